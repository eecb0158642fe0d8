"""Functional (Gaussian-process) noise for Q-functions, and its Theorem 5 calibration (paper 001).

The noise is a random *function* g ~ σ·GP(0, k), k(x, y) = exp(−|x − y|), one per action, sampled
lazily: a state gets a value the first time it is queried, and that value is stored so the same
state always gets the same value until the function is reset.

Why only two neighbours matter. This kernel is the Ornstein-Uhlenbeck (Markov) covariance in
1-D, so given all stored points the law of g(x) depends only on the nearest stored point on each
side, l < x < r (or the single nearest one beyond either end). With d_l = x − l, d_r = r − x and
unit variance (scale everything by σ afterwards), dense conditioning on {l, r} reduces to

    mean = w_l g(l) + w_r g(r),     w_l = e^{−d_l}(1 − e^{−2 d_r}) / (1 − e^{−2(d_l + d_r)}),
                                    w_r = e^{−d_r}(1 − e^{−2 d_l}) / (1 − e^{−2(d_l + d_r)}),
    var  = (1 − e^{−2 d_l})(1 − e^{−2 d_r}) / (1 − e^{−2(d_l + d_r)}).

(w_l = sinh(d_r)/sinh(d_l + d_r), the form in the authors' code.) With no right neighbour put
d_r = ∞: mean = e^{−d_l} g(l), var = 1 − e^{−2 d_l}; symmetrically with no left neighbour; with no
stored point at all, N(0, 1). One formula covers all four cases, so there are no branches. (The
authors' code has a bug at the right end: it conditions on the *first* stored value.)

Two implementations of the same law:

* `GPNoiseFunction`: host-side (numpy + bisect on a sorted list), one query at a time. It is the
  reference, and it counts the comparisons its binary searches make (Proposition 9's
  O(N log N) for N queries is tested by counting, not timing).
* `gp_noise_query` on a `GPNoiseState`: pure JAX on fixed-capacity sorted arrays, so the noise
  lives *inside* the jitted, scanned, vmapped training loop (no host round trip per step, which
  would dominate training time). A batch of B queries is sorted, its stored neighbours are found
  with `searchsorted` (O(B log C)), the new values are drawn left to right in one short `scan`
  (each new point's left neighbour is the nearer of its stored left neighbour and the previous
  query; its right neighbour is always a stored point), and the new points are merged into the
  sorted store by rank (O(C) vectorized work per batch, not per query). Sequential conditioning
  in any order samples the same joint law, so the two implementations agree in distribution.
"""

from __future__ import annotations

import bisect
import math
from types import ModuleType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.privacy.theorem5 import REWARD_NEIGHBOURS as REWARD_NEIGHBOURS
from privrl.privacy.theorem5 import REWARD_UNIT as REWARD_UNIT
from privrl.privacy.theorem5 import Theorem5 as Theorem5
from privrl.privacy.theorem5 import Theorem5Error as Theorem5Error

__all__ = [
    "REWARD_NEIGHBOURS",
    "REWARD_UNIT",
    "GPNoiseFunction",
    "GPNoiseState",
    "Theorem5",
    "Theorem5Error",
    "gp_noise_init",
    "gp_noise_moments",
    "gp_noise_query",
    "gp_noise_reset",
    "ou_conditional",
]



# --- the conditional law (shared) ------------------------------------------------------------
def ou_conditional(x: Any, left_x: Any, left_v: Any, right_x: Any, right_v: Any,
                   xp: ModuleType = jnp) -> tuple[Any, Any]:
    """Mean and variance of a unit-variance exp(−|x − y|) GP at x given its neighbours.

    left_x < x < right_x; a missing neighbour is ±inf (its value must then be finite, e.g. 0).
    `left_v`/`right_v` may carry a trailing action axis (the mean gets it too). `xp` is numpy
    (host) or jax.numpy.
    """
    dl = x - left_x
    dr = right_x - x
    a = -xp.expm1(-2.0 * dl)  # 1 − e^{−2 d_l}; 1 when there is no left neighbour
    b = -xp.expm1(-2.0 * dr)
    c = -xp.expm1(-2.0 * (dl + dr))
    wl = xp.exp(-dl) * b / c
    wr = xp.exp(-dr) * a / c
    mean = xp.expand_dims(wl, -1) * left_v + xp.expand_dims(wr, -1) * right_v
    return mean, a * b / c


# --- host reference --------------------------------------------------------------------------
class GPNoiseFunction:
    """g_a ~ σ·GP(0, exp(−|x − y|)) for `num_actions` actions, sampled lazily on the host.

    `g(x)` returns the vector (g_0(x), ..., g_{A−1}(x)); the same x returns the same vector until
    `reset()`. `comparisons` counts the element comparisons of the binary searches and
    `neighbour_reads` the stored points read to condition on (at most 2 per query).
    """

    def __init__(self, sigma: float, num_actions: int = 2, seed: int = 0) -> None:
        if not sigma >= 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        self.sigma = float(sigma)
        self.num_actions = num_actions
        self.rng = np.random.default_rng(seed)
        self.comparisons = 0
        self.neighbour_reads = 0
        self.reset()

    def reset(self) -> None:
        self.xs: list[float] = []
        self.values: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.xs)

    def _probe(self, y: float) -> float:
        self.comparisons += 1
        return y

    def _neighbours(self, x: float) -> tuple[int, bool]:
        i = bisect.bisect_left(self.xs, x, key=self._probe)  # first stored >= x
        hit = i < len(self.xs) and self.xs[i] == x
        return i, hit

    def _conditional(self, x: float, i: int) -> tuple[np.ndarray, float]:
        zero = np.zeros(self.num_actions)
        lx, lv = (self.xs[i - 1], self.values[i - 1]) if i > 0 else (-math.inf, zero)
        rx, rv = (self.xs[i], self.values[i]) if i < len(self.xs) else (math.inf, zero)
        self.neighbour_reads += (i > 0) + (i < len(self.xs))
        mean, var = ou_conditional(np.float64(x), lx, lv, rx, rv, xp=np)
        return mean, float(var)

    def moments(self, x: float) -> tuple[np.ndarray, float]:
        """Conditional mean of g(x) (per action) and its variance in units of σ²."""
        i, hit = self._neighbours(float(x))
        return (self.values[i].copy(), 0.0) if hit else self._conditional(float(x), i)

    def __call__(self, x: float) -> np.ndarray:
        x = float(x)
        i, hit = self._neighbours(x)
        if hit:
            return self.values[i].copy()
        mean, var = self._conditional(x, i)
        v = mean + self.sigma * math.sqrt(var) * self.rng.standard_normal(self.num_actions)
        self.xs.insert(i, x)
        self.values.insert(i, v)
        return v.copy()


# --- JAX, fixed capacity ---------------------------------------------------------------------
class GPNoiseState(NamedTuple):
    """A lazily sampled noise function: sorted stored states (+inf padded) and their values."""

    xs: Array  # (C,) sorted; unused slots +inf
    values: Array  # (C, A) g_a(xs) (σ-scaled); unused slots 0
    count: Array  # () int32 points stored
    overflow: Array  # () bool: a batch did not fit (points were lost; the run is invalid)


def gp_noise_init(capacity: int, num_actions: int) -> GPNoiseState:
    return GPNoiseState(jnp.full((capacity,), jnp.inf, jnp.float32),
                        jnp.zeros((capacity, num_actions), jnp.float32),
                        jnp.zeros((), jnp.int32), jnp.zeros((), bool))


def gp_noise_reset(state: GPNoiseState) -> GPNoiseState:
    """A fresh, independent noise function (the paper's reset); the overflow flag is kept."""
    fresh = gp_noise_init(state.xs.shape[0], state.values.shape[1])
    return fresh._replace(overflow=state.overflow)


def _stored_neighbours(state: GPNoiseState, x: Array) -> tuple[Array, ...]:
    """For sorted or unsorted x (B,): hit flag, hit value, left (x, v), right (x, v)."""
    cap = state.xs.shape[0]
    i = jnp.searchsorted(state.xs, x, side="left")  # first stored >= x
    ic = jnp.minimum(i, cap - 1)
    il = jnp.maximum(i - 1, 0)
    right_x = jnp.where(i < cap, state.xs[ic], jnp.inf)
    hit = jnp.isfinite(x) & (right_x == x)
    left_x = jnp.where(i > 0, state.xs[il], -jnp.inf)
    return hit, state.values[ic], left_x, state.values[il], right_x, state.values[ic]


def gp_noise_moments(state: GPNoiseState, x: Array) -> tuple[Array, Array]:
    """Conditional mean (B, A) and unit-kernel variance (B,) of the stored function at x (B,)."""
    hit, hv, lx, lv, rx, rv = _stored_neighbours(state, x)
    mean, var = ou_conditional(x, lx, lv, rx, rv)
    return jnp.where(hit[:, None], hv, mean), jnp.where(hit, 0.0, var)


def gp_noise_query(state: GPNoiseState, key: Array, x: Array, sigma: Array | float,
                   valid: Array | None = None) -> tuple[GPNoiseState, Array]:
    """g(x) for a batch x (B,): stored values where known, new draws (then stored) elsewhere.

    Entries with `valid` False are not queried (noise 0, nothing stored). Repeated states within
    the batch get one value. Returns the updated state and the noise (B, A).
    """
    cap, num_actions = state.values.shape
    n = x.shape[0]
    valid = jnp.ones((n,), bool) if valid is None else valid
    q = jnp.where(valid, x.astype(jnp.float32), jnp.inf)
    order = jnp.argsort(q)
    qs = q[order]
    hit, hv, lx, lv, rx, rv = _stored_neighbours(state, qs)
    z = jax.random.normal(key, (n, num_actions), jnp.float32)
    sigma = jnp.asarray(sigma, jnp.float32)

    def draw(carry: tuple[Array, Array], inp: tuple[Array, ...]) -> tuple[tuple, tuple]:
        px, pv = carry  # the nearest point to the left drawn earlier in this batch
        x_, hit_, hv_, lx_, lv_, rx_, rv_, z_ = inp
        live = jnp.isfinite(x_)
        dup = x_ == px
        use_prev = px > lx_
        left_x = jnp.where(use_prev, px, lx_)
        left_v = jnp.where(use_prev, pv, lv_)
        mean, var = ou_conditional(x_, left_x, left_v, rx_, rv_)
        drawn = mean + sigma * jnp.sqrt(var) * z_
        value = jnp.where(hit_, hv_, jnp.where(dup, pv, drawn))
        value = jnp.where(live, value, 0.0)
        is_new = live & ~hit_ & ~dup
        carry = (jnp.where(live, x_, px), jnp.where(live, value, pv))
        return carry, (value, is_new)

    init = (jnp.array(-jnp.inf, jnp.float32), jnp.zeros((num_actions,), jnp.float32))
    _, (vals, is_new) = jax.lax.scan(draw, init, (qs, hit, hv, lx, lv, rx, rv, z))

    # Merge the new points into the sorted store by rank (ties: stored before new).
    new_x = jnp.where(is_new, qs, jnp.inf)
    by_x = jnp.argsort(new_x)
    new_x, new_v = new_x[by_x], vals[by_x]
    pos_old = jnp.arange(cap) + jnp.searchsorted(new_x, state.xs, side="left")
    pos_new = jnp.arange(n) + jnp.searchsorted(state.xs, new_x, side="right")
    xs = jnp.full((cap + n,), jnp.inf, jnp.float32).at[pos_old].set(state.xs)
    xs = xs.at[pos_new].set(new_x)
    values = jnp.zeros((cap + n, num_actions), jnp.float32).at[pos_old].set(state.values)
    values = values.at[pos_new].set(jnp.where(jnp.isfinite(new_x)[:, None], new_v, 0.0))
    count = state.count + jnp.sum(is_new, dtype=jnp.int32)
    new_state = GPNoiseState(xs[:cap], values[:cap], count, state.overflow | (count > cap))
    noise = jnp.zeros((n, num_actions), jnp.float32).at[order].set(vals)
    return new_state, noise


