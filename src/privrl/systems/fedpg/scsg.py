"""The learner FedPG-Cen's server and every FedPG-Dec node are: a policy on a task, its
policy-gradient estimate and the SCSG loop (shared by privrl.systems.fedpg.cen and .dec).

g(τ|θ) = Σ_h ∇log π_θ(a_h|s_h) Â_h with Â the reward-to-go Σ_{j≥h} γ^{j−h} r_j whitened per
episode (FedPG-BR's code: its baseline), r_j the task's rewards (CartPole: +1 per step).
A learner's μ is the mean g over its B_t episodes; then N_t SCSG steps, each on b episodes it
samples with its current θ_n:
    v_n = (1/b) Σ_j [g(τ_j|θ_n) − ω(τ_j|θ_n, θ₀) g(τ_j|θ₀)] + μ,   θ_{n+1} = θ_n ⊕ v_n
where ⊕ is an optimizer step (FedPG-BR: Adam 1e-3) and ω is the importance weight. M learners
run side by side (leading axis M); learner m stops after its own N_t.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import optax
from jax import Array

from privrl.envs.task import Task, check_module
from privrl.federation.adapt import noise_step, scaled
from privrl.losses import (
    action_log_probs,
    discounted_returns,
    importance_weights,
    pg_surrogate,
    whiten,
)
from privrl.nets.flat import FlatModel, mlp
from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.fedpg.source import Episodes, EpisodeSource, episode_source

if TYPE_CHECKING:
    from flax import linen as nn

    from privrl.privacy.report import Report


class Learner(ABC):
    """A resolved config's policy on its task, what its episodes estimate and the SCSG loop;
    `source` plays the task's episodes (privrl.systems.fedpg.source). The system (`FedPG`)
    adds the mechanism an agent's messages pass through (`release`)."""

    mechanism: Any
    central: Any = None  # central-gaussian: the server's noise on its aggregate

    def __init__(self, config: FedPGConfig, task: Task, model: nn.Module | None) -> None:
        """`model`: a flax module mapping one observation to the logits of the task's actions
        (default: FedPG-BR's MLP, `hidden` units, sized from the task's spaces)."""
        self.config, self.task = config, task
        self.env, self.env_params = task.env, task.params
        # The policy head the action space takes (privrl.nets.heads): categorical (FedPG-BR's)
        # or, for a Box, a Gaussian; its episodes' `actions` are then the unclipped samples.
        self.head = task.head
        if model is None:  # FedPG-BR's policy, PyTorch's default initialization
            uniform = config.uniform_start
            self.model: FlatModel = mlp(
                tuple(config.hidden), self.head.outputs, task.obs_dim, "torch_default",
                config.log_std,
                self.head.uniform_log_std() if uniform and self.head.continuous else None,
                zero_output=uniform)
        else:
            self.model = FlatModel(check_module(model, task, "logits"),
                                   jnp.zeros((task.obs_dim,), jnp.float32))
        self.dim = self.model.dim
        # --step-from-noise: the step size from the mechanism's noise level (post-processing)
        self.step_size = (noise_step(config.learning_rate,
                                     report_snr(config, self.dim, self.step_noise_multiplier()),
                                     reports_per_step(config))
                          if config.step_from_noise else config.learning_rate)
        optimizer = {"adam": optax.adam, "sgd": optax.sgd}[config.optimizer](self.step_size)
        # --public-eval-every: a step scale the server lowers when it backs off
        self.optimizer = optimizer if config.public_eval_every is None else scaled(optimizer)
        self.source: EpisodeSource = episode_source(task, self.act, config.max_episode_steps)

    def step_noise_multiplier(self) -> float | None:
        """σ of the mechanism, for --step-from-noise (after `dim` is known): the config's."""
        return self.config.noise_multiplier

    @abstractmethod
    def release(self, setting: Any, key: Array, x: Array) -> Report:
        """What an agent sends, through the system's mechanism."""

    def env_params_of(self, key: Array, ids: Array) -> Any:
        """Each participant's private environment (the task's private parameters, fixed per id;
        the server is id K). Default task: CartPole with each agent's gravity."""
        return self.task.agents_params(jax.random.fold_in(key, 0x5EED), ids)

    def act(self, theta_env: Array, key: Array, obs: Array) -> Any:
        """One action per environment, each from its own θ (P, d): the policy's sample (a
        Gaussian head's: (the clipped actions, the unclipped samples the estimate uses))."""
        logits = jax.vmap(self.model.apply)(theta_env, obs)
        if self.head.continuous:
            return self.head.sample(key, logits)
        return jax.random.categorical(key, logits).astype(jnp.int32)

    def sample(self, thetas: Array, env_params: Any, live: Array, key: Array) -> Episodes:
        """Each of M learners plays `live.shape[1]` episodes with its own θ (M, d), from the
        task's own episode source; episodes with `live` False are not played."""
        return self.source.sample(thetas, env_params, live, key)

    # --- the estimate ---------------------------------------------------------------------
    def advantages(self, ep: Episodes) -> Array:
        """Â: reward-to-go of the task's rewards (discount γ) whitened per episode; (M, n, T)."""
        t = ep.mask.shape[-1]
        rewards = self.task.rewards(ep.rewards, ep.mask).reshape(-1, t)
        flat = ep.mask.reshape(-1, t)
        rtg = lambda r, m: discounted_returns(r, m, jnp.zeros(()), self.config.gamma)  # noqa: E731
        adv = jax.vmap(lambda r, m: whiten(rtg(r, m), m))(rewards, flat)
        return adv.reshape(ep.mask.shape)

    def log_probs(self, theta: Array, obs: Array, actions: Array) -> Array:
        """log π_θ(a|s) per step (a Gaussian head's `actions`: its unclipped samples)."""
        if self.head.continuous:
            return self.head.log_prob(self.model.apply(theta, obs), actions)
        return action_log_probs(self.model.apply(theta, obs), actions)

    def batch_gradient(self, theta: Array, obs: Array, actions: Array, adv: Array, mask: Array,
                       live: Array, weights: Array | None = None) -> Array:
        """(1/n) Σ_j g(τ_j|θ) over one learner's n live episodes (with ω: Σ ω g)."""

        def objective(th: Array) -> Array:
            logp = self.log_probs(th, obs, actions)
            per_ep = jax.vmap(pg_surrogate)(logp, adv, mask, weights) if weights is not None \
                else jax.vmap(pg_surrogate)(logp, adv, mask)
            return jnp.sum(per_ep * live) / jnp.maximum(jnp.sum(live), 1.0)

        return jax.grad(objective)(theta)

    def gradients(self, thetas: Array, ep: Episodes) -> Array:
        """μ per learner (M, d): the GPOMDP-style estimate at its θ from its episodes."""
        adv = self.advantages(ep)
        return jax.vmap(self.batch_gradient)(thetas, ep.obs, ep.actions, adv, ep.mask, ep.live)

    # --- SCSG -----------------------------------------------------------------------------
    def scsg_direction(self, theta_n: Array, theta_0: Array, mu: Array, obs: Array,
                       actions: Array, adv: Array, mask: Array, live: Array) -> Array:
        """v_n = (1/b) Σ_j [g(τ_j|θ_n) − ω_j g(τ_j|θ₀)] + μ for one learner's b episodes,
        sampled with θ_n. With θ_n = θ₀, ω = 1 and v_n = μ exactly."""
        cfg = self.config
        logp_0 = self.log_probs(theta_0, obs, actions)
        logp_n = self.log_probs(theta_n, obs, actions)
        omega = jax.vmap(importance_weights, (0, 0, 0, None, None))(
            logp_0, logp_n, mask, cfg.importance, cfg.importance_clip)
        g_n = self.batch_gradient(theta_n, obs, actions, adv, mask, live)
        g_0 = self.batch_gradient(theta_0, obs, actions, adv, mask, live, omega)
        return g_n - g_0 + mu

    def scsg_step(self, theta: Array, opt: Any, theta_0: Array, mu: Array, going: Array,
                  ep: Episodes) -> tuple[Array, Any]:
        """One SCSG step of the M learners from their b episodes `ep` (sampled with θ_n);
        learners not `going` keep their θ and optimizer state."""
        adv = self.advantages(ep)
        v = jax.vmap(self.scsg_direction)(theta, theta_0, mu, ep.obs, ep.actions, adv,
                                          ep.mask, ep.live)
        updates, new_opt = jax.vmap(self.optimizer.update)(-v, opt, theta)  # ascent on J
        new_theta = theta + updates
        sel = lambda a, o: jnp.where(going.reshape((-1,) + (1,) * (a.ndim - 1)), a, o)  # noqa: E731
        return sel(new_theta, theta), jax.tree_util.tree_map(sel, new_opt, opt)

    def scsg(self, source: EpisodeSource, theta_0: Array, mu: Array, opt_state: Any,
             steps: Array, env_params: Any, key: Array, lengths: bool = False
             ) -> tuple[Array, Any] | tuple[Array, Any, Array]:
        """N SCSG steps for each of M learners in parallel (learner m stops after steps[m]),
        each step's b episodes from `source` with the current θ_n. With `lengths`, also the
        mean length of each learner's episodes (M,) (FedPG-BR's filter scales its σ by it)."""
        b = self.config.minibatch
        scsg_step = source.piece(self.scsg_step)

        def cond(c: tuple) -> Array:
            return c[0] < jnp.max(steps)

        def body(c: tuple) -> tuple:
            n, theta, opt, k, *tally = c
            k, k_ep = jax.random.split(k)
            going = n < steps
            ep = source.sample(theta, env_params,
                               jnp.broadcast_to(going[:, None], (going.shape[0], b)), k_ep)
            theta, opt = scsg_step(theta, opt, theta_0, mu, going, ep)
            if lengths:
                tally = source.piece(_tally)(tally, ep)
            return (n + 1, theta, opt, k, *tally)

        tally = ((jnp.zeros(steps.shape), jnp.zeros(steps.shape)) if lengths else ())
        _, theta, opt_state, _, *tally = source.while_loop(
            cond, body, (jnp.zeros((), jnp.int32), theta_0, opt_state, key, *tally))
        if not lengths:
            return theta, opt_state
        return theta, opt_state, tally[0] / jnp.maximum(tally[1], 1.0)

    def draw_steps(self, key: Array, batch: Array) -> Array:
        """N_t ~ Geom(b/(B_t+b)) on {1, 2, ...} (FedPG-BR's code), or the fixed inner_steps."""
        cfg = self.config
        if cfg.inner_steps is not None:
            return jnp.full(batch.shape, cfg.inner_steps, jnp.int32)
        p = cfg.minibatch / (batch + cfg.minibatch)
        return jax.random.geometric(key, p, batch.shape).astype(jnp.int32)


def _tally(tally: list, ep: Episodes) -> list:
    """Running (Σ length, count) of each learner's live episodes."""
    live = ep.live.astype(jnp.float32)
    return [tally[0] + jnp.sum(ep.length * live, axis=1), tally[1] + jnp.sum(live, axis=1)]


def report_snr(cfg: FedPGConfig, dim: int, sigma: float | None = None) -> float:
    """One report's signal-to-noise ratio from the mechanism's public parameters: the squared
    L2 bound of its clipped signal over its noise's expected squared L2 norm. laplace (L1 clip
    C/2, Laplace(C/ε₀) in each of d coordinates): ε₀²/(8d); gaussian (L2 clip C, N(0, (σC)²)
    per coordinate): 1/(dσ²); none: ∞. Whatever C is. The distributed mechanisms add σC once
    to the sum of the n = q·K reports the server averages (N(0, (σC/n)²) per coordinate of
    the mean): as n reports of 1/(dσ²/n) each, n/(dσ²) (σ: distributed-gaussian's calibrated
    discrete mechanism's, given as `sigma`; -continuous's the round's, before adaptive
    clipping's split)."""
    if cfg.mechanism == "none":
        return math.inf
    if cfg.mechanism == "laplace" and cfg.epsilon_per_report is not None:
        return cfg.epsilon_per_report ** 2 / (8.0 * dim)
    sigma = cfg.noise_multiplier if sigma is None else sigma
    if cfg.mechanism == "gaussian" and sigma is not None:
        return 1.0 / (dim * sigma ** 2)
    if cfg.mechanism in ("distributed-gaussian", "distributed-gaussian-continuous") \
            and sigma is not None:
        return _averaged(cfg) / (dim * sigma ** 2)
    raise ValueError(f"step_from_noise: no noise level known for {cfg.mechanism} (resolve the "
                     "config first)")


def reports_per_step(cfg: FedPGConfig) -> float:
    """How many reports one server step follows: the K (q·K under sampling) averaged into
    μ_t, times Adam's first-moment window 1/(1 − β₁) (optax's β₁ = 0.9)."""
    return _averaged(cfg) * (10.0 if cfg.optimizer == "adam" else 1.0)


def _averaged(cfg: FedPGConfig) -> float:
    """The reports μ_t averages: K, or the expected q·K of Poisson-sampled agents."""
    return cfg.agents * (1.0 if cfg.sampling_rate is None else cfg.sampling_rate)
