"""Push-sum over directed graphs (Kempe et al. 2003; Stochastic Gradient Push, Assran et al.
2019), vectorized over the K nodes: node states are rows of x (K, d) and w (K,).

Each node k keeps a weight w_k (initially 1) and the numerator x_k = w_k·θ_k. In a round it
sends p_{ik}·x_k and p_{ik}·w_k to every out-neighbour i and keeps p_{kk}·(x_k, w_k); the
shares it sends sum to 1 (P is column-stochastic). Receiving is x_k ← Σ_i p_{ki} x_i,
w_k ← Σ_i p_{ki} w_i, i.e. x ← P x and w ← P w, which conserve Σ_k x_k and Σ_k w_k. The
de-biased parameter z_k = x_k / w_k converges to Σ x / Σ w: the average of the initial θ_k.

Paper 004's Algorithm 2 mixes θ instead of x = w·θ; that conserves neither sum and is not
what Kempe et al. or Assran et al. do (see ../shared/papers/README.md).
A local step on z is a step on x scaled by w: z_k + Δ_k ⇔ x_k + w_k·Δ_k.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from privrl.privacy.report import Report

__all__ = ["PushSumState", "push_sum_add", "push_sum_apply", "push_sum_init", "push_sum_mix",
           "push_sum_z"]


class PushSumState(NamedTuple):
    x: Array  # (K, d) numerators x_k = w_k θ_k
    w: Array  # (K,) push-sum weights


def push_sum_init(theta: Array) -> PushSumState:
    """Every node starts with w_k = 1 and x_k = θ_k."""
    theta = jnp.asarray(theta)
    return PushSumState(theta, jnp.ones(theta.shape[0], theta.dtype))


def push_sum_z(state: PushSumState) -> Array:
    """The de-biased parameters z_k = x_k / w_k, shape (K, d)."""
    return state.x / state.w[:, None]


def push_sum_mix(state: PushSumState, mixing: Array) -> PushSumState:
    """One gossip round with column-stochastic `mixing` (K, K): x ← P x, w ← P w."""
    p = jnp.asarray(mixing, state.x.dtype)
    return PushSumState(p @ state.x, p @ state.w)


def push_sum_add(state: PushSumState, delta: Array) -> PushSumState:
    """Each node moves its z_k by delta_k (K, d): x_k ← x_k + w_k·delta_k (w unchanged)."""
    return state._replace(x=state.x + state.w[:, None] * delta)


def push_sum_apply(state: PushSumState, reports: Report) -> PushSumState:
    """Apply the nodes' released updates (a batch of Reports, value (K, d)) as steps on z."""
    return push_sum_add(state, reports.value.astype(state.x.dtype))
