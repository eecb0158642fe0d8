"""The distributed discrete Gaussian over a modular secure sum (Kairouz, Liu & Steinke 2021):
the `distributed-gaussian` mechanism, in a local simulation and in a deployment alike.

A real secure-aggregation protocol (SecAgg, SecAgg+) sums integers modulo 2^b, so every agent
hands it one message made by `share` (one release function over the parameter pytree
`SumParams`, jitted; the same code in a simulation and on a Flower SuperNode):

1. clips its update to L2 norm C (floats; only keeps the integers small) and scales it by 1/γ;
2. rounds it to integers by randomized rounding (unbiased: each coordinate rounds up with
   probability its fractional part), conditionally: the rounding is redrawn until the
   integer vector's L2 norm is at most R (KLS21 Sec. 4.1, Eq. (10) with failure probability
   β per draw), and after `_MAX_REDRAWS` redraws it is clipped to R exactly, in integers. So
   ‖x̃‖₂ <= R always: R is the sum's L2 sensitivity in grid units (zero-out: the sum moves
   by x̃), and R/(C/γ) >= 1 is the norm inflation that quantization costs;
3. adds a noise share ~ N_ℤ(0, s²)^d (the discrete Gaussian), s² an integer;
4. sends (x̃ + noise) mod 2^b.

The secure sum reveals Σ messages mod 2^b (`modular_sum`: what SecAgg+ delivers) and `decode`
reads its centred residue times γ. The sum modulo 2^b is a function of the exact integer sum
Σ x̃ + Σ noise (post-processing), so wrap-around never weakens the guarantee; it can only spoil
utility. γ is chosen so that |Σ x̃ + noise| < 2^(b−1) in every coordinate except with
probability at most `wrap_probability` (a sub-Gaussian tail bound: a discrete Gaussian
N_ℤ(0, s²) is s²-sub-Gaussian, CKS20 Cor. 23, and independent sums add).

Integers. Everything is exact in 32 bits: R <= 2^15 (`grid_bits`), so |x̃_i| <= R + 1 and
‖x̃‖² < (R + √d)² < 2^32 for d < 10^9 (unsigned 32-bit), x̃ + noise fits int32, and a
message is a uint32 whose additions wrap modulo 2^32, a multiple of 2^b (b <= 32).

Noise. A simulation draws each share with `discrete_gaussian_jax` from the agent's JAX key
(seeded, or under secret noise from an os.urandom root), inside the jitted round; a deployment
passes `share` the share drawn by the exact integer sampler of `privrl.privacy.secure` from
os.urandom. Both are N_ℤ(0, s²): `discrete_gaussian_jax` runs the same algorithm (CKS20
Algorithms 2 and 3), with its Bernoulli trials' probabilities computed in float32 (a relative
error below 1e-6 on each probability) instead of as exact rationals.

Guarantee (user level, per round): unit = one agent's whole data; neighbouring = zero-out
(its update replaced by zero, its noise share kept). Only the shares of honest agents whose
messages are in the sum protect an agent: with n of them the noise is a sum of n independent
N_ℤ(0, s²), which is not a discrete Gaussian; KLS21 (Theorem 1 and Prop. 14, Eq. (17)) bound
its Rényi divergence at every order α:

    D_α <= min( α·R²/(2n s²) + τ·d,  α/2·(R/(√n s) + √d·τ)² ),
    τ = 10·Σ_{k=1}^{n−1} exp(−2π² s² k/(k+1)),

i.e. (τd, R²/(2ns²))-zCDP and (R/(√n s) + √d τ)²/2-zCDP. Each is composed over the rounds as
dp-accounting's `ZCDpEvent` by its `RdpAccountant` and converted to (ε, δ); the statement is the
smaller of the two ε (each is a valid bound). n = `min_honest` m: the secure sum must never be
revealed with fewer than m surviving shares (`check_threshold`), and at most (surviving − m)
of the survivors may collude with the server. No amplification by sampling is claimed: every
agent takes part in every round. The noise is calibrated to a request by the privacy plan
(privrl.privacy.plan.plan_discrete), for a local run and a deployment alike, so both state the
same ε for the same request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.privacy.clipping import clip_l2
from privrl.privacy.distributed import USER_NEIGHBOURS, USER_UNIT
from privrl.privacy.report import _MINT, Guarantee, Report
from privrl.privacy.secure import discrete_gaussian

if TYPE_CHECKING:
    import dp_accounting

__all__ = ["DiscreteGaussianSum", "SumParams", "ThresholdError", "decode",
           "discrete_gaussian_jax", "encode", "modular_sum", "secure_sum_bits", "share"]

_MAX_REDRAWS = 20  # conditional rounding's redraws before the exact integer clip
_MAX_VARIANCE = (1 << 26) - 1  # the discrete Gaussian samplers' limit on s²
_MAX_GRID_BITS = 15  # R <= 2^15: every integer of the encoding is exact in 32 bits
_MAX_TRIES = 256  # the JAX sampler's rounds (a coordinate still rejected: probability < 2^-100)
WRAP_TARGET = 1e-9  # γ is chosen so that a round wraps around with at most this probability


def secure_sum_bits(nodes: int) -> int:
    """The largest b with nodes·2^b < 2^32 (SecAgg+'s modulus M = 2^32 also sums the nodes'
    weights T = 2^b modulo M, and a total of M would read as 0): the agents' modulus T = 2^b
    when `nodes` SuperNodes take part (privrl.federation.flower_sum)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be an integer >= 1, got {nodes!r}")
    return 31 - math.floor(math.log2(nodes))


# --- the release: one function over a parameter pytree, jitted -------------------------------
class SumParams(NamedTuple):
    """The numbers of one round's release (`share`) and of its decoding (`decode`)."""

    clip: Any  # C: each update's L2 clip
    gamma: Any  # γ: the grid step
    radius: Any  # R: the integer L2 bound after rounding (<= 2^15)
    share_variance: Any  # s²: each share's integer variance
    bits: Any  # b: the secure sum's modulus 2^b (8 <= b <= 32)


def _mask(bits: Any) -> Array:
    """2^b − 1 as uint32 (b <= 32)."""
    return jnp.right_shift(jnp.uint32(0xFFFFFFFF), (32 - jnp.asarray(bits)).astype(jnp.uint32))


def _sq_norm(k: Array) -> Array:
    """Σ k_i² exactly, as uint32 (the encoding keeps it below 2^32: module doc)."""
    a = jnp.abs(k).astype(jnp.uint32)
    return jnp.sum(a * a, dtype=jnp.uint32)


def _clip_int(k: Array, radius: Any) -> Array:
    """Integers with Σ k_i² <= R² exactly: |k_i|·R // r toward zero, r >= ‖k‖₂ (r: the float
    root widened past its rounding error, so the integer division can only shrink)."""
    root = jnp.sqrt(_sq_norm(k).astype(jnp.float32))
    root = (jnp.ceil(root * (1 + 2.0 ** -20)) + 1).astype(jnp.uint32)
    mag = (jnp.abs(k).astype(jnp.uint32) * jnp.asarray(radius, jnp.uint32)) // root
    return jnp.sign(k) * mag.astype(jnp.int32)


def encode(p: SumParams, key: Array, x: Array) -> Array:
    """clip_C(x)/γ rounded to integers by conditional randomized rounding, ‖·‖₂ <= R exactly
    (int32; steps 1-2 of the module doc). Non-finite entries count as 0."""
    x = jnp.nan_to_num(jnp.asarray(x, jnp.float32).reshape(-1), nan=0.0, posinf=0.0,
                       neginf=0.0)
    scaled = clip_l2(x, p.clip) / p.gamma
    floor = jnp.floor(scaled)
    frac = scaled - floor
    floor = floor.astype(jnp.int32)
    r2 = jnp.asarray(p.radius, jnp.uint32) ** 2

    def draw(i: Array) -> Array:
        up = jax.random.uniform(jax.random.fold_in(key, i), frac.shape) < frac
        return floor + up.astype(jnp.int32)

    def redraw(c: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        i, _, _ = c
        k = draw(i)
        return i + 1, k, _sq_norm(k) <= r2

    first = draw(jnp.int32(0))
    _, k, ok = jax.lax.while_loop(lambda c: ~c[2] & (c[0] < _MAX_REDRAWS), redraw,
                                  (jnp.int32(1), first, _sq_norm(first) <= r2))
    return jnp.where(ok, k, _clip_int(k, p.radius))


def discrete_gaussian_jax(key: Array, share_variance: Any, shape: tuple[int, ...]) -> Array:
    """Draws of N_ℤ(0, s²) (int32) from a JAX key: CKS20 Algorithm 3 (discrete Laplace
    proposals with t = ⌊s⌋ + 1, accepted with probability exp(−(|y| − s²/t)²/(2s²))) over
    Algorithm 2's discrete Laplace (u ~ U{0..t−1} kept with probability exp(−u/t), plus t
    times a Geometric(1 − e^−1) count, a random sign, −0 rejected), every coordinate redrawn
    until accepted (at most _MAX_TRIES rounds; module doc on its float32 probabilities)."""
    s2 = jnp.asarray(share_variance, jnp.float32)
    t = jnp.floor(jnp.sqrt(s2)) + 1  # ⌊s⌋ + 1 (s² < 2^26: exact enough for the floor)
    t_int = t.astype(jnp.int32)

    def draw(k: Array) -> tuple[Array, Array]:
        k_u, k_keep, k_v, k_sign, k_acc = jax.random.split(k, 5)
        u = jax.random.randint(k_u, shape, 0, t_int)
        keep = jax.random.uniform(k_keep, shape) < jnp.exp(-u / t)
        v = jnp.floor(jax.random.exponential(k_v, shape)).astype(jnp.int32)  # P(v >= j) = e^-j
        x = u + t_int * v
        neg = jax.random.bernoulli(k_sign, 0.5, shape)
        y = jnp.where(neg, -x, x)
        gauss = jnp.exp(-jnp.square(jnp.abs(y) - s2 / t) / (2 * s2))
        ok = keep & ~(neg & (x == 0)) & (jax.random.uniform(k_acc, shape) < gauss)
        return y, ok

    def more(c: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        i, out, done = c
        y, ok = draw(jax.random.fold_in(key, i))
        return i + 1, jnp.where(done, out, y), done | ok

    zero = jnp.zeros(shape, jnp.int32)
    _, out, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[2]) & (c[0] < _MAX_TRIES), more,
                                   (jnp.int32(0), zero, jnp.zeros(shape, bool)))
    return out


def share(p: SumParams, key: Array, x: Array, noise: Array | None = None) -> Array:
    """One agent's message (x̃ + noise share) mod 2^b, uint32 in [0, 2^b): `encode` with one
    half of `key`, and the noise share `noise` (a deployment's, from the secure sampler) or
    else one drawn by `discrete_gaussian_jax` with the other half. Alone it is no Report:
    its noise is a 1/m part of what the sum needs."""
    k_round, k_noise = jax.random.split(key)
    q = encode(p, k_round, x)
    if noise is None:
        noise = discrete_gaussian_jax(k_noise, p.share_variance, q.shape)
    y = q + jnp.asarray(noise).astype(jnp.int32)
    return jax.lax.bitcast_convert_type(y, jnp.uint32) & _mask(p.bits)


def modular_sum(p: SumParams, messages: Array) -> Array:
    """Σ messages mod 2^b over the leading axis, exactly (uint32 additions wrap modulo 2^32,
    a multiple of 2^b): what a secure sum of these messages reveals."""
    return jnp.sum(jnp.asarray(messages, jnp.uint32), axis=0, dtype=jnp.uint32) & _mask(p.bits)


def decode(p: SumParams, total: Array) -> Array:
    """A sum modulo 2^b as the estimate of Σ clip_C(x_i): its centred residue in
    [−2^(b−1), 2^(b−1)) (sign-extended from b bits) times γ, float32."""
    shift = (32 - jnp.asarray(p.bits)).astype(jnp.uint32)
    raised = jax.lax.bitcast_convert_type(jnp.left_shift(jnp.asarray(total, jnp.uint32), shift),
                                          jnp.int32)
    centred = jnp.right_shift(raised, shift.astype(jnp.int32))
    return centred.astype(jnp.float32) * jnp.asarray(p.gamma, jnp.float32)


class ThresholdError(ValueError):
    """A secure-sum threshold under which the stated ε would not hold."""


@dataclass(frozen=True)
class DiscreteGaussianSum:
    """One round's distributed discrete Gaussian over a sum modulo 2^`bits` (module doc).

    clip C: L2 clip of each update; dim d; agents K (every one sends a share each round);
    min_honest m: the honest surviving shares the guarantee counts on; noise_multiplier z:
    the m shares' total noise std over the sensitivity R (s² = ⌈z²R²/m⌉); bits b of the
    modulus (<= 32); grid_bits: R is at most 2^grid_bits (<= 15); beta: conditional
    rounding's β; delta: δ of the stated ε."""

    clip: float
    dim: int
    agents: int
    min_honest: int
    noise_multiplier: float
    bits: int = 32
    grid_bits: int = _MAX_GRID_BITS
    beta: float = math.exp(-0.5)
    delta: float = 1e-5
    name = "distributed-gaussian"

    def __post_init__(self) -> None:
        for name in ("clip", "noise_multiplier"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")
        for name, low in (("dim", 1), ("agents", 1), ("bits", 8), ("grid_bits", 4)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        if self.bits > 32:
            raise ValueError(f"bits must be <= 32 (uint32 arithmetic), got {self.bits}")
        if self.grid_bits > _MAX_GRID_BITS:
            raise ValueError(f"grid_bits must be <= {_MAX_GRID_BITS} (exact 32-bit integers), "
                             f"got {self.grid_bits}")
        m = self.min_honest
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= self.agents:
            raise ValueError(f"min_honest must be an integer in [1, agents = {self.agents}], "
                             f"got {m!r}")
        if not 0 < self.beta < 1:
            raise ValueError(f"beta must be in (0, 1), got {self.beta!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        _ = self.grid  # refuses a modulus too small for the grid

    # --- the grid and the noise -----------------------------------------------------------
    @cached_property
    def grid(self) -> tuple[float, int, int]:
        """(γ, R, s²): the grid step, the integer L2 bound R after rounding, and each share's
        integer variance s². R is the largest integer <= 2^grid_bits for which a round wraps
        around modulo 2^b with probability <= WRAP_TARGET; γ makes C/γ the largest scale whose
        rounding bound (KLS21 Eq. (10), or C/γ + √d) is <= R."""
        d, k, z = self.dim, self.agents, float(self.noise_multiplier)
        half = 2 ** (self.bits - 1)
        tail = math.sqrt(2 * math.log(2 * d / WRAP_TARGET))
        # |Σ x̃_i| <= K·R per coordinate; the noise of all K shares has std z·R·sqrt(K/m).
        fit = math.floor((half - 1) / (k + tail * z * math.sqrt(k / self.min_honest)))
        # s² = ⌈z²R²/m⌉ must stay within the exact sampler's range.
        sampler = math.floor(math.sqrt(_MAX_VARIANCE * self.min_honest) / z)
        radius = min(2 ** self.grid_bits, fit, sampler)
        if radius < 4 * math.sqrt(d) + 2:
            why = (f"a modulus of 2^{self.bits} for {k} agents" if fit <= sampler else
                   f"the discrete Gaussian sampler's variance limit 2^26 with {self.min_honest}"
                   " honest shares")
            raise ValueError(
                f"{why} leaves an L2 bound of only {radius} grid steps at dimension {d} and "
                f"noise multiplier {z:g}: the rounding would inflate the norm by more than 25%")
        scale = self._scale_for(radius)
        s2 = max(1, math.ceil(z * z * radius * radius / self.min_honest))
        return self.clip / scale, radius, s2

    def _scale_for(self, radius: int) -> float:
        """The largest C/γ whose rounded norm bound stays <= radius (bisection on a monotone
        bound)."""
        lo, hi = 0.0, float(radius)
        for _ in range(100):
            mid = (lo + hi) / 2
            if self.rounding_bound(mid) <= radius:
                lo = mid
            else:
                hi = mid
        return lo

    def rounding_bound(self, scale: float) -> float:
        """KLS21's bound on ‖x̃‖₂ of a vector of norm <= `scale` after randomized rounding:
        min(scale + √d, sqrt(scale² + d/4 + sqrt(2 ln(1/β))·(scale + √d/2))), the second
        holding with probability >= 1 − β per draw (conditional rounding redraws)."""
        d = self.dim
        b2 = scale ** 2 + d / 4 + math.sqrt(2 * math.log(1 / self.beta)) * (scale
                                                                              + math.sqrt(d) / 2)
        return min(scale + math.sqrt(d), math.sqrt(b2))

    @property
    def gamma(self) -> float:
        return self.grid[0]

    @property
    def radius(self) -> int:
        return self.grid[1]

    @property
    def share_variance(self) -> int:
        return self.grid[2]

    @property
    def modulus(self) -> int:
        return 1 << self.bits

    def inflation(self) -> float:
        """R/(C/γ): how much the quantization inflates the sensitivity."""
        return self.radius * self.gamma / self.clip

    def wrap_probability(self) -> float:
        """An upper bound on the probability that a round's sum wraps around (a utility loss
        only: modular reduction is post-processing of the exact sum)."""
        half = 2 ** (self.bits - 1)
        margin = half - self.agents * self.radius
        if margin <= 0:
            return 1.0
        var = self.agents * self.share_variance
        return min(1.0, 2 * self.dim * math.exp(-margin * margin / (2 * var)))

    # --- the release ----------------------------------------------------------------------
    @cached_property
    def sum_params(self) -> SumParams:
        """The release's parameter pytree (`share`, `decode`)."""
        return SumParams(float(self.clip), float(self.gamma), int(self.radius),
                         int(self.share_variance), int(self.bits))

    def message(self, key: Array, x: Any, secure: bool = True) -> np.ndarray:
        """An agent's message (`share`) outside a jitted round, its rounding keyed by `key`
        and its noise share N_ℤ(0, s²)^d drawn by the exact sampler of privrl.privacy.secure
        from os.urandom (a deployment's) or, with secure=False (a seeded simulation), from
        `key` as in the local runner's round: int64 in [0, 2^b)."""
        return self.messages(jnp.asarray(key)[None], jnp.asarray(x)[None], secure)[0]

    def messages(self, keys: Array, xs: Any, secure: bool = True) -> np.ndarray:
        """`message` of each of several agents at once (row i: keys[i], xs[i]): one call of
        the vmapped release, their noise shares drawn together (independent all the same),
        as a node hosting them releases them: int64 (agents, d) in [0, 2^b)."""
        xs = jnp.asarray(xs, jnp.float32)
        n = len(keys)
        xs = xs.reshape(n, -1) if xs.size == n * self.dim else xs
        if xs.shape != (n, self.dim):
            raise ValueError(f"an update of dimension {self.dim} is needed, got "
                             f"{tuple(xs.shape[1:])}")
        noise = (discrete_gaussian(self.share_variance, n * self.dim).astype(np.int32)
                 .reshape(n, self.dim) if secure else None)
        return np.asarray(_shares(self.sum_params, keys, xs, noise), np.int64)

    def modular_sum(self, messages: Any) -> np.ndarray:
        """Σ messages mod 2^b (what a secure sum reveals), exactly: int64 in [0, 2^b)."""
        return np.asarray(_modular_sum(self.sum_params, np.asarray(messages, np.int64)
                                       .astype(np.uint32)), np.int64)

    def aggregate(self, messages: Array) -> Report:
        """A simulated secure sum of the (K, d) messages (`modular_sum`, as SecAgg+ delivers
        it to the server), decoded: the one `Report` the server receives."""
        return Report._mint(_MINT, _aggregate(self.sum_params, messages), self.guarantee)

    def decode(self, total: Any) -> Report:
        """The secure sum's residue (int in [0, 2^b)) as the estimate of Σ clip_C(x_i), a
        Report with the round's guarantee (`decode`)."""
        t = np.asarray(total, np.int64)
        if t.shape != (self.dim,) or t.min(initial=0) < 0 or t.max(initial=0) >= self.modulus:
            raise ValueError(f"a sum modulo 2^{self.bits} of dimension {self.dim} is needed")
        return Report._mint(_MINT, _decode(self.sum_params, t.astype(np.uint32)), self.guarantee)

    # --- accounting --------------------------------------------------------------------------
    def tau(self, honest: int) -> float:
        """KLS21's τ for `honest` shares: 10·Σ_{k=1}^{n−1} exp(−2π² s² k/(k+1))."""
        s2 = self.share_variance
        return 10 * sum(math.exp(-2 * math.pi ** 2 * s2 * k / (k + 1)) for k in range(1, honest))

    def events(self, honest: int) -> tuple[dp_accounting.DpEvent, dp_accounting.DpEvent]:
        """The two zCDP bounds of one round with `honest` shares in the sum (module doc)."""
        if isinstance(honest, bool) or not isinstance(honest, int) or honest < 1:
            raise ValueError(f"honest must be an integer >= 1, got {honest!r}")
        n, s2, r, d = honest, self.share_variance, self.radius, self.dim
        tau = self.tau(n)
        from dp_accounting import ZCDpEvent  # on first use: privacy.accounting's _dp says why

        a = ZCDpEvent(rho=r * r / (2 * n * s2), xi=tau * d)
        b = ZCDpEvent(rho=(r / math.sqrt(n * s2) + math.sqrt(d) * tau) ** 2 / 2)
        return a, b

    def epsilon(self, rounds: int, honest: int | None = None,
                delta: float | None = None) -> float:
        """ε of `rounds` rounds at δ (default the mechanism's) when `honest` shares (default
        m) protect each round: the smaller of the two composed RDP bounds."""
        n = self.min_honest if honest is None else honest
        delta = self.delta if delta is None else delta
        if rounds == 0:
            return 0.0
        from dp_accounting.rdp import RdpAccountant

        best = math.inf
        for event in self.events(n):
            acc = RdpAccountant()
            acc.compose(event, int(rounds))
            best = min(best, float(acc.get_epsilon(delta)))
        return best

    def check_threshold(self, threshold: int) -> None:
        """Refuse a secure sum that may reveal a sum of fewer than m shares (the stated ε
        counts m honest shares), or whose threshold is not a strict majority of the K agents
        (below it, two disjoint groups could each be unmasked: SecAgg's t > K/2)."""
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise ThresholdError(f"the threshold must be an integer, got {threshold!r}")
        if threshold < self.min_honest:
            raise ThresholdError(
                f"a secure sum revealed with {threshold} surviving agents holds fewer than the "
                f"{self.min_honest} honest noise shares the ε statement counts on")
        if not self.agents // 2 < threshold <= self.agents:
            raise ThresholdError(f"the threshold must be in ({self.agents // 2}, {self.agents}]"
                                 f" (a strict majority of the {self.agents} agents), got "
                                 f"{threshold}")

    @cached_property
    def guarantee(self) -> Guarantee:
        """(ε, δ)-DP of ONE round, m honest shares; a run composes its rounds (`epsilon`)."""
        return Guarantee(
            epsilon=self.epsilon(1), delta=self.delta,
            notion="(ε, δ)-DP (central, user level, one round; distributed discrete Gaussian "
                   f"over a secure sum mod 2^{self.bits}, >= {self.min_honest} honest shares)",
            unit=USER_UNIT, neighbouring=USER_NEIGHBOURS,
            sensitivity=self.radius * self.gamma, norm="L2")  # C after rounding: R·γ

    def account(self, rounds: int) -> dict[str, Any]:
        """The account of `rounds` rounds for privacy.json (a local run's and a deployment's):
        enough to recompute ε elsewhere."""
        a, b = self.events(self.min_honest)
        return {
            "accountant": "KLS21 Prop. 14 (Eq. 17): the smaller ε of two zCDP bounds per "
                          "round, each a dp_accounting ZCDpEvent composed by its RdpAccountant",
            "neighbouring_relation": USER_NEIGHBOURS,
            "events": [{"zcdp_rho": a.rho, "zcdp_xi": a.xi, "count": int(rounds)},
                       {"zcdp_rho": b.rho, "zcdp_xi": b.xi, "count": int(rounds)}],
            "honest_shares": self.min_honest, "delta": self.delta,
            "epsilon": self.epsilon(rounds)}

    def describe(self) -> dict[str, Any]:
        """privacy.json's "mechanism": its name, its numbers and one round's guarantee."""
        params = {k: v for k, v in self.record(1).items()
                  if k not in ("mechanism", "rounds", "epsilon")}
        return {"mechanism": self.name, "params": params, **self.guarantee.to_dict()}

    def upload_bytes(self, dim: int) -> int:
        """Bytes of one agent's message: d words of 4 bytes (b <= 32 bits each); the secure
        sum's own masking and key-exchange traffic is not counted."""
        return 4 * dim

    def record(self, rounds: int) -> dict[str, Any]:
        """What privacy.json states: every number needed to recompute ε."""
        return {
            "mechanism": "distributed discrete Gaussian (Kairouz, Liu & Steinke 2021) over a "
                         "secure sum modulo 2^bits",
            "clip": self.clip, "dim": self.dim, "agents": self.agents,
            "min_honest_surviving": self.min_honest,
            "noise_multiplier": self.noise_multiplier, "bits": self.bits,
            "gamma": self.gamma, "l2_bound_grid_steps": self.radius,
            "norm_inflation": self.inflation(), "beta": self.beta,
            "share_variance_grid_steps2": self.share_variance,
            "tau": self.tau(self.min_honest),
            "wrap_probability_per_round": self.wrap_probability(),
            "rounds": rounds, "delta": self.delta, "epsilon": self.epsilon(rounds),
            "accounting": "min over two zCDP bounds of KLS21 Prop. 14 (Eq. 17), each as "
                          "dp_accounting ZCDpEvent composed by RdpAccountant; no sampling "
                          "amplification; wrap-around is post-processing (utility only)",
        }


_shares = jax.jit(jax.vmap(share, (None, 0, 0, 0)))
# A server's sum and decoding (`DiscreteGaussianSum.modular_sum`, `decode`, `aggregate`), one
# program each, its parameters traced (one program for every SumParams): called on the host,
# each of their integer ops compiled a program of its own, a dozen per process.
_modular_sum, _decode = jax.jit(modular_sum), jax.jit(decode)


@jax.jit
def _aggregate(p: SumParams, messages: Array) -> Array:
    return decode(p, modular_sum(p, messages))
