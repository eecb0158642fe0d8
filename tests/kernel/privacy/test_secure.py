"""Tests for the float-safe (secure) samplers and mechanisms (privrl.privacy.secure).

Secure noise comes from os.urandom, so these tests cannot be seeded: each statistical assertion
is a CLT bound at 6 standard errors, a false-failure probability of about 2e-9 each (< 1e-7 for
the file). Sample sizes are fixed so that each test stays well under 2 s.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy import GaussianMechanism, GaussianSumMechanism, LaplaceMechanism, secure
from privrl.privacy.accounting import Accountant
from privrl.privacy.dpsgd import clipped_grad_sum, per_example_grads

Z = 6.0  # standard errors allowed by every CLT assertion


def _dlap_var(t: int) -> float:
    q = math.exp(-1.0 / t)
    return 2 * q / (1 - q) ** 2


def test_uniform_below_is_in_range_and_uniform() -> None:
    n = 200_000
    u = secure.uniform_below(np.full(n, 3, np.int64))
    assert u.min() == 0 and u.max() == 2
    counts = np.bincount(u, minlength=3)
    se = math.sqrt(n * (1 / 3) * (2 / 3))
    assert np.all(np.abs(counts - n / 3) < Z * se)


def test_discrete_laplace_has_its_variance_and_pmf() -> None:
    n, t = 100_000, 3
    y = secure.discrete_laplace(t, n)
    var = _dlap_var(t)
    # se of the sample mean: √(var/n); of the variance: √((μ4 − var²)/n) with μ4 <= 6·var²
    # + var (the discrete Laplace's kurtosis is at most the continuous one's 6, plus 1/var).
    assert abs(y.mean()) < Z * math.sqrt(var / n)
    assert abs(y.var() - var) < Z * var * math.sqrt((5 + 1 / var) / n)
    q = math.exp(-1 / t)
    p0 = (1 - q) / (1 + q)
    assert abs((y == 0).mean() - p0) < Z * math.sqrt(p0 * (1 - p0) / n)


def test_discrete_gaussian_matches_its_pmf() -> None:
    n, s2 = 60_000, 2
    y = secure.discrete_gaussian(s2, n)
    support = np.arange(-12, 13)
    w = np.exp(-support.astype(float) ** 2 / (2 * s2))
    p = w / w.sum()
    for value in (0, 1, 2, 3):
        pv = p[support == value][0] * (1 if value == 0 else 2)
        freq = (np.abs(y) == value).mean()
        assert abs(freq - pv) < Z * math.sqrt(pv * (1 - pv) / n), value


def test_integer_clipping_is_exact() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = rng.integers(-10**6, 10**6, size=rng.integers(1, 200))
        r = int(rng.integers(1, 10**6))
        c1 = secure._clip_l1_int(k, r)
        c2 = secure._clip_l2_int(k, r)
        assert int(np.abs(c1).sum()) <= r
        assert int((c2.astype(object) ** 2).sum()) <= r * r
        assert np.all(np.abs(c1) <= np.abs(k)) and np.all(np.abs(c2) <= np.abs(k))


@pytest.mark.parametrize("epsilon, clip", [(1.0, 1.0), (0.3, 2.5), (40.0, 0.1)])
def test_laplace_grid_bounds_the_sensitivity_for_the_stated_epsilon(epsilon: float,
                                                                   clip: float) -> None:
    gamma, k, t = secure.laplace_grid(epsilon, clip)
    assert gamma.numerator == 1 and gamma.denominator & (gamma.denominator - 1) == 0
    # two inputs of the clipped L1 ball (radius K) differ by <= 2K; the noise scale t >= 2K/ε
    assert 2 * k * gamma <= clip and t * epsilon >= 2 * k
    assert 2**10 <= t <= 2**11 + 1


def _release(mech, x: np.ndarray, n: int) -> np.ndarray:
    keys = jax.random.split(jax.random.key(0), n)
    f = jax.jit(jax.vmap(lambda k, v: mech.privatize(k, v).value, (0, None)))
    return np.asarray(f(keys, jnp.asarray(x, jnp.float32)), np.float64)


def test_secure_laplace_has_the_float_mechanisms_moments_and_lies_on_the_grid() -> None:
    eps, clip, d = 1.0, 1.0, 50_000
    mech = LaplaceMechanism(eps, clip, secure=True)
    assert mech.guarantee.epsilon == LaplaceMechanism(eps, clip).guarantee.epsilon
    gamma, _, _ = secure.laplace_grid(eps, clip)
    x = np.where(np.arange(d) % 2 == 0, 0.3, -0.3) / d  # L1 = 0.3 < clip/2: no clipping
    out = _release(mech, x, 1)[0]
    assert np.all(out / float(gamma) == np.round(out / float(gamma)))  # on the grid
    b = mech.scale
    noise = out - x
    # rounding to the grid moves each coordinate by <= γ/2 (a bias bound, not sampling error)
    assert abs(noise.mean()) < Z * math.sqrt(2 * b * b / d) + float(gamma) / 2
    assert abs(noise.var() / (2 * b * b) - 1) < Z * math.sqrt(5 / d) + 2**-9


def test_secure_gaussian_moments_and_conservative_epsilon() -> None:
    z, clip, d = 1.5, 1.0, 50_000
    mech = GaussianMechanism(z, clip, 1e-5, secure=True)
    exact = GaussianMechanism(z, clip, 1e-5).guarantee.epsilon
    assert mech.guarantee.epsilon >= exact  # RDP's conversion, never tighter than analytic
    gamma, _, _ = secure.gaussian_grid(mech.std, clip)
    x = np.full(d, 0.5 / math.sqrt(d))  # L2 = 0.5 < clip
    out = _release(mech, x, 1)[0]
    assert np.all(out / float(gamma) == np.round(out / float(gamma)))
    noise, s = out - x, mech.std
    assert abs(noise.mean()) < Z * s / math.sqrt(d) + float(gamma) / 2
    assert abs(noise.var() / (s * s) - 1) < Z * math.sqrt(2 / d) + 2**-9


def test_secure_releases_differ_under_vmap_and_are_not_deduplicated() -> None:
    mech = LaplaceMechanism(1.0, 1.0, secure=True)
    out = _release(mech, np.zeros(8), 3)  # the same input and the same key three times
    assert not np.array_equal(out[0], out[1]) and not np.array_equal(out[1], out[2])


def test_secure_gaussian_sum_clips_rows_and_adds_sigma_c() -> None:
    z, clip = 2.0, 1.0
    mech = GaussianSumMechanism(z, clip, secure=True)
    # The discrete Gaussian is stated by RDP (never the tighter analytic ε of the float one).
    rdp = Accountant("rdp").epsilon_if(mech.event, 1, mech.delta)
    assert mech.guarantee.epsilon == rdp > GaussianSumMechanism(z, clip).guarantee.epsilon
    d = 40_000
    rows = np.zeros((3, d), np.float32)
    rows[0, 0] = 10.0  # clipped to 1
    rows[1, 1] = 0.5
    out = np.asarray(mech.privatize(jax.random.key(0), rows).value, np.float64)
    noise = out - np.r_[1.0, 0.5, np.zeros(d - 2)]
    s = z * clip
    assert abs(noise.mean()) < Z * s / math.sqrt(d) + 1e-3
    assert abs(noise.var() / (s * s) - 1) < Z * math.sqrt(2 / d) + 2**-9
    with pytest.raises(ValueError, match="q = 1"):
        GaussianSumMechanism(z, clip, 0.5, secure=True)


def test_per_example_grads_sum_to_the_clipped_sum() -> None:
    rng = np.random.default_rng(1)
    params = {f"Dense_{i}": {"kernel": jnp.asarray(rng.normal(size=(a, b)), jnp.float32),
                             "bias": jnp.asarray(rng.normal(size=b), jnp.float32)}
              for i, (a, b) in enumerate([(2, 4), (4, 3)])}
    x = jnp.asarray(rng.normal(size=(5, 2)), jnp.float32)
    target = jnp.arange(5) % 3

    def losses(out: jax.Array) -> jax.Array:
        return -jax.nn.log_softmax(out)[jnp.arange(5), target]

    rows = jax.jit(per_example_grads, static_argnums=2)(params, x, losses)
    norms = jnp.linalg.norm(rows, axis=1)
    clipped = (rows / jnp.maximum(1.0, norms / 0.1)[:, None]).sum(0)
    expected, n = jax.jit(clipped_grad_sum, static_argnums=(2, 3))(params, x, losses, 0.1)
    np.testing.assert_allclose(norms, n, rtol=1e-5)
    np.testing.assert_allclose(clipped, expected, rtol=1e-5, atol=1e-7)


def test_secure_q_output_gaussian_states_rdps_epsilon_and_has_its_moments() -> None:
    """FedRL's bounded Q-output noise, float-safe: RDP's ε (≥ the analytic one it states
    without secure), the float mechanism's moments, every value on the grid."""
    from privrl.privacy.qoutput import BoundedQGaussian

    d = 50_000
    mech = BoundedQGaussian.from_sigma(2.0, 1.0, 1e-5, secure=True)
    float_mech = BoundedQGaussian.from_sigma(2.0, 1.0, 1e-5)
    assert mech.event == float_mech.event and mech.guarantee.sensitivity == 2.0
    assert mech.guarantee.epsilon == Accountant("rdp").epsilon_if(mech.event, 1, 1e-5)
    assert mech.guarantee.epsilon >= float_mech.guarantee.epsilon
    gamma, _, _ = secure.gaussian_grid(mech.std, mech.clip)
    x = np.full(d, 0.5 / math.sqrt(d))
    out = _release(mech, x, 1)[0]
    assert np.all(out / float(gamma) == np.round(out / float(gamma)))
    noise, s = out - x, mech.std
    assert abs(noise.mean()) < Z * s / math.sqrt(d) + float(gamma) / 2
    assert abs(noise.var() / (s * s) - 1) < Z * math.sqrt(2 / d) + 2**-9


def test_secure_box_gaussian_is_centred_on_the_box_and_states_rdps_epsilon() -> None:
    """LDP observations, float-safe: the box [0, 2]^d lies in the L2 ball of radius diag/2
    about its centre, so release − centre lies on the grid of the secure Gaussian with clip
    diag/2; a state outside the box is clipped into it first; the noise has std z·diag."""
    from privrl.privacy.mechanisms import BoxGaussianMechanism

    d, z = 50_000, 0.5
    mech = BoxGaussianMechanism((0.0,) * d, (2.0,) * d, z, secure=True)
    plain = BoxGaussianMechanism((0.0,) * d, (2.0,) * d, z)
    assert mech.guarantee.epsilon == Accountant("rdp").epsilon_if(mech.event, 1, 1e-5)
    assert mech.guarantee.epsilon >= plain.guarantee.epsilon
    assert mech.guarantee.sensitivity == plain.guarantee.sensitivity == mech.diagonal
    gamma, _, _ = secure.gaussian_grid(mech.std, mech.diagonal / 2)
    x = np.where(np.arange(d) % 2 == 0, 1.5, 7.0)  # every other coordinate outside: clip to 2
    out = _release(mech, x, 1)[0]
    assert np.all((out - 1) / float(gamma) == np.round((out - 1) / float(gamma)))
    noise, s = out - np.minimum(x, 2.0), mech.std
    assert abs(noise.mean()) < Z * s / math.sqrt(d) + float(gamma) / 2
    assert abs(noise.var() / (s * s) - 1) < Z * math.sqrt(2 / d) + 2**-9
