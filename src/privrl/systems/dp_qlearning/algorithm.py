"""Differentially private Q-learning with functional noise (Wang & Hegde, paper 001), top to bottom.

What is private: the *reward function*. Two reward functions are neighbours when they differ by
at most 1 in sup norm; the released object is the trained Q-function Q_θ. Algorithm 1 adds a
Gaussian-process noise function ĝ_a ~ σ·GP(0, exp(−|x − y|)) to Q wherever Q is evaluated:

1. acting: a_t = argmax_a Q_θ(s_t, a) + ĝ_a(s_t) (ε-greedy around it, as the authors' code);
2. the TD target: y = r + γ max_a [Q_θ⁻(s′, a) + ĝ⁻_a(s′)] with the target network's own noise;
3. the loss: Huber(Q_θ(s, a) + ĝ_a(s) − y), one RMSprop step per environment step on a replay
   batch of 128, gradients clamped to [−1, 1] elementwise;
4. both noise functions are reset every `noise_reset_episodes` episodes (J resets in all).

The noise functions are lazily grown sorted stores (privrl.privacy.functional): the same state
gets the same noise until a reset. Everything — environment, replay, noise, network updates — is
one jitted program: episodes are a `lax.scan` of steps, a run a `lax.scan` of episodes, and seeds
and σ values are `vmap`ped, so a whole sweep is a single compiled call (`train`), or a compiled
call per chunk of episodes with the same floats (`start`, `run_episodes`: local.py, for progress).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from privrl.envs.line1d import make_line1d
from privrl.nets.flat import FlatModel, mlp
from privrl.privacy.functional import (
    REWARD_NEIGHBOURS,
    REWARD_UNIT,
    GPNoiseState,
    gp_noise_init,
    gp_noise_query,
    gp_noise_reset,
)
from privrl.privacy.noise import noise_fields
from privrl.privacy.record import COMPOSED, Claim, Facts, Releases, headline
from privrl.privacy.record import privacy_record as privacy_record_of
from privrl.systems.dp_qlearning.config import DPQLearningConfig


def noise_keys(cfg: DPQLearningConfig) -> str | None:
    """Where the functional noise's keys come from (seeded, secret); None at σ = 0, where
    there is no noise to say anything of (issue 53 item 8)."""
    return None if cfg.sigma == 0 else cfg.noise or "seeded"


def privacy_facts(cfg: DPQLearningConfig) -> Facts:
    """What privacy.json states, as facts (privrl.privacy.record composes the prose): Theorem
    5's (ε, δ) for the whole training, valid only for the supplied constant C, or why no ε is
    claimed."""
    noise = noise_keys(cfg)
    not_protected = ("the transition dynamics and visited states; and the episode returns in "
                     "metrics.csv, summary.json and the plots, which are computed from the raw "
                     "rewards (diagnostics, not releases)")
    if cfg.sigma == 0:
        return Facts(None, "σ = 0, no noise (non-private baseline)", noise=noise)
    if not cfg.claims_epsilon:
        return Facts(None, f"functional noise with σ = {cfg.sigma:g} was added, but NO ε IS "
                     "CLAIMED because Theorem 5's constant C(α, k, L, B) was not supplied (the "
                     "poster does not define it); epsilon, delta, sensitivity_constant and k "
                     "give the Theorem 5 calibration", not_protected=not_protected, noise=noise)
    t5 = cfg.theorem5().record(cfg.sigma)
    return Facts(
        Claim(cfg.epsilon, t5["delta_total"], "DP", "central: the learner is trusted",
              REWARD_UNIT, "Theorem 5 of paper 001"),
        releases=Releases("the learner", "the trained Q-function Q_θ", "Gaussian-process "
                          f"functional noise of scale σ = {cfg.sigma:.4g}"),
        condition=f"the user-supplied sensitivity constant C(α, k, L, B) = "
                  f"{cfg.sensitivity_constant:g}: the poster does not define C, and privrl has "
                  "not verified it",
        not_protected=not_protected, noise=noise)


def privacy_record(cfg: DPQLearningConfig) -> dict[str, Any]:
    """privacy.json: what is protected and the (ε, δ) claimed — or that none is claimed."""
    base = {"unit": REWARD_UNIT, "neighbouring": REWARD_NEIGHBOURS,
            "released": "the trained Q-function Q_θ (its parameters θ)",
            "not_protected": "the transition dynamics and visited states; and the episode "
                             "returns in metrics.csv, summary.json and the plots, which are "
                             "computed from the raw rewards (diagnostics, not releases)",
            "mechanism": "Gaussian-process functional noise on Q (paper 001, Algorithm 1), "
                         "kernel exp(−|x − y|), one noise function per action and network",
            "sigma": cfg.sigma, "T_over_B": cfg.updates, "B": cfg.batch_size,
            "T": cfg.updates * cfg.batch_size, "J": cfg.resets,
            "noise_reset_episodes": cfg.noise_reset_episodes,
            **noise_fields(noise_keys(cfg))}
    if cfg.claims_epsilon:
        t5 = cfg.theorem5().record(cfg.sigma)
        return privacy_record_of(
            privacy_facts(cfg), formal_key="private",
            fields={**base, "epsilon": cfg.epsilon, "delta": t5["delta_total"], "theorem5": t5},
            order=[*base, "private", "epsilon", "delta", *COMPOSED, "theorem5"])
    return privacy_record_of(
        privacy_facts(cfg), formal_key="private",
        fields={**base, "epsilon": "not claimed", "delta": "not claimed"},
        order=[*base, "private", "epsilon", "delta", *COMPOSED])


def describe_privacy(cfg: DPQLearningConfig) -> str:
    """One line for the command line: the composed headline."""
    return headline(privacy_facts(cfg))


# --- the training program --------------------------------------------------------------------
class Replay(NamedTuple):
    obs: Array  # (N,) states
    action: Array  # (N,) int32
    reward: Array  # (N,)
    next_obs: Array  # (N,)
    terminal: Array  # (N,) bool
    size: Array  # () int32 transitions stored
    pos: Array  # () int32 next slot (ring buffer)


class TrainState(NamedTuple):
    theta: Array
    target_theta: Array
    opt_state: Any
    replay: Replay
    steps: Array  # () int32 actions selected so far (drives ε-greedy)
    noise: GPNoiseState  # the online network's noise functions
    target_noise: GPNoiseState  # the target network's
    # Secret noise root (privrl.privacy.noise.secret_keys), or None: the noise functions' keys
    # derive from the run's key (seeded). An argument of the jitted program, never a constant.
    noise_root: Array | None = None


class DPQLearning:
    """The algorithm for one resolved config: `train(key, sigma) -> returns per episode`."""

    def __init__(self, config: DPQLearningConfig) -> None:
        self.config = cfg = config
        self.env, self.env_params = make_line1d(cfg.episode_steps)
        self.num_actions = 2
        # 1-16-16-2 ReLU MLP with PyTorch's default initialization, as the authors' code
        self.model: FlatModel = mlp((cfg.hidden, cfg.hidden), self.num_actions, 1,
                                    "torch_default")
        self.optimizer = optax.chain(
            optax.clip(cfg.grad_clamp),  # elementwise clamp, as param.grad.clamp_(-1, 1)
            optax.rmsprop(cfg.learning_rate, decay=cfg.rms_decay, eps=cfg.rms_eps,
                          eps_in_sqrt=False),  # torch adds eps outside the square root
        )
        self.replay_size = min(cfg.replay_capacity, cfg.total_steps)
        block = min(cfg.noise_reset_episodes, cfg.episodes) * cfg.episode_steps
        # The most distinct states a noise function can be asked about between resets. Online:
        # each acting state and each batch state; target: each batch next state. Every one of
        # them is a state of a transition that was in the replay during the block: at most the
        # replay's size at the block's start plus the transitions pushed during it.
        seen = self.replay_size + block
        self.noise_capacity = min(block * (1 + cfg.batch_size), seen)
        self.target_noise_capacity = min(block * cfg.batch_size, seen)

    # --- setup ---------------------------------------------------------------------------
    def init(self, key: Array) -> TrainState:
        theta = self.model.init(key)
        n = self.replay_size
        replay = Replay(jnp.zeros(n), jnp.zeros(n, jnp.int32), jnp.zeros(n), jnp.zeros(n),
                        jnp.zeros(n, bool), jnp.int32(0), jnp.int32(0))
        return TrainState(theta, theta, self.optimizer.init(theta), replay, jnp.int32(0),
                          gp_noise_init(self.noise_capacity, self.num_actions),
                          gp_noise_init(self.target_noise_capacity, self.num_actions))

    # --- pieces --------------------------------------------------------------------------
    def q_values(self, theta: Array, s: Array) -> Array:
        """Q_θ(s, ·) for states s (B,) → (B, A)."""
        return self.model.apply(theta, s[:, None])

    def exploration(self, steps: Array) -> Array:
        cfg = self.config
        return cfg.eps_end + (cfg.eps_start - cfg.eps_end) * jnp.exp(-steps / cfg.eps_decay)

    def act(self, ts: TrainState, key: Array, s: Array, sigma: Array) -> tuple[TrainState, Array]:
        """ε-greedy on the noised Q; the noise is queried only when acting greedily."""
        k_explore, k_random, k_noise = jax.random.split(key, 3)
        if ts.noise_root is not None:  # secret: (purpose 0, action count) from the run's root
            k_noise = jax.random.fold_in(jax.random.fold_in(ts.noise_root, 0), ts.steps)
        greedy = jax.random.uniform(k_explore) > self.exploration(ts.steps)
        noise, g = gp_noise_query(ts.noise, k_noise, s[None], sigma, greedy[None])
        q = self.q_values(ts.theta, s[None])[0] + g[0]
        random_action = jax.random.randint(k_random, (), 0, self.num_actions)
        action = jnp.where(greedy, jnp.argmax(q), random_action).astype(jnp.int32)
        return ts._replace(noise=noise, steps=ts.steps + 1), action

    def remember(self, replay: Replay, s: Array, a: Array, r: Array, s2: Array,
                 terminal: Array) -> Replay:
        i = replay.pos
        return Replay(replay.obs.at[i].set(s), replay.action.at[i].set(a),
                      replay.reward.at[i].set(r), replay.next_obs.at[i].set(s2),
                      replay.terminal.at[i].set(terminal),
                      jnp.minimum(replay.size + 1, replay.obs.shape[0]),
                      (i + 1) % replay.obs.shape[0])

    def sample(self, replay: Replay, key: Array) -> Array:
        """B distinct indices, uniform among the stored transitions (random.sample)."""
        n = replay.obs.shape[0]
        score = jnp.where(jnp.arange(n) < replay.size, jax.random.uniform(key, (n,)), -1.0)
        return jax.lax.top_k(score, self.config.batch_size)[1]

    def td_loss(self, theta: Array, s: Array, a: Array, y: Array, g: Array) -> Array:
        """Huber (smooth L1) loss of the noised Q(s, a) against the noised target y, mean."""
        q = self.q_values(theta, s) + g
        q_a = jnp.take_along_axis(q, a[:, None], axis=1)[:, 0]
        return jnp.mean(optax.huber_loss(q_a, y, delta=1.0))

    def optimize(self, ts: TrainState, key: Array, sigma: Array) -> TrainState:
        """One gradient step on a replay batch (Algorithm 1 lines 12-14, with a target net)."""
        cfg = self.config
        k_batch, k_noise, k_target_noise = jax.random.split(key, 3)
        if ts.noise_root is not None:  # secret: purposes 1 and 2, after the step's act
            k_noise = jax.random.fold_in(jax.random.fold_in(ts.noise_root, 1), ts.steps)
            k_target_noise = jax.random.fold_in(jax.random.fold_in(ts.noise_root, 2), ts.steps)
        rp = ts.replay
        idx = self.sample(rp, k_batch)
        s, a, r, s2, term = rp.obs[idx], rp.action[idx], rp.reward[idx], rp.next_obs[idx], \
            rp.terminal[idx]
        target_noise, g2 = gp_noise_query(ts.target_noise, k_target_noise, s2, sigma, ~term)
        next_q = jnp.max(self.q_values(ts.target_theta, s2) + g2, axis=1)
        y = r + cfg.gamma * jnp.where(term, 0.0, next_q)
        noise, g = gp_noise_query(ts.noise, k_noise, s, sigma)
        grads = jax.grad(self.td_loss)(ts.theta, s, a, y, g)
        updates, opt_state = self.optimizer.update(grads, ts.opt_state, ts.theta)
        return ts._replace(theta=optax.apply_updates(ts.theta, updates), opt_state=opt_state,
                           noise=noise, target_noise=target_noise)

    def env_step(self, carry: tuple, key: Array, sigma: Array) -> tuple[tuple, Array]:
        ts, env_state, obs = carry
        k_act, k_env, k_opt = jax.random.split(key, 3)
        s = obs[0]
        ts, action = self.act(ts, k_act, s, sigma)
        obs2, env_state, reward, done, _ = self.env.step_env(k_env, env_state, action,
                                                             self.env_params)
        ts = ts._replace(replay=self.remember(ts.replay, s, action, reward, obs2[0], done))
        trained = self.optimize(ts, k_opt, sigma)
        ready = ts.replay.size >= self.config.batch_size
        ts = jax.tree_util.tree_map(lambda new, old: jnp.where(ready, new, old), trained, ts)
        return (ts, env_state, obs2), reward

    def episode(self, ts: TrainState, inp: tuple[Array, Array], sigma: Array
                ) -> tuple[TrainState, Array]:
        """One 50-step episode, then the target copy and the noise reset on their schedules."""
        cfg = self.config
        index, key = inp
        k_reset, k_steps = jax.random.split(key)
        obs, env_state = self.env.reset_env(k_reset, self.env_params)
        keys = jax.random.split(k_steps, cfg.episode_steps)
        (ts, _, _), rewards = jax.lax.scan(
            lambda c, k: self.env_step(c, k, sigma), (ts, env_state, obs), keys)
        copy = index % cfg.target_update_episodes == 0
        ts = ts._replace(target_theta=jnp.where(copy, ts.theta, ts.target_theta))
        reset = (index + 1) % cfg.noise_reset_episodes == 0
        noise = jax.tree_util.tree_map(lambda f, o: jnp.where(reset, f, o),
                                       gp_noise_reset(ts.noise), ts.noise)
        target_noise = jax.tree_util.tree_map(lambda f, o: jnp.where(reset, f, o),
                                              gp_noise_reset(ts.target_noise), ts.target_noise)
        return ts._replace(noise=noise, target_noise=target_noise), jnp.sum(rewards)

    def start(self, key: Array) -> tuple[TrainState, Array]:
        """A run's initial state and the keys of its episodes (E,)."""
        k_init, k_run = jax.random.split(key)
        return self.init(k_init), jax.random.split(k_run, self.config.episodes)

    def run_episodes(self, ts: TrainState, indices: Array, keys: Array, sigma: Array,
                     noise_root: Array | None = None) -> tuple[TrainState, Array]:
        """The episodes `indices` (with their `keys`) from `ts`: `train`'s scan, or a piece of
        it (a run in chunks, for progress). The secret `noise_root` is an argument of each
        piece and is not returned."""
        ts, returns = jax.lax.scan(lambda t, i: self.episode(t, i, sigma),
                                   ts._replace(noise_root=noise_root), (indices, keys))
        return ts._replace(noise_root=None), returns

    @staticmethod
    def overflow(ts: TrainState) -> Array:
        """Whether a noise store lost points (cannot happen at the sized capacities)."""
        return ts.noise.overflow | ts.target_noise.overflow

    def train(self, key: Array, sigma: Array, noise_root: Array | None = None
              ) -> tuple[Array, Array, Array]:
        """One run: (return per episode (E,), final θ, noise-store overflow flag).
        `noise_root`: the run's secret noise root (secret keys); None: seeded."""
        ts, keys = self.start(key)
        ts, returns = self.run_episodes(ts, jnp.arange(self.config.episodes), keys, sigma,
                                        noise_root)
        return returns, ts.theta, self.overflow(ts)

    def train_many(self, keys: Array, sigmas: Array) -> tuple[Array, Array, Array]:
        """All (σ, seed) pairs at once: keys (S,), sigmas (G,) → returns (G, S, E), ..."""
        per_seed = jax.vmap(self.train, in_axes=(0, None))
        return jax.jit(jax.vmap(per_seed, in_axes=(None, 0)))(keys, sigmas)


def run_keys(seed: int, seeds: int) -> Array:
    """The per-seed keys of a run: the same seed index gets the same key in every σ setting."""
    return jax.random.split(jax.random.key(seed), seeds)
