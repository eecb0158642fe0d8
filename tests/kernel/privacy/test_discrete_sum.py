"""The distributed discrete Gaussian over a modular sum (privrl.privacy.discrete_sum)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privrl.privacy.discrete_sum import DiscreteGaussianSum, ThresholdError, calibrate_discrete

D = 40


def mech(**kw) -> DiscreteGaussianSum:
    args = {"clip": 1.0, "dim": D, "agents": 10, "min_honest": 6, "noise_multiplier": 2.0,
            "bits": 24}
    return DiscreteGaussianSum(**(args | kw))


def test_quantization_is_unbiased_and_bounded():
    m = mech()
    x = np.random.default_rng(0).normal(size=D)
    x *= 0.7 / np.linalg.norm(x)  # inside the clip: E[x̃] = x/γ
    draws = np.stack([m.quantize(x) for _ in range(2000)])
    assert all(int((row.astype(object) ** 2).sum()) <= m.radius ** 2 for row in draws)
    # Each coordinate's rounding error is Bernoulli(frac) − frac: std <= 1/2, so the mean of
    # 2000 draws is within 4.5·(1/2)/sqrt(2000) ≈ 0.05 of x/γ (every coordinate, ~1e-5 each).
    err = draws.mean(axis=0) - x / m.gamma
    assert np.max(np.abs(err)) < 0.05
    # a vector beyond the clip is scaled to norm C first
    big = m.quantize(100 * x)
    assert np.linalg.norm(big * m.gamma) == pytest.approx(1.0, rel=1e-3)


def test_rounding_bound_and_inflation():
    m = mech()
    scale = m.clip / m.gamma
    assert m.rounding_bound(scale) <= m.radius
    assert 1.0 <= m.inflation() < 1.01
    # the KLS21 bound is below the deterministic scale + √d one
    assert m.rounding_bound(scale) <= scale + math.sqrt(D)


def test_modular_sum_is_exact_and_decodes_the_sum():
    m = mech()
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(10, D))
    msgs = np.stack([m.message(x) for x in xs])
    assert msgs.min() >= 0 and msgs.max() < m.modulus
    total = m.modular_sum(msgs)
    assert np.array_equal(total, np.mod(msgs.astype(object).sum(axis=0), m.modulus)
                          .astype(np.int64))
    # without noise, the centred residue is exactly Σ x̃ (no wrap-around at this size)
    q = np.stack([m.quantize(x) for x in xs])
    plain = m.decode(m.modular_sum(np.mod(q, m.modulus))).value
    assert np.allclose(np.asarray(plain), q.sum(axis=0) * m.gamma, rtol=0, atol=1e-6)


def test_sum_noise_variance():
    m = mech()
    zero = np.zeros(D)
    sums = np.stack([np.asarray(m.decode(m.modular_sum(np.stack(
        [m.message(zero) for _ in range(m.agents)]))).value) for _ in range(40)])
    # K shares of variance <= s² each (a discrete Gaussian's variance is below its parameter
    # and within 1e-12 of it at this s²): 1600 draws, the sample variance within ±10%.
    expected = m.agents * m.share_variance * m.gamma ** 2
    assert np.mean(sums) == pytest.approx(0.0, abs=4 * math.sqrt(expected / sums.size))
    assert np.var(sums) == pytest.approx(expected, rel=0.1)


def test_epsilon_falls_as_honest_shares_rise():
    m = mech()
    eps = [m.epsilon(5, n) for n in (1, 2, 4, 6, 8, 10)]
    assert all(a > b for a, b in itertools.pairwise(eps))
    assert m.epsilon(5) == eps[3]  # the statement counts min_honest = 6
    assert m.epsilon(0) == 0.0 and m.epsilon(3) < m.epsilon(5)


def test_tau_is_kls21s_and_vanishes_for_large_shares():
    m = mech(noise_multiplier=0.3, grid_bits=4, dim=1)  # R = 16: s² = ⌈0.09·256/6⌉ = 4
    s2 = m.share_variance
    assert s2 == 4
    assert m.tau(1) == 0.0  # one share is a discrete Gaussian itself
    assert m.tau(2) == pytest.approx(10 * math.exp(-2 * math.pi ** 2 * s2 / 2), rel=1e-12)
    assert m.tau(6) > m.tau(2)
    assert mech().tau(6) == 0.0  # exp(−π²s²) underflows at s² in the thousands


def test_threshold_below_min_honest_is_refused():
    m = mech()
    m.check_threshold(6)
    m.check_threshold(10)
    with pytest.raises(ThresholdError, match="fewer than the 6 honest"):
        m.check_threshold(5)
    low = mech(min_honest=3)
    with pytest.raises(ThresholdError, match="strict majority"):
        low.check_threshold(4)
    with pytest.raises(ThresholdError):
        m.check_threshold(11)


def test_calibration_meets_the_target():
    m = calibrate_discrete(2.0, 1e-5, 10, clip=1.0, dim=D, agents=20, min_honest=10, bits=27)
    assert m.epsilon(10) <= 2.0
    assert mech(noise_multiplier=m.noise_multiplier / 1.01, agents=20, min_honest=10,
                bits=27).epsilon(10) > 2.0  # the smallest such z, to 1%
    assert m.wrap_probability() < 1e-9
    rec = m.record(10)
    assert rec["epsilon"] == m.epsilon(10) and rec["min_honest_surviving"] == 10


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="min_honest"):
        mech(min_honest=11)
    with pytest.raises(ValueError, match="modulus of 2\\^8"):
        mech(bits=8)
    with pytest.raises(ValueError, match="dimension 40"):
        mech().quantize(np.zeros(3))
    with pytest.raises(ValueError, match="sum modulo"):
        mech().decode(np.full(D, -1))
