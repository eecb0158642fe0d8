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

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from jax import Array

from privrl.envs.task import Task, check_module
from privrl.federation.adapt import scaled
from privrl.losses import double_td_targets, huber, td_targets
from privrl.nets.flat import FlatModel, mlp
from privrl.privacy.clipping import clip_l2
from privrl.privacy.dpsgd import clipped_grad_sum
from privrl.privacy.mechanisms import (
    GaussianSumMechanism,
    gaussian_sum_dense_release,
    gaussian_sum_release,
)
from privrl.privacy.noise import secret_fold
from privrl.systems.dpsgd_rl.config import DQNConfig
from privrl.systems.dpsgd_rl.episodic import (
    EpisodeMetrics,
    EpisodicLearner,
    EpisodicSetting,
    Progress,
    data_root,
    episode_env_key,
    episodic_task,
    make_env,
    observation_noise,
    progress_init,
    progress_update,
    sum_setting,
)
from privrl.systems.dpsgd_rl.levers import adaptive_clip_mechanisms, next_clip
from privrl.systems.dpsgd_rl.source import EpisodeSource, episode_source

UNIT = "one transition (s, a, r, s′)"


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
