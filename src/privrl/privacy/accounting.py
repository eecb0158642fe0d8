"""Privacy accounting with Google's `dp-accounting`: compose what was released, read off (ε, δ).

Pure-ε mechanisms compose by addition (the `PrivacyLedger` does that per agent). Gaussian and
subsampled-Gaussian mechanisms compose far better under Rényi DP (RDP) or privacy-loss
distributions (PLD), so they are recorded here as `PrivacyEvent`s with counts and converted to
dp-accounting `DpEvent`s only when ε is asked for. Everything a reader needs to recompute ε
independently (mechanism, noise multiplier, sampling scheme and probability, count, δ,
accountant) is in `Accountant.record(delta)`.

Neighbouring relation: add or remove one unit (dp-accounting's default), the relation DP-SGD's
accounting and Poisson sampling are stated for. A local randomizer's releases (LDP: any two
inputs of a bounded domain are neighbours) are accounted under that replace-one relation
instead: `Accountant(neighbouring=...)` names it, and refuses Poisson-sampled events, whose
add/remove analysis does not carry over. Without sampling, a Gaussian (or Laplace) release with
noise / sensitivity = z has the same privacy-loss distribution under either relation once the
sensitivity is the one of that relation, so dp-accounting's computation is exact for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "CalibrationError",
    "PrivacyEvent",
    "calibrate_noise_multiplier",
    "gaussian_epsilon",
]

ACCOUNTANTS = ("rdp", "pld")
ADD_OR_REMOVE = "add or remove one unit (ADD_OR_REMOVE_ONE)"
SAMPLING = ("none", "poisson")
_SIGMA_MAX = 1e4  # calibration searches noise multipliers in [_SIGMA_MIN, _SIGMA_MAX]
_SIGMA_MIN = 1e-3


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
            base = dp_accounting.GaussianDpEvent(self.noise_multiplier)
        else:
            base = dp_accounting.LaplaceDpEvent(self.noise_multiplier)
        if self.sampling == "poisson" and self.sampling_probability < 1:
            return dp_accounting.PoissonSampledDpEvent(self.sampling_probability, base)
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


def _fresh(kind: str) -> dp_accounting.PrivacyAccountant:
    if kind == "rdp":
        return RdpAccountant()
    if kind == "pld":
        return PLDAccountant()
    raise ValueError(f"unknown accountant {kind!r}; choose one of {ACCOUNTANTS}")


def _check_delta(delta: float) -> float:
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(delta)


def _epsilon(kind: str, events: list[tuple[PrivacyEvent, int]], delta: float) -> float:
    acc = _fresh(kind)
    for event, count in events:
        if count > 0:
            acc.compose(event.to_dp_event(), int(count))
    return float(acc.get_epsilon(delta))


class Accountant:
    """Composes `PrivacyEvent`s (with counts) for one protected unit; ε(δ) via dp-accounting.

    kind "rdp" (default: fast for any count and noise level) or "pld" (tighter, but slow and
    memory-hungry for small noise multipliers or very many compositions).
    """

    def __init__(self, kind: str = "rdp", neighbouring: str | None = None) -> None:
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

        ε grows with the count, so a binary search is exact; returns 0 if even one release
        would exceed the budget.
        """
        if self.epsilon_if(event, upper, delta) <= max_epsilon:
            return upper
        lo, hi = 0, upper  # invariant: ε(lo) <= max, ε(hi) > max (ε(0) is what is spent now)
        if self.epsilon(delta) > max_epsilon:
            return 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.epsilon_if(event, mid, delta) <= max_epsilon:
                lo = mid
            else:
                hi = mid
        return lo

    def record(self, delta: float) -> dict[str, Any]:
        """The machine-readable account for privacy.json: enough to recompute ε elsewhere."""
        return {
            "accountant": {"rdp": "dp_accounting.rdp.RdpAccountant",
                           "pld": "dp_accounting.pld.PLDAccountant"}[self.kind],
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


def _dp_accounting_version() -> str:
    from importlib.metadata import version

    return version("dp-accounting")


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """ε of one Gaussian release at δ, exactly (analytic Gaussian mechanism, Balle & Wang 2018)."""
    return float(dp_accounting.get_epsilon_gaussian(noise_multiplier, _check_delta(delta)))


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    count: int,
    sampling_probability: float = 1.0,
    kind: str = "rdp",
    mechanism: str = "gaussian",
) -> float:
    """The smallest noise multiplier whose `count` releases (Poisson-sampled with q < 1) cost at
    most `target_epsilon` at `delta`, by dp-accounting's calibration (Brent's method).

    Raises CalibrationError when the target is out of reach in [1e-3, 1e4].
    """
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise CalibrationError(f"target epsilon must be finite and > 0, got {target_epsilon}")
    delta = _check_delta(delta)
    if int(count) != count or count < 1:
        raise CalibrationError(f"the number of releases must be >= 1, got {count}")
    sampling = "poisson" if sampling_probability < 1 else "none"

    def event(sigma: float) -> dp_accounting.DpEvent:
        e = PrivacyEvent(mechanism, sigma, sampling, sampling_probability).to_dp_event()
        return dp_accounting.SelfComposedDpEvent(e, int(count))

    def eps_at(sigma: float) -> float:
        acc = _fresh(kind)
        acc.compose(event(sigma))
        return float(acc.get_epsilon(delta))

    if eps_at(_SIGMA_MAX) > target_epsilon:
        raise CalibrationError(
            f"target epsilon {target_epsilon:g} at delta {delta:g} cannot be reached over "
            f"{count} release(s) even with noise multiplier {_SIGMA_MAX:g}; raise the target, "
            "raise delta, or release less")
    if eps_at(_SIGMA_MIN) <= target_epsilon:
        return _SIGMA_MIN
    sigma = dp_accounting.calibrate_dp_mechanism(
        lambda: _fresh(kind), event, target_epsilon, delta,
        dp_accounting.ExplicitBracketInterval(_SIGMA_MIN, _SIGMA_MAX), tol=1e-6)
    # Brent's method returns a value within tol of the boundary; step up until the target holds.
    while eps_at(sigma) > target_epsilon:
        sigma *= 1 + 1e-6
    return float(sigma)
