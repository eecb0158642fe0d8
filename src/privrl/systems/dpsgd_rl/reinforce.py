"""REINFORCE on CartPole-v1, non-private or with DP-SGD (paper 003, slides 12-23), top to bottom.

Per training episode, for each seed:

1. play `batch_episodes` episodes with π_θ (an MLP 4-128-2 with dropout 0.5 on the hidden layer,
   as the slides; the dropout masks sampled while acting are recorded and reused by the loss);
2. each episode's gradient g_i = ∇θ −Σ_t R̂_t log π(a_t|s_t), R̂ the discounted returns
   normalized over the episode (the slides' code);
3. DP-SGD (the unit of privacy is one episode): clip each g_i to L2 norm C, add N(0, σ²C²) to the
   sum, divide by the batch size — the GaussianSumMechanism's Report; non-private: the mean;
4. one Adam step; then one greedy evaluation episode (dropout off) for the "solved" rule.

Privacy of DP-SGD REINFORCE: every episode is used in exactly one update, and later updates see
it only through released parameters, so for one episode the whole run is ONE Gaussian release
with noise multiplier σ (zero-out neighbouring: the episode's gradient replaced by zero, the
relation add/remove accounting is stated for). Its ε does not grow with training length.

Settings the slides do not give are read from the public PyTorch REINFORCE code they follow
(Adam with learning rate 0.01, γ = 0.99, Xavier-normal weights, zero biases, returns normalized
with the unbiased std); docs/dpsgd-rl.md lists them.
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
from privrl.losses import (
    discounted_returns,
    masked_standardize,
    reinforce_loss,
    score_function_loss,
)
from privrl.nets.flat import FlatModel, mlp
from privrl.privacy.clipping import clip_l2
from privrl.privacy.mechanisms import (
    GaussianSumMechanism,
    gaussian_sum_release,
)
from privrl.privacy.noise import secret_fold
from privrl.systems.dpsgd_rl.config import ReinforceConfig
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
from privrl.systems.dpsgd_rl.levers import (
    adaptive_clip_mechanisms,
    next_clip,
)
from privrl.systems.dpsgd_rl.source import EpisodeSource, episode_source

UNIT = "one episode (all its transitions)"


class ReinforceState(NamedTuple):
    theta: Array
    opt_state: Any
    key: Array
    progress: Progress
    episodes: Array  # int32: training episodes played
    updates: Array  # int32
    stopped: Array  # bool
    # Secret noise root (privrl.privacy.noise.secret_keys), or None: DP-SGD noise keys derive
    # from `key` (seeded). An argument of the jitted program, never a constant of it.
    noise: Array | None = None
    # Secret root of the LDP observation noise (ldp-* runs), or None: seeded. Kept apart from
    # `noise` so that the two mechanisms never share a key.
    obs_noise: Array | None = None
    # The trial's setting as data (`Reinforce.for_settings`, and a run that could join one);
    # None: the algorithm's own config.
    setting: EpisodicSetting | None = None
    # --adaptive-clip: this update's clip C_t (float32; computed from released counts only);
    # None: the config's fixed clip.
    clip: Array | None = None


class Reinforce(EpisodicLearner):
    """init(key) -> state; episode(state) -> (state, EpisodeMetrics). Pure; vmap over seeds."""

    unit = UNIT
    count_explanation = ("each episode enters exactly one update (on-policy, never reused), so "
                         "one episode's account is a single release, whatever the run's length")
    # What settings run as one program (`for_settings`) may differ in: DP-SGD on or off and
    # its σ, and the slides' σ·IQR observation noise (mode none or sigma, and σ).
    SETTING_FIELDS = ("dp", "noise_multiplier", "target_epsilon", "obs")

    def __init__(self, config: ReinforceConfig, task: Task | None = None,
                 model: nn.Module | None = None) -> None:
        """`task` (default: the one `config.env`/`config.private_params` name, CartPole-v1) and
        `model` (a flax module mapping one observation to logits; default: the slides' MLP with
        `hidden` units and dropout, sized from the task's spaces; yours runs without dropout)."""
        cfg, task = episodic_task(config.resolved(), task)
        self.config, self.task = cfg, task
        self.env, self.env_params = make_env(cfg, task)
        # The policy head the action space takes (privrl.nets.heads): categorical (the slides'),
        # or Gaussian for a Box (its network: the MLP without dropout, 2d outputs).
        self.policy_head = task.head
        self.continuous = self.policy_head.continuous
        self.dropout = model is None and not self.continuous
        if model is None:
            # `uniform_start`: the output layer at zero (uniform logits; a Box task's mean at
            # its centre, its state-free σ the uniform's), `continuous` presets
            uniform, box = cfg.uniform_start, self.continuous
            self.model = mlp((cfg.hidden,), self.policy_head.outputs, task.obs_dim,
                             init="glorot_normal", log_std=cfg.log_std if box else "state",
                             start_log_std=(self.policy_head.uniform_log_std()
                                            if uniform and box else None),
                             zero_output=uniform)
        else:
            self.model = FlatModel(check_module(model, task, "policy"),
                                   jnp.zeros((task.obs_dim,), jnp.float32))
        # Each training episode's private dynamics (with `private_params` specs): agent id = episode
        # number, drawn from one key for the run.
        self.env_key = episode_env_key(cfg)
        # --step-from-noise: one episode's SNR over the B episodes an update sums and Adam's
        # window (LeverConfig.lever_step_size)
        self.step_size = cfg.lever_step_size(cfg.learning_rate, self.model.dim)
        optimizer = optax.adam(self.step_size)
        # --public-eval-every: a step scale the learner lowers when it backs off
        self.optimizer = optimizer if cfg.public_eval_every is None else scaled(optimizer)
        self.mechanism = (GaussianSumMechanism(cfg.noise_multiplier, cfg.clip, 1.0, cfg.delta,
                                               unit=UNIT, secure=cfg.secure_noise)
                          if cfg.private and not cfg.adaptive_clip else None)
        # --adaptive-clip: the gradients at the public C_t and the clip count, together one
        # Gaussian of multiplier σ (levers.adaptive_clip_mechanisms)
        self.clip_mechanisms = (adaptive_clip_mechanisms(cfg, UNIT) if cfg.adaptive_clip
                                else None)
        self.update_cap = cfg.max_updates()
        # Where the episodes are played: inside the jitted program, or on the host.
        self.episodes: EpisodeSource = episode_source(cfg, task)
        # Each setting's own algorithm (several: `for_settings`), and each setting's parameters
        # as data, which the trials carry (`for_settings` makes them; empty: this algorithm's
        # trials use `mechanism` and `env`). A run goes through `settings_algorithm`.
        self.settings: list[Reinforce] = [self]
        self.setting_params: list[EpisodicSetting] = []

    def _as_data(self, each: Sequence[Reinforce]) -> None:
        """The settings `each` as data: DP-SGD sums sharing one clip (a non-private setting
        sums the raw rows); σ·IQR observation noise (None if no setting has any: all trials
        see the raw states)."""
        obs = observation_noise([a.config for a in each], self.task.obs_dim)
        self.setting_params = [
            EpisodicSetting(sum_setting(a.config.noise_multiplier if a.config.dp else None,
                                        self.config.clip), o)
            for a, o in zip(each, obs, strict=True)]

    def init(self, key: Array) -> ReinforceState:
        k_theta, key = jax.random.split(key)
        theta = self.model.init(k_theta)
        clip = jnp.float32(self.config.clip) if self.config.adaptive_clip else None
        return ReinforceState(theta, self.optimizer.init(theta), key,
                              progress_init(self.config.solve_window), jnp.int32(0),
                              jnp.int32(0), jnp.bool_(self.update_cap == 0), clip=clip)

    def policy(self, theta: Array) -> Any:
        """Sample actions with fresh dropout masks; return the masks to reuse in the loss.
        Continuous actions: (the clipped actions, the unclipped samples the loss needs)."""
        keep = 1.0 - self.config.dropout
        if self.continuous:
            return lambda key, obs: self.policy_head.sample(key, self.model.apply(theta, obs))
        if not self.dropout:  # a user's model: no dropout masks to record
            return lambda key, obs: jax.random.categorical(key, self.model.apply(theta, obs))

        def act(key: Array, obs: Array) -> tuple[Array, Array]:
            k_mask, k_act = jax.random.split(key)
            masks = jax.random.bernoulli(k_mask, keep, (obs.shape[0], self.config.hidden))
            masks = masks.astype(jnp.float32) / keep
            logits = self.model.apply(theta, obs, (masks,))
            return jax.random.categorical(k_act, logits), masks

        return act

    def episode_loss(self, theta: Array, obs: Array, actions: Array, mask: Array,
                     masks: Array | None, rewards: Array | None = None) -> Array:
        """One episode's loss, (T, ...) arrays; the gradient is the unit DP-SGD clips.
        `rewards`: the environment's (None: +1 per step, CartPole's)."""
        cfg = self.config
        rewards = mask if rewards is None else self.task.rewards(rewards, mask)
        returns = discounted_returns(rewards, mask, jnp.float32(0.0), cfg.gamma)
        if cfg.normalize_returns:
            returns = masked_standardize(returns, mask, ddof=1)
        if self.continuous:  # `masks` holds the rollout's unclipped samples
            out = self.model.apply(theta, obs)
            return score_function_loss(self.policy_head.log_prob(out, masks), returns, mask)
        logits = (self.model.apply(theta, obs, (masks,)) if masks is not None
                  else self.model.apply(theta, obs))
        return reinforce_loss(logits, actions, returns, mask)

    def gradient(self, theta: Array, traj: Any, key: Array, canaries: Array | None = None,
                 setting: EpisodicSetting | None = None) -> Array:
        """The update direction from a batch of episodes: DP-SGD's noisy mean, or the mean.

        `canaries` (k, d): extra per-example gradient rows (an audit's canaries; zero rows for
        canaries left out) released in the same noisy sum; the mean still divides by the batch.
        """
        cfg = self.config
        per_episode = jax.vmap(jax.grad(self.episode_loss), in_axes=(None, 1, 1, 1, 1, 1))(
            theta, traj.obs, traj.actions, traj.mask, traj.aux, traj.rewards)
        b = per_episode.shape[0]
        if canaries is not None:
            per_episode = jnp.concatenate([per_episode, canaries.astype(per_episode.dtype)])
        if setting is not None and setting.grad is not None:  # the trial's setting, as data
            return gaussian_sum_release(setting.grad, key, per_episode, float(cfg.clip)) / b
        if self.mechanism is not None:
            return self.mechanism.privatize(key, per_episode).value / b
        if cfg.dp:  # σ = 0: clipping without noise, no guarantee
            return jax.vmap(lambda g: clip_l2(g, cfg.clip))(per_episode).sum(0) / b
        return per_episode.mean(0)

    def episode(self, s: ReinforceState, episodes: EpisodeSource | None = None
                ) -> tuple[ReinforceState, EpisodeMetrics]:
        """One training episode (`step`) from `episodes` (default: the task's own source)."""
        state, metrics, _ = self.step(s, None, episodes)
        return state, metrics

    def step(self, s: ReinforceState, canaries: Array | None = None,
             episodes: EpisodeSource | None = None
             ) -> tuple[ReinforceState, EpisodeMetrics, Array]:
        """One training episode: the batch of episodes with π_θ from `episodes` (default: the
        task's own source), the update, the greedy evaluation and the bookkeeping. Also
        returns the released update direction (what an auditor who sees every noisy sum
        observes), and takes an audit's canary rows."""
        src = self.episodes if episodes is None else episodes
        env = lambda: self.observed(s)  # noqa: E731 - the trial's traced environment
        (key, k_roll, k_noise, k_eval), params, active = src.piece(self.plan)(s)
        traj = src.rollout(env, params, self.act, s.theta, k_roll, self.config.batch_episodes,
                           active, s.obs_noise)
        theta, opt_state, grad, clip = src.piece(self.update)(s, traj, k_noise, canaries)
        eval_ret = src.evaluate(env, self.env_params, self.greedy, theta, k_eval, active,
                                s.obs_noise)
        state, metrics = src.piece(self.finish)(s._replace(clip=clip), key, theta, opt_state,
                                                traj, eval_ret)
        return state, metrics, grad

    @property
    def head(self) -> str:  # type: ignore[override]
        """What policy.npz records the network returns (privrl.policy.HEADS)."""
        return "gaussian" if self.continuous else "logits"

    def greedy(self, theta: Array, key: Array, obs: Array) -> Array:
        """The evaluation policy's actions: the argmax of the logits; a Gaussian head's mean
        (squashed into the Box)."""
        if self.continuous:
            return self.policy_head.greedy(self.model.apply(theta, obs))
        return super().greedy(theta, key, obs)

    def act(self, theta: Array, key: Array, obs: Array) -> Any:
        """The training policy's actions (and dropout masks) on `obs` (`policy`)."""
        return self.policy(theta)(key, obs)

    def plan(self, s: ReinforceState) -> tuple[tuple[Array, ...], Any, Array]:
        """This episode's keys (next state's, rollout, DP-SGD noise, evaluation), its
        environment parameters (batch_episodes of them) and whether the seed still runs."""
        b = self.config.batch_episodes
        key, k_roll, k_noise, k_eval = jax.random.split(s.key, 4)
        root = data_root(s)  # secret: the episodes and their dynamics from the seed's root
        k_roll = secret_fold(root, k_roll)
        if s.noise is not None:  # secret: one key per update from this seed's own root
            k_noise = jax.random.fold_in(s.noise, s.updates)
        if self.task.private:  # episode i of this update is agent (episodes · b + i)
            params = self.task.agents_params(secret_fold(root, self.env_key),
                                             s.episodes * b + jnp.arange(b))
        else:  # (vector fields keep their shape behind the batch axis)
            params = jax.tree_util.tree_map(
                lambda x: jnp.broadcast_to(x, (b, *jnp.shape(x))), self.env_params)
        return (key, k_roll, k_noise, k_eval), params, ~s.stopped

    def adaptive_gradient(self, theta: Array, traj: Any, key: Array, clip: Array
                          ) -> tuple[Array, Array]:
        """--adaptive-clip: the batch's noisy mean gradient at the clip C_t and the next clip
        C_{t+1} (Andrew et al. 2021), both from released sums only (`clip_mechanisms`)."""
        cfg = self.config
        grads, bits = self.clip_mechanisms
        per_episode = jax.vmap(jax.grad(self.episode_loss), in_axes=(None, 1, 1, 1, 1, 1))(
            theta, traj.obs, traj.actions, traj.mask, traj.aux, traj.rewards)
        b = per_episode.shape[0]
        k_grad, k_bits = jax.random.split(key)
        grad = grads.privatize(k_grad, per_episode / clip).value * clip / b
        within = (jnp.linalg.norm(per_episode, axis=1) <= clip).astype(jnp.float32)
        count = bits.privatize(k_bits, (within - 0.5)[:, None]).value[0]
        return grad, next_clip(clip, count, b, cfg.clip_quantile, cfg.clip_lr)

    def update(self, s: ReinforceState, traj: Any, k_noise: Array,
               canaries: Array | None = None) -> tuple[Array, Any, Array, Array | None]:
        """One Adam step from the batch's (noisy) gradient, if the seed still runs:
        (θ, optimizer state, the released direction, the next clip: --adaptive-clip's, else
        None)."""
        active = ~s.stopped
        clip = s.clip
        if clip is not None:
            if canaries is not None:
                raise ValueError("the audit's canaries are not released with adaptive clipping")
            grad, new_clip = self.adaptive_gradient(s.theta, traj, k_noise, clip)
            clip = jnp.where(active, new_clip, clip)
        else:
            grad = self.gradient(s.theta, traj, k_noise, canaries, s.setting)
        step, opt_state = self.optimizer.update(grad, s.opt_state, s.theta)
        theta = jnp.where(active, s.theta + step, s.theta)
        opt_state = jax.tree_util.tree_map(lambda n, o: jnp.where(active, n, o), opt_state,
                                           s.opt_state)
        return theta, opt_state, grad, clip

    def finish(self, s: ReinforceState, key: Array, theta: Array, opt_state: Any, traj: Any,
               eval_ret: Array) -> tuple[ReinforceState, EpisodeMetrics]:
        """The episode's bookkeeping: progress, counters, the stop rule and its metrics."""
        cfg = self.config
        active = ~s.stopped
        progress = progress_update(s.progress, eval_ret, active, cfg.solve_threshold)
        episodes = s.episodes + active.astype(jnp.int32)
        updates = s.updates + active.astype(jnp.int32)
        stopped = (s.stopped | (episodes >= cfg.episodes) | (updates >= self.update_cap)
                   | (cfg.stop_when_solved & (progress.solved_at >= 0)))
        nan = jnp.float32(jnp.nan)
        train_return = jnp.sum(traj.rewards, axis=0).mean()  # the environment's return
        metrics = EpisodeMetrics(jnp.where(active, train_return, nan),
                                 jnp.where(active, eval_ret, nan), updates)
        return ReinforceState(theta, opt_state, key, progress, episodes, updates, stopped,
                              s.noise, s.obs_noise, s.setting, s.clip), metrics
