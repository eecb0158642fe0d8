"""Gaussian-process functional noise (paper 001): conditional law, consistency, covariance, cost."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy.functional import (
    GPNoiseFunction,
    Theorem5,
    Theorem5Error,
    gp_noise_init,
    gp_noise_moments,
    gp_noise_query,
    gp_noise_reset,
)

# one program per shape each (eager, each of their ops compiled one of its own); σ is traced
_query, _moments = jax.jit(gp_noise_query), jax.jit(gp_noise_moments)


def kernel(x, y):
    return np.exp(-np.abs(np.subtract.outer(x, y)))


def dense_conditional(xs, values, x):
    """Full GP conditioning with dense linear algebra: mean (A,), variance (unit kernel)."""
    k = kernel(xs, xs)
    k_star = kernel(xs, [x])[:, 0]
    w = np.linalg.solve(k, k_star)
    return w @ values, 1.0 - k_star @ w


def stored_points(seed, n=12, actions=2, sigma=1.3):
    """A host noise function filled at n random points, and the points it holds."""
    rng = np.random.default_rng(seed)
    g = GPNoiseFunction(sigma, actions, seed=seed)
    for x in rng.uniform(0.0, 3.0, n):
        g(x)
    return g, np.array(g.xs), np.array(g.values)


def query_points(xs, rng):
    """Left of all, right of all, interior gaps, and very close to a stored point."""
    gaps = rng.uniform(xs[:-1], xs[1:])
    return np.concatenate([[xs[0] - 0.7, xs[0] - 1e-3, xs[-1] + 1e-3, xs[-1] + 0.4],
                           gaps, [xs[5] + 1e-4]])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_host_conditional_law_equals_dense_gp_conditioning(seed):
    g, xs, values = stored_points(seed)
    for x in query_points(xs, np.random.default_rng(100 + seed)):
        mean, var = g.moments(x)
        d_mean, d_var = dense_conditional(xs, values, x)
        np.testing.assert_allclose(mean, d_mean, rtol=1e-8, atol=1e-9)
        assert var == pytest.approx(d_var, rel=1e-7, abs=1e-10)


def test_right_end_conditions_on_the_last_point_not_the_first():
    """The authors' code conditioned on the first stored value beyond the right end."""
    g = GPNoiseFunction(1.0, 1, seed=0)
    g.xs, g.values = [0.0, 1.0], [np.array([2.0]), np.array([-1.0])]
    mean, var = g.moments(1.5)
    assert mean[0] == pytest.approx(-math.exp(-0.5))
    assert var == pytest.approx(1 - math.exp(-1.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jax_store_conditional_law_equals_dense_gp_conditioning(seed):
    rng = np.random.default_rng(seed)
    state = gp_noise_init(64, 2)
    for k in range(3):  # three batches, so points are merged into an existing store
        pts = jnp.asarray(rng.uniform(0.0, 3.0, 7), jnp.float32)
        state, _ = _query(state, jax.random.key(10 * seed + k), pts, 0.8)
    n = int(state.count)
    assert n == 21 and not bool(state.overflow)
    xs = np.asarray(state.xs[:n], np.float64)
    values = np.asarray(state.values[:n], np.float64)
    assert np.all(np.diff(xs) > 0) and np.all(np.isinf(np.asarray(state.xs[n:])))
    queries = query_points(xs, rng)
    mean, var = _moments(state, jnp.asarray(queries, jnp.float32))
    for i, x in enumerate(np.asarray(jnp.asarray(queries, jnp.float32), np.float64)):
        d_mean, d_var = dense_conditional(xs, values, x)
        # float32 store and arithmetic: errors of a few 1e-6 relative to O(1) values.
        np.testing.assert_allclose(np.asarray(mean[i]), d_mean, atol=5e-5)
        assert float(var[i]) == pytest.approx(d_var, abs=5e-5)


def test_same_state_same_value_until_reset_jax():
    state = gp_noise_init(16, 2)
    batch = jnp.array([0.3, 0.7, 0.3, 1.0, 1.0, 0.2], jnp.float32)
    valid = jnp.array([True, True, True, True, True, False])
    state, v1 = _query(state, jax.random.key(0), batch, 1.0, valid)
    assert int(state.count) == 3  # 0.3, 0.7, 1.0; the invalid 0.2 is not stored
    np.testing.assert_array_equal(v1[0], v1[2])
    np.testing.assert_array_equal(v1[3], v1[4])
    np.testing.assert_array_equal(v1[5], 0.0)
    state, v2 = _query(state, jax.random.key(1), jnp.array([1.0, 0.5, 0.7, 0.3], jnp.float32),
                      1.0)
    np.testing.assert_array_equal(v2[0], v1[3])
    np.testing.assert_array_equal(v2[2], v1[1])
    np.testing.assert_array_equal(v2[3], v1[0])
    assert int(state.count) == 4
    fresh = gp_noise_reset(state)
    assert int(fresh.count) == 0
    _, v3 = _query(fresh, jax.random.key(2), batch[:2], 1.0)
    assert not np.allclose(v3, v1[:2])


def test_same_state_same_value_until_reset_host():
    g = GPNoiseFunction(0.5, 2, seed=3)
    a, b = g(0.25), g(0.75)
    g(0.5)
    np.testing.assert_array_equal(g(0.25), a)
    np.testing.assert_array_equal(g(0.75), b)
    assert len(g) == 3
    g.reset()
    assert len(g) == 0 and not np.allclose(g(0.25), a)


def test_zero_sigma_gives_zero_noise():
    _, v = _query(gp_noise_init(8, 2), jax.random.key(0), np.float32([0.1, 0.9, 0.4]), 0.0)
    np.testing.assert_array_equal(v, 0.0)


def test_overflow_is_flagged():
    state, _ = _query(gp_noise_init(2, 1), jax.random.key(0), np.float32([0.1, 0.2, 0.3]), 1.0)
    assert bool(state.overflow)


def test_sample_paths_have_the_gp_covariance():
    """20,000 independent functions, each queried in a shuffled order over three batches.

    Each empirical covariance entry has standard deviation ≤ σ²·√(2/n) ≈ 0.0049 here, so the
    tolerance 0.03 is > 6 standard deviations (and the seed is fixed).
    """
    sigma, n = 0.7, 20_000
    pts = np.array([0.0, 0.03, 0.1, 0.35, 0.5, 0.9, 1.0, 2.2], np.float32)
    perm = np.random.default_rng(0).permutation(pts.size)
    batches = [perm[:3], perm[3:5], perm[5:]]

    def path(key):
        state = gp_noise_init(8, 2)
        out = jnp.zeros((pts.size, 2))
        for i, idx in enumerate(batches):
            state, v = gp_noise_query(state, jax.random.fold_in(key, i), jnp.asarray(pts[idx]),
                                      sigma)
            out = out.at[idx].set(v)
        return out

    samples = np.asarray(jax.jit(jax.vmap(path))(jax.random.split(jax.random.key(7), n)))
    expected = sigma**2 * kernel(pts, pts)
    for a in range(2):
        cov = np.cov(samples[:, :, a], rowvar=False)
        np.testing.assert_allclose(cov, expected, atol=0.03)
        np.testing.assert_allclose(samples[:, :, a].mean(0), 0.0, atol=0.03)
    cross = np.mean(samples[:, :, 0] * samples[:, :, 1])  # actions are independent
    assert abs(cross) < 0.03


def test_query_cost_grows_like_n_log_n():
    """Count the binary-search comparisons for N fresh queries (not time)."""
    counts = {}
    for n in (1000, 4000, 16000):
        g = GPNoiseFunction(1.0, 2, seed=n)
        for x in np.random.default_rng(n).uniform(0, 1, n):
            g(x)
        assert len(g) == n
        assert g.neighbour_reads <= 2 * n  # the conditional law reads ≤ 2 stored points
        counts[n] = g.comparisons
        # bisect makes ⌈log2(i + 1)⌉ or one fewer comparisons on a list of length i
        log_sum = sum(math.log2(i + 1) for i in range(n))
        assert log_sum - n <= counts[n] <= log_sum + n
    # 16x the queries: N log N predicts about 22x the comparisons; a linear scan would be 256x.
    assert 16 < counts[16000] / counts[1000] < 26


def test_theorem5_calibration_formula():
    t = Theorem5(epsilon=0.5, delta=1e-5, sensitivity_constant=0.002, k=5.0, beta=1.0,
                 updates=1000, batch_size=128, resets=100)
    expected = math.sqrt(2 * 1000 * math.log(math.e + 0.5 / 1e-5)) * 0.002 / 0.5
    assert t.min_sigma == pytest.approx(expected)
    sigma = 1.05 * expected
    g = t.guarantee(sigma)
    assert g.epsilon == 0.5
    assert g.delta == pytest.approx(1e-5 + 100 * math.exp(-(10 - 8.68 * sigma) ** 2 / 2))
    rec = t.record(sigma)
    assert rec["T"] == 128_000 and rec["T_over_B"] == 1000 and rec["J"] == 100
    assert rec["C"] == 0.002 and rec["k"] == 5.0 and rec["beta"] == 1.0


@pytest.mark.parametrize("overrides, field", [
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": 1.5}, "epsilon"),
    ({"delta": 0.0}, "delta"),
    ({"delta": 1.0}, "delta"),
    ({"sensitivity_constant": 0.0}, "sensitivity_constant"),
    ({"sensitivity_constant": -2.0}, "sensitivity_constant"),
    ({"k": 0.0}, "k"),
    ({"beta": float("nan")}, "beta"),
])
def test_theorem5_rejects_bad_parameters(overrides, field):
    args = dict(epsilon=0.5, delta=1e-5, sensitivity_constant=0.002, k=5.0, beta=1.0,
                updates=1000, batch_size=128, resets=100)
    with pytest.raises(Theorem5Error) as e:
        Theorem5(**{**args, **overrides})
    assert e.value.field == field


def test_theorem5_conditions_name_the_failure():
    t = Theorem5(epsilon=0.5, delta=1e-5, sensitivity_constant=0.002, k=1.0, beta=1.0,
                 updates=1000, batch_size=128, resets=100)
    with pytest.raises(Theorem5Error, match="below Theorem 5's calibration") as e:
        t.check(0.5 * t.min_sigma)
    assert e.value.field == "sigma"
    with pytest.raises(Theorem5Error, match=r"2k > 8\.68") as e:
        t.check(0.6)  # σ_min ≈ 0.59 ≤ 0.6, but 2k = 2 < 8.68·0.6 ≈ 5.2
    assert e.value.field == "k"
