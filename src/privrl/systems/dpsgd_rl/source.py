"""Where a REINFORCE or DQN training episode's environment steps come from, and how the
episode's pieces are composed around them.

Each learner's episode (`Reinforce.step`, `DQN.episode`) is written once, as pure pieces (plan,
act, update or learn, finish) around its episode source. The source decides how they run:
- `JittedEpisodes`: a gymnax task, traced with everything else: the pieces, DQN's step loop
  (`lax.while_loop`) and the rollouts compose into the one jitted program the runner vmaps;
- `HostEpisodes`: a Gymnasium task, stepped on the host (it cannot be traced): each piece is
  jitted on its own (compiled once per run), DQN's loop runs in Python, and the episodes come
  back in the same arrays, with the same keys, so the learner is the jitted one step for step.

LDP observations: inside the program the trial's environment releases them (`env`, the
learner's `observed` environment); on the host the source releases each observation Gymnasium
returns (the same mechanism and key discipline) before any piece sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.envs.rollout import Trajectory, rollout_episodes
from privrl.envs.source import HostPieces, JittedPieces, Pieces
from privrl.envs.task import Task
from privrl.systems.dpsgd_rl.episodic import EpisodicConfig
from privrl.systems.dpsgd_rl.ldp_obs import private_observation, private_observations

# (θ or the learner's state, key, observation(s)) -> action(s) [, aux]: a piece of the learner
Act = Callable[[Any, Array, Array], Any]
Env = Callable[[], Any]  # the trial's traced environment (observations released), on demand


class EpisodeSource(Pieces, Protocol):
    """What a REINFORCE or DQN episode needs of its source (`JittedEpisodes`, `HostEpisodes`).
    `env` gives the trial's traced environment; a host source never calls it. `obs_root`: the
    trial's secret observation-noise root (None: seeded keys)."""

    def rollout(self, env: Env, params: Any, act: Act, theta: Any, key: Array, n: int,
                active: Array, obs_root: Array | None) -> Trajectory:
        """`n` episodes (time-major) with `act(theta, key, obs)`, environment i with the
        parameters `params[i]`; none played if not `active`."""
        ...

    def evaluate(self, env: Env, params: Any, greedy: Act, theta: Any, key: Array,
                 active: Array, obs_root: Array | None) -> Array:
        """The return of one greedy episode (`greedy(theta, key, obs)`: the argmax actions)
        with the environment's parameters `params` (unbatched): the sum of its rewards."""
        ...

    def start(self, env: Env, params: Any, key: Array, active: Array,
              obs_root: Array | None) -> tuple[Any, Any]:
        """One episode's environment (with its agent's `params`), reset by `key`: (its state,
        the first observation)."""
        ...

    def step(self, env: Env, env_state: Any, action: Array, key: Array, params: Any,
             obs_root: Array | None) -> tuple[Any, Array, Array, Array, Any]:
        """One step: (state, next observation, reward (float32), terminal (float32: a failure
        state, not a time limit), whether the episode ended; None: exactly when terminal)."""
        ...


class JittedEpisodes(JittedPieces):
    """A gymnax task's episodes, inside the learner's jitted program."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps

    def rollout(self, env: Env, params: Any, act: Act, theta: Any, key: Array, n: int,
                active: Array, obs_root: Array | None) -> Trajectory:
        return rollout_episodes(env(), params, lambda k, obs: act(theta, k, obs), key, n,
                                self.max_steps, jnp.broadcast_to(active, (n,)))

    def evaluate(self, env: Env, params: Any, greedy: Act, theta: Any, key: Array,
                 active: Array, obs_root: Array | None) -> Array:
        batched = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], params)
        traj = rollout_episodes(env(), batched, lambda k, obs: greedy(theta, k, obs), key, 1,
                                self.max_steps, active[None])
        return jnp.sum(traj.rewards[:, 0])

    def start(self, env: Env, params: Any, key: Array, active: Array,
              obs_root: Array | None) -> tuple[Any, Any]:
        obs, env_state = env().reset_env(key, params)
        return env_state, obs

    def step(self, env: Env, env_state: Any, action: Array, key: Array, params: Any,
             obs_root: Array | None) -> tuple[Any, Array, Array, Array, Any]:
        e = env()
        next_obs, env_state, reward, _, _ = e.step_env(key, env_state, action, params)
        terminal = e.is_terminated(env_state, params).astype(jnp.float32)
        return env_state, next_obs, jnp.asarray(reward, jnp.float32), terminal, None


class HostEpisodes(HostPieces):
    """A Gymnasium task's episodes, played on the host (`Task.rollout`, `Task.start`), each
    action by a jitted piece. The one difference from the jitted source: a transition is
    terminal when Gymnasium says `terminated` (a time limit is not), where a gymnax
    environment's `is_terminated` may include its time limit."""

    def __init__(self, task: Task, max_steps: int, observe_rows: Any = None,
                 observe_one: Any = None) -> None:
        """`observe_rows(root, key, obs (n, d))`, `observe_one(root, key, obs (d,))`: the jitted
        LDP release of a rollout's rows and of one observation (`host_observer`), or
        None without LDP."""
        super().__init__()
        self.task, self.max_steps = task, max_steps
        self._rows, self._one = observe_rows, observe_one

    def _observe(self, obs_root: Array | None) -> Any:
        rows = self._rows
        return None if rows is None else (lambda k, o: rows(obs_root, k, o))

    def rollout(self, env: Env, params: Any, act: Act, theta: Any, key: Array, n: int,
                active: Array, obs_root: Array | None) -> Trajectory:
        act = self.piece(act)
        return self.task.rollout(params, lambda k, obs: act(theta, k, obs), key, n,
                                 self.max_steps, np.full(n, bool(active)),
                                 self._observe(obs_root))

    def evaluate(self, env: Env, params: Any, greedy: Act, theta: Any, key: Array,
                 active: Array, obs_root: Array | None) -> Array:
        greedy = self.piece(greedy)
        batched = jax.tree_util.tree_map(lambda x: np.asarray(x)[None], params)
        traj = self.task.rollout(batched, lambda k, obs: greedy(theta, k, obs), key, 1,
                                 self.max_steps, np.array([bool(active)]),
                                 self._observe(obs_root))
        return np.sum(traj.rewards[:, 0])

    def _seen(self, obs_root: Array | None, key: Array, raw: Any) -> np.ndarray:
        """What the learner sees of one observation (PrivateObservations' keys: split(key)
        gives the environment's and the noise's)."""
        raw = np.asarray(raw, np.float32)
        if self._one is None:
            return raw
        return np.asarray(self._one(obs_root, jax.random.split(key)[1], raw))

    def start(self, env: Env, params: Any, key: Array, active: Array,
              obs_root: Array | None) -> tuple[Any, Any]:
        if not bool(active):  # nothing to play
            return None, None
        environment, raw = self.task.start(params, jax.random.split(key)[0])
        return environment, self._seen(obs_root, key, raw)

    def step(self, env: Env, env_state: Any, action: Array, key: Array, params: Any,
             obs_root: Array | None) -> tuple[Any, Array, Array, Array, Any]:
        raw, reward, fell, cut, _ = env_state.step(int(action))
        return (env_state, self._seen(obs_root, key, raw), np.float32(reward),
                np.float32(fell), np.bool_(fell or cut))


def host_observer(cfg: EpisodicConfig, rows: bool = True) -> Any:
    """For a host task: `observe(noise_root, key, obs)`, the jitted LDP release of the
    observations a Gymnasium environment returns (the jitted path's mechanism and key
    discipline, a secret root folded in as there), or None without LDP. `rows`: obs is a
    rollout's batch (n, obs_dim) (ldp_obs.private_observations); else one observation
    (ldp_obs.private_observation)."""
    mech = cfg.obs.mechanism()
    if mech is None:
        return None
    return jax.jit(partial(private_observations if rows else private_observation, mech))


def episode_source(cfg: EpisodicConfig, task: Task) -> EpisodeSource:
    """The task's own source: on the host for a Gymnasium task (with the config's LDP
    observations released there), else inside the learner's jitted program."""
    if task.host:
        return HostEpisodes(task, cfg.max_episode_steps, host_observer(cfg),
                            host_observer(cfg, rows=False))
    return JittedEpisodes(cfg.max_episode_steps)
