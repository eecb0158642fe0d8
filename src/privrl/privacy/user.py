"""Your own mechanism: the set of release functions is open (docs/ldp-mechanisms.md).

A user's mechanism is a `privrl.privacy.Mechanism` subclass written in the user's own code: its
release over its parameters (`release_params(d)`, `release(params, key, x)`), its `guarantee`
(a `Guarantee`: ε, δ, notion, and the unit it protects) and, for `privrl audit`, optionally its
worst-case neighbouring pair (`audit_pair(d)`). A system asks for one by name, `module:callable`
or `path/to/file.py:callable` (config field `mechanism`, CLI `--mechanism`): the callable takes a
`MechanismRequest` (the ε and δ each release may spend, the clip, the input length) and returns
the mechanism. It is imported only when the system builds its mechanism, after every option
has been checked.

privrl does not verify a user's guarantee: it is what the user declares. `DeclaredMechanism`
says so in every guarantee, record and statement that names it ("declared by <module:callable>,
not verified by privrl"), refuses a declaration that spends more than the request allows, and
the ledger composes the declared guarantee like any other. `privrl audit` can test it (a lower
bound on ε, never a proof).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from jax import Array

from privrl.config import ConfigError
from privrl.plugins import call_user, is_user_mechanism, load_callable
from privrl.privacy.mechanisms import Mechanism
from privrl.privacy.report import Guarantee

__all__ = ["DeclaredMechanism", "MechanismRequest", "declared_by", "declared_condition",
           "declared_summary",
           "is_user_mechanism",
           "load_factory", "user_mechanism"]


class MechanismRequest(NamedTuple):
    """What a system asks of a user's mechanism for one release."""

    epsilon: float  # the ε one release may spend (a system's budget split over its releases)
    delta: float  # the δ one release may spend (0: the run's budget is pure ε; under an
    # (ε, δ) budget, δ/(2·releases): privrl.privacy.plan.plan_pure's release_delta)
    clip: float  # the system's clip C for its inputs (what it means is the mechanism's choice)
    dim: int  # the input's length d


def declared_condition(name: str) -> str:
    """What a run's guarantee rests on when its mechanism is a user's (privacy.json's
    condition, `privrl.privacy.record.Facts`); "" for a built-in mechanism."""
    if not is_user_mechanism(name):
        return ""
    return f"the guarantee declared by {name}, which privrl does not verify"


def declared_by(name: str) -> str:
    """`Facts.declared_by` for a run whose mechanism is `name`: the user's `module:callable`,
    whose ε every record marks as declared, not verified; "" for a built-in mechanism."""
    return name if is_user_mechanism(name) else ""


def declared_summary(name: str) -> dict[str, Any]:
    """summary.json's mark beside a run's ε when its mechanism is a user's: declared by it,
    not verified by privrl (nothing for a built-in mechanism)."""
    if not is_user_mechanism(name):
        return {}
    return {"epsilon_declared_by": name, "epsilon_verified_by_privrl": False}


def load_factory(name: str) -> Callable[[MechanismRequest], Any]:
    """The callable `module:callable` (or `path/to/file.py:callable`) names; ConfigError
    ("mechanism") if it cannot be imported or is not callable."""
    return load_callable(name, "mechanism")


def user_mechanism(name: str, request: MechanismRequest) -> DeclaredMechanism:
    """The user's mechanism `name` builds for `request`, as a `DeclaredMechanism`; ConfigError
    ("mechanism") if it is not a Mechanism or declares more than the request allows."""
    made = call_user(load_factory(name), name, "mechanism", request)  # its failure: one line
    if not isinstance(made, Mechanism) or isinstance(made, DeclaredMechanism):
        raise ConfigError("mechanism", f"{name} must return a privrl.privacy.Mechanism "
                                       f"(release_params, release, guarantee), got "
                                       f"{type(made).__name__}")
    g = made.guarantee
    if not isinstance(g, Guarantee):
        raise ConfigError("mechanism", f"{name}'s guarantee must be a privrl.privacy.Guarantee")
    if not g.epsilon <= request.epsilon * (1 + 1e-9) or not g.delta <= request.delta:
        how = ("a plug-in must declare at most the request's ε and δ (MechanismRequest)"
               if request.delta else
               "this run's budget is pure ε, so a plug-in must declare δ = 0 (ε-DP); for an "
               "(ε, δ) plug-in make the budget (ε, δ) (budget_composition optimal), which "
               "gives each release δ/(2·releases)" if g.delta else
               "a plug-in must declare at most the request's ε (MechanismRequest.epsilon)")
        raise ConfigError("mechanism", f"{name} declares (ε, δ) = ({g.epsilon:g}, {g.delta:g}) "
                                       f"per release, more than the ({request.epsilon:g}, "
                                       f"{request.delta:g}) the run allows each release: {how}")
    if not math.isfinite(g.epsilon):
        raise ConfigError("mechanism", f"{name} declares no guarantee (ε = ∞): use none")
    return DeclaredMechanism(made, name)


@dataclass(frozen=True)
class DeclaredMechanism(Mechanism):
    """A user's mechanism (`inner`, built by `source`): its release, and its guarantee marked
    as declared, not verified."""

    inner: Mechanism
    source: str
    audit: tuple[tuple[str, Any], ...] = ()  # privrl.audit.quick's result, when it ran

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def note(self) -> str:
        return f"declared by {self.source}, not verified by privrl"

    @property
    def guarantee(self) -> Guarantee:
        g = self.inner.guarantee
        return replace(g, notion=f"{g.notion} ({self.note})")

    def params(self) -> dict[str, Any]:
        return {**self.inner.params(), "declared_by": self.source,
                "verified_by_privrl": False, "quick_audit": dict(self.audit) or None}

    def release_params(self, dim: int) -> Any:
        return self.inner.release_params(dim)

    def release(self, params: Any, key: Array, x: Array) -> Array:
        return self.inner.release(params, key, x)

    def upload_bytes(self, dim: int) -> int:
        return self.inner.upload_bytes(dim)

    def audit_pair(self, dim: int) -> Any:
        """The user's worst-case neighbouring pair for `privrl audit` (its `audit_pair`)."""
        pair = getattr(self.inner, "audit_pair", None)
        if not callable(pair):
            raise ConfigError("mechanism", f"{self.source} declares no audit_pair(dim): the "
                                           "audit needs the mechanism's worst-case pair")
        return pair(dim)
