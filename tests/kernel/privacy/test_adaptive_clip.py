"""Adaptive clipping's kernel (issue 51): the one geometric clip update, the clip bit's
randomized response and its debiased fraction, and the ε split the plan makes for it."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy.clipping import (
    ClipBitRelease,
    debiased_bit_fraction,
    geometric_clip_update,
    randomized_response_keep,
)
from privrl.privacy.distributed import AdaptiveClip
from privrl.privacy.plan import PlanError, split_clip_bit


def test_geometric_update_moves_the_clip_toward_the_quantile():
    # Andrew et al. eq. 2: C·exp(−η(b̄ − γ)); too many within the clip shrinks it.
    assert float(geometric_clip_update(2.0, 0.9, 0.5, 0.2)) == pytest.approx(
        2.0 * math.exp(-0.2 * 0.4))
    assert float(geometric_clip_update(2.0, 0.1, 0.5, 0.2)) > 2.0
    assert float(geometric_clip_update(2.0, 0.5, 0.5, 0.2)) == pytest.approx(2.0)
    # FedPG-Cen's adaptive clip is the same update (one implementation).
    assert float(AdaptiveClip(1.0, 0.3, 0.7).next_clip(jnp.float32(1.5), 0.8)) == \
        pytest.approx(float(geometric_clip_update(1.5, 0.8, 0.3, 0.7)))


def test_clip_bit_is_kept_with_randomized_responses_probability():
    eps = 1.0
    release = ClipBitRelease(eps)
    keys = jax.random.split(jax.random.key(0), 20_000)
    bits = np.asarray(jax.vmap(release.privatize, (0, None))(keys, jnp.bool_(True)).value)
    p = math.exp(eps) / (1 + math.exp(eps))
    assert randomized_response_keep(eps) == pytest.approx(p)
    # 20,000 draws: the standard error of the mean is ≈ 0.0029; 4 of them.
    assert abs(bits.mean() - p) < 4 * math.sqrt(p * (1 - p) / 20_000)
    assert release.guarantee.epsilon == eps and release.guarantee.notion == "ε-LDP"
    for bad in (0.0, -1.0, math.inf, float("nan"), True):
        with pytest.raises(ValueError):
            ClipBitRelease(bad)


def test_debiased_fraction_is_unbiased_and_ignores_agents_who_did_not_report():
    n, eps, true = 40_000, 0.5, 0.3
    k_bits, k_rr = jax.random.split(jax.random.key(1))
    within = jax.random.uniform(k_bits, (n,)) < true
    released = jax.vmap(ClipBitRelease(eps).privatize)(jax.random.split(k_rr, n), within).value
    live = jnp.arange(n) < n - 100  # the last 100 did not report: they must not count
    released = jnp.where(live, released, 1.0)
    est = float(debiased_bit_fraction(released, live, eps))
    p = randomized_response_keep(eps)
    se = math.sqrt(0.25 / n) / (2 * p - 1)  # the estimator's worst-case standard error
    assert abs(est - float(jnp.mean(within[:n - 100]))) < 4 * se
    assert math.isnan(float(debiased_bit_fraction(released, jnp.zeros(n, bool), eps)))


def test_private_clip_follows_the_median_of_the_agents_norms():
    # 200 rounds of 300 agents with log-normal norms (median e^0 = 1), the clip starting 100×
    # too small, bits by randomized response at ε = 1: the clip ends near the median.
    rng = np.random.default_rng(2)
    release = ClipBitRelease(1.0)
    clip, key = 0.01, jax.random.key(3)
    for _ in range(200):
        norms = rng.lognormal(0.0, 1.0, 300)
        key, k = jax.random.split(key)
        bits = jax.vmap(release.privatize)(jax.random.split(k, 300),
                                           jnp.asarray(norms <= clip)).value
        fraction = debiased_bit_fraction(bits, jnp.ones(300, bool), 1.0)
        clip = float(geometric_clip_update(clip, fraction, 0.5, 0.2))
    assert 0.7 < clip < 1.4


def test_the_plan_splits_a_reports_epsilon_between_update_and_bit():
    update, bit = split_clip_bit(5.0, 0.1)
    assert bit == pytest.approx(0.5) and update == pytest.approx(4.5)
    assert update + bit == pytest.approx(5.0)
    for share in (0.0, 1.0, -0.1, True):
        with pytest.raises(PlanError, match="clip_epsilon_share"):
            split_clip_bit(5.0, share)
    with pytest.raises(PlanError, match="adaptive_clip"):
        split_clip_bit(math.inf, 0.1)
