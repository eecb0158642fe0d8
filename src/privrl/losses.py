"""Pure RL loss functions (tested against their math in tests/test_losses.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

# Steps of `discounted_returns`' scan per loop iteration: a loop iteration is a few kernels
# whatever its length, and the scan runs over the padded time axis (max_steps), so unrolling
# divides the kernels a gradient launches; the same floats (benchmarks/log/30-speed.md).
RETURNS_UNROLL = 8


def discounted_returns(rewards: Array, mask: Array, bootstrap: Array, gamma: float) -> Array:
    """Ĝ_t = Σ_{j=t}^{T-1} γ^{j-t} r_j + γ^{T-t} bootstrap for the valid prefix t < T.

    `mask` marks the steps that happened (a prefix of the padded time axis). `bootstrap` is the
    value of the state after the last step: 0 if the episode ended in a terminal state, V(s_T)
    if it was cut by the step cap (paper 000 eq. 12 and 18). Padded steps get Ĝ = bootstrap.
    """

    def step(carry: Array, inp: tuple[Array, Array]) -> tuple[Array, Array]:
        r, m = inp
        g = jnp.where(m > 0, r + gamma * carry, carry)
        return g, g

    _, returns = jax.lax.scan(step, bootstrap, (rewards, mask), reverse=True,
                              unroll=RETURNS_UNROLL)
    return returns


def masked_standardize(x: Array, mask: Array, ddof: int = 0, eps: float = 1e-8) -> Array:
    """(x − mean) / (std + eps) over the valid steps (mask 1); ddof=1 is torch's default std."""
    n = jnp.sum(mask)
    mean = jnp.sum(mask * x) / jnp.maximum(n, 1.0)
    var = jnp.sum(mask * jnp.square(x - mean)) / jnp.maximum(n - ddof, 1.0)
    return (x - mean) / (jnp.sqrt(var) + eps)


def reinforce_loss(logits: Array, actions: Array, returns: Array, mask: Array) -> Array:
    """REINFORCE for one episode of a categorical policy (`score_function_loss`)."""
    logp_a = jnp.take_along_axis(jax.nn.log_softmax(logits), actions[..., None], axis=-1)[..., 0]
    return score_function_loss(logp_a, returns, mask)


def score_function_loss(logp_a: Array, returns: Array, mask: Array) -> Array:
    """REINFORCE for one episode: L = −Σ_t R_t log π(a_t|s_t) over its valid steps, from the
    log-probabilities of its actions (any policy head: privrl.nets.heads).

    `returns` (already normalized if wanted) are held constant; ∇L is the episode's
    policy-gradient estimate, the unit DP-SGD REINFORCE clips.
    """
    return -jnp.sum(mask * jax.lax.stop_gradient(returns) * logp_a)


def huber(x: Array, delta: float = 1.0) -> Array:
    """Huber loss (PyTorch's SmoothL1 with β = 1 for delta = 1), elementwise."""
    a = jnp.abs(x)
    return jnp.where(a <= delta, 0.5 * jnp.square(x), delta * (a - 0.5 * delta))


def td_targets(rewards: Array, next_q: Array, terminal: Array, gamma: float) -> Array:
    """DQN targets r + γ (1 − terminal) max_a' Q_target(s', a'); truncation is not terminal."""
    return rewards + gamma * (1.0 - terminal) * jnp.max(next_q, axis=-1)


def double_td_targets(rewards: Array, next_q_online: Array, next_q_target: Array,
                      terminal: Array, gamma: float) -> Array:
    """Double-DQN targets (van Hasselt et al. 2016): r + γ (1 − terminal) Q_target(s', a*) with
    a* = argmax_a' Q_online(s', a'); choosing and valuing with different networks removes max's
    upward bias, which feeds back into divergence."""
    best = jnp.argmax(next_q_online, axis=-1)
    value = jnp.take_along_axis(next_q_target, best[..., None], axis=-1)[..., 0]
    return rewards + gamma * (1.0 - terminal) * value


def a2c_loss(
    logits: Array,
    values: Array,
    actions: Array,
    returns: Array,
    mask: Array,
    value_coef: float,
    entropy_coef: float,
    normalize_advantage: bool = False,
) -> tuple[Array, dict[str, Array]]:
    """Paper 000 eq. 15-17 for one episode of a categorical policy (`actor_critic_loss`)."""
    logp = jax.nn.log_softmax(logits)
    logp_a = jnp.take_along_axis(logp, actions[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return actor_critic_loss(logp_a, entropy, values, returns, mask, value_coef, entropy_coef,
                             normalize_advantage)


def actor_critic_loss(
    logp_a: Array,
    entropy: Array,
    values: Array,
    returns: Array,
    mask: Array,
    value_coef: float,
    entropy_coef: float,
    normalize_advantage: bool = False,
    advantage: Array | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Paper 000 eq. 15-17 for one episode (sums over time, not means), from the policy's
    log-probabilities of its actions and its entropies (any head: privrl.nets.heads):

    L = -Σ_t [log π(a_t|s_t) A_t + β H(π(·|s_t))] + λ Σ_t (Ĝ_t - V(s_t))²,  A_t = Ĝ_t - V(s_t).
    The advantage in the policy term and the return target are held constant (stop_gradient),
    as in A3C: the value head learns only through the λ-weighted squared error.
    `normalize_advantage` standardizes A over the episode's valid steps (not in paper 000).
    `advantage`: another estimate of A (GAE, `gae`) in place of Ĝ − V.
    """
    returns = jax.lax.stop_gradient(returns)
    advantage = jax.lax.stop_gradient(returns - values if advantage is None else advantage)
    if normalize_advantage:
        advantage = masked_standardize(advantage, mask)
    policy_loss = -jnp.sum(mask * (logp_a * advantage + entropy_coef * entropy))
    value_loss = jnp.sum(mask * jnp.square(returns - values))
    loss = policy_loss + value_coef * value_loss
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss,
                  "entropy": jnp.sum(mask * entropy)}


def gae(rewards: Array, values: Array, mask: Array, bootstrap: Array, gamma: float,
        lam: float) -> Array:
    """Generalized advantage estimates (Schulman et al. 2016) of one episode's valid prefix:
    Â_t = Σ_{j≥t} (γλ)^{j−t} δ_j, δ_j = r_j + γ V(s_{j+1}) − V(s_j), with V(s_T) = `bootstrap`
    after the last step (0 at a terminal state). λ = 1 is Ĝ_t − V(s_t); padded steps get 0."""

    def step(carry: tuple[Array, Array], inp: tuple[Array, Array, Array]
             ) -> tuple[tuple[Array, Array], Array]:
        adv_next, v_next = carry
        r, v, m = inp
        adv = r + gamma * v_next - v + gamma * lam * adv_next
        keep = m > 0
        return (jnp.where(keep, adv, adv_next), jnp.where(keep, v, v_next)), \
            jnp.where(keep, adv, 0.0)

    _, adv = jax.lax.scan(step, (jnp.zeros_like(bootstrap), bootstrap), (rewards, values, mask),
                          reverse=True)
    return adv


# --- policy gradient (paper 004 / FedPG-BR): GPOMDP-style estimator with importance weights --
def whiten(x: Array, mask: Array) -> Array:
    """Standardize x over the valid steps of one episode (FedPG-BR's per-episode baseline:
    subtract the episode's mean reward-to-go, divide by its std). Padded steps get 0."""
    n = jnp.maximum(jnp.sum(mask), 1.0)
    mean = jnp.sum(mask * x) / n
    std = jnp.sqrt(jnp.sum(mask * jnp.square(x - mean)) / n)
    return mask * (x - mean) / (std + 1e-8)


def action_log_probs(logits: Array, actions: Array) -> Array:
    """log π(a_h | s_h) for every step: logits (..., A), actions (...)."""
    logp = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(logp, actions[..., None], axis=-1)[..., 0]


def importance_weights(
    logp_target: Array, logp_behaviour: Array, mask: Array, kind: str = "step",
    clip: float | None = None,
) -> Array:
    """ω for an episode sampled with the behaviour policy (θ_n), re-weighted to the target (θ₀).

    kind "step": the per-step ratio π_θ₀(a_h|s_h)/π_θn(a_h|s_h) at each step (FedPG-BR's code);
    kind "trajectory": the full product p(τ|θ₀)/p(τ|θ_n) = Π_h ratio_h on every step (paper 004).
    `clip` truncates ω at that value (truncated importance sampling; None: no truncation).
    Returned per step (T,), 0 on padded steps; constant (no gradient flows through ω).
    """
    log_ratio = mask * (logp_target - logp_behaviour)
    if kind == "step":
        w = jnp.exp(log_ratio)
    elif kind == "trajectory":
        w = jnp.broadcast_to(jnp.exp(jnp.sum(log_ratio)), mask.shape)
    else:
        raise ValueError(f"importance weight kind must be 'step' or 'trajectory', got {kind!r}")
    if clip is not None:
        w = jnp.minimum(w, clip)
    return jax.lax.stop_gradient(mask * w)


def pg_surrogate(logp: Array, advantage: Array, mask: Array, weights: Array | None = None
                 ) -> Array:
    """Σ_h ω_h log π(a_h|s_h) Â_h for one episode: its gradient is the episode's policy-gradient
    estimate g(τ|θ) (ω = 1) or the importance-weighted ω g(τ|θ). Â and ω are constants."""
    coef = jax.lax.stop_gradient(advantage if weights is None else advantage * weights)
    return jnp.sum(mask * logp * coef)
