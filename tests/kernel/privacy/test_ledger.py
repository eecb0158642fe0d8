"""Tests for PrivacyLedger: basic sequential composition, refusal before release, atomicity."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privrl.privacy import (
    BudgetExceededError,
    Guarantee,
    IdentityMechanism,
    LaplaceMechanism,
    PrivacyLedger,
    ProjectedRandomSignMechanism,
)


def _g(epsilon: float, delta: float = 0.0) -> Guarantee:
    return Guarantee(
        epsilon=epsilon, delta=delta, notion="ε-LDP", unit="test report", neighbouring="any"
    )


def _state(ledger: PrivacyLedger, agents=range(6)) -> tuple:
    return (
        ledger.num_reports,
        ledger.num_agents,
        tuple(ledger.spent(a) for a in agents),
        tuple(ledger.reports_of(a) for a in agents),
        json.dumps(ledger.summary(), sort_keys=True),
    )


# --- composition ---------------------------------------------------------------------------


def test_charges_compose_additively() -> None:
    ledger = PrivacyLedger(epsilon_budget=10.0)
    g = LaplaceMechanism(epsilon=1.0, clip=1.0).guarantee
    for _ in range(3):
        ledger.charge(0, g)
    assert ledger.spent(0) == (3.0, 0.0)
    assert ledger.reports_of(0) == 3
    assert ledger.num_reports == 3
    assert ledger.num_agents == 1
    # A different mechanism composes with the first (Σε over all releases).
    ledger.charge(0, ProjectedRandomSignMechanism(epsilon=2.5, clip=1.0).guarantee)
    assert ledger.spent(0) == (5.5, 0.0)
    # count=k is the same as k separate charges.
    ledger.charge(1, g, count=3)
    assert ledger.spent(1) == (3.0, 0.0)
    assert ledger.reports_of(1) == 3
    # Deltas compose too.
    ledger_d = PrivacyLedger(epsilon_budget=10.0, delta_budget=1e-5)
    ledger_d.charge(7, _g(1.0, 1e-6), count=4)
    assert ledger_d.spent(7) == pytest.approx((4.0, 4e-6))


def test_unknown_agents_have_spent_nothing() -> None:
    ledger = PrivacyLedger(epsilon_budget=1.0)
    assert ledger.spent(0) == (0.0, 0.0)
    assert ledger.spent(10**6) == (0.0, 0.0)
    assert ledger.reports_of(5) == 0
    assert ledger.num_agents == 0 and ledger.num_reports == 0
    ledger.charge(3, _g(0.5))
    assert ledger.spent(2) == (0.0, 0.0)  # grown storage, but agent 2 released nothing
    assert ledger.num_agents == 1
    with pytest.raises(ValueError):
        ledger.spent(-1)


def test_multi_agent_charge_and_per_agent_counts() -> None:
    ledger = PrivacyLedger(epsilon_budget=10.0)
    ledger.charge([0, 2, 5], _g(1.0))
    ledger.charge(np.array([2, 5]), _g(1.0), count=[1, 3])
    assert [ledger.spent(a)[0] for a in range(6)] == [1.0, 0.0, 2.0, 0.0, 0.0, 4.0]
    assert [ledger.reports_of(a) for a in range(6)] == [1, 0, 2, 0, 0, 4]
    assert ledger.num_agents == 3
    assert ledger.num_reports == 7


# --- refusal -------------------------------------------------------------------------------


def test_over_budget_refused_and_state_unchanged() -> None:
    ledger = PrivacyLedger(epsilon_budget=3.0)
    g = _g(1.0)
    ledger.charge(0, g, count=2)
    before = _state(ledger)
    assert not ledger.can_charge(0, g, count=2)
    with pytest.raises(BudgetExceededError, match="refused"):
        ledger.charge(0, g, count=2)
    assert _state(ledger) == before
    assert ledger.spent(0) == (2.0, 0.0) and ledger.num_reports == 2
    # The budget is still usable up to its limit after a refusal ...
    assert ledger.can_charge(0, g)
    ledger.charge(0, g)
    assert ledger.spent(0) == (3.0, 0.0) and ledger.num_reports == 3
    # ... and not beyond, however small the extra release.
    before = _state(ledger)
    for eps in (1.0, 1e-3, 1e-6):
        with pytest.raises(BudgetExceededError):
            ledger.charge(0, _g(eps))
        assert _state(ledger) == before
    # A single release larger than the whole budget is refused for a fresh agent.
    with pytest.raises(BudgetExceededError):
        ledger.charge(4, _g(3.5))
    assert _state(ledger) == before


def test_multi_agent_charge_is_atomic() -> None:
    ledger = PrivacyLedger(epsilon_budget=2.0)
    g = _g(1.0)
    ledger.charge(1, g, count=2)  # agent 1 is at its budget
    before = _state(ledger)
    assert not ledger.can_charge([0, 1, 2], g)
    with pytest.raises(BudgetExceededError):
        ledger.charge([0, 1, 2], g)  # agents 0 and 2 could pay, agent 1 cannot: nobody pays
    assert _state(ledger) == before
    assert ledger.spent(0) == (0.0, 0.0) and ledger.spent(2) == (0.0, 0.0)
    # Per-agent counts: one agent over budget refuses the whole request too.
    with pytest.raises(BudgetExceededError):
        ledger.charge([0, 3], g, count=[1, 3])
    assert _state(ledger) == before
    # Without the exhausted agent the same request goes through.
    ledger.charge([0, 2], g)
    assert ledger.spent(0) == (1.0, 0.0) and ledger.spent(2) == (1.0, 0.0)


@pytest.mark.parametrize("budget", [0.1, 1.0, 3.0, 7.3, 100.0])
def test_T_charges_of_eps_over_T_fit_exactly(budget: float) -> None:
    # Paper 000 §4.4: T submissions at ε/T each spend exactly ε (sequential composition).
    for T in range(1, 51):
        ledger = PrivacyLedger(epsilon_budget=budget)
        g = _g(budget / T)
        for _ in range(T):
            ledger.charge(0, g)
        assert ledger.spent(0)[0] == pytest.approx(budget, rel=1e-12)
        assert ledger.reports_of(0) == T
        # The (T+1)-th release is refused: the round-off slack is far smaller than ε/T.
        with pytest.raises(BudgetExceededError):
            ledger.charge(0, g)
        # The same in one call.
        ledger2 = PrivacyLedger(epsilon_budget=budget)
        ledger2.charge([0, 1], g, count=T)
        with pytest.raises(BudgetExceededError):
            ledger2.charge([0, 1], g)


def test_roundoff_slack_is_tiny() -> None:
    ledger = PrivacyLedger(epsilon_budget=1.0)
    ledger.charge(0, _g(1.0 + 1e-12))  # float round-off: accepted
    with pytest.raises(BudgetExceededError):
        ledger.charge(1, _g(1.0 + 1e-6))  # a real excess: refused


def test_identity_mechanism_needs_an_infinite_budget() -> None:
    g = IdentityMechanism().guarantee
    assert g.epsilon == math.inf
    finite = PrivacyLedger(epsilon_budget=1e12)
    assert not finite.can_charge(0, g)
    with pytest.raises(BudgetExceededError):
        finite.charge(0, g)
    assert finite.num_reports == 0 and finite.spent(0) == (0.0, 0.0)

    unlimited = PrivacyLedger()  # default budget: inf
    assert unlimited.epsilon_budget == math.inf
    unlimited.charge(0, g, count=2)
    unlimited.charge(0, _g(1.0))
    assert unlimited.spent(0)[0] == math.inf
    assert unlimited.reports_of(0) == 3


def test_delta_budget_enforced() -> None:
    pure = PrivacyLedger(epsilon_budget=10.0)  # δ budget 0: any δ > 0 is refused
    with pytest.raises(BudgetExceededError):
        pure.charge(0, _g(0.1, 1e-9))
    approx = PrivacyLedger(epsilon_budget=10.0, delta_budget=1e-5)
    approx.charge(0, _g(0.1, 5e-6), count=2)
    with pytest.raises(BudgetExceededError):
        approx.charge(0, _g(0.1, 5e-6))
    assert approx.spent(0) == pytest.approx((0.2, 1e-5))


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0, 0.0, -1.0, -math.inf, math.nan, "abc"])
def test_invalid_epsilon_budget(budget) -> None:
    with pytest.raises(ValueError):
        PrivacyLedger(epsilon_budget=budget)


@pytest.mark.parametrize("delta", [-1e-9, -1.0, 1.5, math.nan, math.inf])
def test_invalid_delta_budget(delta: float) -> None:
    with pytest.raises(ValueError, match="delta"):
        PrivacyLedger(epsilon_budget=1.0, delta_budget=delta)


def test_duplicate_and_invalid_agent_ids() -> None:
    ledger = PrivacyLedger(epsilon_budget=10.0)
    g = _g(1.0)
    for bad in ([0, 1, 0], np.array([3, 3])):
        with pytest.raises(ValueError, match="duplicate"):
            ledger.charge(bad, g)
        with pytest.raises(ValueError, match="duplicate"):
            ledger.can_charge(bad, g)
    for bad in (-1, [0, -2], [0.5], 1.0, [True, False]):
        with pytest.raises(ValueError, match="agent ids"):
            ledger.charge(bad, g)
    assert ledger.num_reports == 0 and ledger.num_agents == 0


def test_invalid_count() -> None:
    ledger = PrivacyLedger(epsilon_budget=10.0)
    g = _g(1.0)
    for bad in (0, -1, [1, 0], [2, -1]):
        with pytest.raises(ValueError, match="count"):
            ledger.charge([0, 1], g, count=bad)
    with pytest.raises(ValueError):
        ledger.charge([0, 1], g, count=[1, 1, 1])  # one count per agent, or one for all
    assert ledger.num_reports == 0


def test_empty_charge_is_a_no_op() -> None:
    ledger = PrivacyLedger(epsilon_budget=1.0)
    ledger.charge([], _g(5.0))
    assert ledger.num_reports == 0 and ledger.summary()["agents"] == 0


@pytest.mark.parametrize(
    "bad", [_g(-1.0), _g(-math.inf), _g(math.nan), _g(0.0, -1e-6), _g(0.0, math.nan)]
)
def test_invalid_guarantee_cannot_refund_budget(bad: Guarantee) -> None:
    # A negative (or NaN) ε or δ must never be recorded: it would "refund" spent budget and let
    # an agent release beyond it.
    ledger = PrivacyLedger(epsilon_budget=2.0, delta_budget=1e-5)
    ledger.charge(0, _g(2.0, 1e-5))  # agent 0 has spent its whole (ε, δ) budget
    before = _state(ledger)
    with pytest.raises((ValueError, BudgetExceededError)):
        ledger.charge(0, bad)
    with pytest.raises((ValueError, BudgetExceededError)):
        ledger.charge(1, bad)  # nor for a fresh agent
    assert _state(ledger) == before
    assert not ledger.can_charge(0, _g(1.0))
    assert not ledger.can_charge(0, _g(0.0, 1e-6))


# --- summary -------------------------------------------------------------------------------


def test_summary_counts_and_extremes() -> None:
    ledger = PrivacyLedger(epsilon_budget=5.0)
    lap = LaplaceMechanism(epsilon=1.0, clip=1.0).guarantee
    prs = ProjectedRandomSignMechanism(epsilon=0.5, clip=1.0).guarantee
    ledger.charge(0, lap, count=3)
    ledger.charge([2, 9], prs)
    ledger.charge(2, lap)
    s = ledger.summary()
    json.dumps(s, allow_nan=False)
    assert s["agents"] == 3
    assert s["reports"] == 6
    assert s["per_agent_epsilon"]["min"] == pytest.approx(0.5)
    assert s["per_agent_epsilon"]["max"] == pytest.approx(3.0)
    assert s["per_agent_epsilon"]["mean"] == pytest.approx((3.0 + 1.5 + 0.5) / 3)
    assert s["reports_per_agent"] == {"min": 1, "max": 3}
    assert s["budget_per_agent"] == {"epsilon": 5.0, "delta": 0.0}
    assert s["formal_guarantee"] is True
    releases = {(e["epsilon"], e["notion"]): e["releases"] for e in s["events"]}
    assert releases == {(1.0, "ε-LDP"): 4, (0.5, "ε-LDP"): 2}
    assert "composition" in s["composition"]


def test_summary_empty_ledger() -> None:
    s = PrivacyLedger(epsilon_budget=1.0).summary()
    json.dumps(s, allow_nan=False)
    assert s["agents"] == 0 and s["reports"] == 0
    assert s["per_agent_epsilon"] == {"min": None, "max": None, "mean": None}
    assert s["formal_guarantee"] is False
    assert s["events"] == []


def test_summary_writes_inf_as_string() -> None:
    ledger = PrivacyLedger()  # infinite budget
    ledger.charge(0, _g(2.0))
    ledger.charge(1, IdentityMechanism().guarantee)
    s = ledger.summary()
    text = json.dumps(s, allow_nan=False)  # strict JSON: no Infinity/NaN tokens
    assert "Infinity" not in text
    assert s["budget_per_agent"]["epsilon"] == "inf"
    assert s["per_agent_epsilon"]["min"] == 2.0
    assert s["per_agent_epsilon"]["max"] == "inf"
    assert s["per_agent_epsilon"]["mean"] == "inf"
    assert s["formal_guarantee"] is False
    assert {e["epsilon"] for e in s["events"]} == {2.0, "inf"}
    assert json.loads(text)["per_agent_epsilon"]["max"] == "inf"


@pytest.mark.parametrize("count", [-1, 0, 1.5, True])
def test_can_charge_validates_count_like_charge(count):
    ledger = PrivacyLedger(epsilon_budget=10.0)
    g = LaplaceMechanism(1.0, 1.0).guarantee
    with pytest.raises(ValueError, match="count"):
        ledger.can_charge(0, g, count)
    with pytest.raises(ValueError, match="count"):
        ledger.charge(0, g, count)
    assert ledger.num_reports == 0


# --- a budget in (ε, δ) by the optimal composition --------------------------------------------


def test_optimal_budget_admits_what_basic_refuses_and_both_refuse_beyond() -> None:
    """100 releases of ε = 0.1 at δ = 1e-5: basic composition spends 10; the optimal one
    (Kairouz-Oh-Viswanath, computed here from its formula independently of the ledger) about
    3.1. A budget of 5 refuses the 100th release under basic composition and admits it
    under the optimal one; a budget of 2 refuses it under both, and nothing is recorded."""
    from scipy.special import comb

    g = LaplaceMechanism(epsilon=0.1, clip=1.0).guarantee

    def kov_delta(eps0: float, k: int, eps: float) -> float:  # KOV Theorem 3.3, exact
        return sum(comb(k, j, exact=True) * (math.exp((k - j) * eps0) - math.exp(eps + j * eps0))
                   for j in range(k + 1) if (k - 2 * j) * eps0 > eps) / (1 + math.exp(eps0)) ** k

    assert kov_delta(0.1, 100, 5.0) <= 1e-5 < kov_delta(0.1, 100, 2.0)
    basic, optimal = PrivacyLedger(5.0), PrivacyLedger(5.0, 1e-5, "optimal")
    for ledger in (basic, optimal):
        ledger.charge([0, 1], g, count=49)
    with pytest.raises(BudgetExceededError, match="nothing was released"):
        basic.charge([0, 1], g, count=51)
    optimal.charge([0, 1], g, count=51)
    assert optimal.reports_of(0) == 100
    eps, delta = optimal.spent(0)
    assert delta == 1e-5 and 2.0 < eps < 5.0 and kov_delta(0.1, 100, eps) <= 1e-5
    assert kov_delta(0.1, 100, eps * (1 - 1e-6)) > 1e-5  # the least such ε
    summary = optimal.summary()
    assert summary["budget_per_agent"] == {"epsilon": 5.0, "delta": 1e-5,
                                           "composition": "optimal"}
    assert summary["per_agent_epsilon"]["max"] == pytest.approx(eps)
    assert summary["per_agent_basic_epsilon_max"] == pytest.approx(10.0)
    assert "optimal composition" in summary["composition"]
    tight = PrivacyLedger(2.0, 1e-5, "optimal")
    tight.charge(0, g, count=20)  # basic 2.0: fits either way
    before = _state(tight)
    with pytest.raises(BudgetExceededError, match="optimal composition"):
        tight.charge([0, 1], g, count=80)
    assert not tight.can_charge(0, g, 80) and _state(tight) == before
    with pytest.raises(BudgetExceededError):
        PrivacyLedger(2.0).charge(0, g, count=100)


def test_optimal_budget_refuses_what_it_cannot_compose() -> None:
    with pytest.raises(ValueError, match="δ in"):
        PrivacyLedger(5.0, 0.0, "optimal")
    with pytest.raises(ValueError, match="composition"):
        PrivacyLedger(5.0, 1e-5, "advanced")
    ledger = PrivacyLedger(5.0, 1e-5, "optimal")
    ledger.charge(0, _g(0.1))
    with pytest.raises(ValueError, match="one \\(ε, δ\\) per agent"):
        ledger.charge(0, _g(0.2))
    with pytest.raises(ValueError, match="one \\(ε, δ\\) per agent"):
        ledger.charge(0, _g(0.1, 1e-7))
    assert ledger.reports_of(0) == 1
    with pytest.raises(BudgetExceededError):  # no guarantee (ε = ∞) never fits a budget
        ledger.charge(1, _g(math.inf))
    records = PrivacyLedger(math.inf, 1e-5, "optimal")  # an infinite budget records only
    records.charge(1, _g(math.inf))
    assert records.spent(1) == (math.inf, 0.0) and not records.summary()["formal_guarantee"]


def test_optimal_ledger_round_trips_through_its_state() -> None:
    ledger = PrivacyLedger(5.0, 1e-5, "optimal")
    ledger.charge([0, 3], _g(0.1), count=70)
    back = PrivacyLedger.from_state(ledger.to_state())
    assert back.mode == "optimal" and _state(back) == _state(ledger)
    back.charge(0, _g(0.1), count=30)  # 100 fit; the basic ledger it would be refuses
    assert not PrivacyLedger.from_state(PrivacyLedger(5.0).to_state()).can_charge(
        0, _g(0.1), 100)


def test_optimal_budget_composes_releases_with_delta() -> None:
    """Issue 53 item 4: (ε₀, δ₀) releases (a user's mechanism) under an (ε, δ) budget: k of
    them spend (ε', δ) with ε' the optimal composition of k pure ε₀ at δ − k·δ₀ (KOV 2015,
    Theorem 3.3, union bound on the δ's); none is admitted once the δ's reach the budget's."""
    from privrl.privacy.accounting import optimal_pure_composition

    ledger = PrivacyLedger(50.0, 1e-5, "optimal")
    ledger.charge([0, 1], _g(0.5, 1e-7), 10)
    eps, delta = ledger.spent(0)
    assert delta == 1e-5
    assert eps == pytest.approx(optimal_pure_composition(0.5, 10, 1e-5 - 10 * 1e-7))
    assert eps > optimal_pure_composition(0.5, 10, 1e-5)  # the releases' δ costs ε
    assert ledger.summary()["per_agent_epsilon"]["max"] == pytest.approx(eps)
    ledger.charge(0, _g(0.5, 1e-7), 89)  # 99 releases: Σδ₀ = 9.9e-6 < 1e-5
    with pytest.raises(BudgetExceededError):  # the 100th leaves the pure part no δ
        ledger.charge(0, _g(0.5, 1e-7))
    assert ledger.reports_of(0) == 99
