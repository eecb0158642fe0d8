"""The distributed discrete Gaussian over a modular sum (privrl.privacy.discrete_sum)."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from privrl.privacy.discrete_sum import (
    DiscreteGaussianSum,
    SumParams,
    ThresholdError,
    decode,
    discrete_gaussian_jax,
    encode,
    modular_sum,
    share,
)
from privrl.privacy.plan import PrivacyRequest, plan_discrete

D = 40


def mech(**kw) -> DiscreteGaussianSum:
    args = {"clip": 1.0, "dim": D, "agents": 10, "min_honest": 6, "noise_multiplier": 2.0,
            "bits": 24}
    return DiscreteGaussianSum(**(args | kw))


# jitted: one program each (eager, each of their ops compiled one of its own); the parameters
# are traced, so one program serves every SumParams
_modular_sum, _decode = jax.jit(modular_sum), jax.jit(decode)
# s² traced, as in a round (`share`'s parameters): one program for every s² tested
_discrete_gaussian = jax.jit(discrete_gaussian_jax, static_argnums=2)


def clipped(xs: np.ndarray, clip: float = 1.0) -> np.ndarray:
    return xs / np.maximum(1.0, np.linalg.norm(xs, axis=-1, keepdims=True) / clip)


def test_quantization_is_unbiased_and_bounded():
    m = mech()
    x = np.random.default_rng(0).normal(size=D)
    x *= 0.7 / np.linalg.norm(x)  # inside the clip: E[x̃] = x/γ
    keys = jax.random.split(jax.random.key(0), 2000)
    batched = jax.jit(jax.vmap(encode, (None, 0, None)))
    draws = np.asarray(batched(m.sum_params, keys, x), np.int64)
    assert all(int((row.astype(object) ** 2).sum()) <= m.radius ** 2 for row in draws)
    # Each coordinate's rounding error is Bernoulli(frac) − frac: std <= 1/2, so the mean of
    # 2000 draws is within 4.5·(1/2)/sqrt(2000) ≈ 0.05 of x/γ (every coordinate, ~1e-5 each).
    err = draws.mean(axis=0) - x / m.gamma
    assert np.max(np.abs(err)) < 0.05
    # a vector beyond the clip is scaled to norm C first
    big = np.asarray(batched(m.sum_params, keys, 100 * x)[0])  # (the same program)
    assert np.linalg.norm(big * m.gamma) == pytest.approx(1.0, rel=1e-3)


def test_rounding_that_keeps_failing_is_clipped_in_integers():
    # R = 50 grid steps for a vector of 100: every redraw fails, the integer clip holds it
    p = SumParams(clip=1.0, gamma=0.01, radius=50, share_variance=4, bits=24)
    x = np.random.default_rng(3).normal(size=D)
    k = np.asarray(jax.jit(encode)(p, jax.random.key(1), x), np.int64)
    assert int((k.astype(object) ** 2).sum()) <= 50 ** 2
    assert np.linalg.norm(k) > 50 - math.sqrt(D) - 1  # truncation loses < 1 per coordinate
    assert np.all(np.sign(k) * np.sign(x) >= 0)  # the direction is kept


def test_rounding_bound_and_inflation():
    m = mech()
    scale = m.clip / m.gamma
    assert m.rounding_bound(scale) <= m.radius
    assert 1.0 <= m.inflation() < 1.01
    # the KLS21 bound is below the deterministic scale + √d one
    assert m.rounding_bound(scale) <= scale + math.sqrt(D)


def test_modular_sum_is_exact_and_wraps_around():
    p = SumParams(clip=1.0, gamma=1.0, radius=16, share_variance=1, bits=8)
    msgs = np.array([[255, 0, 100, 200], [1, 255, 100, 200], [0, 255, 100, 255]], np.uint32)
    total = np.asarray(_modular_sum(p, msgs), np.int64)
    assert total.tolist() == [0, 254, 44, 143]  # Σ mod 256
    # the centred residue: [0, 128) as is, [128, 256) minus 256
    assert np.asarray(_decode(p, np.array([0, 127, 128, 255], np.uint32))).tolist() == \
        [0.0, 127.0, -128.0, -1.0]
    # a share of −3 (noise) and +1 (update) at b = 8 is 254: two's complement modulo 2^b
    msg = jax.jit(share)(p, jax.random.key(0), np.zeros(1), np.array([-2]))
    assert int(msg[0]) == 254
    wide = SumParams(1.0, 1.0, 16, 1, 32)
    assert np.asarray(_decode(wide, _modular_sum(wide, np.array(
        [[2 ** 32 - 5], [3]], np.uint32)))).tolist() == [-2.0]


def test_simulated_secure_sum_decodes_the_sum_of_clipped_updates():
    """(b): K messages made in one jitted program (clip, rounding, noise share, mod 2^b) and
    summed modulo 2^b decode to Σ clip_C(x_i) within the rounding and the noise: each agent's
    rounding moves a coordinate by < γ, and the sum's noise has std sqrt(K s²)·γ; with the
    noise off (zero shares) only the rounding is left."""
    m = mech()
    xs = np.random.default_rng(1).normal(size=(m.agents, D)) * 0.5
    keys = jax.random.split(jax.random.key(2), m.agents)
    msgs = jax.jit(jax.vmap(share, (None, 0, 0)))(m.sum_params, keys, xs)
    assert msgs.dtype == jnp.uint32 and int(np.asarray(msgs).max()) < m.modulus
    assert np.array_equal(np.asarray(m.modular_sum(msgs)),
                          np.mod(np.asarray(msgs, np.int64).sum(axis=0), m.modulus))
    truth = clipped(xs).sum(axis=0)
    noise_std = math.sqrt(m.agents * m.share_variance) * m.gamma
    got = np.asarray(m.aggregate(msgs).value)
    assert np.max(np.abs(got - truth)) < 5 * noise_std + m.agents * m.gamma
    quiet = jax.jit(jax.vmap(share, (None, 0, 0, None)))(m.sum_params, keys, xs,
                                                         np.zeros(D, np.int32))
    plain = np.asarray(m.aggregate(quiet).value)
    assert np.max(np.abs(plain - truth)) < m.agents * m.gamma
    # the deployment's message (secure noise share) decodes to the same sum, within noise
    deployed = np.stack([m.message(k, x) for k, x in zip(keys, xs, strict=True)])
    assert np.max(np.abs(np.asarray(m.decode(m.modular_sum(deployed)).value) - truth)) \
        < 5 * noise_std + m.agents * m.gamma


def test_a_seeded_message_is_the_simulated_one():
    """A Flower node under seeded noise sends exactly the local round's message."""
    m = mech()
    x = np.random.default_rng(4).normal(size=(3, D))
    keys = jax.random.split(jax.random.key(5), 3)
    in_round = np.asarray(jax.jit(jax.vmap(share, (None, 0, 0)))(m.sum_params, keys, x))
    alone = np.stack([m.message(k, v, secure=False) for k, v in zip(keys, x, strict=True)])
    assert np.array_equal(in_round.astype(np.int64), alone)


def test_sum_noise_variance():
    m = mech()
    keys = jax.random.split(jax.random.key(6), 40 * m.agents).reshape(40, m.agents)
    msgs = jax.jit(jax.vmap(jax.vmap(share, (None, 0, None)), (None, 0, None)))(
        m.sum_params, keys, np.zeros(D))
    sums = np.stack([np.asarray(m.aggregate(row).value) for row in msgs])
    # K shares of variance <= s² each (a discrete Gaussian's variance is below its parameter
    # and within 1e-12 of it at this s²): 1600 draws, the sample variance within ±10%.
    expected = m.agents * m.share_variance * m.gamma ** 2
    assert np.mean(sums) == pytest.approx(0.0, abs=4 * math.sqrt(expected / sums.size))
    assert np.var(sums) == pytest.approx(expected, rel=0.1)


def _pmf(s2: float, half: int) -> tuple[np.ndarray, np.ndarray]:
    ks = np.arange(-half, half + 1)
    w = np.exp(-ks.astype(np.float64) ** 2 / (2 * s2))
    return ks, w / w.sum()


def _fits(draws: np.ndarray, s2: float) -> tuple[float, float, float]:
    """(χ² p-value, |mean|/SE, |var − Var|/SE) of draws against N_ℤ(0, s²): the χ² over bins
    of w = ⌈s/4⌉ integers (single integers at s² < 16) with expected count >= 20, the tails
    pooled."""
    n = draws.size
    half = int(12 * math.sqrt(s2)) + 10
    ks, p = _pmf(s2, half)
    var = float((p * ks ** 2).sum())
    kurt = float((p * ks.astype(np.float64) ** 4).sum())
    w = max(1, math.ceil(math.sqrt(s2) / 4))
    bins = (ks + half) // w
    expected = np.bincount(bins, weights=p) * n
    observed = np.bincount((np.clip(draws, -half, half) + half) // w,
                           minlength=expected.size)[:expected.size]
    keep = expected >= 20
    observed = np.append(observed[keep], n - observed[keep].sum())
    expected = np.append(expected[keep], n - expected[keep].sum())
    stat = scipy.stats.chisquare(observed, expected * n / expected.sum())
    return (float(stat.pvalue), abs(draws.mean()) / math.sqrt(var / n),
            abs(draws.var() - var) / math.sqrt((kurt - var ** 2) / n))


@pytest.mark.parametrize("s2", [1, 400, 67_107_393])
def test_jax_discrete_gaussian_has_the_right_law(s2):
    """The JAX sampler (fixed seed, 100k draws) against N_ℤ(0, s²): a χ² test on the pmf's
    bins at p >= 1e-4, the mean and the variance within 5 standard errors. A correct sampler
    fails one of these with probability about 1e-4 (any seed); the rounded continuous Gaussian
    (a different law, of variance about s² + 1/12) fails them at s² = 1 (checked below), so
    they can fail."""
    n = 100_000
    draws = np.asarray(_discrete_gaussian(jax.random.key(7), s2, (n,)), np.int64)
    pvalue, mean_z, var_z = _fits(draws, s2)
    assert pvalue > 1e-4 and mean_z < 5 and var_z < 5
    if s2 == 1:
        rounded = np.rint(np.random.default_rng(8).normal(0, math.sqrt(s2), n)).astype(np.int64)
        pvalue, _, var_z = _fits(rounded, s2)
        assert pvalue < 1e-4 or var_z > 5


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


def test_the_plan_calibrates_the_noise_to_the_target():
    def make(z: float) -> DiscreteGaussianSum:
        return mech(noise_multiplier=z, agents=20, min_honest=10, bits=27)

    plan = plan_discrete(PrivacyRequest(epsilon=2.0, delta=1e-5), 10,
                         lambda z: make(z).epsilon(10))
    m = make(plan.noise_multiplier)
    assert m.epsilon(10) <= 2.0
    assert mech(noise_multiplier=m.noise_multiplier / 1.01, agents=20, min_honest=10,
                bits=27).epsilon(10) > 2.0  # the smallest such z, to 1%
    assert m.wrap_probability() < 1e-9
    rec = m.record(10)
    assert rec["epsilon"] == m.epsilon(10) and rec["min_honest_surviving"] == 10
    # σ given is used as given; without the mechanism (its length unknown) the request is
    # only checked
    assert plan_discrete(PrivacyRequest(noise_multiplier=3.0), 10,
                         lambda z: make(z).epsilon(10)).noise_multiplier == 3.0
    assert plan_discrete(PrivacyRequest(epsilon=2.0), 10).noise_multiplier is None


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="min_honest"):
        mech(min_honest=11)
    with pytest.raises(ValueError, match="modulus of 2\\^8"):
        mech(bits=8)
    with pytest.raises(ValueError, match="dimension 40"):
        mech().message(jax.random.key(0), np.zeros(3))
    with pytest.raises(ValueError, match="bits must be <= 32"):
        mech(bits=40)
    with pytest.raises(ValueError, match="grid_bits must be <= 15"):
        mech(grid_bits=16)
    with pytest.raises(ValueError, match="sum modulo"):
        mech().decode(np.full(D, -1))
