"""Mechanisms for released Q-network outputs (paper 002, FedRL eq. 1-2).

In FedRL each party sends the other its Q-network's outputs with Gaussian noise. Two ways:

* `UnboundedQNoise` (the paper): Q̂ = Q + N(0, σ²). Q outputs are unbounded, so no noise level
  bounds what one release reveals: NO formal ε exists, and the guarantee says ε = ∞.
* `BoundedQGaussian` (our bounded mode): clip the Q vector to L2 norm B, then add N(0, σ²) per
  coordinate. Any two clipped vectors differ by at most 2B, so one release is a Gaussian
  mechanism with noise multiplier σ / (2B); its (ε, δ) is exact, and many releases compose
  with privrl.privacy.accounting via `event`.

The unit protected is everything that determines one released vector: the releasing party's
observation and its local network parameters (local DP: any two inputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
from jax import Array

from privrl.privacy.mechanisms import (
    GaussianMechanism,
    Mechanism,
    _check_positive,
    _gaussian_ldp_guarantee,
)
from privrl.privacy.report import Guarantee

Q_UNIT = "one released Q-output vector (one party's Q-network output for one state)"
Q_NEIGHBOURS = ("any two Q-output vectors in the declared L2 ball (local DP): any change of the "
                "releasing party's observation or local Q-network parameters")


@dataclass(frozen=True)
class BoundedQGaussian(GaussianMechanism):
    """Clip the Q vector to L2 norm `clip` (= B), add N(0, σ²) per coordinate, σ = z·B."""

    name = "bounded-q-gaussian"

    @classmethod
    def from_sigma(cls, sigma: float, bound: float, delta: float = 1e-5) -> BoundedQGaussian:
        bound = _check_positive("bound", bound)
        return cls(_check_positive("sigma", sigma) / bound, bound, delta)

    @property
    def guarantee(self) -> Guarantee:
        return _gaussian_ldp_guarantee(self.event.noise_multiplier, self.delta, 2.0 * self.clip,
                                       Q_UNIT, Q_NEIGHBOURS)


@dataclass(frozen=True)
class UnboundedQNoise(Mechanism):
    """Q̂ = Q + N(0, σ²): the paper's mechanism. Unbounded input: NO formal guarantee."""

    sigma: float
    name = "unbounded-q-noise"

    def __post_init__(self) -> None:
        s = float(self.sigma)
        if not (math.isfinite(s) and s >= 0):
            raise ValueError(f"sigma must be finite and >= 0, got {self.sigma!r}")
        object.__setattr__(self, "sigma", s)

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(epsilon=math.inf, delta=0.0, notion="none", unit=Q_UNIT,
                         neighbouring="none: Q outputs are unbounded, so Gaussian noise of any "
                         "σ gives no formal ε (no sensitivity bound)")

    def params(self) -> dict[str, Any]:
        return {"sigma": self.sigma}

    def _randomize(self, key: Array, x: Array) -> Array:
        return x + self.sigma * jax.random.normal(key, x.shape, x.dtype)
