"""Privacy accounting with Google's `dp-accounting`: compose what was released, read off (ε, δ).

Pure-ε mechanisms compose by addition (the `PrivacyLedger` does that per agent). Gaussian and
subsampled-Gaussian mechanisms compose far better by privacy-loss distributions (PLD) or Rényi
DP (RDP), so they are recorded here as `PrivacyEvent`s with counts and converted to
dp-accounting `DpEvent`s only when ε is asked for. Everything a reader needs to recompute ε
independently (mechanism, noise multiplier, sampling scheme and probability, count, δ,
accountant and its parameters) is in `Accountant.record(delta)`.

Accountants ("kind"):
* "pld" (the default, the tightest valid bound): an account made only of unsampled Gaussian
  releases is exact by the analytic Gaussian mechanism (Balle & Wang 2018): n releases with
  noise multipliers z_i compose exactly into one Gaussian release with multiplier
  (Σ n_i / z_i²)^(-1/2) (Gaussian DP composes exactly, Dong, Roth & Su 2019). Anything else
  (Poisson-subsampled Gaussian, Laplace) is composed by dp-accounting's PLDAccountant with
  `PLD_PARAMETERS`: pessimistic rounding of the privacy loss onto a grid of step 1e-4 and
  the truncated tail mass counted as infinite loss, so its ε is a valid upper bound (slightly
  above the exact value, never below). RDP's ε is computed and recorded beside it as a
  cross-check.
* "rdp": dp-accounting's RdpAccountant alone (looser; what privrl used before).

Neighbouring relation: add or remove one unit (dp-accounting's default), the relation DP-SGD's
accounting and Poisson sampling are stated for. A local randomizer's releases (LDP: any two
inputs of a bounded domain are neighbours) are accounted under that replace-one relation
instead: `Accountant(neighbouring=...)` names it, and refuses Poisson-sampled events, whose
add/remove analysis does not carry over. Without sampling, a Gaussian (or Laplace) release with
noise / sensitivity = z has the same privacy-loss distribution under either relation once the
sensitivity is the one of that relation, so dp-accounting's computation is exact for both.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import special
from scipy.special import logsumexp

from privrl.choices import ACCOUNTANTS, DEFAULT_ACCOUNTANT

if TYPE_CHECKING:
    import dp_accounting

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_ACCOUNTANT",
    "PLD_PARAMETERS",
    "Accountant",
    "CalibrationError",
    "PrivacyEvent",
    "calibrate_noise_multiplier",
    "calibrate_pure_epsilon",
    "gaussian_epsilon",
    "optimal_composition_admits",
    "optimal_pure_composition",
    "pure_composition_record",
]

# dp-accounting's PLDAccountant, as privrl builds it: these values, and the ones its
# PLD.from_*_mechanism constructors use by default (stated so that a reader can rebuild it).
PLD_DISCRETIZATION = 1e-4
PLD_PARAMETERS: dict[str, Any] = {
    "value_discretization_interval": PLD_DISCRETIZATION,
    "pessimistic_estimate": True,
    "log_mass_truncation_bound": -50,
    "use_connect_dots": True,
    "why_an_upper_bound": (
        "pessimistic_estimate rounds every privacy-loss value up to the grid, and the "
        "probability mass truncated below exp(-50) is moved to infinite loss; both can "
        "only raise delta(epsilon), so the epsilon read off is >= the exact one"),
}
# Below this noise multiplier a Poisson-subsampled PLD needs gigabytes and minutes (its grid
# grows as 1/σ²; benchmarks/RESULTS.md has a measured case); the tight accountant
# then falls back to RDP, a valid (looser) upper bound, and its record says so.
PLD_MIN_POISSON_SIGMA = 0.25
_METHODS = {
    "analytic": "analytic Gaussian mechanism (dp_accounting.get_epsilon_gaussian, "
                "Balle & Wang 2018) of the exact composition of unsampled Gaussian releases",
    "pld": "dp_accounting.pld.PLDAccountant",
    "rdp": "dp_accounting.rdp.RdpAccountant",
}
ADD_OR_REMOVE = "add or remove one unit (ADD_OR_REMOVE_ONE)"
SAMPLING = ("none", "poisson")
_SIGMA_MAX = 1e4  # calibration searches noise multipliers in [_SIGMA_MIN, _SIGMA_MAX]
_SIGMA_MIN = 1e-3


@functools.cache
def _dp() -> Any:
    """dp_accounting, imported on the first ε asked: with scipy.stats and scipy.signal, which it
    imports, about 1 CPU-s of a Python start, which a process that only releases (a Ray actor,
    a Flower agent executor or ServerApp: pure-ε ledgers) never needs."""
    import dp_accounting

    return dp_accounting


class CalibrationError(ValueError):
    """A target ε that no noise multiplier in the searched range reaches."""


@dataclass(frozen=True)
class PrivacyEvent:
    """One release of a noise mechanism, in the terms an accountant needs.

    mechanism: "gaussian" (noise std / L2 sensitivity = noise_multiplier) or "laplace"
        (noise scale / L1 sensitivity = noise_multiplier).
    sampling: "none" (the unit takes part for sure) or "poisson" (each unit is included
        independently with `sampling_probability`, as DP-SGD's amplification assumes).
    """

    mechanism: str
    noise_multiplier: float
    sampling: str = "none"
    sampling_probability: float = 1.0

    def __post_init__(self) -> None:
        if self.mechanism not in ("gaussian", "laplace"):
            raise ValueError(f"unknown mechanism {self.mechanism!r}; use 'gaussian' or 'laplace'")
        if not (math.isfinite(self.noise_multiplier) and self.noise_multiplier > 0):
            raise ValueError(
                f"noise_multiplier must be finite and > 0, got {self.noise_multiplier}")
        if self.sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {SAMPLING}, got {self.sampling!r}")
        q = self.sampling_probability
        if not 0 < q <= 1:
            raise ValueError(f"sampling_probability must be in (0, 1], got {q}")
        if self.sampling == "none" and q != 1:
            raise ValueError("sampling 'none' means probability 1; use sampling='poisson'")

    def to_dp_event(self) -> dp_accounting.DpEvent:
        base: dp_accounting.DpEvent
        if self.mechanism == "gaussian":
            base = _dp().GaussianDpEvent(self.noise_multiplier)
        else:
            base = _dp().LaplaceDpEvent(self.noise_multiplier)
        if self.sampling == "poisson" and self.sampling_probability < 1:
            return _dp().PoissonSampledDpEvent(self.sampling_probability, base)
        return base

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "noise_multiplier": self.noise_multiplier,
            "noise_multiplier_means": ("noise std / L2 sensitivity" if self.mechanism == "gaussian"
                                       else "Laplace scale / L1 sensitivity"),
            "sampling": self.sampling,
            "sampling_probability": self.sampling_probability,
        }


@functools.lru_cache(maxsize=64)
def _subsampled_gaussian_pld(noise_multiplier: float, q: float, relation: Any) -> Any:
    """One Poisson-subsampled Gaussian release's PLD, exactly as PLDAccountant builds it."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    return pld.from_gaussian_mechanism(
        standard_deviation=noise_multiplier, value_discretization_interval=PLD_DISCRETIZATION,
        sampling_prob=q, neighboring_relation=relation)


# dp-accounting's RDP of a Poisson-subsampled Gaussian at a fractional order sums a series
# that it stops after 1,000 terms; where that does not converge (near q = 0.5 for most σ, at
# small σ for most q: `privrl plan fedpg-cen`'s fleet at K = 100 hit it 725 times in one plan)
# it logs this warning through absl and leaves the order out (its RDP infinite). ε is the
# minimum over the orders, so leaving one out can only raise it: what is read off stays a valid
# upper bound, and the warning tells a user nothing to act on. Dropped here, only this
# message, only while one of privrl's RDP accountants composes (`_QuietRdpAccountant`).
RDP_NOT_CONVERGED = "_compute_log_a_frac failed to converge"


class _DropRdpNotConverged(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(RDP_NOT_CONVERGED)


_RDP_FILTER = _DropRdpNotConverged()
_rdp_quiet_lock = threading.Lock()
_rdp_quiet_depth = 0


@contextmanager
def _quiet_rdp_series() -> Iterator[None]:
    """absl's logger drops RDP_NOT_CONVERGED inside (nested and threaded calls counted)."""
    global _rdp_quiet_depth
    logger = logging.getLogger("absl")
    with _rdp_quiet_lock:
        if _rdp_quiet_depth == 0:
            logger.addFilter(_RDP_FILTER)
        _rdp_quiet_depth += 1
    try:
        yield
    finally:
        with _rdp_quiet_lock:
            _rdp_quiet_depth -= 1
            if _rdp_quiet_depth == 0:
                logger.removeFilter(_RDP_FILTER)


@functools.cache
def _accountants() -> tuple[type, type]:
    """privrl's PLD and RDP accountants (dp-accounting's, subclassed), made on first use
    (`_dp`)."""
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    class _PLDAccountant(PLDAccountant):
        """dp-accounting's PLDAccountant, with each Poisson-subsampled Gaussian release's PLD built
        once and self-composed for every count asked: the same operations on the same numbers (the
        same ε to the bit), but the searches over counts and noise (`max_count`, calibration),
        which compose one release at a dozen counts, no longer rebuild it each time (building it
        is most of a PLD account's time)."""

        def _maybe_compose(self, event: dp_accounting.DpEvent, count: int,
                           do_compose: bool) -> Any:
            if (do_compose and isinstance(event, _dp().PoissonSampledDpEvent)
                    and isinstance(event.event, _dp().GaussianDpEvent)
                    and event.sampling_probability > 0 and event.event.noise_multiplier > 0):
                release = _subsampled_gaussian_pld(event.event.noise_multiplier,
                                                   event.sampling_probability,
                                                   self.neighboring_relation)
                self._pld = self._pld.compose(release.self_compose(count))
                return None
            return super()._maybe_compose(event, count, do_compose)

    class _QuietRdpAccountant(RdpAccountant):
        """dp-accounting's RdpAccountant, the same numbers, without RDP_NOT_CONVERGED's warning
        (an order left out; see there) while it composes, where the RDP is computed."""

        def _maybe_compose(self, event: dp_accounting.DpEvent, count: int,
                           do_compose: bool) -> Any:
            with _quiet_rdp_series():
                return super()._maybe_compose(event, count, do_compose)

    return _PLDAccountant, _QuietRdpAccountant


def _fresh(kind: str) -> dp_accounting.PrivacyAccountant:
    pld, rdp = _accountants()
    if kind == "rdp":
        return rdp()
    if kind == "pld":
        return pld(value_discretization_interval=PLD_DISCRETIZATION)
    raise ValueError(f"unknown accountant {kind!r}; choose one of {ACCOUNTANTS}")


def _check_delta(delta: float) -> float:
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(delta)


Events = tuple[tuple["PrivacyEvent", int], ...]


def _method(kind: str, events: Events) -> str:
    """How ε is computed: "analytic" where that is exact, else the accountant's own."""
    if kind not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {kind!r}; choose one of {ACCOUNTANTS}")
    if kind == "pld" and events and all(
            e.mechanism == "gaussian" and e.sampling == "none" for e, _ in events):
        return "analytic"
    if kind == "pld" and any(e.sampling == "poisson" and e.noise_multiplier
                             < PLD_MIN_POISSON_SIGMA for e, _ in events):
        return "rdp"
    return kind


def _effective_gaussian(events: Events) -> float:
    """The noise multiplier of the one Gaussian release that unsampled ones compose into."""
    return 1.0 / math.sqrt(sum(n / e.noise_multiplier ** 2 for e, n in events))


@functools.lru_cache(maxsize=512)
def _epsilon_of(method: str, events: Events, delta: float) -> float:
    """ε at δ of `events` (counts > 0) by `method`; cached, as a PLD can take a second."""
    if not events:
        return 0.0
    if method == "analytic":
        return gaussian_epsilon(_effective_gaussian(events), delta)
    acc = _fresh(method)
    for event, count in events:
        acc.compose(event.to_dp_event(), int(count))
    return float(acc.get_epsilon(delta))


def _epsilon(kind: str, events: list[tuple[PrivacyEvent, int]], delta: float) -> float:
    live = tuple((e, int(c)) for e, c in events if c > 0)
    return _epsilon_of(_method(kind, live), live, delta)


class Accountant:
    """Composes `PrivacyEvent`s (with counts) for one protected unit; ε(δ) via dp-accounting.

    kind "pld" (default: exact analytic Gaussian where that applies, else dp-accounting's PLD,
    a valid upper bound; about a second per Poisson-subsampled account) or "rdp" (looser,
    milliseconds).
    """

    def __init__(self, kind: str = DEFAULT_ACCOUNTANT, neighbouring: str | None = None) -> None:
        _fresh(kind)  # validates the name
        self.kind = kind
        # None: dp-accounting's add/remove relation; else the replace-one relation of an LDP
        # randomizer, in words (its sensitivity is the one the noise multiplier divides by).
        self.neighbouring = neighbouring
        self._events: dict[PrivacyEvent, int] = {}

    @property
    def events(self) -> list[tuple[PrivacyEvent, int]]:
        return list(self._events.items())

    def compose(self, event: PrivacyEvent, count: int = 1) -> None:
        if isinstance(count, bool) or int(count) != count or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        self._admit(event)
        self._events[event] = self._events.get(event, 0) + int(count)

    def _admit(self, event: PrivacyEvent) -> None:
        if self.neighbouring is not None and event.sampling != "none":
            raise ValueError("Poisson-sampled events are accounted under add/remove only; "
                             f"this account is for {self.neighbouring!r}")

    def epsilon(self, delta: float) -> float:
        """ε at δ of everything composed so far (0 when nothing was released)."""
        return _epsilon(self.kind, self.events, _check_delta(delta))

    def epsilon_if(self, event: PrivacyEvent, count: int, delta: float) -> float:
        """ε at δ if `count` more releases of `event` were composed; nothing is recorded."""
        self._admit(event)
        extra = dict(self._events)
        extra[event] = extra.get(event, 0) + int(count)
        return _epsilon(self.kind, list(extra.items()), _check_delta(delta))

    def max_count(self, event: PrivacyEvent, delta: float, max_epsilon: float,
                  upper: int) -> int:
        """The largest n <= upper such that composing n more releases keeps ε <= max_epsilon.

        ε grows with the count, so a bracketing search is exact: it ends with ε(n) <= max <
        ε(n + 1) both computed. Returns 0 if even one release would exceed the budget. The
        tight accountant starts from RDP's answer and interpolates log ε against log n (the
        regula falsi), so that a PLD is computed a handful of times, not log2(upper) times.
        """
        if self.epsilon_if(event, upper, delta) <= max_epsilon:
            return upper
        lo, hi = 0, upper  # invariant: ε(lo) <= max, ε(hi) > max (ε(0) is what is spent now)
        if self.epsilon(delta) > max_epsilon:
            return 0
        if self.kind != "rdp":  # RDP's answer (milliseconds) is a lower end, if it holds here
            rdp = Accountant("rdp", self.neighbouring)
            rdp._events = dict(self._events)
            seed = rdp.max_count(event, delta, max_epsilon, upper)
            if seed > 0 and self.epsilon_if(event, seed, delta) <= max_epsilon:
                lo = seed
        log_max = math.log(max_epsilon)

        def f(n: int) -> float:  # <= 0: n more releases fit
            eps = self.epsilon_if(event, n, delta)
            return math.inf if not math.isfinite(eps) else math.log(max(eps, 1e-300)) - log_max

        def step(lo: float, hi: float, f_lo: float, f_hi: float) -> int:
            mid = (int(lo) + int(hi)) // 2
            if lo > 0 and math.isfinite(f_lo) and math.isfinite(f_hi) and hi - lo > 4:
                a, b = math.log(lo), math.log(hi)
                guess = math.exp((a * f_hi - b * f_lo) / (f_hi - f_lo))
                mid = min(max(int(guess), int(lo) + 1), int(hi) - 1)
            return mid

        return int(_illinois(f, lo, hi, (f(lo) if lo > 0 else -math.inf), f(hi), step, 1))

    @property
    def method(self) -> str:
        """"analytic", "pld" or "rdp": how `epsilon` is computed for the events so far."""
        return _method(self.kind, tuple((e, c) for e, c in self.events if c > 0))

    def record(self, delta: float) -> dict[str, Any]:
        """The machine-readable account for privacy.json: enough to recompute ε elsewhere."""
        method = self.method
        rec: dict[str, Any] = {
            "accountant": _METHODS[method],
            "accountant_choice": self.kind,
            "dp_accounting_version": _dp_accounting_version(),
            "neighbouring_relation": (ADD_OR_REMOVE if self.neighbouring is None else
                                      f"replace one: {self.neighbouring}; for these unsampled "
                                      "events dp-accounting's ADD_OR_REMOVE_ONE computation "
                                      "gives the same ε (the noise multiplier is noise / this "
                                      "relation's sensitivity)"),
            "composition": "dp_accounting SelfComposedDpEvent per event, composed in sequence",
            "events": [{**e.to_dict(), "count": c} for e, c in self.events],
            "delta": delta,
            "epsilon": self.epsilon(delta),
        }
        if method == "analytic":
            rec["composition"] = ("exact: the unsampled Gaussian releases compose into one "
                                  "Gaussian release with noise multiplier (Σ count / "
                                  "noise_multiplier²)^(-1/2)")
            rec["effective_noise_multiplier"] = _effective_gaussian(
                tuple((e, c) for e, c in self.events if c > 0))
        if method == "pld":
            rec["pld_parameters"] = PLD_PARAMETERS
        if method == "rdp" and self.kind != "rdp":
            rec["fallback"] = (f"RDP used although {self.kind!r} was chosen: a PLD of a "
                               "Poisson-subsampled Gaussian with noise multiplier < "
                               f"{PLD_MIN_POISSON_SIGMA:g} would need gigabytes of memory")
        if method != "rdp":
            rec["cross_check"] = {"accountant": _METHODS["rdp"],
                                  "epsilon": _epsilon("rdp", self.events, delta)}
        return rec


def _dp_accounting_version() -> str:
    from importlib.metadata import version

    return version("dp-accounting")


def _gaussian_log_delta(z: float, epsilon: float) -> float:
    """log δ(ε) of one Gaussian release with noise multiplier z (Balle & Wang 2018, Thm 8):
    δ = Φ(1/(2z) − εz) − e^ε Φ(−1/(2z) − εz)."""
    a = special.log_ndtr(0.5 / z - epsilon * z)
    b = special.log_ndtr(-0.5 / z - epsilon * z)
    gap = epsilon + b - a
    return -math.inf if gap >= 0 else a + math.log(-math.expm1(gap))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """ε of one Gaussian release at δ, exactly (analytic Gaussian mechanism, Balle & Wang 2018).

    dp-accounting finds the root to within 1e-12; the result is then raised, if need be,
    until δ(ε) <= δ holds, so that round-off never states an ε below the exact one.
    """
    delta = _check_delta(delta)
    eps = float(_dp().get_epsilon_gaussian(noise_multiplier, delta))
    log_delta = math.log(delta)
    step = 1e-12
    while eps > 0 and _gaussian_log_delta(noise_multiplier, eps) > log_delta:
        eps += step
        step *= 2
    return eps


def _illinois(f: Callable[[Any], float], good: Any, bad: Any, f_good: float, f_bad: float,
              step: Callable[[Any, Any, float, float], Any], width: float) -> Any:
    """Regula falsi with the Illinois modification on a monotone `f`: shrink the bracket between
    `good` (f <= 0) and `bad` (f > 0) until they are `width` apart; return the good end, at
    which f <= 0 was computed. `step(good, bad, f_good, f_bad)` proposes the next point, so
    a caller can interpolate on its own scale (log σ, log n) or fall back to bisection."""
    side = 0
    while abs(bad - good) > width:
        c = step(good, bad, f_good, f_bad)
        f_c = f(c)
        if f_c <= 0:
            good, f_good = c, f_c
            if side == -1:
                f_bad /= 2
            side = -1
        else:
            bad, f_bad = c, f_c
            if side == 1:
                f_good /= 2
            side = 1
    return good


@functools.lru_cache(maxsize=256)  # pure, and a run asks it the same question several times
def calibrate_noise_multiplier(  # (each construction of a config or learner resolves σ)
    target_epsilon: float,
    delta: float,
    count: int,
    sampling_probability: float = 1.0,
    kind: str = DEFAULT_ACCOUNTANT,
    mechanism: str = "gaussian",
) -> float:
    """The smallest noise multiplier whose `count` releases (Poisson-sampled with q < 1) cost at
    most `target_epsilon` at `delta` by the accountant `kind` (the same one that will state
    the run's ε): RDP by dp-accounting's calibration (Brent's method); the tight accountant
    by bisection on ε(σ), to 1e-5 relative, bracketed by the RDP answer.

    Raises CalibrationError when the target is out of reach in [1e-3, 1e4].
    """
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise CalibrationError(f"target epsilon must be finite and > 0, got {target_epsilon}")
    delta = _check_delta(delta)
    if int(count) != count or count < 1:
        raise CalibrationError(f"the number of releases must be >= 1, got {count}")
    if kind not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {kind!r}; choose one of {ACCOUNTANTS}")
    sampling = "poisson" if sampling_probability < 1 else "none"

    def eps_at(sigma: float, how: str = kind) -> float:
        event = PrivacyEvent(mechanism, sigma, sampling, sampling_probability)
        return _epsilon(how, [(event, int(count))], delta)

    if eps_at(_SIGMA_MAX) > target_epsilon:
        raise CalibrationError(
            f"target epsilon {target_epsilon:g} at delta {delta:g} cannot be reached over "
            f"{count} release(s) even with noise multiplier {_SIGMA_MAX:g}; raise the target, "
            "raise delta, or release less")
    # RDP is a valid upper bound too, and a PLD at σ = 1e-3 would not fit in memory.
    if eps_at(_SIGMA_MIN, "rdp") <= target_epsilon:
        return _SIGMA_MIN
    if kind == "rdp":
        def event(sigma: float) -> dp_accounting.DpEvent:
            e = PrivacyEvent(mechanism, sigma, sampling, sampling_probability).to_dp_event()
            return _dp().SelfComposedDpEvent(e, int(count))

        sigma = _dp().calibrate_dp_mechanism(
            lambda: _fresh("rdp"), event, target_epsilon, delta,
            _dp().ExplicitBracketInterval(_SIGMA_MIN, _SIGMA_MAX), tol=1e-6)
        # Brent's method returns a value within tol of the boundary; step up until it holds.
        while eps_at(sigma) > target_epsilon:
            sigma *= 1 + 1e-6
        return float(sigma)
    # Bracket [lo, hi] with ε(lo) > target >= ε(hi). The RDP answer is a good upper end (the
    # tight ε is smaller at any σ); step below it until the target is missed. Then shrink the
    # bracket by regula falsi (Illinois) on log ε against log σ, a smooth monotone curve, so
    # that a PLD (about a second each) is computed a few times rather than twenty.
    hi = calibrate_noise_multiplier(target_epsilon, delta, count, sampling_probability, "rdp",
                                    mechanism)
    while eps_at(hi) > target_epsilon:  # not expected: RDP >= the tight bound
        hi = min(2 * hi, _SIGMA_MAX)
    lo = hi * 0.8
    while lo > _SIGMA_MIN and eps_at(lo) <= target_epsilon:
        hi, lo = lo, max(lo * 0.8, _SIGMA_MIN)
    log_t = math.log(target_epsilon)

    def f(log_sigma: float) -> float:  # < 0: the target holds
        eps = eps_at(math.exp(log_sigma))
        return math.inf if not eps > 0 else math.log(eps) - log_t

    def step(b: float, a: float, fb: float, fa: float) -> float:  # b holds, a misses
        c = (a * fb - b * fa) / (fb - fa) if math.isfinite(fa) else (a + b) / 2
        return min(max(c, a + 1e-7), b - 1e-7)

    a, b = math.log(lo), math.log(hi)
    return float(math.exp(_illinois(f, b, a, f(b), f(a), step, 1e-5)))


# --- pure ε: basic composition and the optimal one -------------------------------------------
def _kov_log_delta(epsilon: float, count: int, eps_total: float) -> float:
    """log of the least δ at which `count` ε-DP releases are (eps_total, δ)-DP.

    Every ε-DP mechanism is a post-processing of randomized response with parameter ε, so
    the k-fold composition is dominated by k-fold randomized response, whose hockey-stick
    divergence is exact (Kairouz, Oh & Viswanath 2015, Theorem 3.3):
        δ(ε') = Σ_{j: (k−2j)ε > ε'} C(k, j) (e^{(k−j)ε} − e^{ε'+jε}) / (1 + e^ε)^k.
    The terms are summed in log space, vectorized over j (a run's agent may release
    thousands of reports).
    """
    k = int(count)
    norm = k * float(np.logaddexp(0.0, epsilon))
    j = np.arange(k + 1, dtype=np.float64)
    j = j[(k - 2 * j) * epsilon > eps_total]  # a prefix: the condition falls with j
    if j.size == 0:
        return -math.inf
    log_binom = special.gammaln(k + 1) - special.gammaln(j + 1) - special.gammaln(k - j + 1)
    gap = eps_total + j * epsilon - (k - j) * epsilon  # < 0
    terms = log_binom + (k - j) * epsilon + np.log(-np.expm1(gap)) - norm
    return float(logsumexp(terms))


def optimal_composition_admits(epsilon: float, count: int, epsilon_total: float,
                               delta: float) -> bool:
    """Whether `count` ε-DP releases are (epsilon_total, delta)-DP by the optimal composition
    theorem (exact: δ(epsilon_total) of k-fold randomized response <= delta). Basic
    composition's count·ε <= epsilon_total always is; an ε = ∞ release fits no finite
    total."""
    if count * epsilon <= epsilon_total:
        return True
    if not math.isfinite(epsilon):
        return False
    return _kov_log_delta(epsilon, count, epsilon_total) <= math.log(_check_delta(delta))


def calibrate_pure_epsilon(epsilon_total: float, count: int, delta: float) -> float:
    """The largest per-release ε such that `count` ε-DP releases are (epsilon_total, delta)-DP
    by the optimal composition theorem; at least epsilon_total / count (basic composition).

    Bisection to 1e-9 relative on the exact admission test, returning the end at which it
    was computed to hold, so the result never exceeds what the theorem allows.
    """
    if not (math.isfinite(epsilon_total) and epsilon_total > 0):
        raise ValueError(f"epsilon_total must be finite and > 0, got {epsilon_total}")
    if isinstance(count, bool) or int(count) != count or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    delta = _check_delta(delta)
    lo = hi = epsilon_total / count  # basic composition: admitted
    while optimal_composition_admits(hi, count, epsilon_total, delta):
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if optimal_composition_admits(mid, count, epsilon_total, delta):
            lo = mid
        else:
            hi = mid
    return lo


def optimal_pure_composition(epsilon: float, count: int, delta: float) -> float:
    """The least ε' such that `count` ε-DP releases are (ε', δ)-DP: the optimal composition
    theorem (Kairouz, Oh & Viswanath 2015), exact; at most count·ε (basic composition).

    Found by bisection on ε' to 1e-9 relative, returning the end at which δ(ε') <= δ was
    computed, so it never falls below the exact value by more than round-off in δ.
    """
    delta = _check_delta(delta)
    if not (math.isfinite(epsilon) and epsilon > 0) or int(count) != count or count < 0:
        raise ValueError(f"need a finite epsilon > 0 and a count >= 0, got {epsilon}, {count}")
    if count == 0:
        return 0.0
    log_delta = math.log(delta)
    lo, hi = 0.0, count * epsilon  # δ(count·ε) = 0
    if _kov_log_delta(epsilon, count, lo) <= log_delta:
        return 0.0
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if _kov_log_delta(epsilon, count, mid) <= log_delta:
            hi = mid
        else:
            lo = mid
    return hi


def pure_composition_record(epsilon: float, count: int, delta: float,
                            enforced: str = "basic", delta_per_release: float = 0.0
                            ) -> dict[str, Any]:
    """privacy.json's statement of `count` ε-DP releases of one unit: basic composition (pure
    count·ε) and the optimal (ε', δ) at the run's δ, saying which one the ledger enforces.
    With `delta_per_release` δ₀ > 0 ((ε, δ₀) releases: a user's mechanism), basic composition
    is (count·ε, count·δ₀) and the optimal one composes the pure parts at δ − count·δ₀."""
    if enforced not in ("basic", "optimal"):
        raise ValueError(f"enforced must be 'basic' or 'optimal', got {enforced!r}")
    spent = count * delta_per_release
    tight = optimal_pure_composition(epsilon, count, delta - spent) if delta > spent else (
        math.inf)
    return {
        "releases": count,
        "epsilon_per_release": epsilon,
        **({"delta_per_release": delta_per_release} if delta_per_release else {}),
        "basic": {"epsilon": count * epsilon, "delta": spent,
                  "how": "basic sequential composition (sum of the releases' ε" + (
                      " and δ)" if delta_per_release else "), pure ε-DP")},
        "optimal": {"epsilon": tight, "delta": delta,
                    "how": "optimal composition of ε-DP releases (Kairouz, Oh & Viswanath "
                           "2015, Theorem 3.3), exact for any ε-DP mechanism; ε' found by "
                           "bisection on δ(ε') <= δ" + (
                               f" − {count}·δ₀, the releases' own δ added (union bound)"
                               if delta_per_release else "")},
        "enforced_by_ledger": enforced,
    }
