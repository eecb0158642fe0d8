"""Per-agent privacy ledger: records every release and refuses one that would exceed a budget.

Pure ε-LDP releases compose by basic sequential composition (paper 000, Theorem 1): an agent
that released reports with ε_1, …, ε_T has spent Σ ε_i (and Σ δ_i). The check happens before a
release: `charge` either records the whole request or raises `BudgetExceededError` and records
nothing, so callers charge first and privatize only after the charge succeeded.

The budget is enforced by one of two compositions, chosen by the user (`composition`):
* "basic" (the default): the pure (Σε, Σδ) above must stay within (epsilon_budget,
  delta_budget).
* "optimal": the budget is an (ε, δ) with δ = delta_budget > 0, and an agent's releases, all
  (ε_0, δ_0)-DP with one (ε_0, δ_0), are admitted while their k-fold composition is
  (epsilon_budget, delta_budget)-DP by the optimal composition theorem (Kairouz, Oh &
  Viswanath 2015; exact for pure releases, privrl.privacy.accounting.
  optimal_composition_admits; with δ_0 > 0 the pure part is composed at δ − k·δ_0). It admits
  every release basic composition admits, and for many small releases far more.

Agents are identified by non-negative integers; the ledger stores their spending in growable
numpy arrays so that a run with millions of agents stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from privrl.choices import COMPOSITIONS
from privrl.privacy.report import Guarantee

__all__ = ["COMPOSITIONS", "BudgetExceededError", "PrivacyLedger"]

_DESCRIBE = {
    "basic": "basic sequential composition (Σε, Σδ; paper 000 Theorem 1)",
    "optimal": "optimal composition of pure ε-DP releases (Kairouz, Oh & Viswanath 2015, "
               "Theorem 3.3; exact), at the budget's δ",
}

# (privrl.privacy.accounting, which loads dp-accounting, is imported only where the optimal
# composition is computed: the aggregator side and the CLI's start need the ledger alone.)
# Relative slack for float round-off, so that T charges of ε/T fit a budget of ε exactly.
_ROUNDOFF = 1e-9


class BudgetExceededError(RuntimeError):
    """A release was refused because it would exceed an agent's privacy budget."""


class PrivacyLedger:
    """Records each agent's releases and composes them: basic sequential composition, or,
    with composition="optimal", the optimal composition of its pure ε-DP releases at the
    budget's δ (see the module docstring)."""

    def __init__(self, epsilon_budget: float = math.inf, delta_budget: float = 0.0,
                 composition: str = "basic") -> None:
        eps = float(epsilon_budget)
        if math.isnan(eps) or eps <= 0:
            raise ValueError(f"epsilon_budget must be > 0 (or inf), got {epsilon_budget!r}")
        delta = float(delta_budget)
        if math.isnan(delta) or not 0.0 <= delta <= 1.0:
            raise ValueError(f"delta_budget must be in [0, 1], got {delta_budget!r}")
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition must be one of {COMPOSITIONS}, got {composition!r}")
        if composition == "optimal" and not 0.0 < delta < 1.0:
            raise ValueError("the optimal composition's budget is an (ε, δ) with δ in (0, 1), "
                             f"got delta_budget = {delta_budget!r}")
        self.epsilon_budget = eps
        self.delta_budget = delta
        self.mode = composition
        self.composition = _DESCRIBE[composition]
        self._eps = np.zeros(0, dtype=np.float64)
        self._delta = np.zeros(0, dtype=np.float64)
        self._count = np.zeros(0, dtype=np.int64)
        self._unit = np.zeros(0, dtype=np.float64)  # optimal: each agent's ε_0 (NaN: none yet)
        self._events: dict[Guarantee, int] = {}
        self._admits: dict[tuple[float, int, float], bool] = {}  # optimal: (ε₀, k, kδ₀) -> fits

    # --- queries -------------------------------------------------------------------------
    @property
    def num_agents(self) -> int:
        """Agents that released at least one report."""
        return int(np.count_nonzero(self._count))

    @property
    def num_reports(self) -> int:
        return int(self._count.sum())

    def spent(self, agent: int) -> tuple[float, float]:
        """(ε, δ) the agent has spent so far, by the ledger's composition (optimal: the
        least ε' of its releases at the budget's δ)."""
        if agent < 0:
            raise ValueError(f"agent ids are non-negative integers, got {agent}")
        if agent >= self._eps.size or self._count[agent] == 0:
            return 0.0, 0.0
        if self.mode == "optimal" and math.isfinite(self._unit[agent]):
            from privrl.privacy.accounting import optimal_pure_composition

            return (optimal_pure_composition(float(self._unit[agent]),
                                             int(self._count[agent]),
                                             self._delta_left(float(self._delta[agent]))),
                    self.delta_budget)
        return float(self._eps[agent]), float(self._delta[agent])

    def reports_of(self, agent: int) -> int:
        return int(self._count[agent]) if 0 <= agent < self._count.size else 0

    def can_charge(
        self, agents: int | Iterable[int], guarantee: Guarantee, count: int | Iterable[int] = 1
    ) -> bool:
        ids = self._ids(agents)
        counts = self._counts(count, ids)
        eps, delta = self._would_spend(ids, guarantee, counts)
        return self._admitted(ids, guarantee, counts, eps, delta)

    # --- recording -----------------------------------------------------------------------
    def charge(
        self, agents: int | Iterable[int], guarantee: Guarantee, count: int | Iterable[int] = 1
    ) -> None:
        """Record `count` releases under `guarantee` for each agent, or refuse them all.

        `count` is one number for all agents or one per agent. Raises BudgetExceededError
        (recording nothing) if any agent would exceed its budget.
        """
        ids = self._ids(agents)
        counts = self._counts(count, ids)
        if ids.size == 0:
            return
        eps, delta = self._would_spend(ids, guarantee, counts)
        if not self._admitted(ids, guarantee, counts, eps, delta):
            worst = int(ids[np.argmax(eps)])
            if self.mode == "optimal" and math.isfinite(guarantee.epsilon):
                from privrl.privacy.accounting import optimal_pure_composition

                k = int(self.reports_of(worst) + counts[np.argmax(eps)])
                left = self._delta_left(float(np.max(delta)))
                tight = (optimal_pure_composition(guarantee.epsilon, k, left) if left > 0
                         else math.inf)
                raise BudgetExceededError(
                    f"refused: agent {worst}'s {k} releases of ε = {guarantee.epsilon:g} "
                    f"would be (ε = {tight:g}, δ = {self.delta_budget:g})-DP by the optimal "
                    f"composition, over the budget ε = {self.epsilon_budget:g}; nothing was "
                    "released")
            raise BudgetExceededError(
                f"refused: agent {worst} would spend ε = {float(np.max(eps)):g}, "
                f"δ = {float(np.max(delta)):g} > budget ε = {self.epsilon_budget:g}, "
                f"δ = {self.delta_budget:g}; nothing was released"
            )
        self._grow(int(ids.max()) + 1)
        self._count[ids] += counts
        self._eps[ids] = eps
        self._delta[ids] = delta
        if self.mode == "optimal":
            self._unit[ids] = guarantee.epsilon
        self._events[guarantee] = self._events.get(guarantee, 0) + int(counts.sum())

    # --- summaries -----------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        active = self._count > 0
        eps = self._eps[active]
        events = [
            {**g.to_dict(), "releases": n} for g, n in sorted(self._events.items(), key=repr)
        ]
        private = bool(eps.size) and bool(np.all(np.isfinite(eps)))
        budget: dict[str, Any] = {"epsilon": _num(self.epsilon_budget),
                                  "delta": self.delta_budget}
        delta_max = float(self._delta[active].max()) if eps.size else None
        if self.mode == "optimal":
            budget["composition"] = "optimal"  # the budget (ε, δ) the ledger enforces
            basic_max = _num(float(eps.max())) if eps.size else None
            eps = self._optimal_spent(active) if private else eps
            delta_max = self.delta_budget if eps.size else None
        out = {
            "composition": self.composition,
            "budget_per_agent": budget,
            "agents": int(active.sum()),
            "reports": self.num_reports,
            "per_agent_epsilon": {
                "min": _num(float(eps.min())) if eps.size else None,
                "max": _num(float(eps.max())) if eps.size else None,
                "mean": _num(float(eps.mean())) if eps.size else None,
            },
            "per_agent_delta_max": delta_max,
            "reports_per_agent": {
                "min": int(self._count[active].min()) if eps.size else 0,
                "max": int(self._count[active].max()) if eps.size else 0,
            },
            "events": events,
            "formal_guarantee": private,
        }
        if self.mode == "optimal":
            out["per_agent_basic_epsilon_max"] = basic_max  # Σε of the same releases
        return out

    # --- run files -----------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """Budgets, per-agent spending and events as plain values and arrays (for run files,
        privrl.runfile: a checkpoint holds no pickled object); `from_state` inverts it."""
        state = {"epsilon_budget": self.epsilon_budget, "delta_budget": self.delta_budget,
                 "epsilon": self._eps, "delta": self._delta, "count": self._count,
                 "events": [{"guarantee": g.to_state(), "releases": n}
                            for g, n in self._events.items()]}
        if self.mode == "optimal":
            state |= {"composition": self.mode, "unit_epsilon": self._unit}
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PrivacyLedger:
        """The ledger a run file recorded; ValueError if it is inconsistent."""
        ledger = cls(state["epsilon_budget"], state["delta_budget"],
                     state.get("composition", "basic"))
        eps, delta, count = (np.asarray(state[k]) for k in ("epsilon", "delta", "count"))
        if not (eps.ndim == 1 and eps.shape == delta.shape == count.shape
                and eps.dtype == delta.dtype == np.float64 and count.dtype == np.int64
                and (count >= 0).all() and (eps >= 0).all()  # NaN fails: ∞ is allowed
                and (delta >= 0).all()):
            raise ValueError("a ledger's spending arrays are inconsistent")
        ledger._eps, ledger._delta, ledger._count = eps.copy(), delta.copy(), count.copy()
        unit = np.asarray(state.get("unit_epsilon", np.full(eps.shape, np.nan)))
        if unit.shape != eps.shape or unit.dtype != np.float64:
            raise ValueError("a ledger's spending arrays are inconsistent")
        ledger._unit = unit.copy()
        for event in state["events"]:
            n = event["releases"]
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"bad release count {n!r}")
            ledger._events[Guarantee.from_state(event["guarantee"])] = n
        return ledger

    # --- internals -----------------------------------------------------------------------
    @staticmethod
    def _ids(agents: int | Iterable[int]) -> np.ndarray:
        ids = np.atleast_1d(np.asarray(agents))
        if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0):
            raise ValueError("agent ids must be non-negative integers")
        if np.unique(ids).size != ids.size:
            raise ValueError("charge each agent once per call (duplicate agent ids given)")
        return ids.astype(np.int64)

    @staticmethod
    def _counts(count: int | Iterable[int], ids: np.ndarray) -> np.ndarray:
        raw = np.asarray(count)
        if raw.size and (raw.dtype == bool or not np.issubdtype(raw.dtype, np.integer)):
            raise ValueError(f"count must be whole numbers >= 1, got {count!r}")
        counts = np.broadcast_to(raw.astype(np.int64), ids.shape)
        if counts.size and counts.min() < 1:
            raise ValueError(f"count must be >= 1, got {counts.min()}")
        return counts

    def _would_spend(
        self, ids: np.ndarray, guarantee: Guarantee, count: int | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # A negative or NaN ε/δ would "refund" budget (and let an agent release beyond it).
        if not (guarantee.epsilon >= 0 and guarantee.delta >= 0):
            raise ValueError(
                "a guarantee's epsilon and delta must be >= 0, "
                f"got ε = {guarantee.epsilon}, δ = {guarantee.delta}"
            )
        eps0 = np.zeros(ids.size)
        delta0 = np.zeros(ids.size)
        known = ids < self._eps.size
        eps0[known] = self._eps[ids[known]]
        delta0[known] = self._delta[ids[known]]
        with np.errstate(invalid="ignore"):
            return eps0 + count * guarantee.epsilon, delta0 + count * guarantee.delta

    def _within(self, eps: np.ndarray, delta: np.ndarray) -> bool:
        eps_ok = np.all(eps <= self.epsilon_budget * (1 + _ROUNDOFF))
        delta_ok = np.all(delta <= self.delta_budget * (1 + _ROUNDOFF) + 1e-300)
        return bool(eps_ok and delta_ok)

    def _admitted(self, ids: np.ndarray, guarantee: Guarantee, counts: np.ndarray,
                  eps: np.ndarray, delta: np.ndarray) -> bool:
        """Whether every agent's releases, these included, stay within the budget."""
        if self.mode == "basic" or ids.size == 0:
            return self._within(eps, delta)
        known = ids < self._unit.size
        prior = self._unit[ids[known]]
        had = ~np.isnan(prior)
        if np.any(prior[had] != guarantee.epsilon) or not np.allclose(
                self._delta[ids[known]][had], self._count[ids[known]][had] * guarantee.delta,
                rtol=1e-9, atol=0.0):
            raise ValueError("the optimal-composition budget composes one (ε, δ) per agent; "
                             "an agent's releases differ in ε or δ")
        # (ε₀, δ₀)-DP releases: k of them are (ε', δ' + k·δ₀)-DP with (ε', δ') the optimal
        # composition of k pure ε₀ releases (Kairouz, Oh & Viswanath 2015, Theorem 3.3, with
        # 1 − (1 − δ₀)^k (1 − δ') <= δ' + k·δ₀): the pure part gets the δ the releases leave.
        if np.any(delta >= self.delta_budget):
            return False
        if math.isinf(self.epsilon_budget) or self._within(eps, delta):
            return True  # basic composition fits: the optimal one does too
        totals = np.zeros(ids.size, np.int64)
        totals[known] = self._count[ids[known]]
        totals += counts
        return all(self._optimal_fits(guarantee.epsilon, int(k), k * guarantee.delta)
                   for k in np.unique(totals))

    def _delta_left(self, spent: float) -> float:
        """The δ an agent's releases leave to the optimal composition of their pure part."""
        return self.delta_budget - spent

    def _optimal_fits(self, epsilon: float, count: int, release_delta: float = 0.0) -> bool:
        from privrl.privacy.accounting import optimal_composition_admits

        key = (epsilon, count, release_delta)
        if key not in self._admits:
            self._admits[key] = optimal_composition_admits(
                epsilon, count, self.epsilon_budget * (1 + _ROUNDOFF),
                self._delta_left(release_delta))
        return self._admits[key]

    def _optimal_spent(self, active: np.ndarray) -> np.ndarray:
        """Each active agent's least ε' at the budget's δ (computed once per (ε_0, k))."""
        from privrl.privacy.accounting import optimal_pure_composition

        pairs = np.stack([self._unit[active], self._count[active].astype(np.float64),
                          self._delta[active]], 1)
        uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
        values = np.array([optimal_pure_composition(float(e), int(k), self._delta_left(d))
                           for e, k, d in uniq])
        return values[np.asarray(inverse).reshape(-1)]

    def _grow(self, size: int) -> None:
        if size <= self._eps.size:
            return
        extra = size - self._eps.size
        self._eps = np.concatenate([self._eps, np.zeros(extra)])
        self._delta = np.concatenate([self._delta, np.zeros(extra)])
        self._count = np.concatenate([self._count, np.zeros(extra, dtype=np.int64)])
        self._unit = np.concatenate([self._unit, np.full(extra, np.nan)])


def _num(x: float) -> float | str:
    """JSON-safe number: inf is written as the string "inf"."""
    return x if math.isfinite(x) else "inf"
