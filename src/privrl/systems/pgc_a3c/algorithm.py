"""PGC-A3C: locally private distributed A3C (Ono & Takahashi, paper 000), read top to bottom.

The Private Gradient Collection loop, for each trial:

1. the aggregator hands the current θ to P agents (the paper's 9 asynchronous threads);
2. each agent is a new private environment (CartPole with its own gravity ψ ∈ {9.7, 9.8, 9.9}):
   it plays one episode with θ, computes the gradient of the A3C loss (eq. 15-18) ...
3. ... and randomizes it with the mechanism (Laplace or PRS), producing a `Report`;
4. the aggregator applies the P reports in turn through its buffer (eq. 22).

Model of A3C's asynchrony: the P agents of a round start from the same snapshot of θ and their
reports are applied one after another, so the k-th report of a round was computed from a θ that
is k-1 updates stale (with |B| = 1), as a thread of A3C that read θ before its peers wrote.

One round (`PGCA3C.round`) advances a batch of trials: `plan` (who plays, keys, each agent's
private dynamics), the episodes from the source passed in (`JITTED_EPISODES`: the gymnax
rollout inside the round's jitted program; `HOST_EPISODES`: a Gymnasium task's, played on the
host between the round's jitted pieces), then `settle`: each agent's gradient, its report (the
mechanism) and the aggregator's updates. Rounds are chained with `lax.scan` (`run_rounds`),
trials sharded over host devices by the runner. Agent-side (rollout, loss, mechanism) and
aggregator-side (`BufferedAggregator.receive`) meet only through the `Report` pytree; Ray's
agent and the audit's canary run the agent side alone (`agent_reports`), from the same plan,
episode source, gradient and release. A submission's score is its episode's true return
(`score`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from jax import Array

from privrl.compute.programs import alone_or_program, settings_program
from privrl.compute.sharding import in_blocks, pad_rows
from privrl.config import (
    ConfigError,
    fail,
    other_field,
)
from privrl.envs.rollout import Trajectory, rollout_episodes, rollout_trials
from privrl.envs.task import Task, cartpole_task, check_module, resolve_task
from privrl.federation.adapt import noise_step, scaled
from privrl.federation.aggregator import AggregatorState, BufferedAggregator
from privrl.losses import a2c_loss, actor_critic_loss, discounted_returns, gae
from privrl.nets.flat import FlatModel, actor_critic
from privrl.privacy.clipping import (
    ClipBitRelease,
    debiased_bit_fraction,
    geometric_clip_update,
)
from privrl.privacy.ldp_compact import compact_mechanism
from privrl.privacy.ldp_vector import unit_mechanism
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.mechanisms import (
    IdentityMechanism,
    LaplaceMechanism,
    Mechanism,
    ProjectedRandomSignMechanism,
    SettingParams,
    privatize_setting,
    setting_params,
    stack_params,
)
from privrl.privacy.noise import secret_fold
from privrl.privacy.user import MechanismRequest, is_user_mechanism, user_mechanism
from privrl.systems.pgc_a3c.config import ADAPTIVE_LEVERS, PGCA3CConfig


class TrialState(NamedTuple):
    """Everything one trial carries from round to round."""

    agg: AggregatorState
    submitted: Array  # submissions so far (n)
    key: Array  # the trial's root key (never split in place: rounds fold in their index)
    retired: Array  # bool: the runner stopped this trial (its agents no longer run or submit)
    # Secret noise root (privrl.privacy.noise.secret_keys), or None: noise keys derive from
    # `key` (seeded). An argument of the jitted program, never a constant of it.
    noise: Array | None = None
    # The trial's setting as data (`PGCA3C.for_settings`: one program, several settings), or
    # None: the algorithm's own config, compiled in.
    setting: TrialSetting | None = None
    # --adaptive-clip: s_t = C_t/C_0, the clip of the next round over the configured one (a
    # function of earlier rounds' released clip bits); None: the clip is fixed.
    clip_scale: Array | None = None
    # The submissions cap (int32) as data: the local runner's, so that one compiled program
    # serves every budget (`ShardedTrials`); None: the config's `submissions`, compiled in.
    cap: Array | None = None


class TrialSetting(NamedTuple):
    """The numbers a trial's setting sets (per-trial data of one program for several)."""

    mechanism: SettingParams
    buffer_size: Array  # int32 |B|


class RoundPlan(NamedTuple):
    """One trial's round before any episode is played (`PGCA3C.plan`); a batch of trials'
    plans has a leading trial axis."""

    active: Array  # (P,) bool: the agents that play and submit
    round_key: Array  # the round's key (the shuffler's order folds it)
    keys: Array  # (2,): the rollout's key, the mechanism's
    noise_keys: Array | None  # (P,) each agent's mechanism key (secret noise); None: seeded
    params: Any  # each agent's private dynamics, (P, ...) leaves
    alpha: Array  # the exploration probability α


# Config fields that settings run as one program may differ in (they become per-trial data).
# `noise` may differ only for non-private settings, whose mechanism takes no key.
SETTING_FIELDS = ("mechanism", "epsilon", "epsilon_per_report", "clip", "buffer_size", "d_hat",
                  "budget_composition", "noise")
# The releases every program of PGC-A3C settings computes, and every run that could join one
# (`privacy.mechanisms.setting_release`): the same compiled arithmetic in both. XLA CPU contracts
# `clipped + scale·noise` into a multiply-add or not depending on what else the release's
# kernel selects between, so a Laplace run computed alone differed by an ulp from the same
# setting beside the non-private one.
ONE_PROGRAM_MECHANISMS = ("none", "laplace", "prs")


def one_program_field(configs: Sequence[PGCA3CConfig]) -> str | None:
    """The config field that keeps resolved `configs` from running as one program (None: they
    can): they must differ only in SETTING_FIELDS, use none/laplace/prs without float-safe
    noise, and the private ones must agree on the noise keys' mode."""
    for cfg in configs:
        if cfg.mechanism not in ONE_PROGRAM_MECHANISMS:
            return "mechanism"
        for lever in ADAPTIVE_LEVERS:  # each setting's own clip bit ε, step size, evaluation
            if getattr(cfg, lever) not in (False, None):
                return lever
        if cfg.secure_noise:
            return "secure_noise"
    field = other_field(configs, SETTING_FIELDS)
    if field is not None:
        return field
    if len({c.noise for c in configs if c.mechanism != "none"}) > 1:
        return "noise"
    return None


class PGCA3C:
    """The algorithm for one resolved config: `init(key)`, and `run_rounds(states, n)` or
    `round(states, ...)` for a batch of trials (leading axis)."""

    def __init__(self, config: PGCA3CConfig, task: Task | None = None,
                 model: nn.Module | None = None) -> None:
        """`task` (default: the one `config.env`/`config.private_params` name) and `model` (a flax
        module mapping one observation to (logits, value); default: the paper's network,
        `hidden` units, sized from the task's spaces)."""
        resolved = config.resolved()  # config.json records the task the run used
        cfg, task = resolve_task(resolved, task, partial(cartpole_task, "v0", resolved.gravities),
                                 "target_score")
        if cfg.reward == "shaped":
            cfg = replace(cfg, reward=task.shaping or "env")
        if cfg.reward == "goal" and cfg.target_score is None:
            fail("reward", f"goal rewards reaching the target return, and {task.name} has none: "
                           "set the target (--target-return)")
        self.config, self.task = cfg, task
        self.env, self.env_params = task.env, task.params
        # The policy head the action space takes (privrl.nets.heads): categorical (the
        # paper's) or, for a Box, a Gaussian whose unclipped samples the rollout records.
        self.head = task.head
        if model is None:
            continuous = self.head.continuous
            self.model: FlatModel = actor_critic(
                cfg.hidden, self.head.outputs, task.obs_dim, cfg.use_bias,
                cfg.log_std if continuous else "state",
                self.head.uniform_log_std() if continuous and cfg.uniform_start else None,
                cfg.uniform_start, value_head=cfg.critic == "shared")
        else:
            self.model = FlatModel(check_module(model, task, "logits,value"),
                                   jnp.zeros((task.obs_dim,), jnp.float32))
        self.dim = self.model.dim
        self.mechanism = make_mechanism(cfg, self.dim)
        eps_update, eps_bit = cfg.release_epsilons()
        # --adaptive-clip: each report's clip bit, by randomized response at its share of ε
        # (None: no bit, or the non-private baseline's exact bit).
        self.clip_bit = None if eps_bit is None else ClipBitRelease(eps_bit)
        # What the ledger charges per report: the gradient's release and its clip bit composed
        # (their ε sum to the plan's ε per report).
        self.report_guarantee = (self.mechanism.guarantee if eps_bit is None else replace(
            self.mechanism.guarantee, epsilon=eps_update + eps_bit,
            unit=f"{self.mechanism.guarantee.unit} and its adaptive-clip bit"))
        # --step-from-noise: the step size from the mechanism's noise level (post-processing).
        self.step_size = (noise_step(cfg.learning_rate, report_snr(cfg, eps_update, self.dim),
                                     reports_per_step(cfg))
                          if cfg.step_from_noise else cfg.learning_rate)
        self.aggregator = BufferedAggregator(
            self.dim, cfg.buffer_size, self.step_size, server_optimizer(cfg, self.step_size)
        )
        # Where the task's episodes are played: in the round's jitted program (gymnax), or on
        # the host (Gymnasium), between the round's jitted pieces (compiled once per run).
        self.episodes: EpisodeSource = HOST_EPISODES if task.host else JITTED_EPISODES
        self._act, self._plan = jax.jit(self.act), jax.jit(jax.vmap(self.plan))
        self._act_trials = jax.jit(jax.vmap(self.act))  # every trial's agents in one call
        self._settle = jax.jit(self.settle, static_argnums=3)
        self._agents_plan = jax.jit(self.agents_plan)
        # Each setting's own algorithm (several: `for_settings`), and the aggregator for each
        # of their |B|.
        self.settings: list[PGCA3C] = [self]
        self.aggregators = {cfg.buffer_size: self.aggregator}
        # The settings' mechanisms, whose parameters the trials carry as data (`for_settings`);
        # None: `mechanism`, the config's, compiled in.
        self.setting_mechanisms: tuple[Mechanism, ...] | None = None

    @classmethod
    def for_settings(cls, configs: Sequence[PGCA3CConfig], task: Task | None = None,
                     model: nn.Module | None = None) -> PGCA3C:
        """One algorithm for several settings that differ only in SETTING_FIELDS (mechanism
        family, ε, clip, |B|, d̂): every trial carries its setting as data (its mechanism's
        parameter pytree and |B|: `TrialState.setting`, from `setting_data`), so one jitted
        program runs them all. A trial's releases and updates are the floats its setting's own
        program computes. ConfigError names the field that keeps them apart."""
        return settings_program(cls, configs, task, model, one_program_field,
                                f"{', '.join(SETTING_FIELDS)} (mechanisms "
                                f"{', '.join(ONE_PROGRAM_MECHANISMS)}, without float-safe "
                                "noise)", cls._as_data)

    def _as_data(self, each: Sequence[PGCA3C]) -> None:
        """Settings `each` as per-trial data: their mechanisms (whose parameters the trials
        carry), and an aggregator for each of their |B|."""
        self.setting_mechanisms = tuple(a.mechanism for a in each)
        self.aggregators = {a.config.buffer_size: a.aggregator for a in each}

    def receive(self, agg: AggregatorState, report: Any, setting: TrialSetting | None
                ) -> AggregatorState:
        """The aggregator takes one report. Settings run as one program with different |B|
        each apply it with |B| compiled in (one aggregator per |B|, selected per trial): a
        |B| passed as data would let XLA fold the mean's 1/|B| with the optimizer's constants
        differently, and a trial would no longer get its own run's floats."""
        if setting is None or len(self.aggregators) == 1:
            return self.aggregator.receive(agg, report)
        new = agg
        for size, aggregator in self.aggregators.items():
            ours = setting.buffer_size == size
            new = jax.tree_util.tree_map(lambda a, b, ours=ours: jnp.where(ours, a, b),
                                         aggregator.receive(agg, report), new)
        return new

    def setting_data(self, settings: Sequence[int]) -> TrialSetting:
        """Per-trial data: trial k runs setting settings[k] (an index into `self.settings`)."""
        assert self.setting_mechanisms is not None
        mechanisms = [setting_params(self.setting_mechanisms[i], self.dim) for i in settings]
        return TrialSetting(stack_params(mechanisms), np.asarray(
            [self.settings[i].config.buffer_size for i in settings], np.int32))

    # --- setup ---------------------------------------------------------------------------
    def init(self, key: Array) -> TrialState:
        k_theta, k_run = jax.random.split(key)
        agg = self.aggregator.init(self.model.init(k_theta))
        scale = jnp.ones((), jnp.float32) if self.config.adaptive_clip else None
        return TrialState(agg, jnp.zeros((), jnp.int32), k_run, jnp.zeros((), bool),
                          clip_scale=scale)

    # --- agent side ----------------------------------------------------------------------
    def exploration(self, submitted: Array) -> Array:
        """α = max(0, 0.5 − n/1800), n = submissions so far."""
        cfg = self.config
        return jnp.maximum(0.0, cfg.explore_start - submitted / cfg.explore_decay)

    def act(self, theta: Array, alpha: Array, key: Array, obs: Array) -> Any:
        """argmax π(·|s; θ) (or a sample of π) with probability 1 − α, else a random action.
        A Gaussian head: (the actions, clipped to the Box, and what their log-probability is
        of: the unclipped samples; argmax is the mean, a random action uniform in the Box)."""
        logits, _ = self.model.apply(theta, obs)
        k_explore, k_random, k_pi = jax.random.split(key, 3)
        explore = jax.random.uniform(k_explore, obs.shape[:1]) < alpha
        if self.head.continuous:
            random_action = self.head.uniform(k_random, obs.shape[0])
            if self.config.action_selection == "sample":
                action, raw = self.head.sample(k_pi, logits)
            else:
                action = raw = self.head.greedy(logits)
            return (jnp.where(explore[:, None], random_action, action),
                    jnp.where(explore[:, None], random_action, raw))
        random_action = jax.random.randint(k_random, obs.shape[:1], 0, logits.shape[-1])
        if self.config.action_selection == "sample":
            policy_action = jax.random.categorical(k_pi, logits)
        else:
            policy_action = jnp.argmax(logits, axis=-1)
        return jnp.where(explore, random_action, policy_action).astype(jnp.int32)

    def episode_loss(self, theta: Array, traj: Trajectory) -> Array:
        """The empirical A3C loss of one agent's episode (time-major traj, no agent axis)."""
        cfg = self.config
        logits, values = self.model.apply(theta, traj.obs)
        _, final_value = self.model.apply(theta, traj.final_obs)
        if cfg.critic == "none":  # the policy alone (a module passed in: its value ignored)
            values, final_value = jnp.zeros_like(values), jnp.zeros_like(final_value)
        bootstrap = jnp.where(traj.terminated, 0.0, jax.lax.stop_gradient(final_value))
        if cfg.gae_lambda is None:
            returns = discounted_returns(self.rewards(traj), traj.mask, bootstrap, cfg.gamma)
            advantage = None
        else:  # GAE(λ); the critic's targets are the λ-returns Â + V
            fixed = jax.lax.stop_gradient(values)
            advantage = gae(self.rewards(traj), fixed, traj.mask, bootstrap, cfg.gamma,
                            cfg.gae_lambda)
            returns = advantage + fixed
        if self.head.continuous:  # traj.aux: the rollout's unclipped samples
            loss, _ = actor_critic_loss(
                self.head.log_prob(logits, traj.aux), self.head.entropy(logits), values,
                returns, traj.mask, cfg.value_coef, cfg.entropy_coef, cfg.normalize_advantage,
                advantage)
        elif advantage is None:
            loss, _ = a2c_loss(logits, values, traj.actions, returns, traj.mask,
                               cfg.value_coef, cfg.entropy_coef, cfg.normalize_advantage)
        else:
            loss, _ = actor_critic_loss(
                self.head.log_prob(logits, traj.actions), self.head.entropy(logits), values,
                returns, traj.mask, cfg.value_coef, cfg.entropy_coef, cfg.normalize_advantage,
                advantage)
        if cfg.loss_reduction == "mean":
            loss = loss / jnp.maximum(jnp.sum(traj.mask), 1.0)
        return loss

    def rewards(self, traj: Trajectory) -> Array:
        """Per-step rewards of one episode: the environment's ("env"), or shaped from the mask
        and the termination flag.

        "env": the task's rewards (CartPole: +1 for every step the pole stayed up, the paper's).
        "step": +1 for every step the pole stayed up, so the return counts steps.
        "failure": 0 per step and −1 on the step where the pole fell (not at the step cap).
        "goal" (the public TF1 example's): 0 per step; on an episode's last step +1 if its
        true return (`score`) reached `target_score`, else −1 if it terminated. On CartPole the
        return is the length: +1 for lasting `target_score` steps, −1 for a fall before.
        Each is multiplied by `reward_scale` (when not 1).
        """
        scale = self.config.reward_scale
        return self._rewards(traj) if scale == 1.0 else scale * self._rewards(traj)

    def _rewards(self, traj: Trajectory) -> Array:
        if self.config.reward == "env":
            return self.task.rewards(traj.rewards, traj.mask)
        if self.config.reward == "step":
            return traj.mask
        last = jnp.arange(traj.mask.shape[0]) == traj.length - 1
        if self.config.reward == "failure":
            return jnp.where(last & traj.terminated, -1.0, 0.0) * traj.mask
        reached = self.score(traj) >= self.config.target_score
        end = jnp.where(reached, 1.0, jnp.where(traj.terminated, -1.0, 0.0))
        return jnp.where(last, end, 0.0) * traj.mask

    # --- one round: plan, episodes (from the source passed in), reports, aggregation -------
    def plan(self, state: TrialState, env_key: Array) -> RoundPlan:
        """Who plays this round and with what, before any episode is played. The last round
        may be partial; a retired trial's agents do nothing."""
        cfg = self.config
        index = state.submitted + jnp.arange(cfg.parallel_agents, dtype=jnp.int32)
        cap = cfg.submissions if state.cap is None else state.cap
        active = (index < cap) & ~state.retired
        round_key = jax.random.fold_in(state.key, state.submitted // cfg.parallel_agents)
        agent_ids = index // cfg.submissions_per_agent
        return self.agents_plan(state.submitted, round_key, env_key, agent_ids, active,
                                self.noise_keys(state.noise, agent_ids, index), state.noise)

    def agents_plan(self, submitted: Array, key: Array, env_key: Array, agent_ids: Array,
                    active: Array, noise_keys: Array | None = None, root: Array | None = None
                    ) -> RoundPlan:
        """The plan of agents `agent_ids` (those `active` play) after `submitted` submissions,
        from the round key `key` (`plan` folds it from the trial's; Ray's agent and the audit's
        canary choose their own) and the trial's `env_key`.

        `root`: the secret noise root (None: seeded). Under secret noise it also keys the
        agents' private dynamics and their episodes (`secret_fold` over the seeded keys), so
        that config.json and the log do not let anyone re-simulate an agent's data; the round
        key the aggregator folds stays the seeded one."""
        return RoundPlan(active, key, jax.random.split(secret_fold(root, key)), noise_keys,
                         self.task.agents_params(secret_fold(root, env_key),
                                                 self.per_episode(agent_ids)),
                         self.exploration(submitted))

    @staticmethod
    def noise_keys(root: Array | None, agent_ids: Array, index: Array) -> Array | None:
        """The round's mechanism keys under secret noise (None: seeded, from the round key)."""
        if root is None:
            return None
        return jax.vmap(agent_noise_key, (None, 0, 0))(root, agent_ids, index)

    def round(self, states: TrialState, env_keys: Array, episodes: EpisodeSource, group: int
              ) -> tuple[TrialState, Array]:
        """One round of a batch of trials (leading axis, a multiple of `group`; `env_keys`:
        each trial's `trial_env_key`): the plan, the agents' episodes from `episodes`
        (`JITTED_EPISODES` inside this program, or `HOST_EPISODES` on the host, between its
        jitted pieces), then `settle`. Scores (trials, P), NaN where no agent submitted."""
        host = episodes.host  # a host source cannot be traced: plan and settle jitted apart
        plans = (self._plan if host else jax.vmap(self.plan))(states, env_keys)
        # The named scopes label the pieces in a profile (benchmarks/profile_round.py).
        with jax.named_scope("rollout"):
            traj = episodes(self, states.agg.theta, plans, group)
        return (self._settle if host else self.settle)(states, plans, traj, group)

    def settle(self, states: TrialState, plans: RoundPlan, traj: Trajectory, group: int
               ) -> tuple[TrialState, Array]:
        """A batch of trials' round after its episodes: each agent's gradient, its report (the
        mechanism) and the aggregator's updates.

        A trial's floats can depend on the size of the batch XLA computes it in and on what it
        fuses with, so every piece is computed `group` trials at a time (`in_blocks`), `group`
        fixed by the run's own configuration, never by how many trials share the program
        (`trial_group`): each trial's floats are the same in any batch, its own run's when
        settings run as one program."""
        with jax.named_scope("gradients"):
            grads = in_blocks(jax.vmap(self.report_grads), group)(states.agg.theta, traj)

        def one(state: TrialState, grads: Array, key: Array, noise_keys: Array | None,
                scores: Array, active: Array, round_key: Array) -> tuple[TrialState, Array]:
            if state.clip_scale is not None:
                return self.adaptive_round(state, grads, key, noise_keys, scores, active,
                                           round_key)
            with jax.named_scope("mechanism"):
                reports = self.privatize(grads, key, noise_keys, state.setting)
            with jax.named_scope("aggregator"):
                return self.finish_round(state, reports, scores, active, round_key)

        return in_blocks(jax.vmap(one), group)(
            states, grads, plans.keys[:, 1], plans.noise_keys,
            jax.vmap(self.report_scores)(traj), plans.active, plans.round_key)

    def adaptive_round(self, state: TrialState, grads: Array, key: Array,
                       noise_keys: Array | None, scores: Array, active: Array,
                       round_key: Array) -> tuple[TrialState, Array]:
        """`settle`'s round of one trial under --adaptive-clip (Andrew et al. 2021, local DP).

        Agent side: with the public s_t = C_t/C_0, each agent releases its gradient scaled by
        1/s_t through the mechanism (compiled with C_0: for Laplace, exactly the release at
        clip C_t scaled by 1/s_t, as its L1 clip and noise are homogeneous in C) and its bit
        1[‖∇‖₁ <= C_t/2] (the clip Laplace applies) by randomized response. Aggregator side:
        the reports scaled back by s_t, then C_{t+1} = C_t·exp(−η_C (b̄ − γ)) from the bits'
        debiased fraction b̄ (post-processing; no live agent: the clip stays)."""
        s = state.clip_scale
        assert s is not None
        with jax.named_scope("mechanism"):
            reports = self.privatize(grads / s, key, noise_keys, state.setting)
            within = jnp.sum(jnp.abs(grads), axis=-1) <= s * (self.config.clip / 2.0)
            if self.clip_bit is None:  # the non-private baseline: the exact bits
                bits, eps_bit = within.astype(jnp.float32), math.inf
            else:
                bit_keys = jax.vmap(jax.random.fold_in, (0, None))(
                    jax.random.split(key, grads.shape[0]) if noise_keys is None else noise_keys,
                    CLIP_BIT_SALT)
                bits = jax.vmap(self.clip_bit.privatize)(bit_keys, within).value
                eps_bit = self.clip_bit.epsilon
        with jax.named_scope("aggregator"):
            reports = jax.tree_util.tree_map(lambda v: v * s, reports)
            state, scores = self.finish_round(state, reports, scores, active, round_key)
            fraction = (jnp.sum(jnp.where(active, bits, 0.0)) / jnp.maximum(jnp.sum(active), 1)
                        if math.isinf(eps_bit) else debiased_bit_fraction(bits, active, eps_bit))
            cfg = self.config
            new = geometric_clip_update(s, fraction, cfg.clip_quantile, cfg.clip_lr)
            return state._replace(clip_scale=jnp.where(jnp.any(active), new, s)), scores

    def public_returns(self, thetas: Array, key: Array) -> Array:
        """Each θ's (n, d) returns (n, episodes) on the task's PUBLIC simulator: the environment's
        default parameters (`Task.params`, no agent's private draw), `public_eval_episodes`
        episodes from `key` (the same for every θ), actions as the agents choose them without
        exploration. What the aggregator's best-candidate choice reads (post-processing)."""
        cfg = self.config
        n = cfg.public_eval_episodes
        params = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(jnp.asarray(x), (n, *jnp.shape(x))), self.task.params)
        zero = jnp.zeros((), jnp.float32)
        if self.task.host:
            out = []
            for theta in np.asarray(thetas):
                traj = self.task.rollout(params, partial(self._act, jnp.asarray(theta), zero),
                                         key, n, cfg.max_episode_steps)
                out.append(np.asarray(traj.rewards * traj.mask, np.float64).sum(0))
            return jnp.asarray(out)
        return self._public(thetas, params, key)

    @partial(jax.jit, static_argnums=0)
    def _public(self, thetas: Array, params: Any, key: Array) -> Array:
        def one(theta: Array) -> Array:
            traj = rollout_episodes(self.env, params,
                                    lambda k, obs: self.act(theta, jnp.zeros(()), k, obs), key,
                                    self.config.public_eval_episodes,
                                    self.config.max_episode_steps)
            return jnp.sum(traj.rewards * traj.mask, axis=0)
        return jax.vmap(one)(thetas)

    def finish_round(self, state: TrialState, reports: Any, scores: Array, active: Array,
                     round_key: Array) -> tuple[TrialState, Array]:
        """The aggregator's side of a round: the reports (shuffled, if so configured) applied
        one after another; scores NaN where no agent submitted."""
        p = self.config.parallel_agents
        if self.config.shuffle:  # the shuffler: a uniformly random order, no identities
            order = jax.random.permutation(jax.random.fold_in(round_key, 0x5F1E), p)
            reports, active_in = jax.tree_util.tree_map(lambda a: a[order], (reports, active))
        else:
            active_in = active

        def apply(agg: AggregatorState, item: tuple) -> tuple[AggregatorState, None]:
            report, live = item
            new = self.receive(agg, report, state.setting)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), new, agg), None

        agg, _ = jax.lax.scan(apply, state.agg, (reports, active_in))
        submitted = state.submitted + jnp.sum(active, dtype=jnp.int32)
        return (state._replace(agg=agg, submitted=submitted),
                jnp.where(active, scores, jnp.nan))

    def run_rounds(self, states: TrialState, num_rounds: int, group: int | None = None,
                   episodes: EpisodeSource | None = None) -> tuple[TrialState, Array]:
        """`num_rounds` rounds of a batch of trials (`round`); scores (trials, rounds * P), NaN
        where no agent submitted (past the cap, or retired): a return can be any number, so NaN
        marks none. `group`: the trials computed together (default: the batch, at most the
        config's `trial_block`); `episodes`: the source (default: the task's). The batch is
        padded once to a multiple of `group` with retired copies of its first trial, which
        take no step and are dropped. Jit it, unless the episodes are played on the host."""
        episodes = episodes or self.episodes
        n = states.submitted.shape[0]
        group = group or trial_group(n, 1, self.config.trial_block)
        size = -(-n // group) * group
        states = jax.tree_util.tree_map(lambda x: pad_rows(x, size), states)
        states = states._replace(retired=states.retired.at[n:].set(True))
        env_keys = jax.vmap(trial_env_key)(states)

        def body(s: TrialState, _: Any) -> tuple[TrialState, Array]:
            return self.round(s, env_keys, episodes, group)

        if episodes.host:
            per_round = []
            for _ in range(num_rounds):
                states, scores = body(states, None)
                per_round.append(np.asarray(scores))
            scores = jnp.asarray(np.stack(per_round))
        else:
            states, scores = jax.lax.scan(body, states, None, length=num_rounds)
        return (jax.tree_util.tree_map(lambda x: x[:n], states),
                jnp.swapaxes(scores, 0, 1)[:n].reshape(n, -1))

    # --- the agent side alone: Ray's agent, the audit's canary ---------------------------
    def agent_reports(self, theta: Array, submitted: Array, key: Array, env_key: Array,
                      agent_ids: Array, active: Array, noise_keys: Array | None = None,
                      traj: Trajectory | None = None, setting: TrialSetting | None = None,
                      root: Array | None = None) -> tuple[Any, Array]:
        """What a round computes on the agents' side, for one trial's agents (`agents_plan`)
        from θ: their Reports and scores (P,). `noise_keys` (P,): each agent's own mechanism
        keys (secret noise); None: derived from `key` (seeded). `traj`: their episodes, already
        played on the host (`host_rollout`); None: played here by `JITTED_EPISODES`.
        `setting`: the trial's mechanism as data (`for_settings`). `root`: the agent's secret
        noise root, which also keys its dynamics and episodes (`agents_plan`)."""
        plan = self.agents_plan(submitted, key, env_key, agent_ids, active, noise_keys, root)
        if traj is None:
            traj = self._one_trial(JITTED_EPISODES, theta, plan)
        reports = self.privatize(self.report_grads(theta, traj), plan.keys[1],
                                 plan.noise_keys, setting)
        return reports, self.report_scores(traj)

    def host_rollout(self, theta: Array, submitted: Array, key: Array, env_key: Array,
                     agent_ids: Array, active: Array, root: Array | None = None) -> Trajectory:
        """The episodes `agent_reports` takes on a Gymnasium task: `HOST_EPISODES` for one
        trial's agents (`root`: as there)."""
        plan = self._agents_plan(submitted, key, env_key, agent_ids, active, None, root)
        return self._one_trial(HOST_EPISODES, theta, plan)

    def _one_trial(self, episodes: EpisodeSource, theta: Array, plan: RoundPlan
                   ) -> Trajectory:
        """`episodes` for one trial (no trial axis)."""
        one = jax.tree_util.tree_map(lambda x: x[None], (theta, plan))
        return jax.tree_util.tree_map(lambda x: x[0], episodes(self, *one, 1))

    # --- the agent side's pieces ---------------------------------------------------------
    def per_episode(self, x: Array, axis: int = 0) -> Array:
        """A per-agent array repeated for each of an agent's `episodes_per_report` episodes
        (agent-major: agent i's episodes are i·E ... i·E + E − 1)."""
        e = self.config.episodes_per_report
        return x if e == 1 else jnp.repeat(x, e, axis=axis)

    def report_grads(self, theta: Array, traj: Trajectory) -> Array:
        """Each agent's gradient (P, d): the mean of its `episodes_per_report` episodes'
        gradients (its own data only; one report, one release, whatever E is)."""
        grads = self.episode_grads(theta, traj)
        e = self.config.episodes_per_report
        return grads if e == 1 else jnp.mean(grads.reshape(-1, e, grads.shape[-1]), axis=1)

    def report_scores(self, traj: Trajectory) -> Array:
        """Each agent's score (P,): the mean true return of its episodes."""
        scores = self.score(traj)
        e = self.config.episodes_per_report
        return scores if e == 1 else jnp.mean(scores.reshape(-1, e), axis=1)

    def episode_grads(self, theta: Array, traj: Trajectory) -> Array:
        """∇θ of each agent's episode loss (P, d), from the round's episodes (time-major)."""
        per_agent = traj._replace(  # agent-major, so that vmap gives one episode per agent
            obs=jnp.swapaxes(traj.obs, 0, 1), actions=jnp.swapaxes(traj.actions, 0, 1),
            mask=traj.mask.T, rewards=traj.rewards.T,
            aux=None if traj.aux is None else jnp.swapaxes(traj.aux, 0, 1))
        return jax.vmap(jax.grad(self.episode_loss), (None, 0))(theta, per_agent)

    def privatize(self, grads: Array, key: Array, noise_keys: Array | None,
                  setting: TrialSetting | None) -> Any:
        """The agents' Reports: each gradient through the mechanism (the trial's `setting`, if
        any), with each agent's `noise_keys` or keys split from `key` (seeded)."""
        if noise_keys is None:
            noise_keys = jax.random.split(key, grads.shape[0])
        if setting is None:
            return jax.vmap(self.mechanism.privatize)(noise_keys, grads)
        assert self.setting_mechanisms is not None
        release = partial(privatize_setting, self.setting_mechanisms, ONE_PROGRAM_MECHANISMS)
        return jax.vmap(release, (None, 0, 0))(
            setting.mechanism, noise_keys, grads)

    @staticmethod
    def score(traj: Trajectory) -> Array:
        """Each episode's score (P,) float32: its true return, the sum of the environment's
        own rewards (what reward "env" learns from; a `reward_transform` and the shaped
        rewards do not change it). CartPole's return is its length, the paper's score."""
        return jnp.sum(traj.rewards, axis=0)

class EpisodeSource(Protocol):
    """Where a round's episodes are played: `(algo, theta, plans, group)` gives the episodes
    (time-major `Trajectory` per trial) of a batch of trials (leading axis, a multiple of
    `group`) from each trial's θ and `RoundPlan`."""

    host: bool  # True: played on the host, outside any jitted program

    def __call__(self, algo: PGCA3C, theta: Array, plans: RoundPlan, group: int
                 ) -> Trajectory: ...


class JittedEpisodes:
    """A gymnax task's episodes, inside the round's jitted program (`rollout_trials`): trials
    step `group` at a time, and trials whose agents are all done stop costing steps (stages of
    half the blocks, a quarter, ...: `trial_stages`)."""

    host = False

    def __call__(self, algo: PGCA3C, theta: Array, plans: RoundPlan, group: int
                 ) -> Trajectory:
        cfg = algo.config
        return rollout_trials(
            algo.env, plans.params, lambda a, k, obs: algo.act(a[0], a[1], k, obs),
            (theta, plans.alpha), plans.keys[:, 0], cfg.parallel_agents * cfg.episodes_per_report,
            cfg.max_episode_steps, algo.per_episode(plans.active, axis=1), group,
            trial_stages(theta.shape[0] // group, group))


class HostEpisodes:
    """A Gymnasium task's episodes, played on the host (`Task.rollout_trials`), every trial at
    once: each step, one call of the jitted network chooses the actions of every trial's
    agents (a call per trial cost as much as the steps of ~9 CartPoles). The same keys and
    private dynamics as `JittedEpisodes` (tests/kernel/envs/test_gymnasium_task.py: the
    rollouts are twins)."""

    host = True

    def __call__(self, algo: PGCA3C, theta: Array, plans: RoundPlan, group: int
                 ) -> Trajectory:
        cfg = algo.config
        return algo.task.rollout_trials(
            plans.params, partial(algo._act_trials, theta, plans.alpha), plans.keys[:, 0],
            cfg.parallel_agents * cfg.episodes_per_report, cfg.max_episode_steps,
            np.asarray(algo.per_episode(plans.active, axis=1)))


JITTED_EPISODES, HOST_EPISODES = JittedEpisodes(), HostEpisodes()
# Folded into an agent's mechanism key for its adaptive-clip bit (a key the gradient's release
# never uses).
CLIP_BIT_SALT = 0xC11B


def settings_algorithm(configs: Sequence[PGCA3CConfig], task: Task | None = None,
                       model: nn.Module | None = None) -> PGCA3C:
    """The algorithm that runs `configs` together: `PGCA3C.for_settings`, or for one setting
    that could not join a program (another mechanism, float-safe noise, a Gymnasium task), its
    own `PGCA3C`. A setting that could join one computes through the program's path even
    alone, so that it gets the same floats alone and in any program; its trials then carry
    their setting as data (`setting_data`)."""
    return alone_or_program(PGCA3C, configs, task, model, one_program_field)


def lone_agent(config: PGCA3CConfig, task: Task | None = None, model: nn.Module | None = None
               ) -> tuple[PGCA3C, TrialSetting | None]:
    """The algorithm one agent at a time runs (the Ray agents, `privrl audit pgc-a3c`): a
    local run's (`settings_algorithm`) with one agent per round, and its setting as data for
    `agent_reports` (None: the mechanism is compiled in), so that every runtime and the audit
    release through the code a local run releases with."""
    algo = settings_algorithm([replace(config, parallel_agents=1, trials=1)], task, model)
    if algo.setting_mechanisms is None:
        return algo, None
    return algo, jax.tree_util.tree_map(lambda a: jnp.asarray(a[0]), algo.setting_data([0]))


def trial_group(trials: int, devices: int, block: int = PGCA3CConfig.trial_block) -> int:
    """The block of trials a run of `trials` trials on `devices` devices computes together: its
    trials per device, at most `block` (the config's `trial_block`). Settings run as one
    program use their own run's, so every trial is computed in blocks of the size its own run
    uses."""
    return max(1, min(block, math.ceil(trials / devices)))


def trial_stages(blocks: int, group: int) -> list[int]:
    """`rollout_trials`' stages for `blocks` blocks of `group` trials: half of the blocks,
    half of that, ... down to one block (a run with one block has no stages). Halving was the
    cheapest of the splits tried on the paper sweep (thirds, two-thirds)."""
    sizes = []
    while blocks > 1:
        blocks = -(-blocks // 2)
        sizes.append(blocks * group)
    return sizes


def trial_env_key(state: TrialState) -> Array:
    """The key of a trial's private dynamics (agent i's are drawn from fold_in(it, i))."""
    return jax.random.fold_in(state.key, 0x5EED)


def agent_noise_key(root: Array, agent_id: Array, index: Array) -> Array:
    """The mechanism key of one submission under secret noise: the agent's secret root folded
    with its id and the submission's index (one key per (agent, index))."""
    return jax.random.fold_in(jax.random.fold_in(root, agent_id), index)


def server_optimizer(cfg: PGCA3CConfig, learning_rate: float | None = None
                     ) -> optax.GradientTransformation:
    """The aggregator's optax optimizer. "rmsprop" is TF1's RMSPropOptimizer without momentum:
    optax's rmsprop with eps inside the square root and ν initialised to `initial_scale` (TF1:
    ones), which makes the first steps ≈ η·g rather than ≈ η·sign(g)·10. With
    `lr_decay_updates` τ the step size after n updates is η/√(1 + n/τ). `learning_rate`: η
    (default the config's; --step-from-noise passes the one it set). With --public-eval-every
    the update carries a scale the aggregator lowers when it backs off (`adapt.scaled`)."""
    eta = cfg.learning_rate if learning_rate is None else learning_rate
    lr: float | optax.Schedule = eta
    if cfg.lr_decay_updates is not None:
        lr = partial(_decayed, eta, cfg.lr_decay_updates)
    opt = _inner_optimizer(cfg, lr)
    opt = opt if cfg.theta_ema is None else polyak(opt, cfg.theta_ema)
    return opt if cfg.public_eval_every is None else scaled(opt)


def report_snr(cfg: PGCA3CConfig, epsilon: float, dim: int) -> float:
    """One report's signal-to-noise ratio from the mechanism's public parameters: the squared
    L2 bound of its clipped signal over its noise's expected squared L2 norm. Laplace (L1 clip
    C/2, i.i.d. Laplace(C/ε) in d coordinates): (C/2)²/(2d·(C/ε)²) = ε²/(8d), whatever C is;
    the non-private baseline: ∞."""
    if cfg.mechanism == "none" or math.isinf(epsilon):
        return math.inf
    if cfg.mechanism != "laplace":
        fail("step_from_noise", f"knows the noise level of laplace and none, not "
                                f"{cfg.mechanism}")
    return epsilon ** 2 / (8.0 * dim)


def reports_per_step(cfg: PGCA3CConfig) -> float:
    """How many reports one aggregator step averages: |B|, times Adam's first-moment window
    1/(1 − β₁)."""
    window = 1.0 / (1.0 - cfg.adam_momentum) if cfg.server_optimizer == "adam" else 1.0
    return cfg.buffer_size * window


def _inner_optimizer(cfg: PGCA3CConfig, lr: float | optax.Schedule
                     ) -> optax.GradientTransformation:
    if cfg.server_optimizer == "rmsprop":
        return optax.rmsprop(lr, decay=cfg.rmsprop_decay, eps=cfg.rmsprop_eps,
                             initial_scale=cfg.rmsprop_initial_scale, eps_in_sqrt=True,
                             momentum=cfg.rmsprop_momentum or None)
    if cfg.server_optimizer == "adam":
        return optax.adam(lr, b1=cfg.adam_momentum)
    return optax.sgd(lr)


class PolyakState(NamedTuple):
    fast: Array  # φ, the weights the inner optimizer steps
    inner: Any  # the inner optimizer's state


def polyak(inner: optax.GradientTransformation, beta: float) -> optax.GradientTransformation:
    """`inner` stepping fast weights φ (in the state), with params θ their moving average:
    φ ← φ + inner's update, θ ← β·θ + (1 − β)·φ; the update returned is the change of θ. The
    gradient is taken at θ (what the agents play)."""

    def init(params: Array) -> PolyakState:
        return PolyakState(params, inner.init(params))

    def update(grads: Array, state: PolyakState, params: Array | None = None
               ) -> tuple[Array, PolyakState]:
        if params is None:
            raise ValueError("polyak needs the params θ (the aggregator passes them)")
        step, inner_state = inner.update(grads, state.inner, state.fast)
        fast = optax.apply_updates(state.fast, step)
        return (1.0 - beta) * (fast - params), PolyakState(fast, inner_state)

    return optax.GradientTransformation(init, update)


def _decayed(lr: float, tau: float, count: Array) -> Array:
    """η/√(1 + n/τ) after n = `count` updates (`server_optimizer`'s schedule)."""
    return lr / jnp.sqrt(1.0 + count / tau)


def budget_ledger(cfg: PGCA3CConfig) -> PrivacyLedger:
    """Each agent's ledger on every runtime: the privacy plan's (`PGCA3CConfig.privacy_plan`),
    enforcing ε by the budget's composition."""
    return cfg.privacy_plan().ledger()


def make_mechanism(cfg: PGCA3CConfig, dim: int) -> Mechanism:
    """The per-report mechanism at the plan's ε per report (the agent's budget ε split over
    its T submissions by the budget's composition, `PGCA3CConfig.privacy_plan`; with
    --adaptive-clip, less its clip bit's share, `PGCA3CConfig.release_epsilons`)."""
    if cfg.mechanism == "none":
        return IdentityMechanism(cfg.clip)
    eps = cfg.release_epsilons()[0]
    if is_user_mechanism(cfg.mechanism):  # (ε, δ) per report as planned: the ledger composes
        mech = user_mechanism(cfg.mechanism, MechanismRequest(
            eps, cfg.privacy_plan().delta_per_report, cfg.clip, dim))
        if not cfg.audit_plugin:
            return mech
        from privrl.audit.quick import audited

        return audited(mech, dim, cfg.clip)
    if cfg.mechanism == "laplace":
        return LaplaceMechanism(eps, cfg.clip, secure=cfg.secure_noise)
    if cfg.mechanism in ("privunit", "privunitg"):
        return unit_mechanism(cfg.mechanism, eps, cfg.clip)
    if cfg.mechanism in ("projunit", "privunitg-seed"):
        return compact_mechanism(cfg.mechanism, eps, cfg.clip)
    try:
        return ProjectedRandomSignMechanism(eps, cfg.clip, cfg.d_hat, dim=dim)
    except ValueError as e:
        raise ConfigError("d_hat", str(e)) from None
