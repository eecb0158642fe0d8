"""ProjUnit and seed-compressed PrivUnitG: the exact ε statements, unbiasedness, the variance
formulas, the upload (what is decoded is what was uploaded, in the stated bytes), and an audit
that keeps the claim. Seeds fixed; Monte Carlo tolerances in standard errors (4.5 per
coordinate, as in test_ldp_vector: a false alarm has probability ~1e-5 per coordinate)."""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy.ldp_compact import (
    SEED_BYTES,
    ProjUnitMechanism,
    SeedPrivUnitGMechanism,
    _seed_density,
    projection_bias,
)
from privrl.privacy.ldp_vector import PrivUnitGMechanism, calibrate

N = 20_000


def _draws(mech, fn, n=N, seed=0):
    """fn at n keys. Seed compression's draws are mapped one key at a time (`lax.map`), so that
    its rejection loop draws each key's own candidates (about 1/α), where a vmapped loop runs
    every key until the slowest of the n ends (all T tries: 6× the work at ε = 3); the same
    draws either way. ProjUnit's are cheaper vmapped."""
    keys = jax.random.split(jax.random.key(seed), n)
    mapped = ((lambda ks: jax.lax.map(fn, ks)) if isinstance(mech, SeedPrivUnitGMechanism)
              else jax.vmap(fn))
    return np.asarray(jax.jit(mapped)(keys), np.float64)


@partial(jax.jit, static_argnums=0)
def _reports(mech, keys, v):
    """`mech.privatize(k, v).value` at each of `keys`, mapped or vmapped as `_draws` does;
    v as data, so that every input of one shape shares one program."""
    fn = lambda k: mech.privatize(k, v).value  # noqa: E731
    if isinstance(mech, SeedPrivUnitGMechanism):
        return jax.lax.map(fn, keys)
    return jax.vmap(fn)(keys)


def test_projunit_is_privunitg_in_r_k_at_the_same_epsilon():
    m = ProjUnitMechanism(1.5, 2.0, k=5)
    p = m.release_params(30)
    assert p.k == 5 and p.cal == calibrate("privunitg", 1.5, 5)
    assert p.cal.cap_epsilon + p.cal.size_epsilon == pytest.approx(1.5, rel=1e-12)
    assert m.guarantee.epsilon == 1.5 and m.guarantee.delta == 0.0
    assert m.upload_bytes(30) == SEED_BYTES + 4 * 5
    assert ProjUnitMechanism(1.5, 2.0, k=16).release_params(3).k == 4  # k ≤ D = d + 1
    assert projection_bias(4, 4) == 1.0
    # c = √(D/k)·E‖Pu‖, ‖Pu‖² ~ Beta(k/2, (D−k)/2): measured on 2·10⁵ random subspaces
    g = np.random.default_rng(0).standard_normal((200_000, 12))
    r = np.linalg.norm(g[:, :3], axis=1) / np.linalg.norm(g, axis=1)  # ‖Pu‖, k = 3 of D = 12
    assert math.sqrt(12 / 3) * r.mean() == pytest.approx(projection_bias(12, 3),
                                                         abs=5 * 2 * r.std() / math.sqrt(2e5))
    for kw in [dict(k=0), dict(k=2.5), dict(k=True)]:
        with pytest.raises(ValueError, match="k must"):
            ProjUnitMechanism(1.0, 1.0, **kw)


@pytest.mark.parametrize("mech", [ProjUnitMechanism(4.0, 1.5, k=2),
                                  SeedPrivUnitGMechanism(2.0, 1.5)])
def test_estimates_are_unbiased_and_inputs_are_clipped(mech):
    # ProjUnit at k = 2 of D = 12: without the 1/c correction the mean is 0.905·x (13 SE off)
    d = 11
    x = jnp.zeros(d).at[0].set(0.9).at[1].set(-0.6).at[5].set(0.3)  # ‖x‖ < clip
    keys = jax.random.split(jax.random.key(0), N)  # `_draws`'s
    for v, target in [(x, x), (4 * x, 1.5 * x / jnp.linalg.norm(x))]:  # beyond: clipped
        ys = np.asarray(_reports(mech, keys, v), np.float64)  # one program for both inputs
        se = ys.std(0) / math.sqrt(N)
        assert np.all(np.abs(ys.mean(0) - np.asarray(target)) < 4.5 * se), (ys.mean(0), target)


@pytest.mark.parametrize("mech", [ProjUnitMechanism(3.0, 1.0, k=4),
                                  SeedPrivUnitGMechanism(3.0, 1.0, failure=1e-3)])
def test_variance_is_the_stated_formula(mech):
    d = 15
    u = mech.lift(jnp.full((d,), 0.2))
    err = ((_draws(mech, lambda k: mech.sphere(k, u)) - np.asarray(u)) ** 2).sum(1)
    assert abs(err.mean() - mech.mse(d)) < 4 * err.std() / math.sqrt(N), (err.mean(), mech.mse(d))
    x = np.full(d, 0.2)
    err_x = ((_draws(mech, lambda k: mech.privatize(k, jnp.asarray(x)).value) - x) ** 2).sum(1)
    assert err_x.mean() <= mech.mse_bound(d) + 4 * err_x.std() / math.sqrt(N)


def test_the_compact_mechanisms_cost_little_error_over_privunitg():
    """At ε = 1 and d = 131 (PGC-A3C's tuned-ldp gradient): the exact formulas."""
    base = PrivUnitGMechanism(1.0, 1.0).mse_bound(131)
    assert SeedPrivUnitGMechanism(1.0, 1.0).mse_bound(131) <= base * (1 + 1e-5)
    assert ProjUnitMechanism(1.0, 1.0, k=16).mse_bound(131) <= 1.05 * base


@pytest.mark.parametrize("mech", [ProjUnitMechanism(2.0, 1.0, k=3),
                                  SeedPrivUnitGMechanism(2.0, 1.0)])
def test_the_report_is_the_decoded_upload_of_the_stated_size(mech):
    """Encoding, decoding and the release each jitted (op by op, each compiled dozens of
    programs); the release called twice, as a user calls it."""
    d, key = 9, jax.random.key(4)
    x = jnp.linspace(-0.3, 0.4, d)
    upload = jax.jit(lambda k, v: mech.encode(k, mech.lift(v)))(key, x)
    size = sum(np.asarray(a).nbytes for a in jax.tree_util.tree_leaves(upload))
    assert size == mech.upload_bytes(d)
    decoded = mech.clip * jax.jit(partial(mech.decode, d + 1))(upload)[:-1]
    release = jax.jit(lambda k, v: mech.privatize(k, v).value)
    np.testing.assert_allclose(release(key, x), decoded, rtol=1e-6, atol=1e-7)
    assert np.array_equal(release(key, x), release(key, x))


def test_seed_compression_epsilon_statements():
    m = SeedPrivUnitGMechanism(1.0, 1.0)
    d = 131
    t, a = m.tries(d), m.acceptance(d)
    cal = m.calibration(d)
    assert a == pytest.approx((1 / (1 + math.exp(cal.size_epsilon))) / cal.p)
    assert (1 - a) ** (t - 1) <= m.failure < (1 - a) ** (t - 2)  # the fewest tries
    assert m.epsilon_for(d, 0.0) <= m.epsilon  # ideal generator: the stated ε
    # any generator: 2ε + log(1 − (1 − e^{−ε})^T), below 2ε
    any_gen = 2 * m.epsilon + math.log1p(-(1 - math.exp(-m.epsilon)) ** t)
    assert m.epsilon_for(d, None) == pytest.approx(any_gen, rel=1e-12)
    assert m.epsilon < any_gen < 2 * m.epsilon == m.params()["epsilon_any_generator_below"]
    eta = [m.epsilon_for(d, e) for e in (0.0, 1e-4, 1e-2, 1.0)]
    assert eta == sorted(eta) and eta[-1] == pytest.approx(any_gen)
    for kw in [dict(epsilon=6.5, clip=1.0), dict(epsilon=1.0, clip=1.0, failure=0.0)]:
        with pytest.raises(ValueError):
            SeedPrivUnitGMechanism(**kw)


def test_the_seed_density_is_the_samplers():
    """The output law `_seed_density` states, against the sampler run on a 4-seed generator
    (acceptances 1, e^{−ε}, e^{−ε}, 1: any generator is such a table), 4·10⁵ runs."""
    eps, tries = 1.0, 3
    pi = np.array([1.0, math.exp(-eps), math.exp(-eps), 1.0])
    rng = np.random.default_rng(2)
    n = 400_000
    seeds = rng.integers(0, 4, (n, tries))
    accept = rng.random((n, tries)) < pi[seeds]
    accept[:, -1] = True
    out = seeds[np.arange(n), accept.argmax(1)]
    freq = np.bincount(out, minlength=4) / n
    want = np.array([_seed_density(q, pi.mean(), tries) for q in pi]) / 4
    assert want.sum() == pytest.approx(1.0)
    assert np.all(np.abs(freq - want) < 5 * np.sqrt(want * (1 - want) / n)), (freq, want)


@pytest.mark.parametrize("mech", [ProjUnitMechanism(2.0, 1.0, k=2),
                                  SeedPrivUnitGMechanism(2.0, 1.0)])
def test_audit_keeps_the_claim(mech):
    from privrl.audit import audit_mechanism

    res = audit_mechanism(mech, key=jax.random.key(0), samples=40_000, confidence=1 - 1e-6,
                          dim=3)
    assert 0.8 * mech.epsilon < res.epsilon_lower <= mech.epsilon, res
