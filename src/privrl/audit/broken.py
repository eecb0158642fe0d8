"""Deliberately broken mechanisms: they claim more privacy than they give, so an audit that
works must refute them. For tests and for the CLI's demonstration only; never use them.

Each is a view over its family's own release function (`privrl.privacy.mechanisms`) with
wrong parameters, so the audit refutes them through the code every run releases with."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privrl.privacy.mechanisms import (
    GaussianMechanism,
    GaussianParams,
    LaplaceMechanism,
    LaplaceParams,
    SecureParams,
)

__all__ = ["HalfNoiseGaussian", "HalfNoiseLaplace", "UnclippedLaplace"]


@dataclass(frozen=True)
class HalfNoiseLaplace(LaplaceMechanism):
    """Claims Laplace's ε but adds half its noise (true ε = 2ε)."""

    name = "broken-laplace-half-noise"

    def release_params(self, dim: int) -> LaplaceParams | SecureParams:
        p = super().release_params(dim)
        assert isinstance(p, LaplaceParams)
        return p._replace(scale=p.scale / np.float32(2.0))


@dataclass(frozen=True)
class UnclippedLaplace(LaplaceMechanism):
    """Claims Laplace's ε but never clips: unbounded true ε (4ε on the default pair ±2·clip)."""

    name = "broken-laplace-no-clip"

    def release_params(self, dim: int) -> LaplaceParams | SecureParams:
        p = super().release_params(dim)
        assert isinstance(p, LaplaceParams)
        return p._replace(inverse_half_clip=np.float32(0.0))  # an inverse radius 0: no clip


@dataclass(frozen=True)
class HalfNoiseGaussian(GaussianMechanism):
    """Claims the Gaussian mechanism's ε but adds half its noise."""

    name = "broken-gaussian-half-noise"

    def release_params(self, dim: int) -> GaussianParams | SecureParams:
        p = super().release_params(dim)
        assert isinstance(p, GaussianParams)
        return p._replace(std=p.std / np.float32(2.0))
