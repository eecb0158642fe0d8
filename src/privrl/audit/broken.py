"""Deliberately broken mechanisms: they claim more privacy than they give, so an audit that
works must refute them. For tests and for the CLI's demonstration only; never use them."""

from __future__ import annotations

from dataclasses import dataclass

import jax
from jax import Array

from privrl.privacy.mechanisms import GaussianMechanism, LaplaceMechanism

__all__ = ["HalfNoiseGaussian", "HalfNoiseLaplace", "UnclippedLaplace"]


@dataclass(frozen=True)
class HalfNoiseLaplace(LaplaceMechanism):
    """Claims Laplace's ε but adds half its noise (true ε = 2ε)."""

    name = "broken-laplace-half-noise"

    def _randomize(self, key: Array, x: Array) -> Array:
        noise = jax.random.laplace(key, x.shape, dtype=x.dtype) * self.scale / 2.0
        return self.clip_input(x) + noise


@dataclass(frozen=True)
class UnclippedLaplace(LaplaceMechanism):
    """Claims Laplace's ε but never clips: unbounded true ε (4ε on the default pair ±2·clip)."""

    name = "broken-laplace-no-clip"

    def _randomize(self, key: Array, x: Array) -> Array:
        return x + jax.random.laplace(key, x.shape, dtype=x.dtype) * self.scale


@dataclass(frozen=True)
class HalfNoiseGaussian(GaussianMechanism):
    """Claims the Gaussian mechanism's ε but adds half its noise."""

    name = "broken-gaussian-half-noise"

    def _randomize(self, key: Array, x: Array) -> Array:
        from privrl.privacy.clipping import clip_l2

        return clip_l2(x, self.clip) + self.std / 2.0 * jax.random.normal(key, x.shape, x.dtype)
