"""Your own mechanism: Duchi et al.'s one-dimensional ε-LDP mechanism, per coordinate.

A mechanism privrl does not ship (Duchi, Jordan & Wainwright 2018, "Minimax optimal procedures
for locally private estimation", JASA, the mechanism for one bounded value), applied to each
coordinate of a vector with the budget split evenly: x is clipped to the L∞ ball of radius r;
coordinate j is released as +B with probability ½ + x_j·tanh(ε_j/2)/(2r), else −B, with
B = r/tanh(ε_j/2) (so the release is unbiased) and ε_j = ε/d. Any two inputs change each
coordinate's output probabilities by a factor of at most e^{ε_j}, so one release is ε-LDP
(basic composition over the d coordinates). That is what it DECLARES; privrl does not check it
(`privrl audit` can try to refute it).

Used by PGC-A3C (a run and its audit):

    privrl run pgc-a3c --preset tuned --mechanism examples/own_mechanism.py:duchi \\
        --epsilon 50 --trials 1 --submissions 900
    privrl audit mechanism --mechanism examples/own_mechanism.py:duchi --epsilon 1,2 \\
        --samples 20000

and from Python: `PGCA3CConfig(mechanism="own_mechanism:duchi", ...)` with this file on the
path, or `audit_mechanism(duchi(MechanismRequest(1.0, 0.0, 1.0, 4)), key=...)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.privacy import Guarantee, Mechanism
from privrl.privacy.user import MechanismRequest


class DuchiParams(NamedTuple):
    """The release's numbers (traced data: a program can take them per trial)."""

    radius: Any  # r, the L∞ clip
    slope: Any  # tanh(ε_j/2)/(2r)
    level: Any  # B = r/tanh(ε_j/2)


def duchi_release(p: DuchiParams, key: Array, x: Array) -> Array:
    """The release: clip to [−r, r]^d, then each coordinate ±B with P(+B) = ½ + x_j·slope."""
    clipped = jnp.clip(x, -p.radius, p.radius)
    plus = jax.random.uniform(key, x.shape, x.dtype) < 0.5 + clipped * p.slope
    return jnp.where(plus, p.level, -p.level).astype(x.dtype)


@dataclass(frozen=True)
class DuchiCoordinates(Mechanism):
    """ε-LDP for vectors of length `dim` in the L∞ ball of radius `radius` (module docstring)."""

    epsilon: float
    radius: float
    dim: int
    name = "duchi-coordinates"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0 and self.radius > 0
                and self.dim >= 1):
            raise ValueError(f"need ε > 0 finite, radius > 0, dim >= 1; got {self}")

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(
            epsilon=self.epsilon, delta=0.0, notion="ε-LDP",
            unit="agent report (one randomized gradient submission)",
            neighbouring="any two inputs (local DP): any two vectors of the L∞ ball",
            sensitivity=2.0 * self.radius, norm="L∞ (ε/d per coordinate)")

    def params(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "radius": self.radius, "dim": self.dim}

    def release_params(self, dim: int) -> DuchiParams:
        if dim != self.dim:
            raise ValueError(f"built for inputs of length {self.dim}, got {dim}")
        t = math.tanh(self.epsilon / self.dim / 2)
        return DuchiParams(np.float32(self.radius), np.float32(t / (2 * self.radius)),
                           np.float32(self.radius / t))

    def release(self, params: DuchiParams, key: Array, x: Array) -> Array:
        return duchi_release(params, key, x)

    def audit_pair(self, dim: int) -> tuple[Array, Array]:
        """The worst pair: opposite corners of the ball, beyond it (so skipped clipping
        would show)."""
        corner = jnp.full((dim,), 2.0 * self.radius, jnp.float32)
        return corner, -corner


def duchi(request: MechanismRequest) -> DuchiCoordinates:
    """The factory privrl calls (`--mechanism examples/own_mechanism.py:duchi`): all of the
    release's ε for the request's input length, L∞ radius C/2 (Laplace's L1 radius: the same
    clip scale)."""
    return DuchiCoordinates(request.epsilon, request.clip / 2, request.dim)


if __name__ == "__main__":
    from privrl.audit import audit_mechanism
    from privrl.privacy.user import user_mechanism

    mech = user_mechanism(f"{__file__}:duchi", MechanismRequest(2.0, 0.0, 1.0, 4))
    result = audit_mechanism(mech, key=jax.random.key(0), samples=40_000, dim=4)
    print(mech.guarantee.describe())
    print(f"audited ε lower bound {result.epsilon_lower:.3f} (claimed {result.epsilon_claimed})")
