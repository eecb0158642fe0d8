"""Every mechanism's noise at a clip C ≠ 1, against the level computed here from (σ, C) or
(C, ε), never from the mechanism's own `std` or `scale`: a dropped clip factor (σ for σ·C) is
then seen, float and secure alike. And every discrete grid rounds in the private direction
(variance and noise scale up, the input's radius down), checked exactly in fractions."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy import (
    BoxGaussianMechanism,
    GaussianMechanism,
    GaussianSumMechanism,
    LaplaceMechanism,
    secure,
)

C = 2.5  # the clip: not 1, so that σ and σ·C differ
D = 40_000  # coordinates of one release: the sample of each std below
Z = 6.0  # standard errors allowed (a false failure needs a 6-sigma draw)
# A sample std over D coordinates has relative standard error sqrt(1/(2D)) for a Gaussian and
# sqrt(5/(4D)) for a Laplace (kurtosis 6); the secure grids add at most (γ/std)² = 2^-20.
GAUSS_TOL = Z * math.sqrt(1 / (2 * D)) + 2**-19
LAPLACE_TOL = Z * math.sqrt(5 / (4 * D)) + 2**-19


def _noise(mech: Any, shape: tuple[int, ...]) -> np.ndarray:
    """One release of zeros (every mechanism below releases 0 plus its noise), in float64."""
    release = jax.jit(lambda k, v: mech.privatize(k, v).value)
    return np.asarray(release(jax.random.key(0), jnp.zeros(shape, jnp.float32)), np.float64)


@pytest.mark.parametrize("is_secure", [False, True])
def test_gaussian_noise_std_is_sigma_times_clip(is_secure: bool) -> None:
    z = 0.7
    noise = _noise(GaussianMechanism(z, C, 1e-5, secure=is_secure), (D,))
    assert abs(noise.std() / (z * C) - 1) < GAUSS_TOL, noise.std()


@pytest.mark.parametrize("is_secure", [False, True])
def test_gaussian_sum_noise_std_is_sigma_times_clip(is_secure: bool) -> None:
    """DP-SGD's noisy sum (the secure one only without subsampling)."""
    z = 0.7
    noise = _noise(GaussianSumMechanism(z, C, secure=is_secure), (3, D))
    assert abs(noise.std() / (z * C) - 1) < GAUSS_TOL, noise.std()


@pytest.mark.parametrize("is_secure", [False, True])
def test_laplace_noise_scale_is_clip_over_epsilon(is_secure: bool) -> None:
    eps = 0.8
    noise = _noise(LaplaceMechanism(eps, C, secure=is_secure), (D,))
    assert abs(noise.std() / (math.sqrt(2) * C / eps) - 1) < LAPLACE_TOL, noise.std()


@pytest.mark.parametrize("is_secure", [False, True])
def test_box_gaussian_noise_std_is_sigma_times_the_diagonal(is_secure: bool) -> None:
    z = 0.6
    half = (C / 2,) * D  # the box [-C/2, C/2]^D: diagonal C·sqrt(D), centre 0
    mech = BoxGaussianMechanism(tuple(-h for h in half), half, z, secure=is_secure)
    noise = _noise(mech, (D,))
    assert abs(noise.std() / (z * C * math.sqrt(D)) - 1) < GAUSS_TOL, noise.std()


STDS = (0.3, 0.7, 1.75, 2.5, 10 / 3, 123.456)
EPSILONS = (0.3, 2 / 3, 1.0, 5.0, 9.9)


def test_every_grid_rounds_in_the_private_direction() -> None:
    """Noise never below its target, the clipped input's radius never above the clip; and the
    targets are off the grid often enough that rounding the other way would be seen."""
    off_grid = 0
    for std in STDS:
        gamma, k, s2 = secure.gaussian_grid(std, C)
        target = (Fraction(std) / gamma) ** 2
        off_grid += target.denominator != 1
        assert s2 >= target and s2 - target < 1  # ⌈·⌉: the least integer variance above
        assert k * gamma <= Fraction(C) < (k + 1) * gamma
    for eps in EPSILONS:
        gamma, k, t = secure.laplace_grid(eps, C)
        target = Fraction(C) / (Fraction(eps) * gamma)
        off_grid += target.denominator != 1
        assert t >= target and t - target < 1
        assert 2 * k * gamma <= Fraction(C) < 2 * (k + 1) * gamma
    assert off_grid >= 5
