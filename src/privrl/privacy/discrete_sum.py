"""The distributed discrete Gaussian over a modular secure sum (Kairouz, Liu & Steinke 2021).

`privrl.privacy.distributed` simulates the secure sum with real-valued Gaussian shares. A real
secure-aggregation protocol (SecAgg, SecAgg+) sums integers modulo 2^b, so here every agent:

1. clips its update to L2 norm C (floats; only keeps the integers small) and scales it by 1/γ;
2. rounds it to integers by randomized rounding (unbiased: each coordinate rounds up with
   probability its fractional part), conditionally: the rounding is redrawn until the
   integer vector's L2 norm is at most R (KLS21 Sec. 4.1, Eq. (10) with failure probability
   β per draw), and after `_MAX_REDRAWS` redraws it is clipped to R exactly, in integers. So
   ‖x̃‖₂ <= R always: R is the sum's L2 sensitivity in grid units (zero-out: the sum moves
   by x̃), and R/(C/γ) >= 1 is the norm inflation that quantization costs;
3. adds a noise share ~ N_ℤ(0, s²)^d (the discrete Gaussian, drawn by the exact sampler of
   `privrl.privacy.secure` from os.urandom), s² an integer;
4. sends (x̃ + noise) mod 2^b.

The sum modulo 2^b is a function of the exact integer sum Σ x̃ + Σ noise (post-processing), so
wrap-around never weakens the guarantee; it can only spoil utility. γ is chosen so that
|Σ x̃ + noise| < 2^(b−1) in every coordinate except with probability at most
`wrap_probability` (a sub-Gaussian tail bound: a discrete Gaussian N_ℤ(0, s²) is s²-sub-Gaussian,
CKS20 Cor. 23, and independent sums add), and `decode` reads the centred residue times γ.

Guarantee (user level, per round): unit = one agent's whole data; neighbouring = zero-out
(its update replaced by zero, its noise share kept), as for the continuous version. Only the
shares of honest agents whose messages are in the sum protect an agent: with n of them the
noise is a sum of n independent N_ℤ(0, s²), which is not a discrete Gaussian; KLS21 (Theorem 1
and Prop. 14, Eq. (17)) bound its Rényi divergence at every order α:

    D_α <= min( α·R²/(2n s²) + τ·d,  α/2·(R/(√n s) + √d·τ)² ),
    τ = 10·Σ_{k=1}^{n−1} exp(−2π² s² k/(k+1)),

i.e. (τd, R²/(2ns²))-zCDP and (R/(√n s) + √d τ)²/2-zCDP. Each is composed over the rounds as
dp-accounting's `ZCDpEvent` by its `RdpAccountant` and converted to (ε, δ); the statement is the
smaller of the two ε (each is a valid bound). n = `min_honest` m: the secure sum must never be
revealed with fewer than m surviving shares (`check_threshold`), and at most (surviving − m)
of the survivors may collude with the server. No amplification by sampling is claimed: every
agent takes part in every round.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.rdp import RdpAccountant

from privrl.privacy.distributed import USER_NEIGHBOURS, USER_UNIT
from privrl.privacy.report import _MINT, Guarantee, Report
from privrl.privacy.secure import _clip_l2_int, discrete_gaussian

__all__ = ["DiscreteGaussianSum", "ThresholdError", "calibrate_discrete"]

_MAX_REDRAWS = 20  # conditional rounding's redraws before the exact integer clip
_MAX_VARIANCE = (1 << 26) - 1  # the discrete Gaussian sampler's limit on s²
WRAP_TARGET = 1e-9  # γ is chosen so that a round wraps around with at most this probability


class ThresholdError(ValueError):
    """A secure-sum threshold under which the stated ε would not hold."""


def _uniform01(n: int) -> np.ndarray:
    """n uniform floats in [0, 1) with 53 random bits each, from the OS CSPRNG."""
    words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
    return words.astype(np.float64) * 2.0 ** -53


def _sq_norm(k: np.ndarray) -> int:
    return int((k.astype(object) ** 2).sum())


@dataclass(frozen=True)
class DiscreteGaussianSum:
    """One round's distributed discrete Gaussian over a sum modulo 2^`bits` (module doc).

    clip C: L2 clip of each update; dim d; agents K (every one sends a share each round);
    min_honest m: the honest surviving shares the guarantee counts on; noise_multiplier z:
    the m shares' total noise std over the sensitivity R (s² = ⌈z²R²/m⌉); bits b of the
    modulus; grid_bits: R is at most 2^grid_bits; beta: conditional rounding's β; delta: δ
    of the stated ε."""

    clip: float
    dim: int
    agents: int
    min_honest: int
    noise_multiplier: float
    bits: int = 32
    grid_bits: int = 16
    beta: float = math.exp(-0.5)
    delta: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("clip", "noise_multiplier"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")
        for name, low in (("dim", 1), ("agents", 1), ("bits", 8), ("grid_bits", 4)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        if self.bits > 62:
            raise ValueError(f"bits must be <= 62 (int64 arithmetic), got {self.bits}")
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

    # --- an agent's message ----------------------------------------------------------------
    def quantize(self, x: np.ndarray) -> np.ndarray:
        """clip_C(x)/γ rounded to integers by conditional randomized rounding, ‖·‖₂ <= R
        exactly (int64). Non-finite entries count as 0."""
        x = np.nan_to_num(np.asarray(x, np.float64).reshape(-1), nan=0.0, posinf=0.0,
                          neginf=0.0)
        if x.shape != (self.dim,):
            raise ValueError(f"an update of dimension {self.dim} is needed, got {x.shape}")
        norm = float(np.linalg.norm(x))
        scaled = x * (min(1.0, self.clip / norm) if norm > 0 else 1.0) / self.gamma
        floor = np.floor(scaled)
        frac = scaled - floor
        r2 = self.radius * self.radius
        for _ in range(_MAX_REDRAWS):
            k = (floor + (_uniform01(self.dim) < frac)).astype(np.int64)
            if _sq_norm(k) <= r2:
                return k
        return _clip_l2_int(k, self.radius)

    def noise_share(self) -> np.ndarray:
        """One agent's noise share N_ℤ(0, s²)^d (exact sampler, os.urandom)."""
        return discrete_gaussian(self.share_variance, self.dim)

    def message(self, x: np.ndarray) -> np.ndarray:
        """What an agent hands to the secure sum: (x̃ + noise share) mod 2^b, int64 in
        [0, 2^b). Alone it is no Report: its noise is a 1/m part of what the sum needs."""
        return np.mod(self.quantize(x) + self.noise_share(), self.modulus)

    def modular_sum(self, messages: np.ndarray) -> np.ndarray:
        """Σ messages mod 2^b (what a secure sum reveals), exactly, without int64 overflow."""
        messages = np.asarray(messages, np.int64)
        total = np.zeros(messages.shape[-1], np.int64)
        for row in messages.reshape(-1, messages.shape[-1]):
            total = np.mod(total + np.mod(row, self.modulus), self.modulus)
        return total

    def decode(self, total: np.ndarray) -> Report:
        """The secure sum's residue as the estimate of Σ clip_C(x_i): the centred residue in
        [−2^(b−1), 2^(b−1)) times γ, a Report with the round's guarantee."""
        t = np.asarray(total, np.int64)
        if t.shape != (self.dim,) or t.min(initial=0) < 0 or t.max(initial=0) >= self.modulus:
            raise ValueError(f"a sum modulo 2^{self.bits} of dimension {self.dim} is needed")
        half = self.modulus // 2
        centred = np.mod(t + half, self.modulus) - half
        value = (centred.astype(np.float64) * self.gamma).astype(np.float32)
        return Report._mint(_MINT, value, self.guarantee)

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
        a = dp_accounting.ZCDpEvent(rho=r * r / (2 * n * s2), xi=tau * d)
        b = dp_accounting.ZCDpEvent(rho=(r / math.sqrt(n * s2) + math.sqrt(d) * tau) ** 2 / 2)
        return a, b

    def epsilon(self, rounds: int, honest: int | None = None,
                delta: float | None = None) -> float:
        """ε of `rounds` rounds at δ (default the mechanism's) when `honest` shares (default
        m) protect each round: the smaller of the two composed RDP bounds."""
        n = self.min_honest if honest is None else honest
        delta = self.delta if delta is None else delta
        if rounds == 0:
            return 0.0
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


def calibrate_discrete(epsilon: float, delta: float, rounds: int, *, clip: float, dim: int,
                       agents: int, min_honest: int, bits: int = 32, grid_bits: int = 16,
                       ) -> DiscreteGaussianSum:
    """The mechanism with the smallest noise multiplier (to a relative 1e-3) whose `rounds`
    rounds are (ε, δ)-DP with m = `min_honest` honest shares; ValueError if none is."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")

    def make(z: float) -> DiscreteGaussianSum:
        return DiscreteGaussianSum(clip, dim, agents, min_honest, z, bits, grid_bits,
                                   delta=delta)

    lo, hi = 1e-2, 1.0
    while make(hi).epsilon(rounds) > epsilon:  # make() refuses a z the grid cannot carry
        lo, hi = hi, 2 * hi
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        if make(mid).epsilon(rounds) <= epsilon:
            hi = mid
        else:
            lo = mid
    return make(hi)
