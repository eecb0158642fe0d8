"""What paper 003's two CartPole-v1 learners (REINFORCE, DQN) share: the options of DP-SGD and
of LDP observations, the environment, greedy evaluation and the "solved" rule.

The slides: CartPole-v1, 500-step episodes, reward 1 per step; solved when the mean return of
25 consecutive evaluation episodes is >= 475. Those are the CartPole-v1 task's (envs.task): on
another task the episode cap and the target are its own (a task without a target is never
"solved": its runs report returns). As in the code the slides follow, one greedy
evaluation episode is played after every training episode and training stops once solved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.compute.programs import alone_or_program, settings_program
from privrl.config import (
    fail,
    other_field,
)
from privrl.envs.task import Task, cartpole_task, resolve_task
from privrl.policy import SavedPolicy, saved_policy
from privrl.privacy.mechanisms import GaussianSumParams, stack_params
from privrl.systems.dpsgd_rl.config import EpisodicConfig
from privrl.systems.dpsgd_rl.ldp_obs import (
    ObservationSetting,
    PrivateObservations,
    observation_setting,
)
from privrl.systems.dpsgd_rl.levers import ADAPTIVE_LEVERS

C = TypeVar("C", bound=EpisodicConfig)


class Progress(NamedTuple):
    """Per seed: the last `window` evaluation returns (a ring), how many, and when solved."""

    evals: Array  # (window,) float32
    count: Array  # int32: evaluation episodes played
    solved_at: Array  # int32: training episodes when first solved; -1 if not yet


class EpisodeMetrics(NamedTuple):
    train_return: Array  # float32; NaN when the seed has stopped
    eval_return: Array
    updates: Array  # int32: model updates so far


def episodic_task(cfg: C, task: Task | None, host: bool = True) -> tuple[C, Task]:
    """The task a REINFORCE or DQN run learns on (`task`, else the config's, else CartPole-v1;
    envs.task.resolve_task) and the config naming it, with the observation mechanism checked
    against the task's observations. `host` False: the learner rolls out inside jit only, and
    refuses a task stepped on the host (Gymnasium). A host task's LDP observations are
    released by its episode source (dpsgd_rl.source) as the rollout returns them."""
    cfg, task = resolve_task(cfg, task, partial(cartpole_task, "v1"), "solve_threshold")
    cfg = cfg.resolved()  # what depends on the episode (DQN's σ for the run's steps)
    if task.host and not host:
        fail("env", f"{task.name} is stepped on the host (Gymnasium); this learner steps its "
             "environment inside its jitted update loop: use a gymnax task")
    if cfg.obs.mode == "sigma" and task.name != "gymnax:CartPole-v1":
        fail("obs.mode", "sigma mode's noise is scaled to CartPole's state components; "
             f"for {task.name} use box mode with the observation's bounds")
    if cfg.obs.mode == "box" and len(cfg.obs.box_low) != task.obs_dim:
        fail("obs.box_low", f"{len(cfg.obs.box_low)} bounds for {task.name}'s "
             f"{task.obs_dim}-dimensional observations")
    return cfg, task


def make_env(cfg: EpisodicConfig, task: Task) -> tuple[Any, Any]:
    """The task's environment, seen through the observation mechanism when LDP is on (a host
    task's is not wrapped: its episode source releases them, dpsgd_rl.source)."""
    mech = cfg.obs.mechanism()
    wrap = mech is not None and not task.host
    return (PrivateObservations(task.env, mech) if wrap else task.env), task.params


def data_root(state: Any) -> Array | None:
    """The seed's secret root that also keys its data (training episodes and their private
    dynamics, through `secret_fold`): the DP-SGD noise root, else the observation noise's;
    None (seeded): the data derive from the seed. Evaluation episodes stay seeded."""
    return state.noise if state.noise is not None else state.obs_noise


def episode_env_key(cfg: EpisodicConfig) -> Array:
    """The run's key for its training episodes' private dynamics (agent id = episode number)."""
    return jax.random.fold_in(jax.random.key(cfg.seed), 0x5EED)


def observed_env(env: Any, obs_noise: Array | None) -> Any:
    """The environment a learner step uses: with a secret observation-noise root (the state's
    `obs_noise`), the LDP wrapper keyed by it; otherwise `env` unchanged (seeded keys)."""
    return env if obs_noise is None else env.keyed(obs_noise)


# --- settings as one program ---------------------------------------------------------------
class EpisodicSetting(NamedTuple):
    """One trial's setting as data, when settings run as one program (`for_settings`): its
    DP-SGD sum's parameters and its observation noise (None: no setting of the program has
    such a mechanism). A batch of trials' settings is these stacked (`setting_data`)."""

    grad: GaussianSumParams | None
    obs: ObservationSetting | None


def sum_setting(noise_multiplier: float | None, clip: float) -> GaussianSumParams:
    """A DP-SGD sum with rows clipped to `clip` as one trial's data: noise multiplier σ > 0
    (`GaussianSumMechanism(σ, clip)`'s parameters, std = float32(σ·C)), 0 clips without noise
    (no guarantee), None sums the raw rows (non-private training)."""
    s = noise_multiplier
    if s is not None and not (math.isfinite(s) and s >= 0):
        raise ValueError(f"noise multipliers must be finite and >= 0 (or None), got {s}")
    return GaussianSumParams(np.bool_(s is not None), np.float32(s * clip if s else 0.0))


def one_program_field(configs: Sequence[EpisodicConfig], setting_fields: Sequence[str]
                      ) -> str | None:
    """The config field that keeps resolved `configs` from running as one program (None: they
    can): they may differ only in `setting_fields`, without float-safe noise or an ε cap, with
    σ·IQR (or no) observation noise; the private ones must agree on the noise keys' mode."""
    first = configs[0]
    for cfg in configs:
        if cfg.secure_noise:
            return "secure_noise"
        if cfg.max_epsilon is not None:
            return "max_epsilon"
        if cfg.obs.mode not in ("none", "sigma"):
            return "obs.mode"
        if replace(cfg.obs, mode=first.obs.mode, sigma=first.obs.sigma) != first.obs:
            return "obs"
    field = other_field(configs, setting_fields)
    if field is not None:
        return field
    if len({c.noise for c in configs if c.private or c.obs.mechanism() is not None}) > 1:
        return "noise"
    return None


def program_allows(setting_fields: Sequence[str]) -> str:
    """What settings run as one program may differ in (`compute.programs.settings_program`'s
    message)."""
    return (f"{', '.join(setting_fields)} (σ·IQR or no observation noise, no float-safe noise, "
            "no ε cap)")


def observation_noise(configs: Sequence[EpisodicConfig], obs_dim: int
                      ) -> list[ObservationSetting | None]:
    """The σ·IQR observation noise of each of settings `configs` as data; all None if no
    setting has any (every trial sees the raw states)."""
    mechanisms = [c.obs.mechanism() for c in configs]
    if all(m is None for m in mechanisms):
        return [None] * len(configs)
    return [observation_setting(m, obs_dim) for m in mechanisms]


def trial_env(env: Any, raw_env: Any, setting: EpisodicSetting | None,
              obs_noise: Array | None) -> Any:
    """The environment a trial's episodes see: with its setting as data, its own observation
    noise over `raw_env`; otherwise `env` (the run's, LDP-wrapped or not) as `observed_env`."""
    if setting is not None and setting.obs is not None:
        return PrivateObservations(raw_env, None, obs_noise, setting.obs)
    return observed_env(env, obs_noise)


class EpisodicLearner:
    """What REINFORCE and DQN (each a subclass) share around their own episode: how settings
    run as one program (`for_settings`) or alone (`settings_algorithm`), the environment a
    trial's episodes see and the greedy evaluation policy. A subclass sets `SETTING_FIELDS`
    (what its settings in one program may differ in) and `_as_data`, and has `env`, `task`,
    `model` and `setting_params` (each setting's as data, from `_as_data`; empty: trials use
    the config's mechanisms, compiled in)."""

    SETTING_FIELDS: ClassVar[tuple[str, ...]] = ()
    env: Any
    task: Task
    model: Any
    setting_params: list[EpisodicSetting]

    @classmethod
    def one_program_field(cls, configs: Sequence[EpisodicConfig]) -> str | None:
        """The field that keeps resolved `configs` from running as one program (None: they
        can; `one_program_field` with this learner's SETTING_FIELDS). A run with an adaptive
        lever on (privrl.systems.dpsgd_rl.levers) runs alone: its levers are not settings as
        data."""
        for cfg in configs:
            for name in ADAPTIVE_LEVERS:
                if getattr(cfg, name, None) not in (False, None):
                    return name
        return one_program_field(configs, cls.SETTING_FIELDS)

    @classmethod
    def settings_algorithm(cls, configs: Sequence[Any], task: Task | None = None,
                           model: Any = None) -> Any:
        """The algorithm that runs `configs` together (`for_settings`), or for one setting
        that could not join a program (box observations, float-safe noise, an ε cap, a
        Gymnasium task) its own. A setting that could join one computes through the
        program's path even alone (compute.programs.alone_or_program), so it gets the same
        floats alone and in any program. Every run takes its algorithm from here."""
        return alone_or_program(cls, configs, task, model, cls.one_program_field)

    @classmethod
    def for_settings(cls, configs: Sequence[Any], task: Task | None = None,
                     model: Any = None) -> Any:
        """One algorithm for several settings that differ only in SETTING_FIELDS: each trial
        carries its setting as data (the state's `setting`, from `setting_data`), so one
        jitted program runs them all, and a trial's floats are its setting's own run's.
        ConfigError names the field that keeps them apart."""
        return settings_program(cls, configs, task, model, cls.one_program_field,
                                program_allows(cls.SETTING_FIELDS), cls._as_data)

    def _as_data(self, each: Sequence[Any]) -> None:
        """Make this algorithm carry the settings `each` (their own algorithms) as per-trial
        data: set `setting_params`, each setting's as an `EpisodicSetting`."""
        raise NotImplementedError

    def setting_data(self, settings: Sequence[int]) -> EpisodicSetting:
        """Per-trial data: trial k runs setting settings[k] (an index into `self.settings`),
        the settings' parameters stacked along a leading trials axis."""
        return stack_params([self.setting_params[int(i)] for i in settings])

    def observed(self, s: Any) -> Any:
        """The environment a trial's episodes see: its LDP observations (keyed by its secret
        root, if any; as its setting says, if settings run as one program)."""
        return trial_env(self.env, self.task.env, s.setting, s.obs_noise)

    def public_returns(self, thetas: Array, key: Array, episodes: int | None = None
                       ) -> np.ndarray:
        """Each θ's (n, d) greedy returns (n, `episodes`; default public_eval_episodes) on
        the task's PUBLIC simulator: the environment's default parameters (no agent's private
        draw), episodes from `key` (the same for every θ). What the best-candidate choice
        reads (--public-eval-every; post-processing)."""
        keys = jax.random.split(key, episodes or self.config.public_eval_episodes)
        yes = jnp.bool_(True)

        def one(theta: Array, k: Array) -> Array:
            return self.episodes.evaluate(lambda: self.env, self.env_params, self.greedy,
                                          theta, k, yes, None)

        if self.task.host:
            return np.array([[float(one(t, k)) for k in keys] for t in np.asarray(thetas)])
        if getattr(self, "_public", None) is None:  # one program per count
            self._public = jax.jit(jax.vmap(jax.vmap(one, (None, 0)), (0, None)))
        return np.asarray(self._public(thetas, keys), np.float64)

    def greedy(self, theta: Array, key: Array, obs: Array) -> Array:
        """The evaluation policy's actions on `obs`: the argmax of the network's outputs
        (logits or Q-values)."""
        return jnp.argmax(self.model.apply(theta, obs), -1)

    # What the network returns (privrl.policy.HEADS): REINFORCE's logits, DQN's Q-values.
    head: ClassVar[str] = "logits"

    def saved_policy(self, name: str, theta: np.ndarray) -> SavedPolicy:
        """policy.npz of a run: each trial's final θ (trials, d) and the model's description
        (a Q-network's sampled action is ε-greedy at its final exploration rate)."""
        sampling = {"epsilon": self.config.explore_end} if self.head == "q" else {}
        return saved_policy(name, self.model, self.task, self.head, theta,
                            self.config.max_episode_steps, **sampling)


def progress_init(window: int) -> Progress:
    return Progress(jnp.zeros((window,), jnp.float32), jnp.int32(0), jnp.int32(-1))


def progress_update(p: Progress, eval_return: Array, active: Array, threshold: float | None
                    ) -> Progress:
    """Record one evaluation return (if `active`) and mark the episode where the mean of the
    last `window` evaluations first reaches the threshold (None: never; no target)."""
    threshold = jnp.inf if threshold is None else threshold
    window = p.evals.shape[0]
    evals = jnp.where(active, p.evals.at[p.count % window].set(eval_return), p.evals)
    count = p.count + active.astype(jnp.int32)
    solved = (count >= window) & (jnp.mean(evals) >= threshold) & (p.solved_at < 0) & active
    return Progress(evals, count, jnp.where(solved, count, p.solved_at))
