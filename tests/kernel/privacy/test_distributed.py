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
