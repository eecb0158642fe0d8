"""The privacy plan (privrl.privacy.plan): one request → a mechanism's per-release parameter
and every runtime's ledger; ε is the unit's total unless asked per report."""

import math

import pytest

from privrl.privacy.accounting import (
    Accountant,
    PrivacyEvent,
    calibrate_noise_multiplier,
    optimal_composition_admits,
)
from privrl.privacy.ledger import BudgetExceededError
from privrl.privacy.plan import (
    PlanError,
    PrivacyRequest,
    gaussian_spent,
    ledger_for,
    no_privacy,
    plan_gaussian,
    plan_pure,
    split_epsilon,
)
from privrl.privacy.report import Guarantee


def release(epsilon: float) -> Guarantee:
    return Guarantee(epsilon, 0.0, "ε-LDP", "one report", "any two inputs")


def test_a_total_is_split_over_the_releases_and_enforced_by_the_ledger():
    plan = plan_pure(PrivacyRequest(epsilon=2.0), 8)
    assert plan.epsilon_per_report == 0.25 and plan.cap == 2.0
    ledger, one = plan.ledger(), release(plan.epsilon_per_report)
    ledger.charge(0, one, 8)  # all R releases fit the total...
    with pytest.raises(BudgetExceededError):
        ledger.charge(0, one)  # ...and not one more


def test_the_optimal_composition_gives_each_release_more_of_the_same_total():
    basic = split_epsilon(2.0, 100, 1e-5)
    optimal = plan_pure(PrivacyRequest(epsilon=2.0, composition="optimal"), 100)
    assert basic == 0.02 and optimal.epsilon_per_report > 2 * basic
    assert optimal_composition_admits(optimal.epsilon_per_report, 100, 2.0, 1e-5)
    ledger = optimal.ledger()
    assert ledger.mode == "optimal" and ledger.epsilon_budget == 2.0
    assert ledger.delta_budget == 1e-5


def test_a_per_report_epsilon_is_used_as_given_capped_by_the_budget_or_the_total():
    alone = plan_pure(PrivacyRequest(epsilon_per_report=0.5), 10)
    assert alone.epsilon_per_report == 0.5 and alone.cap is None
    assert math.isinf(alone.ledger().epsilon_budget)  # records only
    capped = plan_pure(PrivacyRequest(epsilon_per_report=0.5, epsilon_budget=3.0), 10)
    assert capped.cap == 3.0
    # a resolved config carries both the total and its split: the plan is the same again
    total = plan_pure(PrivacyRequest(epsilon=2.0), 8)
    again = plan_pure(PrivacyRequest(epsilon=2.0, epsilon_per_report=total.epsilon_per_report),
                      8)
    assert again == total


@pytest.mark.parametrize(("request_", "releases", "field"), [
    (PrivacyRequest(), 5, "epsilon"),
    (PrivacyRequest(epsilon=math.inf), 5, "epsilon"),
    (PrivacyRequest(epsilon=-1.0), 5, "epsilon"),
    (PrivacyRequest(epsilon_per_report=math.nan), 5, "epsilon_per_report"),
    (PrivacyRequest(epsilon=1.0, epsilon_budget=2.0), 5, "epsilon_budget"),
    (PrivacyRequest(epsilon_per_report=3.0, epsilon_budget=2.0), 5, "epsilon_budget"),
    (PrivacyRequest(epsilon=1.0, noise_multiplier=1.0), 5, "noise_multiplier"),
    (PrivacyRequest(epsilon=1.0, composition="tight"), 5, "budget_composition"),
    (PrivacyRequest(epsilon=1.0, composition="optimal", delta=0.0), 5, "delta"),
])
def test_a_pure_request_that_cannot_be_planned_names_its_field(request_, releases, field):
    with pytest.raises(PlanError) as e:
        plan_pure(request_, releases)
    assert e.value.field == field


def test_afford_all_asks_the_cap_to_admit_every_release():
    req = PrivacyRequest(epsilon=1.0, epsilon_per_report=0.3)
    assert plan_pure(req, 4).cap == 1.0  # affords the first release: a unit may end early
    with pytest.raises(PlanError, match="cannot afford 4 releases"):
        plan_pure(req, 4, afford_all=True)


def test_sigma_is_calibrated_so_the_releases_cost_the_total():
    plan = plan_gaussian(PrivacyRequest(epsilon=2.0, accountant="rdp"), 20, sensitivity=2.0)
    z = calibrate_noise_multiplier(2.0, 1e-5, 20, kind="rdp")
    assert plan.noise_multiplier == 2.0 * z and plan.cap is None
    acc = Accountant("rdp")
    acc.compose(PrivacyEvent("gaussian", z), 20)
    assert acc.epsilon(1e-5) <= 2.0 * (1 + 1e-4)
    # gaussian_spent is its inverse: the plan's σ spends the total over the releases
    assert gaussian_spent(z, 20, 1e-5, "rdp") == pytest.approx(2.0, rel=1e-3)
    assert gaussian_spent(z, 0, 1e-5, "rdp") == 0.0
    given = plan_gaussian(PrivacyRequest(epsilon=2.0, noise_multiplier=3.0), 20)
    assert given.noise_multiplier == 3.0  # σ given wins: ε was the target it came from


@pytest.mark.parametrize(("request_", "field"), [
    (PrivacyRequest(), "epsilon"),
    (PrivacyRequest(epsilon_per_report=1.0), "epsilon_per_report"),
    (PrivacyRequest(epsilon=1.0, epsilon_budget=1.0), "epsilon_budget"),
    (PrivacyRequest(epsilon=1.0, composition="optimal"), "budget_composition"),
    (PrivacyRequest(noise_multiplier=1.0, delta=1.0), "delta"),
    (PrivacyRequest(epsilon=1e-9), "epsilon"),  # out of the calibration's reach
])
def test_a_gaussian_request_that_cannot_be_planned_names_its_field(request_, field):
    with pytest.raises(PlanError) as e:
        plan_gaussian(request_, 10)
    assert e.value.field == field


def test_no_mechanism_takes_no_request_and_its_ledger_records_only():
    with pytest.raises(PlanError) as e:
        no_privacy(PrivacyRequest(epsilon=1.0))
    assert e.value.field == "epsilon"
    ledger = no_privacy(PrivacyRequest()).ledger()
    ledger.charge(0, release(math.inf), 3)
    assert ledger.reports_of(0) == 3
    assert ledger_for(None, 1e-5).epsilon_budget == math.inf
