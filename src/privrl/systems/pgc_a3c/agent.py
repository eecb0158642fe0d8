"""PGC-A3C's agent step: what one agent computes for one submission, on every distributed
runtime (a Ray agent actor, a Flower agent executor's `AgentNode`).

One function for both, so that they release through the same code with the same keys as the
local runner: with `noise="seeded"` and one agent per round, a Flower or Ray submission is the
local run's.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privrl.compute.sharding import setting_trial_keys
from privrl.federation.service import Submission
from privrl.systems.pgc_a3c.algorithm import (
    PGCA3CConfig,
    agent_noise_key,
    lone_agent,
    trial_env_key,
)

__all__ = ["AgentStep", "StepProgram", "step_program"]


class AgentStep:
    """PGC-A3C's pure agent step (privrl.runtime.node.AgentStep): submission `index` of agent
    a from θ through the local runner's agent-side code (`PGCA3C.agent_reports` of
    `lone_agent`, the release path every runtime and the audit share), with the local
    runner's keys (its trial key; submission n = a·T + index is its round n with one agent per
    round); `noise`: the agent process's secret root, or None (seeded: the local run's).

    Agent steps of one config share one `StepProgram` (`step_program`): a process that hosts
    several agents (an in-process deployment, the tests) traces and compiles their step once."""

    def __init__(self, cfg: PGCA3CConfig, noise: jax.Array | None) -> None:
        self.config, self._noise = cfg, noise
        self.program = step_program(cfg)
        self.algo, self.setting = self.program.algo, self.program.setting
        self.dim = self.algo.dim
        self.guarantee = self.algo.mechanism.guarantee

    def check(self, agent: int, index: int) -> None:
        per = self.config.submissions_per_agent
        if not 0 <= index < per:
            raise ValueError(f"submission index {index} is outside 0..{per - 1}")

    def together(self, agent: int) -> list[int]:
        return [agent]

    def __call__(self, theta: np.ndarray | None, agent: int, index: int
                 ) -> dict[tuple[int, int], tuple[Submission, float]]:
        program = self.program
        n = agent * self.config.submissions_per_agent + index
        args = (jnp.asarray(theta, jnp.float32), jnp.int32(agent), jnp.int32(n), jnp.int32(n))
        traj = None
        if self.algo.task.host:  # a Gymnasium task: the episode on the host, the rest jitted
            traj = self.algo.host_rollout(args[0], args[3], program.round_key(args[2]),
                                          program.env_key, args[1][None], np.ones(1, bool),
                                          self._noise)
        report, score = program.run(*args, self._noise, traj)
        return {(agent, index): (Submission(agent, index, report), float(score))}


class StepProgram:
    """What every agent step of one config computes with (the noise root apart, an argument):
    the algorithm of `lone_agent`, the local trial's keys, and the jitted step."""

    def __init__(self, cfg: PGCA3CConfig) -> None:
        self.config = cfg
        self.algo, self.setting = lone_agent(cfg)
        root = self.algo.init(setting_trial_keys(cfg.seed, 1, 1, 1, 1)[0])  # the local trial's
        self.key, self.env_key = root.key, trial_env_key(root)
        self.run = jax.jit(self.one)

    def one(self, theta: jax.Array, agent_id: jax.Array, n: jax.Array, submitted: jax.Array,
            noise: jax.Array | None, traj: Any = None) -> tuple[Any, jax.Array]:
        """Submission n's report and score (no agent axis); `noise`: the secret root or None."""
        index = n % self.config.submissions_per_agent
        noise_keys = None if noise is None else agent_noise_key(noise, agent_id, index)[None]
        # Under secret noise the root also keys the agent's dynamics and episode (the local
        # runner's and Ray's `agents_plan`), so the seed does not let anyone re-simulate them.
        reports, scores = self.algo.agent_reports(
            theta, submitted, self.round_key(n), self.env_key, agent_id[None],
            jnp.ones((1,), bool), noise_keys, traj, self.setting, noise)
        return jax.tree_util.tree_map(lambda x: x[0], reports), scores[0]

    def round_key(self, n: jax.Array) -> jax.Array:
        """The local runner's round key of submission n with one agent per round."""
        return jax.random.fold_in(self.key, n)


@functools.lru_cache(maxsize=8)
def step_program(cfg: PGCA3CConfig) -> StepProgram:
    """The `StepProgram` of `cfg` (a frozen config: equal configs, one program per process).
    It holds no secret: the noise root is the jitted step's argument."""
    return StepProgram(cfg)
