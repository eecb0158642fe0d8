"""Tests for the local randomizers (paper 000, eqs. 4-5 and 19-24) and the Report boundary.

Statistical tests use fixed seeds, so every run is deterministic. Each one states its
false-failure probability: the chance, over the choice of seed, that a *correct* implementation
fails the assertion. Budget (union bound over the whole file):
  4 goodness-of-fit assertions at 1e-4 (3 Laplace KS, 1 projection χ²)        4.0e-4
  24 eq.-24 sign-frequency assertions at 1e-5 (9 binomial, 15 Hoeffding)        2.4e-4
  "wrong alternative is rejected" (power) assertions, all together            < 1e-4
  total                                                                      < 1e-3
"""

from __future__ import annotations

import functools
import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privrl.privacy import (
    Guarantee,
    IdentityMechanism,
    LaplaceMechanism,
    ProjectedRandomSignMechanism,
    Report,
    default_d_hat,
)

SQRT3 = math.sqrt(3.0)


def _keys(seed: int, n: int) -> jax.Array:
    return jax.random.split(jax.random.key(seed), n)


def _l1(a: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(a, dtype=np.float64)).sum(axis=-1)


# =============================================================================================
# Laplace mechanism: clipping (eq. 19-20)
# =============================================================================================


@pytest.mark.parametrize("clip", [0.1, 1.0, 5.0])
@pytest.mark.parametrize("d", [1, 2, 7, 112, 1000])
def test_laplace_clip_input_l1_ball(d: int, clip: float) -> None:
    m = LaplaceMechanism(epsilon=1.0, clip=clip)
    rng = np.random.default_rng(1000 * d + int(10 * clip))
    bound = clip / 2.0
    for scale in [1e-3, 1e-1, 1.0, 10.0, 1e3]:
        x = (rng.standard_normal(d) * scale).astype(np.float32)
        out = np.asarray(m.clip_input(jnp.asarray(x)))
        assert out.shape == (d,)
        assert _l1(out) <= bound * (1 + 1e-5)
        if _l1(x) <= bound:
            # Already inside the ball: the input is returned unchanged, bit for bit.
            np.testing.assert_array_equal(out, x)
        else:
            # Outside: scaled (positively, same direction) onto the sphere ||.||_1 = C/2.
            assert _l1(out) == pytest.approx(bound, rel=1e-5)
            ratio = out / x
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-5)
            assert ratio[0] > 0


def test_laplace_clip_input_inside_ball_unchanged() -> None:
    m = LaplaceMechanism(epsilon=2.0, clip=4.0)  # ball of L1 radius 2
    for x in ([0.0], [2.0], [-2.0], [0.5, -0.5, 1.0], [0.0, 0.0, 0.0], [1.99, 0.0]):
        xa = jnp.asarray(x, dtype=jnp.float32)
        np.testing.assert_array_equal(np.asarray(m.clip_input(xa)), np.asarray(xa))


@pytest.mark.parametrize("d", [1, 7, 112])
def test_laplace_clipped_vectors_differ_by_at_most_clip(d: int) -> None:
    clip = 1.7
    m = LaplaceMechanism(epsilon=1.0, clip=clip)
    rng = np.random.default_rng(d)
    xs = (rng.standard_normal((200, d)) * rng.lognormal(0.0, 2.0, (200, 1))).astype(np.float32)
    clipped = np.asarray(jax.vmap(m.clip_input)(jnp.asarray(xs)), dtype=np.float64)
    dist = _l1(clipped[:100] - clipped[100:])
    assert np.all(dist <= clip * (1 + 1e-5))
    # Antipodal inputs attain the bound.
    x = np.zeros(d, np.float32)
    x[0] = 10.0
    a, b = (np.asarray(m.clip_input(jnp.asarray(v))) for v in (x, -x))
    assert _l1(a - b) == pytest.approx(clip, rel=1e-6)


# =============================================================================================
# Laplace mechanism: noise distribution (eq. 21)
# =============================================================================================
#
# Under H0 (noise ~ Laplace(0, C/ε)) the KS p-value is uniform on [0, 1] (continuous law; the
# float32 rounding of samples is ~1e-7 relative, negligible against the KS resolution
# 1/sqrt(n) ≈ 7e-3), so `p > 1e-4` falsely fails with probability exactly 1e-4 per test.
# Power: the sup-distance between the Laplace CDFs of scale b and 1.25b is ≈ 0.041 (b vs 2b or
# 0.5b: 0.125). `p < 1e-10` needs an observed KS distance above ≈ sqrt(ln(2e10)/(2n)) ≈ 0.0245
# at n = 20000, which for the 1.25b alternative fails only if the empirical CDF strays by more
# than 0.0165 from the true one: probability ≤ 2exp(-2n·0.0165²) ≈ 4e-5 (DKW). The 2b, 0.5b and
# same-variance-Gaussian alternatives have far larger distances (negligible false failure).

_KS_ALPHA = 1e-4


@pytest.mark.parametrize(("epsilon", "clip"), [(0.7, 1.3), (5.0, 2.0)])
def test_laplace_noise_is_laplace_with_scale_clip_over_epsilon(epsilon: float, clip: float) -> None:
    n = 20_000
    m = LaplaceMechanism(epsilon=epsilon, clip=clip)
    values = np.asarray(m.privatize(jax.random.key(7), jnp.zeros(n)).value, dtype=np.float64)
    b = clip / epsilon  # paper eq. 21: density ε/(2C)·exp(-ε|z|/C)
    assert stats.kstest(values, stats.laplace(loc=0.0, scale=b).cdf).pvalue > _KS_ALPHA
    for wrong in (2.0 * b, 0.5 * b, 1.25 * b):  # the same test has power against wrong scales
        assert stats.kstest(values, stats.laplace(loc=0.0, scale=wrong).cdf).pvalue < 1e-10
    # Not a Gaussian of the same variance either.
    sd = math.sqrt(2.0) * b
    assert stats.kstest(values, stats.norm(loc=0.0, scale=sd).cdf).pvalue < 1e-10


def test_laplace_noise_is_added_to_the_clipped_input() -> None:
    # A large input: the output minus the *clipped* input must be Laplace(C/ε) noise.
    # False-failure probability 1e-4 (KS, as above).
    n, epsilon, clip = 20_000, 2.0, 3.0
    m = LaplaceMechanism(epsilon=epsilon, clip=clip)
    x = jax.random.normal(jax.random.key(1), (n,)) * 5.0
    out = np.asarray(m.privatize(jax.random.key(2), x).value, dtype=np.float64)
    noise = out - np.asarray(m.clip_input(x), dtype=np.float64)
    assert stats.kstest(noise, stats.laplace(scale=clip / epsilon).cdf).pvalue > _KS_ALPHA
    # The unclipped input is visibly not the centre.
    assert stats.kstest(out - np.asarray(x), stats.laplace(scale=clip / epsilon).cdf).pvalue < 1e-10


def test_laplace_same_key_same_output_different_key_different_output() -> None:
    m = LaplaceMechanism(epsilon=1.0, clip=1.0)
    x = jnp.ones(5)
    a = m.privatize(jax.random.key(3), x).value
    b = m.privatize(jax.random.key(3), x).value
    c = m.privatize(jax.random.key(4), x).value
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))


# =============================================================================================
# Laplace mechanism: the ε-LDP density ratio (paper 000, proof of Theorem 2)
# =============================================================================================


def _laplace_log_density(y: np.ndarray, centre: np.ndarray, b: float) -> np.ndarray:
    """log of prod_i Laplace(y_i; centre_i, b), in float64, computed independently of privrl."""
    y = np.asarray(y, dtype=np.float64)
    centre = np.asarray(centre, dtype=np.float64)
    return -np.abs(y - centre).sum(axis=-1) / b - y.shape[-1] * math.log(2.0 * b)


@pytest.mark.parametrize(("epsilon", "clip", "d"), [(1.0, 2.0, 5), (0.3, 1.0, 1), (4.0, 0.5, 20)])
def test_laplace_density_ratio_at_most_e_epsilon_and_tight(
    epsilon: float, clip: float, d: int
) -> None:
    m = LaplaceMechanism(epsilon=epsilon, clip=clip)
    b = clip / epsilon  # the scale the paper prescribes, not read from the mechanism
    e1 = np.zeros(d, np.float32)
    e1[0] = 1.0
    x, x_prime = (clip / 2) * e1, -(clip / 2) * e1
    # Both are valid clipped inputs (on the L1 sphere of radius C/2), at L1 distance exactly C.
    np.testing.assert_array_equal(np.asarray(m.clip_input(jnp.asarray(x))), x)
    np.testing.assert_array_equal(np.asarray(m.clip_input(jnp.asarray(x_prime))), x_prime)
    assert _l1(x - x_prime) == pytest.approx(clip)

    n = 4000
    keys = _keys(11, n)
    sample = jax.jit(jax.vmap(lambda k, c: m.privatize(k, c).value, in_axes=(0, None)))
    ys = np.asarray(sample(keys, jnp.asarray(x)))
    ys_prime = np.asarray(sample(keys, jnp.asarray(x_prime)))
    bound = math.exp(epsilon)
    for y in (ys, ys_prime):
        ratio = np.exp(_laplace_log_density(y, x, b) - _laplace_log_density(y, x_prime, b))
        assert np.all(ratio <= bound + 1e-6)
        assert np.all(1.0 / ratio <= bound + 1e-6)
    # Tightness: for outputs with y_1 >= C/2 the ratio is exactly e^ε. Under x, y_1 - C/2 is
    # Laplace noise, so this happens with probability 1/2. `at least 40% of 4000` falsely fails
    # with probability P(Bin(4000, 1/2) < 1600) < exp(-2·4000·0.1²) = e^-80 (Hoeffding).
    ratio = np.exp(_laplace_log_density(ys, x, b) - _laplace_log_density(ys, x_prime, b))
    tight = np.isclose(ratio, bound, rtol=1e-6)
    assert tight.mean() >= 0.4
    assert ratio.max() == pytest.approx(bound, rel=1e-6)


def test_laplace_density_ratio_for_arbitrary_inputs() -> None:
    # Any two raw inputs, after the mechanism's own clipping, give a ratio ≤ e^ε at every output.
    epsilon, clip, d = 1.5, 1.0, 8
    m = LaplaceMechanism(epsilon=epsilon, clip=clip)
    b = clip / epsilon
    rng = np.random.default_rng(5)
    raw = (rng.standard_normal((2, 300, d)) * rng.lognormal(0, 2, (2, 300, 1))).astype(np.float32)
    cx = np.asarray(jax.vmap(m.clip_input)(jnp.asarray(raw[0])))
    cxp = np.asarray(jax.vmap(m.clip_input)(jnp.asarray(raw[1])))
    ys = np.asarray(jax.vmap(m.privatize)(_keys(6, 300), jnp.asarray(raw[0])).value)
    log_ratio = _laplace_log_density(ys, cx, b) - _laplace_log_density(ys, cxp, b)
    assert np.all(np.exp(log_ratio) <= math.exp(epsilon) + 1e-6)


# =============================================================================================
# Projected Random Sign: the projection matrix (eq. 5)
# =============================================================================================


def test_prs_projection_shape_values_and_frequencies() -> None:
    m = ProjectedRandomSignMechanism(epsilon=5.0, clip=1.0, d_hat=300)
    M = np.asarray(m.projection(jax.random.key(0), 1000))
    assert M.shape == (300, 1000)
    s3 = np.float32(SQRT3)
    assert np.all(np.isin(M, [-s3, np.float32(0.0), s3]))
    counts = np.array([np.count_nonzero(np.equal(M, v)) for v in (-s3, 0.0, s3)])
    assert counts.sum() == M.size
    # Chi-square goodness of fit, 2 d.o.f., expected counts ≥ 50000, so the asymptotic χ² law is
    # essentially exact: `p > 1e-4` falsely fails with probability 1e-4.
    expected = M.size * np.array([1 / 6, 2 / 3, 1 / 6])
    assert stats.chisquare(counts, expected).pvalue > 1e-4
    # Power: the same counts are firmly rejected against uniform or 1/4-1/2-1/4 frequencies.
    for wrong in ([1 / 3, 1 / 3, 1 / 3], [1 / 4, 1 / 2, 1 / 4]):
        assert stats.chisquare(counts, M.size * np.array(wrong)).pvalue < 1e-10
    # E[m_ij²] = 1, so E[MᵀM] = d̂·I (the projection is norm-preserving on average).
    assert float(np.mean(M.astype(np.float64) ** 2)) == pytest.approx(1.0, abs=0.01)


def test_prs_projection_default_d_hat_shape_and_fresh_per_key() -> None:
    m = ProjectedRandomSignMechanism(epsilon=10.0, clip=1.0)
    M1 = np.asarray(m.projection(jax.random.key(1), 112))
    M2 = np.asarray(m.projection(jax.random.key(2), 112))
    assert M1.shape == (4, 112) == M2.shape
    assert not np.array_equal(M1, M2)  # a fresh M per release (P(equal) = tiny)
    np.testing.assert_array_equal(M1, np.asarray(m.projection(jax.random.key(1), 112)))


# =============================================================================================
# Projected Random Sign: output structure Mᵀũ with ũ ∈ {±C}^d̂ (Alg. 3)
# =============================================================================================


@pytest.mark.parametrize(("epsilon", "d_hat", "d"), [(5.0, 4, 10), (1.0, 1, 3)])
def test_prs_output_is_Mt_times_sign_vector(epsilon: float, d_hat: int, d: int) -> None:
    clip = 0.8
    m = ProjectedRandomSignMechanism(epsilon=epsilon, clip=clip, d_hat=d_hat)
    candidates = clip * np.array(list(itertools.product([-1.0, 1.0], repeat=d_hat)))  # (2^d̂, d̂)
    rng = np.random.default_rng(d)
    n = 30
    # Inputs of very different sizes: well inside, around and far outside the clipping range.
    xs = rng.standard_normal((n, d)) * np.resize([0.01, 1.0, 100.0], (n, 1))
    outs, Ms = jax.jit(jax.vmap(lambda k, x: (m.privatize(k, x).value, m.projection(k, d))))(
        _keys(21, n), jnp.asarray(xs, dtype=jnp.float32)
    )
    assert outs.shape == (n, d) and Ms.shape == (n, d_hat, d)
    for out, M in zip(np.asarray(outs, np.float64), np.asarray(Ms, np.float64), strict=True):
        residual = np.abs(candidates @ M - out).max(axis=1)  # row j: ||Mᵀ v_j - out||_∞
        assert residual.min() <= 1e-5 * max(1.0, np.abs(out).max())


def test_prs_output_not_explained_by_a_different_projection() -> None:
    # Guards the test above: with the projection of another key, no sign vector fits.
    m = ProjectedRandomSignMechanism(epsilon=10.0, clip=1.0)  # d̂ = 4
    d = 7
    candidates = np.array(list(itertools.product([-1.0, 1.0], repeat=4)))
    out = np.asarray(m.privatize(jax.random.key(0), jnp.ones(d)).value, dtype=np.float64)
    M_other = np.asarray(m.projection(jax.random.key(1), d), dtype=np.float64)
    assert np.abs(candidates @ M_other - out).max(axis=1).min() > 0.1


# =============================================================================================
# Projected Random Sign: P(ũ_i = +C | ū_i) (eq. 24)
# =============================================================================================


def _p_plus_reference(u_bar: np.ndarray, epsilon: float, d_hat: int, clip: float) -> np.ndarray:
    """Eq. 24 written out literally, in float64."""
    a = math.exp(epsilon / d_hat)
    return 1.0 / (a + 1.0) + (np.asarray(u_bar, np.float64) + clip) / (2.0 * clip) * (a - 1.0) / (
        a + 1.0
    )


@pytest.mark.parametrize(
    ("epsilon", "d_hat", "clip"), [(1.0, 1, 1.0), (5.0, 2, 0.5), (10.0, 4, 3.0), (40.0, 1, 1.0)]
)
def test_prs_flip_probability_matches_eq_24(epsilon: float, d_hat: int, clip: float) -> None:
    m = ProjectedRandomSignMechanism(epsilon=epsilon, clip=clip)
    grid = np.linspace(-clip, clip, 101)
    got = np.asarray(m.flip_probability(jnp.asarray(grid), d_hat), dtype=np.float64)
    np.testing.assert_allclose(got, _p_plus_reference(grid, epsilon, d_hat, clip), atol=1e-6)
    assert np.all((got >= 0) & (got <= 1))
    assert np.all(np.diff(got) >= 0)  # increasing in ū
    np.testing.assert_allclose(got[50], 0.5, atol=1e-6)  # ū = 0 gives a fair coin


@functools.cache
def _prs_sampler(m: ProjectedRandomSignMechanism, d: int):
    """(keys, x) -> (M per key, released value per key); compiled once per (mechanism, d)."""
    return jax.jit(
        jax.vmap(lambda k, x: (m.projection(k, d), m.privatize(k, x).value), in_axes=(0, None))
    )


def _prs_samples(m: ProjectedRandomSignMechanism, x: np.ndarray, seed: int, n: int):
    """For n keys: (ū computed here from m.projection, ũ recovered from the released value)."""
    d = x.shape[0]
    Ms, out = _prs_sampler(m, d)(_keys(seed, n), jnp.asarray(x, dtype=jnp.float32))
    Ms = np.asarray(Ms, dtype=np.float64)  # (n, d̂, d)
    out = np.asarray(out, dtype=np.float64)  # (n, d)
    u_bar = np.clip(Ms @ x.astype(np.float64), -m.clip, m.clip)  # eq. 23, computed independently
    # Recover ũ from out = Mᵀũ via the normal equations (M Mᵀ) ũ = M out. Keys whose M is (near)
    # rank-deficient (e.g. an all-zero row, probability ≤ d̂·(2/3)^d) are dropped: that depends on
    # M alone, and given M the coin flips are independent of it, so the remaining samples still
    # follow eq. 24 exactly.
    G = Ms @ np.swapaxes(Ms, 1, 2)
    ok = np.abs(np.linalg.det(G)) > 1e-6 * np.prod(np.diagonal(G, axis1=1, axis2=2), axis=1)
    assert ok.mean() > 0.99
    u_tilde = np.linalg.solve(G[ok], (Ms[ok] @ out[ok][..., None]))[..., 0]
    np.testing.assert_allclose(np.abs(u_tilde), m.clip, rtol=1e-4)  # ũ ∈ {±C}^d̂
    return u_bar[ok].ravel(), (u_tilde > 0).ravel()


# The released signs are tested against eq. 24 with exact binomial tests at α = 1e-5 (when ū is a
# known constant) and with Hoeffding bounds at δ = 1e-5 (when ū varies: independent Bernoulli(p_i)
# signs, P(|Σ(b_i - p_i)| ≥ t) ≤ 2exp(-2t²/n)). Each assertion falsely fails with prob. ≤ 1e-5.
_BIN_ALPHA = 1e-5


def _hoeffding_t(n: int, delta: float = _BIN_ALPHA) -> float:
    return math.sqrt(n * math.log(2.0 / delta) / 2.0)


@pytest.mark.parametrize(("epsilon", "d_hat"), [(1.0, None), (5.0, None), (10.0, 4)])
def test_prs_sign_frequencies_at_known_levels(epsilon: float, d_hat: int | None) -> None:
    # x = 100·e_1 makes u_i = 100·M_i1 ∈ {-100√3, 0, +100√3}, so ū_i ∈ {-C, 0, +C} exactly.
    clip, d = 0.7, 40
    m = ProjectedRandomSignMechanism(epsilon=epsilon, clip=clip, d_hat=d_hat)
    dh = m.resolved_d_hat(d)
    x = np.zeros(d)
    x[0] = 100.0
    u_bar, plus = _prs_samples(m, x, seed=int(epsilon * 10), n=12_000)
    for level in (-clip, 0.0, clip):
        sel = np.isclose(u_bar, level)
        k, n = int(plus[sel].sum()), int(sel.sum())
        assert n > 1000
        p = float(_p_plus_reference(np.array(level), epsilon, dh, clip))
        assert stats.binomtest(k, n, p).pvalue > _BIN_ALPHA
        if level != 0.0:
            # Power: the per-coordinate budget must be ε/d̂; ε (the paper's ambiguous "k" read
            # as 1) is rejected whenever d̂ > 1, and ε/(2d̂) always.
            for wrong_dh in {1, 2 * dh} - {dh}:
                wrong = float(_p_plus_reference(np.array(level), epsilon, wrong_dh, clip))
                assert stats.binomtest(k, n, wrong).pvalue < 1e-8


@pytest.mark.parametrize(("epsilon", "d_hat"), [(1.0, None), (5.0, None), (10.0, 4)])
def test_prs_sign_frequencies_for_interior_u_bar(epsilon: float, d_hat: int | None) -> None:
    # ||x||_2 = 0.8·C so that u_i = (Mx)_i has variance ||x||²: ū covers (-C, C) with some mass
    # at the clipping boundaries. Check eq. 24 overall and in four quantile bins of ū.
    clip, d = 0.7, 40  # as in the test above, so the compiled sampler is shared
    m = ProjectedRandomSignMechanism(epsilon=epsilon, clip=clip, d_hat=d_hat)
    dh = m.resolved_d_hat(d)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(d)
    x *= 0.8 * clip / np.linalg.norm(x)
    u_bar, plus = _prs_samples(m, x, seed=100 + int(epsilon), n=12_000)
    p = _p_plus_reference(u_bar, epsilon, dh, clip)
    edges = np.quantile(u_bar, [0.0, 0.25, 0.5, 0.75, 1.0])
    bins = [np.ones_like(plus)] + [
        (u_bar >= lo) & (u_bar <= hi) for lo, hi in itertools.pairwise(edges)
    ]
    for sel in bins:
        n = int(sel.sum())
        assert abs(float(plus[sel].sum() - p[sel].sum())) < _hoeffding_t(n)
    # Power: the signs must depend on ū — a fair coin is rejected in the extreme bins.
    lo_bin, hi_bin = bins[1], bins[4]
    assert plus[hi_bin].sum() - 0.5 * hi_bin.sum() > _hoeffding_t(int(hi_bin.sum()))
    assert 0.5 * lo_bin.sum() - plus[lo_bin].sum() > _hoeffding_t(int(lo_bin.sum()))


# =============================================================================================
# Projected Random Sign: per-coordinate likelihood ratio ≤ e^{ε/d̂}
# =============================================================================================


@pytest.mark.parametrize(
    ("epsilon", "d_hat", "clip"), [(0.5, 1, 1.0), (1.0, 1, 2.0), (5.0, 2, 0.5), (10.0, 4, 1.0)]
)
def test_prs_per_coordinate_likelihood_ratio(epsilon: float, d_hat: int, clip: float) -> None:
    m = ProjectedRandomSignMechanism(epsilon=epsilon, clip=clip)
    grid = np.linspace(-clip, clip, 201)
    p_plus = np.asarray(m.flip_probability(jnp.asarray(grid), d_hat), dtype=np.float64)
    p_minus = 1.0 - p_plus
    bound = math.exp(epsilon / d_hat)
    tol = 1e-5 * bound  # float32 probabilities
    for p in (p_plus, p_minus):
        ratios = p[:, None] / p[None, :]  # all pairs (ū, ū')
        assert ratios.max() <= bound + tol
    # Equality at the extremes ū = +C, ū' = -C.
    assert p_plus[-1] / p_plus[0] == pytest.approx(bound, rel=1e-5)
    assert p_minus[0] / p_minus[-1] == pytest.approx(bound, rel=1e-5)


# =============================================================================================
# d̂ default
# =============================================================================================


@pytest.mark.parametrize(
    ("epsilon", "d", "expected"),
    [
        (1.0, 112, 1),
        (2.0, 112, 1),
        (2.5, 112, 1),
        (4.99, 112, 1),
        (5.0, 112, 2),
        (7.49, 112, 2),
        (7.5, 112, 3),
        (10.0, 112, 4),
        (0.1, 112, 1),
        (100.0, 112, 40),
        (100.0, 3, 3),
        (10.0, 1, 1),
        (1000.0, 112, 112),
    ],
)
def test_default_d_hat(epsilon: float, d: int, expected: int) -> None:
    assert default_d_hat(epsilon, d) == expected
    assert ProjectedRandomSignMechanism(epsilon=epsilon, clip=1.0).resolved_d_hat(d) == expected


def test_resolved_d_hat_explicit() -> None:
    m = ProjectedRandomSignMechanism(epsilon=1.0, clip=1.0, d_hat=7)
    assert m.resolved_d_hat(112) == 7
    assert m.resolved_d_hat(7) == 7
    with pytest.raises(ValueError, match="d_hat"):
        m.resolved_d_hat(6)
    assert ProjectedRandomSignMechanism(1.0, 1.0, d_hat=3, dim=10).params()["d_hat_resolved"] == 3


# =============================================================================================
# IdentityMechanism
# =============================================================================================


def test_identity_mechanism_has_no_guarantee_and_returns_input() -> None:
    m = IdentityMechanism()
    g = m.guarantee
    assert g.epsilon == math.inf
    assert g.is_private is False
    assert "NO PRIVACY GUARANTEE" in g.describe()
    info = m.describe()
    assert info["private"] is False
    assert info["epsilon"] == "inf"
    json.dumps(info, allow_nan=False)
    x = jnp.asarray([1.5, -2.0, 0.0, 3.25])
    report = m.privatize(jax.random.key(0), x)
    assert isinstance(report, Report)
    np.testing.assert_array_equal(np.asarray(report.value), np.asarray(x))
    assert report.guarantee == g
    assert m.params() == {"clip": None}


def test_identity_mechanism_with_clip_clips_without_noise() -> None:
    # The ε → ∞ limit of LaplaceMechanism(ε, clip): L1-clip to clip/2, no noise, still no guarantee.
    m = IdentityMechanism(clip=2.0)
    assert m.guarantee.epsilon == math.inf and not m.guarantee.is_private
    assert m.params() == {"clip": 2.0}
    lap = LaplaceMechanism(epsilon=1.0, clip=2.0)
    for x in ([0.2, -0.3, 0.1], [3.0, -4.0, 5.0], [0.0, 0.0, 0.0]):
        xa = jnp.asarray(x, dtype=jnp.float32)
        out = np.asarray(m.privatize(jax.random.key(0), xa).value)
        np.testing.assert_array_equal(out, np.asarray(lap.clip_input(xa)))
        assert _l1(out) <= 1.0 * (1 + 1e-6)
        # Deterministic: the key does not matter.
        np.testing.assert_array_equal(out, np.asarray(m.privatize(jax.random.key(9), xa).value))
    for bad in (0, -1.0, math.nan, math.inf, "abc"):
        with pytest.raises(ValueError, match="clip"):
            IdentityMechanism(clip=bad)


# =============================================================================================
# Validation on construction
# =============================================================================================

_MECHS = [LaplaceMechanism, ProjectedRandomSignMechanism]


@pytest.mark.parametrize("cls", _MECHS)
@pytest.mark.parametrize("bad", [0, 0.0, -1, -1e-9, math.nan, math.inf, -math.inf, "abc", None])
def test_invalid_epsilon_rejected(cls, bad) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        cls(epsilon=bad, clip=1.0)


@pytest.mark.parametrize("cls", _MECHS)
@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "abc", None])
def test_invalid_clip_rejected(cls, bad) -> None:
    with pytest.raises(ValueError, match="clip"):
        cls(epsilon=1.0, clip=bad)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, False])
def test_invalid_d_hat_rejected(bad) -> None:
    with pytest.raises(ValueError, match="d_hat"):
        ProjectedRandomSignMechanism(epsilon=1.0, clip=1.0, d_hat=bad)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_invalid_dim_rejected(bad) -> None:
    with pytest.raises(ValueError, match="dim"):
        ProjectedRandomSignMechanism(epsilon=1.0, clip=1.0, dim=bad)


def test_d_hat_larger_than_dim_rejected_on_construction() -> None:
    with pytest.raises(ValueError, match="d_hat"):
        ProjectedRandomSignMechanism(epsilon=1.0, clip=1.0, d_hat=11, dim=10)
    ProjectedRandomSignMechanism(epsilon=1.0, clip=1.0, d_hat=10, dim=10)  # boundary is fine
    # An integral float is accepted and normalised to int.
    assert ProjectedRandomSignMechanism(epsilon=1.0, clip=1.0, d_hat=2.0).d_hat == 2


def test_d_hat_larger_than_input_rejected_at_privatize() -> None:
    m = ProjectedRandomSignMechanism(epsilon=1.0, clip=1.0, d_hat=4)
    with pytest.raises(ValueError, match="d_hat"):
        m.privatize(jax.random.key(0), jnp.ones(3))
    with pytest.raises(ValueError, match="d_hat"):
        m.projection(jax.random.key(0), 3)
    assert m.privatize(jax.random.key(0), jnp.ones(7)).value.shape == (7,)


def test_valid_parameters_are_stored_as_floats() -> None:
    m = LaplaceMechanism(epsilon=2, clip=3)
    assert isinstance(m.epsilon, float) and isinstance(m.clip, float)
    assert m.scale == pytest.approx(1.5)
    assert m.params() == {"epsilon": 2.0, "clip": 3.0, "laplace_scale": 1.5}


# =============================================================================================
# Guarantee fields
# =============================================================================================


@pytest.mark.parametrize(
    ("mech", "sensitivity"),
    [
        (LaplaceMechanism(epsilon=2.0, clip=0.5), 0.5),
        (ProjectedRandomSignMechanism(epsilon=3.0, clip=0.5), 1.0),
    ],
)
def test_guarantee_fields(mech, sensitivity: float) -> None:
    g = mech.guarantee
    assert isinstance(g, Guarantee)
    assert g.epsilon == mech.epsilon
    assert g.delta == 0
    assert g.notion == "ε-LDP"
    assert isinstance(g.unit, str) and g.unit
    assert isinstance(g.neighbouring, str) and g.neighbouring
    assert g.sensitivity == pytest.approx(sensitivity)
    assert g.is_private
    assert f"ε = {mech.epsilon:g}" in g.describe()
    d = mech.describe()
    assert d["mechanism"] == mech.name and d["epsilon"] == mech.epsilon and d["private"] is True
    json.dumps(d, allow_nan=False)
    with pytest.raises(AttributeError):
        g.epsilon = 100.0  # frozen


# =============================================================================================
# Report: the privacy boundary
# =============================================================================================


def test_report_cannot_be_constructed_directly() -> None:
    with pytest.raises(TypeError):
        Report()
    with pytest.raises(TypeError):
        Report(jnp.ones(3), LaplaceMechanism(1.0, 1.0).guarantee)
    with pytest.raises(TypeError):
        Report(value=jnp.ones(3))
    with pytest.raises(TypeError):
        Report._mint(object(), jnp.ones(3), LaplaceMechanism(1.0, 1.0).guarantee)


def test_report_is_immutable() -> None:
    r = LaplaceMechanism(1.0, 1.0).privatize(jax.random.key(0), jnp.ones(3))
    value = r.value
    with pytest.raises(AttributeError):
        r.value = jnp.zeros(3)
    with pytest.raises(AttributeError):
        r.guarantee = IdentityMechanism().guarantee
    with pytest.raises(AttributeError):
        r.extra = 1
    with pytest.raises(AttributeError):
        del r.value
    with pytest.raises(AttributeError):
        del r.guarantee
    assert r.value is value
    assert r.guarantee.epsilon == 1.0
    assert "ε-LDP" in repr(r)


@pytest.mark.parametrize(
    "mech",
    [
        LaplaceMechanism(epsilon=1.0, clip=1.0),
        ProjectedRandomSignMechanism(epsilon=10.0, clip=1.0),
        IdentityMechanism(),
    ],
)
def test_report_survives_jit_vmap_and_scan(mech) -> None:
    d = 7
    x = jnp.linspace(-1.0, 1.0, d)
    r = jax.jit(mech.privatize)(jax.random.key(0), x)
    assert isinstance(r, Report)
    assert r.guarantee == mech.guarantee
    np.testing.assert_allclose(
        np.asarray(r.value),
        np.asarray(mech.privatize(jax.random.key(0), x).value),
        rtol=1e-5,
        atol=1e-6,
    )
    # A Report passed into and out of a jitted function.
    r2 = jax.jit(lambda rep: rep)(r)
    assert isinstance(r2, Report) and r2.guarantee == mech.guarantee
    # vmap over keys (under jit, to keep the test fast): one Report with a batched value.
    rb = jax.jit(jax.vmap(lambda k: mech.privatize(k, x)))(_keys(1, 5))
    assert isinstance(rb, Report)
    assert rb.value.shape == (5, d)
    assert rb.guarantee == mech.guarantee

    # lax.scan emitting Reports.
    def step(carry, k):
        return carry, mech.privatize(k, x)

    _, rs = jax.lax.scan(step, 0, _keys(2, 4))
    assert isinstance(rs, Report) and rs.value.shape == (4, d) and rs.guarantee == mech.guarantee
    leaves, _ = jax.tree_util.tree_flatten(r)
    assert len(leaves) == 1 and leaves[0].shape == (d,)


@pytest.mark.parametrize(
    "mech",
    [
        LaplaceMechanism(epsilon=1.0, clip=1.0),
        ProjectedRandomSignMechanism(epsilon=5.0, clip=1.0),
        IdentityMechanism(),
    ],
)
def test_privatize_rejects_non_vector_input(mech) -> None:
    key = jax.random.key(0)
    for bad in (jnp.ones((2, 3)), jnp.ones((1, 1)), jnp.asarray(1.0), jnp.ones((2, 2, 2))):
        with pytest.raises(ValueError, match="1-D"):
            mech.privatize(key, bad)


@pytest.mark.parametrize(
    "mech",
    [
        LaplaceMechanism(epsilon=1.0, clip=1.0),
        ProjectedRandomSignMechanism(epsilon=10.0, clip=1.0),  # d̂ = min(4, d)
        IdentityMechanism(),
    ],
)
@pytest.mark.parametrize("d", [1, 7, 112, 1000])
def test_privatize_arbitrary_lengths(mech, d: int) -> None:
    x = np.linspace(-2.0, 2.0, d)
    r = mech.privatize(jax.random.key(d), x)  # numpy input accepted
    assert isinstance(r, Report)
    assert r.value.shape == (d,)
    assert jnp.issubdtype(r.value.dtype, jnp.floating)
    assert np.all(np.isfinite(np.asarray(r.value)))
    if d == 7:
        # Integer input is promoted to float (and gives the same release as the float input).
        r_int = mech.privatize(jax.random.key(0), np.arange(d))
        r_flt = mech.privatize(jax.random.key(0), np.arange(d, dtype=np.float32))
        assert jnp.issubdtype(r_int.value.dtype, jnp.floating)
        np.testing.assert_allclose(np.asarray(r_int.value), np.asarray(r_flt.value), rtol=1e-6)


def test_report_pickles_as_a_report():
    import copy
    import pickle

    mech = LaplaceMechanism(1.0, 1.0)
    r = mech.privatize(jax.random.key(0), jnp.ones(3))
    for r2 in (pickle.loads(pickle.dumps(r)), copy.deepcopy(r)):
        assert isinstance(r2, Report) and r2.guarantee == r.guarantee
        np.testing.assert_array_equal(r2.value, r.value)


@pytest.mark.parametrize("flag", [True, False])
def test_boolean_parameters_rejected(flag):
    with pytest.raises(ValueError, match="epsilon"):
        LaplaceMechanism(flag, 1.0)
    with pytest.raises(ValueError, match="clip"):
        LaplaceMechanism(1.0, flag)
