"""Distributed Gaussian noise with a simulated secure aggregation (user-level DP, issue 19)."""

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from privrl.privacy.accounting import PLD_DISCRETIZATION, Accountant
from privrl.privacy.distributed import (
    DistributedGaussianMechanism,
    RoundBudget,
    Share,
    secure_aggregate,
)
from privrl.privacy.ledger import BudgetExceededError
from privrl.privacy.report import Report


def _round(mech: DistributedGaussianMechanism, key, x, sampled) -> Report:
    keys = jax.random.split(key, mech.agents)
    return secure_aggregate(jax.vmap(mech.share)(keys, x, sampled))


def test_the_sum_carries_the_full_noise_variance():
    """K = 50 agents, shares sized for m = 40: the sum's noise variance per coordinate is
    K/m·σ²C². 40 rounds × 100 coordinates = 4,000 draws: the sample variance's relative std
    is sqrt(2/4000) = 2.2%, so a 10% tolerance is 4.5 standard deviations."""
    mech = DistributedGaussianMechanism(2.0, 0.5, agents=50, min_honest=40)
    x = jnp.zeros((50, 100))
    none = jnp.zeros((50,), bool)
    run = jax.jit(lambda k: _round(mech, k, x, none).value)
    sums = np.stack([np.asarray(run(k)) for k in jax.random.split(jax.random.key(0), 40)])
    expected = 50 / 40 * (2.0 * 0.5) ** 2
    assert np.var(sums) == pytest.approx(expected, rel=0.10)
    assert mech.share_std == pytest.approx(2.0 * 0.5 / math.sqrt(40))


def test_the_sum_holds_the_clipped_updates_of_the_sampled_agents_only():
    """The noise is the same draw whatever is sampled (same keys), so the difference of two
    sums is exactly the clipped updates of the agents that differ."""
    mech = DistributedGaussianMechanism(1.0, 1.0, agents=4)
    x = jnp.array([[3.0, 4.0], [0.3, 0.4], [10.0, 0.0], [0.0, -0.5]])
    key = jax.random.key(1)
    noise = _round(mech, key, x, jnp.zeros(4, bool)).value
    some = _round(mech, key, x, jnp.array([True, True, False, True])).value
    np.testing.assert_allclose(some - noise, [0.6 + 0.3 + 0.0, 0.8 + 0.4 - 0.5], atol=1e-5)


def test_secure_aggregation_returns_only_the_sum_as_a_report():
    mech = DistributedGaussianMechanism(1.0, 1.0, agents=3)
    keys = jax.random.split(jax.random.key(2), 3)
    shares = jax.vmap(mech.share)(keys, jnp.ones((3, 5)), jnp.ones(3, bool))
    report = secure_aggregate(shares)
    assert isinstance(report, Report) and report.value.shape == (5,)
    assert report.guarantee == mech.guarantee
    assert "user level" in report.guarantee.unit and "zero-out" in report.guarantee.neighbouring
    np.testing.assert_allclose(report.value, np.asarray(shares._value).sum(axis=0), rtol=1e-6)
    with pytest.raises(TypeError):
        Share(jnp.ones(5))
    assert not isinstance(shares, Report)  # a share is never a releasable Report


@pytest.mark.parametrize("q", [1.0, 0.05])
def test_accounting_equals_a_direct_dp_accounting_computation(q):
    mech = DistributedGaussianMechanism(1.3, 1.0, agents=100, sampling_rate=q)
    acc = Accountant("pld")
    acc.compose(mech.event, 50)
    base = dp_accounting.GaussianDpEvent(1.3)
    event = base if q == 1 else dp_accounting.PoissonSampledDpEvent(q, base)
    if q == 1:  # the exact analytic Gaussian: 50 releases = one with multiplier 1.3/√50
        direct = dp_accounting.get_epsilon_gaussian(1.3 / math.sqrt(50), 1e-5)
        assert acc.epsilon(1e-5) == pytest.approx(direct, rel=1e-9)
    else:
        pld = PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
        pld.compose(event, 50)
        assert acc.epsilon(1e-5) == pytest.approx(pld.get_epsilon(1e-5), rel=1e-12)
    rdp = RdpAccountant()
    rdp.compose(event, 50)
    rdp_acc = Accountant("rdp")
    rdp_acc.compose(mech.event, 50)
    assert rdp_acc.epsilon(1e-5) == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-12)
    record = acc.record(1e-5)
    assert record["events"] == [{**mech.event.to_dict(), "count": 50}]


def test_round_budget_refuses_beyond_the_rounds_that_fit():
    mech = DistributedGaussianMechanism(5.0, 1.0, agents=10)
    budget = RoundBudget(mech.event, 2.0, 1e-5, 1000, "pld")
    n = budget.allowed
    assert 0 < n < 1000
    assert Accountant("pld").epsilon_if(mech.event, n, 1e-5) <= 2.0
    assert Accountant("pld").epsilon_if(mech.event, n + 1, 1e-5) > 2.0
    for _ in range(n):
        budget.charge()
    with pytest.raises(BudgetExceededError):
        budget.charge()
    assert budget.rounds == n and budget.accountant.events[0][1] == n


def test_dropouts_degrade_the_noise_multiplier():
    mech = DistributedGaussianMechanism(4.0, 1.0, agents=100, min_honest=80)
    assert mech.effective_noise_multiplier(100) == 4.0
    assert mech.effective_noise_multiplier(80) == 4.0
    assert mech.effective_noise_multiplier(20) == pytest.approx(4.0 * math.sqrt(20 / 80))


@pytest.mark.parametrize("kwargs", [dict(min_honest=11), dict(min_honest=0),
                                    dict(sampling_rate=0.0), dict(sampling_rate=1.5)])
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        DistributedGaussianMechanism(1.0, 1.0, agents=10, **kwargs)


def test_each_agent_samples_itself_with_rate_q():
    """20,000 agents' own keys, q = 0.1: the sampled fraction's std is sqrt(q(1-q)/n) = 0.0021,
    so ±0.01 is 4.7 standard deviations; q = 1 samples everyone."""
    keys = jax.random.split(jax.random.key(5), 20_000)
    sampled = DistributedGaussianMechanism(1.0, 1.0, agents=20_000, sampling_rate=0.1).sample(keys)
    assert abs(float(jnp.mean(sampled)) - 0.1) < 0.01
    assert bool(jnp.all(DistributedGaussianMechanism(1.0, 1.0, agents=3).sample(keys[:3])))


# --- adaptive clipping (Andrew et al. 2021) ---------------------------------------------------
@pytest.mark.parametrize("z_delta, sigma_b, clip", [(1.0, 2.5, 1.0), (3.0, 0.8, 0.3),
                                                    (0.5, 10.0, 7.0)])
def test_adaptive_round_is_the_gaussian_mechanism_with_the_joint_multiplier(z_delta, sigma_b,
                                                                            clip):
    """The derivation, on the code's own messages: one agent (update beyond the clip, so its
    bit is 0) moves the sum by its message [clip_C(x), (0 − ½)κ], κ = z_Δ C/σ_b, of L2 norm
    sqrt(C² + κ²/4); the sum's noise std is z_Δ C on every coordinate. Their ratio is the
    multiplier z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2) the round is accounted with, and
    update_noise_multiplier inverts it."""
    from privrl.privacy.distributed import (
        AdaptiveClip,
        joint_noise_multiplier,
        update_noise_multiplier,
    )

    z = (z_delta ** -2 + (2 * sigma_b) ** -2) ** -0.5
    assert joint_noise_multiplier(z_delta, sigma_b) == pytest.approx(z, rel=1e-12)
    assert update_noise_multiplier(z, sigma_b) == pytest.approx(z_delta, rel=1e-9)
    mech = DistributedGaussianMechanism(z, clip, agents=3, adaptive=AdaptiveClip(sigma_b))
    assert mech.update_multiplier == pytest.approx(z_delta, rel=1e-9)
    x = jnp.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]) * clip  # ‖x₀‖ = 5C
    key = jax.random.key(7)
    with_agent = _round(mech, key, x, jnp.array([True, False, False])).value
    without = _round(mech, key, x, jnp.zeros(3, bool)).value  # zero-out: same noise
    moved = np.asarray(with_agent - without, np.float64)
    kappa = z_delta * clip / sigma_b
    np.testing.assert_allclose(moved, [0.6 * clip, 0.8 * clip, 0.0, -kappa / 2], rtol=1e-5,
                               atol=1e-6 * clip)
    sensitivity = math.hypot(clip, kappa / 2)
    assert np.linalg.norm(moved) == pytest.approx(sensitivity, rel=1e-5)
    sum_std = mech.share_std * math.sqrt(mech.min_honest)
    assert sum_std == pytest.approx(z_delta * clip, rel=1e-9)
    assert sum_std / sensitivity == pytest.approx(z, rel=1e-9)
    assert mech.event == DistributedGaussianMechanism(z, clip, agents=3).event  # same account


def test_adaptive_split_needs_enough_bit_noise():
    from privrl.privacy.distributed import AdaptiveClip, update_noise_multiplier

    with pytest.raises(ValueError, match="σ_b"):
        update_noise_multiplier(2.0, 1.0)  # 2σ_b = z: z_Δ would be infinite
    with pytest.raises(ValueError, match="σ_b"):
        DistributedGaussianMechanism(2.0, 1.0, agents=3, adaptive=AdaptiveClip(0.9))
    for kwargs in (dict(quantile=0.0), dict(quantile=1.0), dict(learning_rate=0.0),
                   dict(count_stddev=-1.0)):
        with pytest.raises(ValueError):
            AdaptiveClip(**{"count_stddev": 1.0, **kwargs})


def test_adaptive_bit_sum_is_noised_with_std_sigma_b():
    """Nobody sampled: the server's bit fraction b̄ = ½ + (noise)/(q·K), so (b̄ − ½)·q·K is
    the bit sum's noise alone. 4,000 rounds (fixed seed): the sample std's relative std is
    sqrt(1/(2·4000)) = 1.1%, so 5% is 4.5 standard deviations. All sampled, with known bits:
    the mean of b̄ is the true fraction 5/8 (the mean's std over 4,000 rounds:
    σ_b/K/sqrt(4000) = 0.0030, so ±0.012 is 4 standard deviations)."""
    from privrl.privacy.distributed import AdaptiveClip

    k, sigma_b, clip = 8, 1.5, 0.7
    mech = DistributedGaussianMechanism(2.0, clip, agents=k, adaptive=AdaptiveClip(sigma_b))
    x = jnp.zeros((k, 3)).at[:3, 0].set(5.0)  # 3 agents beyond the clip, 5 within

    def fraction(key, sampled):
        keys = jax.random.split(key, k)
        shares = jax.vmap(mech.share, (0, 0, 0, None))(keys, x, sampled, jnp.float32(clip))
        return mech.unpack(secure_aggregate(shares), jnp.float32(clip), float(k))[1]

    keys = jax.random.split(jax.random.key(11), 4000)
    none = jax.jit(jax.vmap(lambda kk: fraction(kk, jnp.zeros(k, bool))))(keys)
    assert np.std(np.asarray(none - 0.5) * k) == pytest.approx(sigma_b, rel=0.05)
    everyone = jax.jit(jax.vmap(lambda kk: fraction(kk, jnp.ones(k, bool))))(keys)
    assert float(jnp.mean(everyone)) == pytest.approx(5 / 8, abs=0.012)


def test_adaptive_clip_tracks_the_target_quantile_of_the_update_norms():
    """Negligible noise (z = 1e-3, σ_b = 1e-3), q = 1, K = 100 agents whose update norms are
    1, 2, ..., 100: from C_0 = 1, C_{t+1} = C_t·exp(−0.2(b̄_t − 0.3)) climbs to the 0.3
    quantile of the norms (30) and stays within one step of it (|Δ log C| <= 0.2·0.7)."""
    from privrl.privacy.distributed import AdaptiveClip

    k = 100
    mech = DistributedGaussianMechanism(1e-3, 1.0, agents=k,
                                        adaptive=AdaptiveClip(1e-3, quantile=0.3))
    norms = jnp.arange(1.0, k + 1)
    x = jnp.stack([norms * 0.6, norms * 0.8], axis=1)
    sampled = jnp.ones(k, bool)

    def step(clip, key):
        keys = jax.random.split(key, k)
        shares = jax.vmap(mech.share, (0, 0, 0, None))(keys, x, sampled, clip)
        update, frac = mech.unpack(secure_aggregate(shares), clip, float(k))
        clipped = jnp.sum(x * jnp.minimum(1.0, clip / norms)[:, None], axis=0)
        return mech.adaptive.next_clip(clip, frac), (clip, update.value - clipped)

    final, (path, err) = jax.jit(lambda ks: jax.lax.scan(step, jnp.float32(1.0), ks))(
        jax.random.split(jax.random.key(3), 300))
    assert float(jnp.max(jnp.abs(err))) < 1e-2 * float(jnp.max(path))  # the update sum
    assert 25 < float(final) < 36
    path = np.asarray(path)
    assert path[0] == 1.0 and np.all(np.diff(path[:40]) > 0)  # climbing from below
    tail = path[-100:]
    assert np.all((tail > 30 * math.exp(-0.2 * 0.7)) & (tail < 31 * math.exp(0.2 * 0.7))), tail
    fraction_within = np.mean(np.asarray(norms)[None, :] <= tail[:, None], axis=1)
    assert abs(float(np.mean(fraction_within)) - 0.3) < 0.02
