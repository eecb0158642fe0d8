"""Functional (Gaussian-process) noise of paper 001, audited at a fixed set of states.

Released at states s_1..s_n, r(s) + g(s) with g ~ σ·GP(0, exp(−|s − s′|)) is a Gaussian mechanism
with covariance σ²K; for neighbouring reward functions (‖r − r′‖∞ ≤ 1) its ε at δ is exactly
the analytic Gaussian ε of noise multiplier σ / max_d √(dᵀK⁻¹d), the max over d ∈ [−1, 1]ⁿ
(a convex function, so attained at a vertex: we enumerate them, n ≤ 12). That is the claim this
adapter states and the audit tests: it checks that `gp_noise_query` draws the covariance the
theory assumes. It is NOT Theorem 5's ε for a whole training run (which composes many releases
with a user-supplied constant); auditing that end to end is not built yet.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.config import ConfigError
from privrl.privacy.accounting import gaussian_epsilon
from privrl.privacy.functional import REWARD_NEIGHBOURS, REWARD_UNIT, gp_noise_init, gp_noise_query
from privrl.privacy.report import Guarantee

__all__ = ["FunctionalNoiseRelease"]


@dataclass(frozen=True)
class FunctionalNoiseRelease:
    """r(points) + g(points), g a fresh σ·GP(0, exp(−|s − s′|)) draw per release."""

    sigma: float
    points: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5)
    delta: float = 1e-5
    name = "functional"

    def __post_init__(self) -> None:
        pts = tuple(float(p) for p in self.points)
        if not 1 <= len(pts) <= 12 or len(set(pts)) != len(pts):
            raise ConfigError("points", f"need 1 to 12 distinct states, got {pts}")
        if not (math.isfinite(self.sigma) and self.sigma > 0):
            raise ConfigError("sigma", f"must be finite and > 0, got {self.sigma!r}")
        object.__setattr__(self, "points", pts)

    @cached_property
    def _worst(self) -> tuple[float, np.ndarray]:
        """max over sign vectors d of √(dᵀK⁻¹d), and the maximizing d."""
        p = np.asarray(self.points)
        kinv = np.linalg.inv(np.exp(-np.abs(p[:, None] - p[None, :])))
        best, arg = -1.0, np.ones(len(p))
        for signs in itertools.product((-1.0, 1.0), repeat=len(p)):
            d = np.asarray(signs)
            v = float(d @ kinv @ d)
            if v > best:
                best, arg = v, d
        return math.sqrt(best), arg

    @property
    def guarantee(self) -> Guarantee:
        norm, _ = self._worst
        return Guarantee(epsilon=gaussian_epsilon(self.sigma / norm, self.delta), delta=self.delta,
                         notion="(ε, δ)-DP of one release at fixed states (Gaussian mechanism)",
                         unit=REWARD_UNIT, neighbouring=REWARD_NEIGHBOURS, sensitivity=norm,
                         norm="Mahalanobis (K⁻¹) norm of the worst sup-norm-1 difference")

    def privatize(self, key: Array, x: Array) -> Array:
        pts = jnp.asarray(self.points, jnp.float32)
        _, noise = gp_noise_query(gp_noise_init(len(self.points), 1), key, pts, self.sigma)
        return x + noise[:, 0]

    def audit_pair(self, dim: int) -> tuple[Array, Array]:
        """r = 0 and r′ = the worst ±1 pattern at the points (`dim` is ignored)."""
        _, d = self._worst
        return jnp.zeros(len(self.points), jnp.float32), jnp.asarray(d, jnp.float32)
