"""The audit's lower bound: valid for every built-in mechanism, and it refutes broken ones.

Why a correct mechanism cannot fail these tests by bad luck: every audit here runs at
confidence 1 − 1e-6, so for a mechanism whose true ε is at most its claim the bound exceeds
the claim with probability ≤ 1e-6 (the held-out Clopper–Pearson bound is valid whatever
threshold was selected); the seeds are fixed, so each outcome is also reproducible. The broken
mechanisms leak 2× (half noise) or 4× (no clip) their claim, far beyond the bound's slack at
these sample sizes (measured margins in the asserts), so the detection tests have high power.
(A Gaussian mechanism with half its noise is NOT in them: its extra leak lives in tails of
probability ~δ = 1e-5, which 10⁴ draws do not reach; docs/audit.md says so.)
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.audit import FunctionalNoiseRelease, audit_mechanism
from privrl.audit.broken import HalfNoiseLaplace, UnclippedLaplace
from privrl.audit.stats import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_bound,
)
from privrl.config import ConfigError
from privrl.privacy.accounting import calibrate_noise_multiplier
from privrl.privacy.mechanisms import (
    BoxGaussianMechanism,
    GaussianMechanism,
    GaussianSumMechanism,
    IdentityMechanism,
    LaplaceMechanism,
    ProjectedRandomSignMechanism,
)
from privrl.privacy.report import Guarantee

CONF = 1 - 1e-6
N = 20_000  # draws per input: half select the threshold, half bound ε


def _nm(eps: float) -> float:
    """The noise multiplier of one Gaussian release with ε at δ = 1e-5."""
    return calibrate_noise_multiplier(eps, 1e-5, 1)


def test_clopper_pearson_closed_forms():
    n, a = 50, 0.05
    # k = 0: the upper bound solves (1 − p)^n = α; k = n: the lower bound solves p^n = α.
    assert float(clopper_pearson_upper(0, n, a)) == pytest.approx(1 - a ** (1 / n))
    assert float(clopper_pearson_lower(n, n, a)) == pytest.approx(a ** (1 / n))
    assert float(clopper_pearson_lower(0, n, a)) == 0.0
    assert float(clopper_pearson_upper(n, n, a)) == 1.0
    k = np.arange(n + 1)
    assert np.all(clopper_pearson_lower(k, n, a) <= k / n)
    assert np.all(clopper_pearson_upper(k, n, a) >= k / n)


def test_bound_covers_the_true_epsilon_at_its_confidence():
    """Counts of a fixed set S under P_a = p, P_b = e^ε p: the 95 % bound exceeds ε in at most
    5 % of 20 000 repetitions (binomial sd of the rate ≈ 0.15 %, so 6 % is > 6 sd away)."""
    rng = np.random.default_rng(0)
    eps, p, n = 1.0, 0.05, 2000
    ka = rng.binomial(n, p, 20_000)
    kb = rng.binomial(n, math.exp(eps) * p, 20_000)
    bounds = epsilon_bound(ka, kb, n, 0.0, 0.05)
    assert np.mean(bounds > eps) < 0.06
    assert np.mean(bounds) > 0.5  # and the bound is not vacuous


def _builtin() -> list:
    return [
        LaplaceMechanism(1.0, 1.0),
        ProjectedRandomSignMechanism(2.0, 1.0),
        GaussianMechanism(2 * _nm(1.0), 1.0),
        BoxGaussianMechanism((0.0, -1.0), (1.0, 1.0), _nm(2.0)),
        GaussianSumMechanism(1.0, 1.0, sampling_probability=0.2),
        FunctionalNoiseRelease(sigma=4.0),
    ]


@pytest.mark.parametrize("mechanism", _builtin(), ids=lambda m: m.name)
def test_builtin_mechanisms_keep_their_claim(mechanism):
    r = audit_mechanism(mechanism, key=jax.random.key(1), samples=N, confidence=CONF)
    assert r.epsilon_lower <= r.epsilon_claimed, r
    assert not r.violated
    assert r.epsilon_lower > 0.0, r  # the audit sees the mechanism's leak at all


@pytest.mark.parametrize("mechanism", [
    HalfNoiseLaplace(1.0, 1.0),  # claims ε = 1, true ε = 2
    UnclippedLaplace(1.0, 1.0),  # claims ε = 1, 4 on the default pair
], ids=lambda m: m.name)
def test_broken_mechanisms_are_caught(mechanism):
    r = audit_mechanism(mechanism, key=jax.random.key(2), samples=N, confidence=CONF)
    assert r.violated and r.epsilon_lower > 1.2 * r.epsilon_claimed, r


def test_laplace_bound_is_tight_with_enough_draws():
    """At 95 % and 200 000 draws the bound is within 10 % of Laplace's exact ε = 1."""
    r = audit_mechanism(LaplaceMechanism(1.0, 1.0), key=jax.random.key(3), samples=200_000)
    assert 0.9 <= r.epsilon_lower <= 1.0, r


class _UserMechanism:
    """A user's mechanism: randomized response on one bit, ε = log 3, output as an array."""

    guarantee = Guarantee(epsilon=math.log(3.0), delta=0.0, notion="ε-DP", unit="one bit",
                          neighbouring="the bit flipped")

    def privatize(self, key, x):
        keep = jax.random.bernoulli(key, 0.75)
        return jnp.where(keep, x, 1.0 - x)


def test_a_users_mechanism_with_a_pair():
    m = _UserMechanism()
    r = audit_mechanism(m, key=jax.random.key(4), samples=N, confidence=CONF,
                        pair=(jnp.zeros(1), jnp.ones(1)))
    assert 0.8 * math.log(3.0) < r.epsilon_lower <= math.log(3.0), r
    with pytest.raises(ConfigError, match="pair"):
        audit_mechanism(m, key=jax.random.key(4), samples=N)


def test_no_guarantee_no_audit():
    with pytest.raises(ConfigError, match="nothing to audit"):
        audit_mechanism(IdentityMechanism(), key=jax.random.key(0))
    with pytest.raises(ConfigError, match="samples"):
        audit_mechanism(LaplaceMechanism(1.0, 1.0), key=jax.random.key(0), samples=3)
