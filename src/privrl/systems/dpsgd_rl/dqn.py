"""DQN on CartPole-v1, non-private or with DP-SGD (paper 003, slides 14-22), top to bottom.

Per environment step, for each seed:

1. act ε-greedily with Q_θ (an MLP 4-128-128-2, as the slides), store (s, a, r, s', terminal)
   in a FIFO replay buffer (10,000 transitions), r the task's reward;
2. once the buffer holds a batch: draw a batch, compute the Huber TD loss against the target
   network, step the optimizer, and move the target network toward θ (soft update, τ);
3. DP-SGD (the unit of privacy is one transition): Poisson sampling — each stored transition is
   in the batch independently with probability q — per-transition gradients, each clipped to
   L2 norm C (computed exactly without materializing them: privrl.privacy.dpsgd), N(0, σ²C²)
   added to their sum (the GaussianSumMechanism's Report), divided by the public expected batch
   size q × capacity (the `dp-sgd` preset: q × the transitions stored so far).

Poisson sampling is done exactly: the batch size m ~ Binomial(n, q) and a uniformly random set
of m stored transitions, padded to a fixed `max_batch` rows so that shapes stay static. If m ever
exceeds `max_batch`, the batch is truncated; the Chernoff bound on that event's probability is
added to δ (it is below 1e-20 per step at the defaults).

Privacy accounting: a transition can only be sampled while it is in the buffer, i.e. during the
`capacity` updates after it was stored (one update per step), so one transition's account is
min(updates, capacity) Poisson-subsampled Gaussian releases, composed by the accountant.

Another task (privrl.envs.task): its environment and rewards; each training episode is played
by a fresh agent (id = the episode number) with its own private parameters; the Q-network is
sized from its spaces, or is the user's flax module (one observation -> Q-values per action;
its clipped per-transition gradients are then materialized, since the one-pass clipping of
privacy.dpsgd holds for privrl's ReLU MLP only).

Settings the slides do not give are read from the public PyTorch DQN code they follow (AdamW
with AMSGrad, learning rate 1e-4, γ = 0.99, ε-greedy 0.9 → 0.05 with decay 1000 steps, τ =
0.005, Huber loss, gradient values clipped at 100); docs/dpsgd-rl.md lists them.
The `paper` preset keeps them; `dp-sgd` (ours) swaps AdamW for SGD with momentum, under which
DP-DQN learns despite the noise (docs/dpsgd-rl.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from jax import Array

from privrl.config import fail, in_range, integer, non_negative, one_of, option, positive
from privrl.envs.task import Task, check_module
from privrl.federation.adapt import scaled
from privrl.losses import double_td_targets, huber, td_targets
from privrl.nets.flat import FlatModel, mlp
from privrl.privacy.accounting import Accountant, PrivacyEvent
from privrl.privacy.clipping import clip_l2
from privrl.privacy.dpsgd import clipped_grad_sum
from privrl.privacy.mechanisms import (
    GaussianSumMechanism,
    gaussian_sum_dense_release,
    gaussian_sum_release,
)
from privrl.privacy.noise import secret_fold
from privrl.systems.dpsgd_rl.choices import DQN_OPTIMIZERS as OPTIMIZERS
from privrl.systems.dpsgd_rl.episodic import (
    EpisodeMetrics,
    EpisodicConfig,
    EpisodicLearner,
    EpisodicSetting,
    Progress,
    calibrated_sigma,
    data_root,
    episode_env_key,
    episodic_task,
    make_env,
    observation_noise,
    progress_init,
    progress_update,
    sum_setting,
)
from privrl.systems.dpsgd_rl.levers import LeverConfig, adaptive_clip_mechanisms, next_clip
from privrl.systems.dpsgd_rl.source import EpisodeSource, episode_source

UNIT = "one transition (s, a, r, s′)"


_DP_SGD: Mapping[str, Any] = {
    "optimizer": "sgd", "momentum": 0.9, "learning_rate": 0.003, "weight_decay": 0.0,
    "average_over_stored": True, "learning_starts": 1000, "batch_size": 512, "tau": 0.002}


# adaptive (ours, issue 51): dp-sgd with the levers of privrl.systems.dpsgd_rl.levers: the clip
# starts at --clip and follows the median of the sampled transitions' gradient norms (its
# count's noise split off the same σ and counted), and the best greedy policy on the task's
# public simulator kept every 10 training episodes, reverting (with the target network) and
# halving the step when it collapses. Not --step-from-noise: its 1/(dσ²) signal model cut the
# step 75× on corridor, where the adaptive clip had already shrunk the noise with the clip
# (benchmarks/log/26-dqn.md).
_ADAPTIVE: Mapping[str, Any] = {**_DP_SGD, "adaptive_clip": True, "public_eval_every": 10}


@dataclass(frozen=True)
class DQNConfig(LeverConfig, EpisodicConfig):
    """Every hyperparameter of a DQN run; the defaults are the paper preset."""

    preset: str = option(
        "paper", choices=("paper", "dp-sgd", "dp-solve", "adaptive"),
        help="paper: the slides' settings (AdamW). dp-sgd: ours, SGD with momentum, which "
        "learns under DP noise. dp-solve: ours, dp-sgd with a 16-16 network, double DQN and "
        "--pause-at 500, which solves CartPole at ε = 8 per transition (docs/dpsgd-rl.md). "
        "adaptive: ours, dp-sgd with the levers that adapt it to the task (adaptive clip, "
        "best candidate on the public simulator; issue 51). "
        "Options given explicitly override it.")
    hidden: tuple[int, ...] = option((128, 128), help="Hidden layer sizes of the Q-network.")
    learning_rate: float = option(1e-4, help="The optimizer's step size.")
    weight_decay: float = option(0.01, help="Decoupled weight decay (AdamW's default).")
    batch_size: int = option(128, help="Transitions per update (the expected batch under DP).")
    buffer_size: int = option(10_000, help="Replay buffer capacity.", unit="transitions")
    explore_start: float = option(
        0.9, help="ε-greedy: ε = end + (start − end)·exp(−steps / decay).")
    explore_end: float = option(0.05, help="See --explore-start.")
    explore_decay: float = option(1000.0, help="See --explore-start.", unit="steps")
    tau: float = option(0.005, help="Soft target-network update per step, in (0, 1].")
    grad_value_clip: float = option(100.0, help="Gradient value clip (non-private runs only).")
    sampling_probability: float | None = option(
        None, flag="--q", help="Poisson sampling probability per stored transition. Default: "
        "batch size / buffer size (paper 0.0128, dp-sgd 0.0512).")
    clip: float = option(10.0, help="C: L2 bound of each transition's gradient (ours: the "
                         "slides do not give it; C = 1 stalls DQN, see docs).")
    optimizer: str = option("adamw", choices=OPTIMIZERS,
                            help="adamw (AMSGrad, the slides' code) or sgd (heavy-ball momentum).")
    momentum: float = option(0.9, help="SGD momentum in [0, 1) (sgd only).")
    average_over_stored: bool = option(
        False, help="DP-SGD: divide the noisy sum by q × the stored transitions (the expected "
        "batch size now) instead of q × capacity, which shrinks the step while the buffer "
        "fills (post-processing: one transition is stored per step whatever the data).")
    learning_starts: int | None = option(
        None, help="The first update once this many transitions are stored. Default: the "
        "batch size.")
    double_dqn: bool = option(
        False, help="Double DQN targets: the next action chosen by the online network, valued "
        "by the target network.")
    lr_decay_updates: int | None = option(
        None, help="Decay the learning rate linearly over this many updates to lr × "
        "--lr-final-fraction, then hold it (post-processing). Default: constant.")
    lr_final_fraction: float = option(
        0.1, help="The decayed learning rate as a fraction of the first, in [0, 1].")
    pause_at: float | None = option(
        None, help="Make no updates during a training episode when the previous greedy "
        "evaluation returned at least this (post-processing: no privacy cost). Default: never.")

    # paper: the dataclass defaults. dp-sgd (ours, not the slides'): SGD + momentum instead of
    # AdamW, whose per-coordinate normalization turns DP noise into full-size steps on
    # coordinates with little gradient signal (docs/dpsgd-rl.md, benchmarks/log/04-*.md).
    # dp-solve (ours): dp-sgd with a 16-16 Q-network (386 parameters instead of 17,410, so the
    # same per-coordinate noise has ~7x less norm), double DQN and pause-at 500; it solves
    # CartPole at ε = 8 per transition (benchmarks/RESULTS.md, "A DP-DQN that solves").
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "paper": {},
        "dp-sgd": _DP_SGD,
        "dp-solve": {**_DP_SGD, "hidden": (16, 16), "double_dqn": True, "pause_at": 500.0},
        "adaptive": _ADAPTIVE,
    }

    @property
    def q(self) -> float:
        return (self.sampling_probability if self.sampling_probability is not None
                else self.batch_size / self.buffer_size)

    @property
    def max_batch(self) -> int:
        """Rows of the padded Poisson batch: the mean + 12 standard deviations + 16."""
        mean = self.q * self.buffer_size
        return min(self.buffer_size, math.ceil(mean + 12 * math.sqrt(mean) + 16))

    def validate(self) -> None:
        super().validate()
        if self.batch_size < 1 or self.buffer_size < self.batch_size:
            fail("batch_size", "need 1 <= batch size <= buffer size, got "
                               f"{self.batch_size} and {self.buffer_size}")
        if self.learning_starts is not None and not (
                self.batch_size <= self.learning_starts <= self.buffer_size):
            fail("learning_starts", "need batch size <= learning starts <= buffer size, got "
                                    f"{self.learning_starts}")
        q = self.sampling_probability
        if q is not None:
            in_range("sampling_probability", q, 0, 1, low_open=True)
            if not self.dp:
                fail("sampling_probability", "Poisson sampling is for DP-SGD runs (dp)")
        if self.secure_noise and self.dp and self.q < 1:
            fail("secure_noise", "float-safe noise needs sampling probability 1: no accountant "
                                 f"here covers the subsampled discrete Gaussian (q = {self.q:g})")
        in_range("tau", self.tau, 0, 1, low_open=True)
        one_of("optimizer", self.optimizer, OPTIMIZERS)
        in_range("momentum", self.momentum, 0, 1, high_open=True)
        non_negative("weight_decay", self.weight_decay)
        if self.lr_decay_updates is not None:
            integer("lr_decay_updates", self.lr_decay_updates)
        in_range("lr_final_fraction", self.lr_final_fraction, 0, 1)
        if self.pause_at is not None:
            positive("pause_at", self.pause_at)
        self.check_levers()

    @property
    def lever_system(self) -> str:
        return "DQN (dp-dqn)"

    @property
    def expected_batch(self) -> float:
        """The Poisson sample's mean size on a full buffer, q × capacity."""
        return self.q * self.buffer_size

    def clip_count_accounting(self) -> str:
        """How the accountant counts --adaptive-clip's count (privacy.json)."""
        return ("both releases of an update read the same Poisson sample: the vector (gradient "
                "sum / C_t, count × z_Δ/σ_b) has sensitivity z_Δ/z and noise multiplier z_Δ, so "
                "the update is ONE Poisson-subsampled Gaussian of multiplier z = "
                "(z_Δ⁻² + (2σ_b)⁻²)^(−1/2), the event below, composed over the releases a "
                "transition can take part in as without the lever")

    def resolved(self) -> DQNConfig:
        """Validate; with a target ε, calibrate σ for the releases one transition can see
        (adaptive clipping: the joint σ of the gradient and the clip count); fill the clip
        count's default noise."""
        self.validate()
        # σ is calibrated once the task's episode is known (episodic_task resolves again);
        # the clip count's noise σ_b only once σ is.
        if self.target_epsilon is None:
            return self.with_count_stddev()
        if self.max_episode_steps is None:
            return self
        return replace(self, noise_multiplier=calibrated_sigma(
            self, self.releases_per_unit(self.max_steps()), self.q)).with_count_stddev()

    # --- privacy -----------------------------------------------------------------------------
    def max_steps(self) -> int:
        return self.episodes * self.max_episode_steps

    def event(self) -> PrivacyEvent:
        q = self.q
        return PrivacyEvent("gaussian", self.noise_multiplier, "poisson" if q < 1 else "none", q)

    def releases_per_unit(self, updates: int) -> int:
        """Updates one transition can take part in: it is evicted after `buffer_size` steps."""
        return min(updates, self.buffer_size)

    def truncation_delta(self, updates: int) -> float:
        """Chernoff bound on P(some batch of the run exceeded max_batch), added to δ."""
        n, q, k = self.buffer_size, self.q, self.max_batch
        if k >= n or q >= 1:
            return 0.0
        a = k / n
        kl = a * math.log(a / q) + (1 - a) * math.log((1 - a) / (1 - q))
        return min(1.0, self.releases_per_unit(updates) * math.exp(-n * kl))

    def max_updates(self) -> int:
        """Updates allowed by max_epsilon (all of them without one)."""
        total = self.max_steps()
        if not self.private or self.max_epsilon is None:
            return total
        acc = Accountant(self.accountant)
        n = acc.max_count(self.event(), self.delta, self.max_epsilon,
                          self.releases_per_unit(total))
        return total if n >= self.releases_per_unit(total) else n

    def accountant_for(self, updates: int) -> Accountant:
        acc = Accountant(self.accountant)
        if self.private:
            acc.compose(self.event(), self.releases_per_unit(updates))
        return acc


def make_optimizer(cfg: DQNConfig, learning_rate: float | None = None
                   ) -> optax.GradientTransformation:
    """AdamW (AMSGrad) or SGD with heavy-ball momentum, both with decoupled weight decay.

    Only the step direction differs, so a comparison of the two isolates Adam's
    per-coordinate normalization. The optimizer only post-processes released gradients: it
    does not touch the privacy account. `learning_rate`: the step size (default the config's;
    --step-from-noise sets its own).
    """
    lr0 = cfg.learning_rate if learning_rate is None else learning_rate
    direction = (optax.scale_by_amsgrad() if cfg.optimizer == "adamw"
                 else optax.trace(decay=cfg.momentum))
    if cfg.lr_decay_updates is None:
        step = optax.scale(-lr0)
    else:  # the schedule's count advances only on real updates (opt_state is masked)
        lr = optax.linear_schedule(lr0, lr0 * cfg.lr_final_fraction, cfg.lr_decay_updates)
        step = optax.scale_by_schedule(lambda n: -lr(n))
    return optax.chain(direction, optax.add_decayed_weights(cfg.weight_decay), step)


class Replay(NamedTuple):
    obs: Array  # (N, obs_dim)
    action: Array  # (N,) int32
    reward: Array  # (N,)
    next_obs: Array  # (N, obs_dim)
    terminal: Array  # (N,) float32: 1 if s' is a failure state (not a time-limit cut)
    size: Array  # int32
    ptr: Array  # int32


class DQNState(NamedTuple):
    theta: Array
    target: Array
    opt_state: Any
    replay: Replay
    key: Array
    progress: Progress
    steps: Array  # int32: environment steps taken (for the ε-greedy schedule)
    episodes: Array
    updates: Array
    stopped: Array
    # Secret noise root (privrl.privacy.noise.secret_keys), or None: DP-SGD noise keys derive
    # from `key` (seeded). An argument of the jitted program, never a constant of it.
    noise: Array | None = None
    # Secret root of the LDP observation noise (ldp-* runs), or None: seeded. Kept apart from
    # `noise` so that the two mechanisms never share a key.
    obs_noise: Array | None = None
    # pause_at: True while the last greedy evaluation return was >= pause_at (no updates)
    paused: Array | None = None
    # The trial's setting as data (`DQN.for_settings`, and a run that could join one); None:
    # the algorithm's own config.
    setting: EpisodicSetting | None = None
    # --adaptive-clip: this update's clip C_t (float32; computed from released counts only);
    # None: the config's fixed clip.
    clip: Array | None = None


def replay_add(r: Replay, obs: Array, action: Array, reward: Array, next_obs: Array,
               terminal: Array) -> Replay:
    n = r.obs.shape[0]
    i = r.ptr
    return Replay(r.obs.at[i].set(obs), r.action.at[i].set(action), r.reward.at[i].set(reward),
                  r.next_obs.at[i].set(next_obs), r.terminal.at[i].set(terminal),
                  jnp.minimum(r.size + 1, n), (i + 1) % n)


def sample_uniform(key: Array, size: Array, capacity: int, batch: int) -> tuple[Array, Array]:
    """`batch` distinct stored indices, uniformly (the non-private batch); all rows valid."""
    gumbel = jax.random.gumbel(key, (capacity,))
    idx = jax.lax.top_k(jnp.where(jnp.arange(capacity) < size, gumbel, -jnp.inf), batch)[1]
    return idx, jnp.ones((batch,), jnp.float32)


def sample_poisson(key: Array, size: Array, capacity: int, q: float, max_batch: int
                   ) -> tuple[Array, Array]:
    """Poisson sampling: each of the `size` stored transitions independently with prob. q.

    Equivalent in law: m ~ Binomial(size, q), then a uniform m-subset. Returns `max_batch`
    indices and a row mask (1 for the m sampled rows; m is truncated at max_batch).
    """
    k_m, k_idx = jax.random.split(key)
    m = jax.random.binomial(k_m, size.astype(jnp.float32), q).astype(jnp.int32)
    idx, _ = sample_uniform(k_idx, size, capacity, max_batch)
    return idx, (jnp.arange(max_batch) < m).astype(jnp.float32)


class DQN(EpisodicLearner):
    """init(key) -> state; episode(state) -> (state, EpisodeMetrics). Pure; vmap over seeds."""

    unit = UNIT
    head = "q"
    noise_in_loop = True  # its DP-SGD release is made inside the episode's while_loop
    count_explanation = ("a transition is in the FIFO buffer for `buffer_size` steps (one "
                         "update per step), so its account is min(updates, buffer_size) "
                         "Poisson-subsampled Gaussian releases")
    # What settings run as one program (`for_settings`) may differ in: DP-SGD's σ and the
    # slides' σ·IQR observation noise. DP-SGD on or off is not a number here: a DP-SGD DQN
    # samples its batches by Poisson sampling and steps without value clipping, a
    # non-private one not.
    SETTING_FIELDS = ("noise_multiplier", "target_epsilon", "obs")

    def __init__(self, config: DQNConfig, task: Task | None = None,
                 model: nn.Module | None = None) -> None:
        """`task` (default: the one `config.env`/`config.private_params` name, CartPole-v1) and
        `model` (a flax module mapping one observation to the Q-values of the task's actions;
        default: the slides' MLP, `hidden` units, sized from the task's spaces)."""
        cfg, task = episodic_task(config.resolved(), task)
        self.config, self.task = cfg, task
        self.env, self.env_params = make_env(cfg, task)
        # privrl's ReLU MLP: DP-SGD clips per-transition gradients in one pass (privacy.dpsgd);
        # a user's module: they are materialized and clipped one by one.
        self.dense = model is None
        if model is None:
            self.model = mlp(cfg.hidden, task.num_actions, task.obs_dim, init="torch_default")
        else:
            self.model = FlatModel(check_module(model, task, "q"),
                                   jnp.zeros((task.obs_dim,), jnp.float32))
        self.env_key = episode_env_key(cfg)  # training episode i is agent i
        # --step-from-noise: one transition's SNR over the expected batch and the optimizer's
        # window (LeverConfig.lever_step_size)
        self.step_size = cfg.lever_step_size(cfg.learning_rate, self.model.dim)
        opt = make_optimizer(cfg, self.step_size)
        self.optimizer = opt if cfg.dp else optax.chain(optax.clip(cfg.grad_value_clip), opt)
        if cfg.public_eval_every is not None:  # a step scale the learner lowers on a back-off
            self.optimizer = scaled(self.optimizer)
        self.mechanism = (GaussianSumMechanism(cfg.noise_multiplier, cfg.clip, cfg.q, cfg.delta,
                                               unit=UNIT, secure=cfg.secure_noise)
                          if cfg.private and not cfg.adaptive_clip else None)
        # --adaptive-clip: the sampled gradients at the public C_t and the clip count, read from
        # the same Poisson sample: together one sampled Gaussian of multiplier σ
        self.clip_mechanisms = (adaptive_clip_mechanisms(cfg, UNIT) if cfg.adaptive_clip
                                else None)
        self.update_cap = cfg.max_updates()
        # Where the episodes are played: inside the jitted program, or on the host.
        self.episodes: EpisodeSource = episode_source(cfg, task)
        # Each setting's own algorithm (several: `for_settings`), and each setting's parameters
        # as data, which the trials carry (`for_settings` makes them; empty: this algorithm's
        # trials use `mechanism` and `env`). A run goes through `settings_algorithm`.
        self.settings: list[DQN] = [self]
        self.setting_params: list[EpisodicSetting] = []

    def _as_data(self, each: Sequence[DQN]) -> None:
        """The settings `each` as data: DP-SGD sums sharing one clip and q, if DP-SGD is on
        (else None); σ·IQR observation noise (None if no setting has any)."""
        cfg = self.config
        obs = observation_noise([a.config for a in each], self.task.obs_dim)
        self.setting_params = [
            EpisodicSetting(sum_setting(a.config.noise_multiplier, cfg.clip) if cfg.dp else None,
                            o) for a, o in zip(each, obs, strict=True)]

    def init(self, key: Array) -> DQNState:
        cfg = self.config
        k_theta, key = jax.random.split(key)
        theta = self.model.init(k_theta)
        n, d = cfg.buffer_size, self.task.obs_dim
        replay = Replay(jnp.zeros((n, d)), jnp.zeros((n,), jnp.int32), jnp.zeros((n,)),
                        jnp.zeros((n, d)), jnp.zeros((n,)), jnp.int32(0), jnp.int32(0))
        return DQNState(theta, theta, self.optimizer.init(theta), replay, key,
                        progress_init(cfg.solve_window), jnp.int32(0), jnp.int32(0),
                        jnp.int32(0), jnp.bool_(self.update_cap == 0), paused=jnp.bool_(False),
                        clip=jnp.float32(cfg.clip) if cfg.adaptive_clip else None)

    def gradient(self, theta: Array, target: Array, replay: Replay, key: Array,
                 noise_key: Array | None = None, setting: EpisodicSetting | None = None
                 ) -> Array:
        """`noise_key`: the mechanism's key under secret noise; None: split from `key`.
        `setting`: the trial's noise level as data (`for_settings`); None: the config's."""
        cfg = self.config
        k_noise, obs, action, y, rows, losses = self.batch(theta, target, replay, key,
                                                           noise_key)
        per_trial = setting is not None and setting.grad is not None
        if not cfg.dp:  # the mean loss's gradient, as non-private DQN
            return jax.grad(lambda th: jnp.mean(losses(self.model.apply(th, obs))))(theta)
        # public: the expected batch size of a full buffer, or of the buffer now
        norm = cfg.q * (replay.size.astype(jnp.float32) if cfg.average_over_stored
                        else cfg.buffer_size)
        if not self.dense:  # a user's module: each transition's gradient, masked by `rows`
            grads = self.per_transition(theta, obs, action, y, rows)
            if per_trial:
                assert setting is not None
                return gaussian_sum_release(setting.grad, k_noise, grads, float(cfg.clip)) / norm
            if self.mechanism is not None:
                return self.mechanism.privatize(k_noise, grads).value / norm
            return jax.vmap(lambda g: clip_l2(g, cfg.clip))(grads).sum(0) / norm  # σ = 0
        params = self.model.unravel(theta)
        if per_trial:
            assert setting is not None
            return gaussian_sum_dense_release(setting.grad, k_noise, params, obs, losses,
                                              float(cfg.clip), rows) / norm
        if self.mechanism is not None:
            report = self.mechanism.privatize_dense(k_noise, params, obs, losses, rows)
            return report.value / norm
        return clipped_grad_sum(params, obs, losses, cfg.clip, rows)[0] / norm  # σ = 0

    def batch(self, theta: Array, target: Array, replay: Replay, key: Array,
              noise_key: Array | None) -> tuple[Array, Array, Array, Array, Array, Any]:
        """An update's batch from `key`: (the noise's key: `noise_key` under secret noise,
        else split from `key`; observations, actions, TD targets, the row mask, and each
        example's Huber TD loss from its own row of Q-values). DP-SGD: Poisson-sampled,
        padded to max_batch; non-private: `batch_size` uniform rows."""
        cfg = self.config
        k_batch, k_noise = jax.random.split(key)
        if noise_key is not None:
            k_noise = noise_key
        if cfg.dp:
            idx, rows = sample_poisson(k_batch, replay.size, cfg.buffer_size, cfg.q,
                                       cfg.max_batch)
        else:
            idx, rows = sample_uniform(k_batch, replay.size, cfg.buffer_size, cfg.batch_size)
        obs, action = replay.obs[idx], replay.action[idx]
        next_obs = replay.next_obs[idx]
        if cfg.double_dqn:
            y = double_td_targets(replay.reward[idx], self.model.apply(theta, next_obs),
                                  self.model.apply(target, next_obs), replay.terminal[idx],
                                  cfg.gamma)
        else:
            y = td_targets(replay.reward[idx], self.model.apply(target, next_obs),
                           replay.terminal[idx], cfg.gamma)
        y = jax.lax.stop_gradient(y)

        def losses(q_values: Array) -> Array:  # each example's Huber TD loss from its own row
            return huber(jnp.take_along_axis(q_values, action[:, None], 1)[:, 0] - y)

        return k_noise, obs, action, y, rows, losses

    def per_transition(self, theta: Array, obs: Array, action: Array, y: Array, rows: Array
                       ) -> Array:
        """A user's module: each transition's gradient (B, d), masked by `rows`."""
        def one(th: Array, o: Array, a: Array, target: Array) -> Array:
            return huber(self.model.apply(th, o)[a] - target)

        return jax.vmap(jax.grad(one), (None, 0, 0, 0))(theta, obs, action, y) * rows[:, None]

    def adaptive_gradient(self, theta: Array, target: Array, replay: Replay, key: Array,
                          noise_key: Array | None, clip: Array) -> tuple[Array, Array]:
        """--adaptive-clip: the Poisson batch's noisy mean gradient at the clip C_t and the
        next clip C_{t+1} (Andrew et al. 2021), both from released sums only
        (`clip_mechanisms`): the gradients of ℓ/C_t released at clip 1 (times C_t: exactly
        DP-SGD at C_t) and the centred count of sampled transitions within C_t, whose fraction
        is read against the public expected sample q × stored."""
        cfg = self.config
        grads_m, bits_m = self.clip_mechanisms
        k_noise, obs, action, y, rows, losses = self.batch(theta, target, replay, key,
                                                           noise_key)
        k_grad, k_bits = jax.random.split(k_noise)
        if self.dense:
            report, norms = grads_m.privatize_dense_norms(
                k_grad, self.model.unravel(theta), obs, lambda q: losses(q) / clip, rows)
        else:
            scaled_grads = self.per_transition(theta, obs, action, y, rows) / clip
            report, norms = (grads_m.privatize(k_grad, scaled_grads),
                             jnp.linalg.norm(scaled_grads, axis=1))
        within = (norms <= 1.0).astype(jnp.float32)
        count = bits_m.privatize(k_bits, ((within - 0.5) * rows)[:, None]).value[0]
        stored = replay.size.astype(jnp.float32)
        norm = cfg.q * (stored if cfg.average_over_stored else cfg.buffer_size)
        return (report.value * clip / norm,
                next_clip(clip, count, cfg.q * stored, cfg.clip_quantile, cfg.clip_lr))

    def act(self, s: DQNState, obs: Array, key: Array) -> tuple[Array, Array, Array, Array]:
        """The ε-greedy action on `obs`: (the loop's next key, action, the environment step's
        key, the update's key)."""
        cfg = self.config
        key, k_eps, k_act, k_env, k_grad = jax.random.split(key, 5)
        eps = cfg.explore_end + (cfg.explore_start - cfg.explore_end) * jnp.exp(
            -s.steps / cfg.explore_decay)
        greedy = jnp.argmax(self.model.apply(s.theta, obs))
        action = jnp.where(jax.random.uniform(k_eps) < eps,
                           jax.random.randint(k_act, (), 0, self.task.num_actions), greedy)
        return key, action, k_env, k_grad

    def learn(self, s: DQNState, obs: Array, action: Array, reward: Array, next_obs: Array,
              terminal: Array, k_grad: Array) -> DQNState:
        """Store the transition (the task's reward) and, if the buffer is ready and the cap
        allows, make one (DP-SGD) update and move the target network."""
        cfg = self.config
        replay = replay_add(s.replay, obs, action, self.task.rewards(reward, jnp.float32(1.0)),
                            next_obs, terminal)
        starts = cfg.batch_size if cfg.learning_starts is None else cfg.learning_starts
        learn = (replay.size >= starts) & (s.updates < self.update_cap) & ~s.paused
        noise_key = None if s.noise is None else jax.random.fold_in(s.noise, s.steps)
        clip = s.clip
        if clip is None:
            grad = self.gradient(s.theta, s.target, replay, k_grad, noise_key, s.setting)
        else:
            grad, new_clip = self.adaptive_gradient(s.theta, s.target, replay, k_grad, noise_key,
                                                    clip)
            clip = jnp.where(learn, new_clip, clip)
        upd, opt_state = self.optimizer.update(grad, s.opt_state, s.theta)
        theta = jnp.where(learn, s.theta + upd, s.theta)
        opt_state = jax.tree_util.tree_map(lambda n, o: jnp.where(learn, n, o), opt_state,
                                           s.opt_state)
        target = jnp.where(learn, cfg.tau * theta + (1 - cfg.tau) * s.target, s.target)
        return s._replace(theta=theta, target=target, opt_state=opt_state, replay=replay,
                          steps=s.steps + 1, updates=s.updates + learn.astype(jnp.int32),
                          clip=clip)

    def plan(self, s: DQNState) -> tuple[tuple[Array, ...], Any, Array]:
        """This episode's keys (next state's, reset, loop, evaluation), its agent's
        environment parameters and whether the seed still runs."""
        key, k_reset, k_loop, k_eval = jax.random.split(s.key, 4)
        # Secret: the episode (its reset, actions, steps, minibatches) and its agent's dynamics
        # from the seed's own root; evaluation stays seeded.
        root = data_root(s)
        params = self.task.agent_params(secret_fold(root, self.env_key), s.episodes)
        return ((key, secret_fold(root, k_reset), secret_fold(root, k_loop), k_eval), params,
                ~s.stopped)

    def episode(self, s: DQNState, episodes: EpisodeSource | None = None
                ) -> tuple[DQNState, EpisodeMetrics]:
        """One training episode from `episodes` (default: the task's own source): per
        environment step, the ε-greedy action (`act`), the step, the transition's storage and
        (if the buffer is ready and the cap allows) one update (`learn`); then the greedy
        evaluation and the bookkeeping (`finish`). The episode's return is the sum of the
        environment's rewards."""
        cfg, src = self.config, self.episodes if episodes is None else episodes
        (key, k_reset, k_loop, k_eval), params, active = src.piece(self.plan)(s)
        env = lambda s=s: self.observed(s)  # noqa: E731 - the trial's traced environment
        env_state, obs = src.start(env, params, k_reset, active, s.obs_noise)

        def cond(c: tuple) -> Array:
            t, _, _, done = c
            return active & ~done & (t < cfg.max_episode_steps)

        def body(c: tuple) -> tuple:
            t, st, (env_state, obs, key, ret), _ = c
            key, action, k_env, k_grad = src.piece(self.act)(st, obs, key)
            env_state, next_obs, reward, terminal, ended = src.step(
                lambda: self.observed(st), env_state, action, k_env, params, st.obs_noise)
            st = src.piece(self.learn)(st, obs, action, reward, next_obs, terminal, k_grad)
            ret = ret + reward
            done = terminal > 0 if ended is None else ended
            return t + 1, st, (env_state, next_obs, key, ret), done

        _, s, (_, _, _, train_return), _ = src.while_loop(
            cond, body, (jnp.int32(0), s, (env_state, obs, k_loop, jnp.float32(0.0)),
                         jnp.bool_(False)))
        eval_ret = src.evaluate(env, self.env_params, self.greedy, s.theta, k_eval, active,
                                s.obs_noise)
        return src.piece(self.finish)(s, key, train_return, eval_ret, active)

    def finish(self, s: DQNState, key: Array, train_return: Array, eval_ret: Array,
               active: Array) -> tuple[DQNState, EpisodeMetrics]:
        """The episode's bookkeeping: progress, pause, counters, the stop rule, its metrics."""
        cfg = self.config
        progress = progress_update(s.progress, eval_ret, active, cfg.solve_threshold)
        if cfg.pause_at is not None:
            s = s._replace(paused=jnp.where(active, eval_ret >= cfg.pause_at, s.paused))
        episodes = s.episodes + active.astype(jnp.int32)
        stopped = (s.stopped | (episodes >= cfg.episodes) | (s.updates >= self.update_cap)
                   | (cfg.stop_when_solved & (progress.solved_at >= 0)))
        nan = jnp.float32(jnp.nan)
        metrics = EpisodeMetrics(jnp.where(active, train_return, nan),
                                 jnp.where(active, eval_ret, nan), s.updates)
        return s._replace(key=key, progress=progress, episodes=episodes, stopped=stopped), metrics
