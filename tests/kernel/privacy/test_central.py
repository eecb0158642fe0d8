"""Central DP for a robust aggregate (privrl.privacy.central): the coordinate-wise rules'
sensitivity diameter/(values kept per coordinate), checked on random and tight neighbours."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.federation.robust import coordinate_median, trimmed_mean
from privrl.privacy.central import CentralGaussian, kept_per_coordinate


def _rule(name, values, trim):
    if name == "none":
        return jnp.mean(values, axis=0)
    if name == "median":
        return coordinate_median(values)
    return trimmed_mean(values, trim)


@pytest.mark.parametrize("rule,k,trim", [("none", 10, 0), ("trimmed-mean", 10, 3),
                                         ("trimmed-mean", 9, 2), ("median", 10, 0),
                                         ("median", 9, 0)])
def test_rule_moves_at_most_diameter_over_kept(rule, k, trim):
    """Updates in the L2 ball of radius 1/2 (diameter 1); replace one by any other: the rule's
    output moves by at most 1/kept in L2, over 300 random neighbours (some replacements pushed
    to the ball's far side)."""
    kept = kept_per_coordinate(rule, k, trim)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(300):
        v = rng.normal(size=(k, 6))
        v = 0.5 * v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1.0) * rng.uniform(
            0.2, 1.0, (k, 1))
        w = v.copy()
        i = rng.integers(k)
        w[i] = -0.5 * v[i] / max(np.linalg.norm(v[i]), 1e-9)  # the far side of the ball
        moved = float(jnp.linalg.norm(_rule(rule, jnp.asarray(v), trim)
                                      - _rule(rule, jnp.asarray(w), trim)))
        worst = max(worst, moved)
    assert worst <= 1.0 / kept + 1e-6


@pytest.mark.parametrize("k,trim", [(10, 3), (9, 2), (10, 0)])
def test_trimmed_mean_bound_is_tight(k, trim):
    """One coordinate: t values at −1, K − 2t at 0, t at 1; a middle 0 moved to Δ = 0.5 (still
    in the middle) moves the trimmed mean by exactly Δ/(K − 2t)."""
    v = jnp.asarray([-1.0] * trim + [0.0] * (k - 2 * trim) + [1.0] * trim)[:, None]
    w = v.at[trim].set(0.5)
    moved = float(jnp.abs(trimmed_mean(w, trim) - trimmed_mean(v, trim))[0])
    assert moved == pytest.approx(0.5 / (k - 2 * trim))


def test_kept_and_noise():
    assert kept_per_coordinate("none", 10) == 10
    assert kept_per_coordinate("trimmed-mean", 10, 3) == 4
    assert kept_per_coordinate("median", 10) == 2 and kept_per_coordinate("median", 9) == 1
    with pytest.raises(ValueError):
        kept_per_coordinate("fedpg-br", 10)
    with pytest.raises(ValueError):
        kept_per_coordinate("trimmed-mean", 10, 5)
    c = CentralGaussian(noise_multiplier=2.0, diameter=1.0, kept=4)
    assert c.sensitivity == 0.25 and c.std == 0.5 and c.event.noise_multiplier == 2.0
    draws = c.release(jax.random.key(0), jnp.zeros((20000,)))
    assert float(jnp.std(draws)) == pytest.approx(0.5, rel=0.03)
