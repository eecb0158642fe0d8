"""Byzantine-robust aggregation (privrl.federation.robust): FedPG-BR's filter and the
coordinate-wise rules, on reports whose honest spread is known."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.federation.robust import fedpg_br_keep, robust_mean, trimmed_mean
from privrl.privacy.mechanisms import IdentityMechanism

K, D = 10, 50
BYZ = np.array([0, 3, 7])  # three of ten


def reports(values):
    return jax.vmap(IdentityMechanism().privatize)(jax.random.split(jax.random.key(0), K),
                                                   values)


def honest(key, spread):
    """K estimates of one gradient g (norm 1), each within `spread` of g."""
    k_g, k_dir, k_len = jax.random.split(key, 3)
    g = jax.random.normal(k_g, (D,))
    g = g / jnp.linalg.norm(g)
    u = jax.random.normal(k_dir, (K, D))
    u = u / jnp.linalg.norm(u, axis=1, keepdims=True)
    return g, g + u * spread * jax.random.uniform(k_len, (K, 1))


@pytest.mark.parametrize("seed", range(20))
def test_fedpg_br_removes_sign_flippers_and_keeps_the_honest(seed):
    """Honest estimates within ρ = 0.3 of g (threshold 2ρ, as 𝔗 = 2σ√(V/B) is for σ√(V/B));
    three agents send −2.5× theirs. The filter keeps exactly the seven honest ones and its mean
    points along g; the plain mean points against it ((7 − 7.5)/10 of g, FedPG-BR's example)."""
    keep, robust, plain, kept_all = map(np.asarray, _flipped(jax.random.key(seed), 0.3))
    expect = np.ones(K, bool)
    expect[BYZ] = False
    assert (keep == expect).all()
    assert float(robust) > 0.8
    assert float(plain) < 0 and bool(kept_all)


@jax.jit  # one program for every seed (eager, each op compiled one of its own)
def _flipped(key: jax.Array, rho: jax.Array) -> tuple[jax.Array, ...]:
    """The sign-flip test's round: FedPG-BR's keep mask, the robust and the plain mean's
    projection on g, and whether the plain mean kept every agent."""
    g, mu = honest(key, rho)
    mu = mu.at[BYZ].multiply(-2.5)
    keep = fedpg_br_keep(mu, 2 * rho, 4 * rho, 0.4)
    robust, _ = robust_mean(reports(mu), "fedpg-br", 2 * rho, 4 * rho)
    plain, kept_all = robust_mean(reports(mu), "none")
    return keep, jnp.dot(robust, g), jnp.dot(plain, g), kept_all.all()


def test_fedpg_br_falls_back_to_r2_when_r1_keeps_too_few():
    """A threshold too tight for the honest spread: R1 keeps fewer than (1 − α)K, so R2 at the
    wider radius decides, and keeps the honest ones."""
    @jax.jit  # one program (eager, each op compiled one of its own)
    def rounds(key: jax.Array) -> tuple[jax.Array, ...]:
        _, mu = honest(key, 0.3)
        mu = mu.at[BYZ].multiply(-2.5)
        tight, wide = jnp.asarray(0.05), jnp.asarray(0.6)
        mean, _ = robust_mean(reports(mu), "fedpg-br", tight, tight)
        return (fedpg_br_keep(mu, tight, wide, 0.4), fedpg_br_keep(mu, tight, tight, 0.4),
                mean)

    keep, none_kept, mean = map(np.asarray, rounds(jax.random.key(1)))
    assert keep.sum() == K - len(BYZ) and not keep[BYZ].any()
    # and with no usable radius at all it keeps nothing, and the mean is 0 (not NaN)
    assert not bool(none_kept.any())
    assert bool(np.all(mean == 0))


def test_coordinate_rules():
    values = jnp.arange(K, dtype=jnp.float32)[:, None] * jnp.ones((K, 3))
    values = values.at[0].set(-1e6)  # one outlier
    med, _ = robust_mean(reports(values), "median")
    assert np.allclose(med, 4.5)  # the median of -1e6, 1, ..., 9: (4 + 5)/2, the outlier ignored
    # α = 0.4: drop 4 at each end, the mean of the middle two (4, 5)
    tm, _ = robust_mean(reports(values), "trimmed-mean", alpha=0.4)
    assert np.allclose(tm, 4.5)
    assert np.allclose(trimmed_mean(values, 0), jnp.mean(values, axis=0))
    with pytest.raises(ValueError, match="unknown robust rule"):
        robust_mean(reports(values), "krum")
