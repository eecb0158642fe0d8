"""The privacy plan: the one reader of a user's privacy request.

A request (`PrivacyRequest`) asks for ONE of
- `epsilon`: the protected unit's TOTAL ε over the whole run (the default meaning of ε in every
  config and on the command line),
- `epsilon_per_report`: one release's ε (pure ε-DP mechanisms only), or
- `noise_multiplier`: the Gaussian noise multiplier σ (accounted mechanisms only),

with δ, an optional cap on the unit's ε (`epsilon_budget`), how pure releases compose
(`composition`: "basic" or "optimal") and the accountant of Gaussian releases. A plan
(`PrivacyPlan`) is what the request means for a mechanism that releases at most `releases`
times per unit: the mechanism's per-release parameter (ε per report, or σ), the cap the ledger
enforces, and `ledger()`, the ledger every runtime (local, Ray, Flower) gives each agent.

Pure mechanisms: a total ε is split over the R releases (ε/R, or with the optimal composition
the largest ε₀ whose R-fold composition is (ε, δ)-DP) and the ledger enforces the total. A
per-report ε is used as given; the cap is then `epsilon_budget`, or `epsilon` if that was given
too (a resolved config carries both: the total and the split it was resolved to).
Gaussian mechanisms: σ is used as given, or calibrated so that R releases cost at most ε at δ
by the accountant that states the run's ε. The distributed discrete Gaussian
(privrl.privacy.discrete_sum) is calibrated here too (`plan_discrete`), by the mechanism's own
bound: a local run and a deployment then state the same ε for the same request.

Refusals are `PlanError(field, message)`, naming the config field (systems turn them into their
own `ConfigError`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from privrl.choices import ACCOUNTANTS, COMPOSITIONS, DEFAULT_ACCOUNTANT

if TYPE_CHECKING:
    from privrl.privacy.ledger import PrivacyLedger

# The accountant (dp-accounting, SciPy) and the ledger (NumPy) are imported where a plan needs
# them: a config's validation reads this module, and a bad value is refused before they load.

__all__ = [
    "PlanError",
    "PrivacyPlan",
    "PrivacyRequest",
    "gaussian_spent",
    "ledger_for",
    "no_privacy",
    "plan_discrete",
    "plan_gaussian",
    "plan_pure",
    "split_clip_bit",
    "split_epsilon",
]


class PlanError(ValueError):
    """A privacy request that cannot be planned; `field` names the config field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class PrivacyRequest:
    """What the user asked for (see the module doc); None: not given."""

    epsilon: float | None = None  # the unit's total over the run
    epsilon_per_report: float | None = None  # one release's (pure mechanisms)
    noise_multiplier: float | None = None  # σ (Gaussian mechanisms)
    delta: float = 1e-5
    epsilon_budget: float | None = None  # a cap on the unit's ε, with epsilon_per_report
    composition: str = "basic"  # how pure releases compose: basic | optimal
    accountant: str = DEFAULT_ACCOUNTANT  # how Gaussian releases compose: pld | rdp


@dataclass(frozen=True)
class PrivacyPlan:
    """A request resolved for a mechanism that releases at most `releases` times per unit.

    kind: "none" (no mechanism), "pure" (ε per release, composed by the ledger) or "gaussian"
    (σ, composed by `accountant`). `cap`: the ε the ledger enforces per unit before every
    release (None: it records only; the run's length bounds the releases)."""

    kind: str
    releases: int
    delta: float
    epsilon: float | None = None  # the requested total, if any
    epsilon_per_report: float | None = None  # pure
    noise_multiplier: float | None = None  # gaussian: noise std / clip
    cap: float | None = None
    composition: str = "basic"
    accountant: str = DEFAULT_ACCOUNTANT
    delta_per_report: float = 0.0  # pure with release_delta: the δ₀ one release may spend

    def ledger(self) -> PrivacyLedger:
        """Each agent's ledger, the same on every runtime: it records every release (charged
        before it is made) and refuses one beyond `cap` by the plan's composition."""
        return ledger_for(self.cap, self.delta, self.composition)


def ledger_for(cap: float | None, delta: float, composition: str = "basic") -> PrivacyLedger:
    """A ledger that enforces `cap` per unit, by basic composition (pure ε) or the optimal one
    ((cap, delta)); cap None: records only (any release is admitted)."""
    from privrl.privacy.ledger import PrivacyLedger

    if composition == "optimal":
        return PrivacyLedger(math.inf if cap is None else cap, delta, "optimal")
    if cap is not None:
        return PrivacyLedger(cap)
    return PrivacyLedger(math.inf, 1.0)


def split_epsilon(total: float, releases: int, delta: float, composition: str = "basic"
                  ) -> float:
    """One release's ε when `releases` pure releases must compose to at most `total`: total/R
    (basic composition), or the largest ε₀ whose R-fold optimal composition is (total, δ)-DP."""
    if composition == "basic" or math.isinf(total):
        return total / releases
    from privrl.privacy.accounting import calibrate_pure_epsilon

    return calibrate_pure_epsilon(total, releases, delta)


def split_clip_bit(epsilon_per_report: float, share: float) -> tuple[float, float]:
    """(ε of the update, ε of the adaptive-clip bit) of one pure ε-LDP report that also
    releases its clip bit (privrl.privacy.clipping.ClipBitRelease): the bit gets `share` of
    the report's ε, the update the rest; by basic composition the two cost exactly
    `epsilon_per_report`, the release the ledger charges."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share < 1:
        raise PlanError("clip_epsilon_share", f"must be in (0, 1), got {share!r}")
    if not math.isfinite(epsilon_per_report):
        raise PlanError("adaptive_clip", "the non-private baseline releases no clip bit with "
                                         "an ε; adaptive clipping needs a mechanism")
    bit = float(epsilon_per_report) * float(share)
    return float(epsilon_per_report) - bit, bit


def _positive(field: str, value: float | None, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise PlanError(field, f"{what} must be a number > 0, got {value!r}")
    if math.isinf(value):
        raise PlanError(field, "ε must be finite; use mechanism none for no privacy"
                        if field.startswith("epsilon") else f"{what} must be finite")
    if value <= 0:
        raise PlanError(field, f"{what} must be > 0, got {value!r}")


def _check_delta(delta: float) -> None:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise PlanError("delta", f"must be in (0, 1), got {delta!r}")


def no_privacy(request: PrivacyRequest, releases: int = 0) -> PrivacyPlan:
    """No mechanism: nothing of a privacy request may be given."""
    for field in ("epsilon", "epsilon_per_report", "noise_multiplier", "epsilon_budget"):
        if getattr(request, field) is not None:
            raise PlanError(field, "no mechanism (mechanism='none') has no ε; drop "
                                   f"{field} or choose a mechanism")
    if request.composition != "basic":
        raise PlanError("budget_composition", "the non-private baseline has no budget to "
                                              "compose")
    return PrivacyPlan("none", releases, request.delta)


def plan_pure(request: PrivacyRequest, releases: int, afford_all: bool = False,
              release_delta: bool = False) -> PrivacyPlan:
    """A pure ε-DP mechanism that releases at most `releases` times per unit (module doc).
    `afford_all`: the cap must admit every one of the releases (a system that cannot end a
    unit early), not only the first. `release_delta`: the mechanism may be (ε₀, δ₀)-DP (a
    user's): under an (ε, δ) budget (optimal composition) each release gets δ₀ = δ/(2R) and
    the R releases' pure parts compose at δ/2, so that R releases cost at most (ε, δ)
    (the ledger composes them so); under a pure budget δ₀ = 0."""
    r = request
    if r.composition not in COMPOSITIONS:
        raise PlanError("budget_composition", f"must be one of {', '.join(COMPOSITIONS)}, got "
                                              f"{r.composition!r}")
    if r.noise_multiplier is not None:
        raise PlanError("noise_multiplier", "only the Gaussian mechanisms take it")
    if r.epsilon is None and r.epsilon_per_report is None:
        raise PlanError("epsilon", "required (the unit's total over the run, > 0), or give "
                                   "epsilon_per_report (one release's)")
    _positive("epsilon", r.epsilon, "ε")
    _positive("epsilon_per_report", r.epsilon_per_report, "ε")
    _positive("epsilon_budget", r.epsilon_budget, "the budget")
    if r.composition == "optimal" or r.epsilon_budget is not None:
        _check_delta(r.delta)
    if r.epsilon is not None and r.epsilon_budget is not None:
        raise PlanError("epsilon_budget", "epsilon is already the unit's total budget; a "
                                          "separate cap goes with epsilon_per_report")
    if isinstance(releases, bool) or int(releases) != releases or releases < 1:
        raise PlanError("releases", f"the mechanism must release at least once, got "
                                    f"{releases}")
    delta0 = r.delta / (2 * int(releases)) if release_delta and r.composition == "optimal" else 0.0
    if r.epsilon_per_report is not None:
        each = float(r.epsilon_per_report)
        cap = r.epsilon_budget if r.epsilon is None else r.epsilon
    else:
        each = split_epsilon(float(r.epsilon), int(releases), r.delta - int(releases) * delta0,
                             r.composition)
        cap = r.epsilon
    count = int(releases) if afford_all else 1
    if r.composition == "optimal":
        from privrl.privacy.accounting import optimal_composition_admits
    if cap is not None and not (
            optimal_composition_admits(each, count, cap, r.delta - count * delta0)
            if r.composition == "optimal" else count * each <= cap * (1 + 1e-9)):
        field = "epsilon_budget" if r.epsilon_budget is not None else "epsilon"
        what = (f"one release of ε = {each:g}: nothing would be released" if count == 1 else
                f"{count} releases of ε = {each:g} by {r.composition} composition")
        raise PlanError(field, f"{cap:g} cannot afford {what}")
    return PrivacyPlan("pure", int(releases), r.delta, r.epsilon, each, None, cap,
                       r.composition, r.accountant, delta0)


def plan_gaussian(request: PrivacyRequest, releases: int, sampling_rate: float | None = None,
                  sensitivity: float = 1.0) -> PrivacyPlan:
    """A Gaussian mechanism released at most `releases` times per unit (Poisson-sampled at
    `sampling_rate` < 1, if given): σ as given, or the accountant's smallest multiplier z for
    which they cost at most the total ε at δ, times `sensitivity` (the mechanism's L2
    sensitivity in units of its clip: 2 for an L2 ball under replace-one), so that noise std =
    σ·clip."""
    r = request
    if r.accountant not in ACCOUNTANTS:
        raise PlanError("accountant", f"must be one of {', '.join(ACCOUNTANTS)}, got "
                                      f"{r.accountant!r}")
    if r.epsilon_per_report is not None:
        raise PlanError("epsilon_per_report", "only the pure ε-DP mechanisms release a "
                                              "per-report ε; give epsilon (the unit's total)")
    if r.epsilon_budget is not None:
        raise PlanError("epsilon_budget", "only the pure ε-DP mechanisms take it (a Gaussian "
                                          "mechanism's epsilon is already the unit's total, "
                                          "composed by the accountant)")
    if r.composition != "basic":
        raise PlanError("budget_composition", "composes pure ε-DP releases only (Gaussian "
                                              "releases compose by the accountant)")
    if r.epsilon is None and r.noise_multiplier is None:
        raise PlanError("epsilon", "a Gaussian mechanism needs epsilon (the unit's total) or "
                                   "noise_multiplier")
    _positive("epsilon", r.epsilon, "ε")
    _positive("noise_multiplier", r.noise_multiplier, "σ")
    _check_delta(r.delta)
    sigma = r.noise_multiplier
    if sigma is None:  # σ given wins: ε, if also given, was the target it was calibrated for
        from privrl.privacy.accounting import CalibrationError, calibrate_noise_multiplier

        try:
            z = calibrate_noise_multiplier(r.epsilon, r.delta, releases,
                                           1.0 if sampling_rate is None else sampling_rate,
                                           kind=r.accountant)
        except CalibrationError as e:
            raise PlanError("epsilon", str(e)) from None
        sigma = sensitivity * z
    return PrivacyPlan("gaussian", int(releases), r.delta, r.epsilon, None, sigma, None,
                       "basic", r.accountant)


def plan_discrete(request: PrivacyRequest, releases: int,
                  epsilon_of: Callable[[float], float] | None = None) -> PrivacyPlan:
    """The distributed discrete Gaussian (privrl.privacy.discrete_sum) released at most
    `releases` times per unit, its request checked as a Gaussian mechanism's: σ as given, or
    the smallest noise multiplier z (to a relative 1e-3) whose releases cost at most the total
    ε at δ, `epsilon_of(z)` being their ε by the mechanism's own bound (it raises ValueError
    for a z no grid carries). Without `epsilon_of` (the mechanism not known yet: its update's
    length is not) σ stays as given, possibly None."""
    r = request
    if r.noise_multiplier is None and r.epsilon is not None:
        r = replace(r, noise_multiplier=1.0)  # only checks the request: σ is not planned yet
    plan = replace(plan_gaussian(r, releases), noise_multiplier=request.noise_multiplier)
    if epsilon_of is None or request.noise_multiplier is not None:
        return plan
    lo, hi = 1e-2, 1.0
    while epsilon_of(hi) > request.epsilon:
        lo, hi = hi, 2 * hi
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        if epsilon_of(mid) <= request.epsilon:
            hi = mid
        else:
            lo = mid
    return replace(plan, noise_multiplier=hi)


def gaussian_spent(noise_multiplier: float, releases: int, delta: float,
                   accountant: str = DEFAULT_ACCOUNTANT, sampling_rate: float | None = None
                   ) -> float:
    """The inverse of `plan_gaussian`: the ε at δ of `releases` Gaussian releases of noise
    multiplier σ (Poisson-sampled at `sampling_rate` < 1), by `accountant` (0 for none)."""
    if releases == 0:
        return 0.0
    from privrl.privacy.accounting import Accountant, PrivacyEvent

    q = 1.0 if sampling_rate is None else sampling_rate
    acc = Accountant(accountant)
    acc.compose(PrivacyEvent("gaussian", noise_multiplier, "poisson" if q < 1 else "none", q),
                releases)
    return acc.epsilon(delta)
