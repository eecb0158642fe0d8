"""Theorem 5 of paper 001 (DP Q-learning's functional noise): its conditions, its calibration
of σ and its (ε, δ), apart from the Gaussian-process sampler (privrl.privacy.functional) so
that a config's validation applies it before JAX starts (issue 53)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from privrl.config import ConfigError

if TYPE_CHECKING:
    from privrl.privacy.report import Guarantee

REWARD_UNIT = "the reward function r(·) (the whole function is one data point)"
REWARD_NEIGHBOURS = "reward functions r, r′ with sup_s,a |r(s, a) − r′(s, a)| ≤ 1"


class Theorem5Error(ConfigError):
    """A Theorem 5 parameter or condition failed; `field` names the parameter."""


SUP_CONSTANT = 8.68  # Theorem 5's constant in 2k > 8.68·√β·σ


@dataclass(frozen=True)
class Theorem5:
    """Theorem 5 of paper 001, with the constant C(α, k, L, B) supplied by the user.

    (ε, δ + J·exp(−(2k − 8.68·√β·σ)²/2))-DP for reward functions with ‖r − r′‖∞ ≤ 1, provided
    2k > 8.68·√β·σ and σ ≥ √(2 (T/B) ln(e + ε/δ)) · C / ε.

    updates: T/B, the number of noisy gradient updates (we count one per SGD step on a batch
    of B TD losses; T = updates·B loss terms); resets: J, how many fresh noise functions are
    drawn; k, beta: the theorem's k and β; sensitivity_constant: C(α, k, L, B), which the
    poster does not define. The guarantee is only as valid as the C supplied.
    """

    epsilon: float
    delta: float
    sensitivity_constant: float
    k: float
    beta: float
    updates: int
    batch_size: int
    resets: int

    def __post_init__(self) -> None:
        def finite(name: str, v: float) -> None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise Theorem5Error(name, f"must be a finite number, got {v!r}")

        for name, v in [("epsilon", self.epsilon), ("delta", self.delta),
                        ("sensitivity_constant", self.sensitivity_constant),
                        ("k", self.k), ("beta", self.beta)]:
            finite(name, v)
        if not 0 < self.epsilon < 1:
            raise Theorem5Error("epsilon", f"Theorem 5 rests on the Gaussian-process "
                                   f"mechanism, stated for 0 < ε < 1; got ε = {self.epsilon}")
        if not 0 < self.delta < 1:
            raise Theorem5Error("delta", f"δ must be in (0, 1), got {self.delta}")
        if not self.sensitivity_constant > 0:
            raise Theorem5Error("sensitivity_constant",
                                   f"C must be > 0, got {self.sensitivity_constant}")
        if not self.k > 0:
            raise Theorem5Error("k", f"k must be > 0, got {self.k}")
        if not self.beta > 0:
            raise Theorem5Error("beta", f"β must be > 0, got {self.beta}")
        for name, v in [("updates", self.updates), ("batch_size", self.batch_size),
                        ("resets", self.resets)]:
            if int(v) != v or v < 1:
                raise Theorem5Error(name, f"must be an integer >= 1, got {v}")

    @property
    def min_sigma(self) -> float:
        """σ ≥ √(2 (T/B) ln(e + ε/δ)) · C / ε (natural log)."""
        log_term = math.log(math.e + self.epsilon / self.delta)
        return math.sqrt(2.0 * self.updates * log_term) * self.sensitivity_constant / self.epsilon

    def max_sigma(self) -> float:
        """The largest σ with 2k > 8.68·√β·σ (exclusive)."""
        return 2.0 * self.k / (SUP_CONSTANT * math.sqrt(self.beta))

    def check(self, sigma: float) -> None:
        """Both conditions of the theorem for this σ, or a Theorem5Error naming the failure."""
        if sigma < self.min_sigma:
            raise Theorem5Error(
                "sigma", f"σ = {sigma:g} is below Theorem 5's calibration "
                f"√(2·(T/B)·ln(e + ε/δ))·C/ε = {self.min_sigma:.6g} "
                f"(T/B = {self.updates}, ε = {self.epsilon:g}, δ = {self.delta:g}, "
                f"C = {self.sensitivity_constant:g})")
        if not 2.0 * self.k > SUP_CONSTANT * math.sqrt(self.beta) * sigma:
            raise Theorem5Error(
                "k", f"Theorem 5 needs 2k > 8.68·√β·σ, but 2k = {2 * self.k:.6g} and "
                f"8.68·√β·σ = {SUP_CONSTANT * math.sqrt(self.beta) * sigma:.6g} "
                f"(k = {self.k:g}, β = {self.beta:g}, σ = {sigma:.6g})")

    def total_delta(self, sigma: float) -> float:
        """δ + J·exp(−(2k − 8.68·√β·σ)²/2)."""
        gap = 2.0 * self.k - SUP_CONSTANT * math.sqrt(self.beta) * sigma
        return self.delta + self.resets * math.exp(-gap * gap / 2.0)

    def guarantee(self, sigma: float) -> Guarantee:
        from privrl.privacy.report import Guarantee  # JAX: where the guarantee is stated

        self.check(sigma)
        return Guarantee(
            epsilon=self.epsilon, delta=self.total_delta(sigma),
            notion="(ε, δ)-DP (Theorem 5 of paper 001, valid only for the user-supplied C)",
            unit=REWARD_UNIT, neighbouring=REWARD_NEIGHBOURS,
            sensitivity=1.0, norm="sup norm of the reward function")

    def record(self, sigma: float) -> dict[str, Any]:
        g = self.guarantee(sigma)
        return {
            "epsilon": self.epsilon, "delta": self.delta, "delta_total": g.delta,
            "sigma": sigma, "sigma_min_theorem5": self.min_sigma,
            "sigma_max_condition": self.max_sigma(),
            "T": self.updates * self.batch_size, "B": self.batch_size,
            "T_over_B": self.updates, "J": self.resets, "k": self.k, "beta": self.beta,
            "C": self.sensitivity_constant,
            "formula": "σ ≥ √(2 (T/B) ln(e + ε/δ)) C/ε, 2k > 8.68 √β σ, "
                       "δ_total = δ + J exp(−(2k − 8.68 √β σ)²/2); ln = natural log",
        }
