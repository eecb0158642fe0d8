"""The privacy statement, composed once: every system supplies facts, this module writes prose.

A run's privacy.json (and the one line the command line and summary.json show) is built from
the same parts for every system:

- the guarantee (`Claim`): the WHOLE-RUN ε and δ for the unit it names, its notion and the
  composition or accountant that gives it; or, where there is none, why (`Facts.no_guarantee`);
- the releases (`Releases`): who released what, how often, through which mechanism, and the ε
  of one release, always labelled "per release";
- other valid accounts of the same releases (`Composition`), each labelled by how it composes;
- the budget the ledger enforces (`Budget`), the shuffle (`CentralShuffle`), the trust model
  (`Trust`), what is not protected, a condition the guarantee depends on, and the noise keys
  mode (a seeded run's guarantee is a simulation's).

`statement(facts)` and `headline(facts)` render them; `privacy_record` lays out privacy.json
from the facts and the kernel objects themselves (mechanism, ledger, accountant), and refuses a
record whose facts contradict the ledger's verdict on whether a guarantee holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from privrl.privacy.accounting import Accountant
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.plan import PrivacyPlan

__all__ = [
    "COMPOSED",
    "NO_GUARANTEE",
    "SIMULATION_ONLY",
    "SPREAD_ACCOUNTING",
    "TRUST_DOMAINS",
    "Budget",
    "CentralShuffle",
    "Claim",
    "Composition",
    "Facts",
    "Releases",
    "Trust",
    "headline",
    "mechanism_record",
    "planned",
    "privacy_record",
    "pure_ldp",
    "statement",
    "trust_domain",
]

NO_GUARANTEE = "NO PRIVACY GUARANTEE"
SIMULATION_ONLY = "SIMULATION ONLY: the noise is reproducible from the seed in config.json."
SPREAD_ACCOUNTING = "**accounting"  # in `order`: the account's keys inline, not under a key
COMPOSED = ("statement", "headline", "guarantee")  # the keys `privacy_record` composes


# Where a run's parties live, by runtime: what separates an agent's secrets (its environment, raw
# data, noise root) from the aggregator's operator. privacy.json names it (`trust_domain`): the
# same (ε, δ) means something else when whoever runs the aggregator can read an agent's memory.
TRUST_DOMAINS: dict[str, dict[str, str]] = {
    "local": {
        "domains": "one process",
        "what": "every agent, the aggregator and the driver share one operating-system "
                "process: a simulation of a deployment, not one",
        "guarantee_against": "whoever sees only the released reports (the run's files); "
                             "no party of the run is separated from another",
    },
    "ray": {
        "domains": "one Ray cluster",
        "what": "scale-out inside one organization: anyone who can connect to the cluster "
                "(the driver, the aggregator's operator, any other job) can run code on any "
                "node, including reading an agent's secret noise root and raw gradients",
        "guarantee_against": "whoever sees only the released reports and cannot connect to "
                             "the cluster; NOT the operator of the aggregator or anyone else "
                             "who can connect",
    },
    "flower": {
        "domains": "one per agent, one for the aggregator",
        "what": "each agent computes in a process of its own beside its SuperNode (privrl's "
                "agent executor), holding its environment, parameters and noise root, and "
                "runs only the app bundle its owner pinned, never a bundle's code; the "
                "aggregator's ServerApp receives only Reports, or (FedPG-Cen's secure sum) "
                "SecAgg+-masked vectors and their one revealed sum",
        "guarantee_against": "the aggregator's operator and anyone who sees the Reports, "
                             "provided each agent's SuperNode runs in a domain of its own "
                             "(a local test deployment runs them all on one machine as one "
                             "user: docs/flower.md); under a secure sum, what holds against "
                             "a server that deviates from the protocol is stated apart "
                             "(secure_sum.guarantee_against; docs/threat-model.md)",
    },
}


def trust_domain(runtime: str) -> dict[str, str]:
    """privacy.json's `trust_domain` for a run on `runtime` (docs/threat-model.md)."""
    if runtime not in TRUST_DOMAINS:
        raise ValueError(f"unknown runtime {runtime!r}; one of {sorted(TRUST_DOMAINS)}")
    return {"runtime": runtime, **TRUST_DOMAINS[runtime]}


def _eps(epsilon: float, delta: float, notion: str) -> str:
    """`(ε = 1.2, δ = 1e-05)-DP`, or `1.2-LDP` for a pure ε."""
    if delta:
        return f"(ε = {epsilon:.4g}, δ = {delta:.3g})-{notion}"
    return f"{epsilon:.4g}-{notion}"


@dataclass(frozen=True)
class Claim:
    """The guarantee over the whole run for one unit.

    epsilon, delta: the whole run's (never one release's). notion: "LDP" or "DP".
    scope: what kind of DP, e.g. "local, untrusted aggregator" or "central, user level".
    unit: what is protected, e.g. "all of one agent's reports".
    how: the composition or accountant that gives (ε, δ), in a few words ("basic
    composition", "the pld accountant, 8 rounds"); `detail`: more on it, for the statement only.
    """

    epsilon: float
    delta: float
    notion: str
    scope: str
    unit: str
    how: str
    detail: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError(f"a claim's ε must be finite and >= 0, got {self.epsilon!r}")

    def text(self) -> str:
        return _eps(self.epsilon, self.delta, self.notion)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "whole_run": True}


@dataclass(frozen=True)
class Releases:
    """What the ledger counts: `who` released `count` (at most) of `what`, each randomized by
    `mechanism`; `epsilon`/`delta`: one release's (None where a release has no ε alone)."""

    who: str
    what: str
    mechanism: str
    count: int | None = None
    epsilon: float | None = None
    delta: float = 0.0
    notion: str = "LDP"


@dataclass(frozen=True)
class Composition:
    """Another valid account of the same releases (looser or of another kind), labelled."""

    epsilon: float
    delta: float
    how: str
    notion: str = "LDP"


@dataclass(frozen=True)
class Budget:
    """The cap enforced per unit before every release, by what (`how`), and what happens at
    it (`at_cap`)."""

    epsilon: float
    delta: float
    how: str
    at_cap: str


@dataclass(frozen=True)
class CentralShuffle:
    """The shuffle model's central account against `receiver` (with a trusted shuffler)."""

    receiver: str
    batch: int
    batches: int
    epsilon: float
    delta: float
    per_batch_epsilon: float | None = None
    per_batch_delta: float | None = None

    @classmethod
    def of(cls, account: Mapping[str, Any], receiver: str) -> CentralShuffle:
        """The facts of a `privrl.privacy.shuffle.shuffle_record` account."""
        return cls(receiver, int(account["batch_size"]), int(account["batches_per_user"]),
                   float(account["central_epsilon"]), float(account["central_delta"]),
                   float(account["central_epsilon_per_batch"]), float(account["delta"]))


@dataclass(frozen=True)
class Trust:
    """Who must be honest for the claim, and what is computed from the releases only."""

    honest: str
    post_processing: str = ""  # what is computed from the releases alone


@dataclass(frozen=True)
class Facts:
    """Everything a privacy statement says, as data. `claim` None: no formal guarantee, for
    the reason `no_guarantee` gives. `noise`: "seeded", "secret", "secure" or None (no noise)."""

    claim: Claim | None
    no_guarantee: str = ""
    releases: Releases | None = None
    also: Sequence[Composition] = field(default_factory=tuple)
    budget: Budget | None = None
    shuffle: CentralShuffle | None = None
    trust: Trust | None = None
    condition: str = ""
    not_protected: str = ""
    noise: str | None = None
    asked: bool = True  # False: no protection was asked for, so none is said plainly
    unspent: str = ""  # why the claim's ε is below the budget (`budget`), where it is
    declared_by: str = ""  # a user's mechanism: its ε is declared, not verified (privacy.user)
    audit: Mapping[str, Any] | None = None  # the quick audit of a declared one (audit.quick)
    runtime: str = "local"  # where the parties ran (TRUST_DOMAINS): Ray's cluster is one domain

    def __post_init__(self) -> None:
        if self.claim is None and not self.no_guarantee:
            raise ValueError("facts without a claim must say why there is no guarantee")
        if self.claim is not None and self.no_guarantee:
            raise ValueError("facts with a claim cannot also give a reason for none")
        trust_domain(self.runtime)

    @property
    def formal(self) -> bool:
        return self.claim is not None

    @property
    def declared(self) -> str:
        """"declared " before every ε of an unverified mechanism, else ""."""
        return "declared " if self.declared_by else ""

    @property
    def scope(self) -> str:
        """The claim's scope as the runtime's trust domain allows: on Ray an "untrusted
        aggregator" can connect to the agents' cluster, so the scope names the cluster."""
        assert self.claim is not None
        if self.runtime != "ray":
            return self.claim.scope
        if self.claim.scope.startswith("local"):
            return ("local DP inside ONE Ray cluster, one trust domain: against whoever sees "
                    "only the released reports and cannot connect to the cluster")
        return f"{self.claim.scope}; inside ONE Ray cluster, one trust domain"

    @property
    def honest(self) -> str | None:
        """Who must be honest, as the runtime's trust domain allows (None: not stated)."""
        if self.runtime == "ray":
            return ("everyone who can connect to the Ray cluster, which is one trust domain: "
                    "the driver, the aggregator's operator and any other job on it can read "
                    "an agent's secret noise root and raw data")
        return None if self.trust is None else self.trust.honest

    def guarantee(self) -> dict[str, Any] | None:
        """privacy.json's `guarantee`: the claim's fields (scope as the runtime allows) and,
        for a user's mechanism, that its ε is declared, not verified."""
        if self.claim is None:
            return None
        out = {**self.claim.to_dict(), "scope": self.scope}
        if self.declared_by:
            out |= {"declared_by": self.declared_by, "verified_by_privrl": False,
                    "audited_epsilon_lower_per_release": (
                        None if not self.audit else self.audit["epsilon_lower"])}
        return out


def _none(facts: Facts) -> str:
    """The sentence for no guarantee: in capitals where one could be expected, plainly where
    none was asked for (a part of the run the user left unprotected on purpose)."""
    if facts.asked:
        return f"{NO_GUARANTEE}: {facts.no_guarantee}"
    return f"none asked for ({facts.no_guarantee})"


def headline(facts: Facts) -> str:
    """One line: the whole-run guarantee for its unit (a release's ε labelled per release), or
    that there is none."""
    c = facts.claim
    if c is None:
        return _none(facts)
    line = (f"{facts.declared}{c.text()} for {c.unit}, over the whole run ({facts.scope}; "
            f"{c.how})")
    r = facts.releases
    if r is not None and r.epsilon is not None:
        line += f"; per release {facts.declared}{_eps(r.epsilon, r.delta, r.notion)}"
    if facts.unspent and facts.budget is not None:
        line += (f"; {c.epsilon:.4g} of the budget ε = {facts.budget.epsilon:g} spent (why: "
                 "privacy.json's statement)")
    if facts.shuffle is not None:
        s = facts.shuffle
        line += f"; shuffled: {_eps(s.epsilon, s.delta, 'DP')} against the {s.receiver}"
    if facts.condition:
        line += f"; ONLY AS VALID AS {facts.condition}"
    return line + (" [simulation: seeded noise]" if facts.noise == "seeded" else "")


def planned(plan: PrivacyPlan, who: str = "each agent") -> str:
    """Before a run, what its plan bounds: `who`'s whole-run ε (at δ where a composition or
    accountant needs one), or "" where nothing bounds it before the run (no mechanism, σ given,
    or per-report ε without a cap): the run's ε is then stated with its results."""
    if plan.kind == "pure" and plan.cap is not None and math.isfinite(plan.cap):
        at = f" at δ = {plan.delta:g}" if plan.composition == "optimal" else ""
        return f"{who}'s total ε ≤ {plan.cap:g}{at} over the run"
    if plan.kind == "gaussian" and plan.epsilon is not None:
        return f"{who}'s total ε ≤ {plan.epsilon:g} at δ = {plan.delta:g} over the run"
    return ""


def statement(facts: Facts) -> str:
    """privacy.json's statement: the parts in a fixed order, each a sentence or two."""
    c = facts.claim
    out: list[str] = []
    if c is None:
        out.append(f"{_none(facts)}.")
    else:
        detail = f" ({c.detail})" if c.detail else ""
        out.append(f"{facts.declared[:1].upper()}{facts.declared[1:]}{c.text()} for {c.unit}, "
                   f"over the whole run ({facts.scope}), by {c.how}{detail}.")
    r = facts.releases
    if r is not None:
        count = "" if r.count is None else f" ({r.count} release(s) at most)"
        one = ("" if r.epsilon is None else
               f" Each release alone is {facts.declared}{_eps(r.epsilon, r.delta, r.notion)} "
               "(per release).")
        out.append(f"{r.who[:1].upper()}{r.who[1:]} released {r.what}{count}, randomized by "
                   f"{r.mechanism}.{one}")
    for a in facts.also:
        out.append(f"Also {facts.declared}{_eps(a.epsilon, a.delta, a.notion)} by {a.how}.")
    if facts.budget is not None:
        b = facts.budget
        notion = "DP" if c is None else c.notion
        out.append(f"Budget {_eps(b.epsilon, b.delta, notion)} per unit, enforced before every "
                   f"release ({b.how}): {b.at_cap}.")
        if facts.unspent:
            out.append(f"Unspent budget: {facts.unspent}.")
    if facts.shuffle is not None:
        s = facts.shuffle
        batch = ("" if s.per_batch_epsilon is None else
                 f"each round is {_eps(s.per_batch_epsilon, s.per_batch_delta or 0.0, 'DP')} and ")
        out.append(f"Shuffled: the {s.receiver} receives each round's reports (at least "
                   f"{s.batch}) in random order without identities, so against it, with a "
                   f"trusted shuffler, {batch}an agent's {s.batches} rounds together are "
                   f"{_eps(s.epsilon, s.delta, 'DP')} (central, amplification by shuffling, "
                   "basic composition); against the shuffler only the local ε holds.")
    if facts.honest is not None:
        post = "" if facts.trust is None else facts.trust.post_processing
        out.append(f"Trust: {facts.honest}."
                   + (f" Post-processing (no privacy cost): {post}." if post else ""))
    if facts.condition:
        out.append(f"ONLY AS VALID AS {facts.condition}.")
    if facts.declared_by:
        out.append("privrl's quick audit at the start of the run found one release's ε ≥ "
                   f"{facts.audit['epsilon_lower']:g} (confidence "
                   f"{facts.audit['confidence']:.6g}; a lower bound, which can refute a "
                   "declaration, never prove it)."
                   if facts.audit else "The declaration was not audited (audit_plugin off).")
    if facts.not_protected:
        out.append(f"Not protected: {facts.not_protected}.")
    if facts.noise == "seeded" and c is not None:
        out.append(SIMULATION_ONLY)
    return " ".join(out)


def pure_ldp(composed: Mapping[str, Any], scope: str, unit: str, at_cap: str,
             budget: float | None) -> tuple[Claim, list[Composition], Budget | None]:
    """Pure ε-LDP releases of one unit (a `pure_composition_record`): the whole-run claim in
    the composition the ledger enforces, the other composition beside it, and the ledger's
    budget per unit (None: no budget)."""
    optimal = composed["enforced_by_ledger"] == "optimal"
    opt, basic = composed["optimal"], composed["basic"]
    tight = (opt["epsilon"], opt["delta"], "the optimal composition theorem")
    pure = (basic["epsilon"], basic["delta"],
            "basic composition" + ("" if basic["delta"] else " (pure)"))
    (e, d, how), other = (tight, pure) if optimal else (pure, tight)
    claim = Claim(e, d, "LDP", scope, unit, f"{how}, as the ledger enforces")
    cap = None if budget is None else Budget(
        budget, opt["delta"] if optimal else 0.0,
        "optimal composition" if optimal else "pure, basic composition", at_cap)
    # An (ε, δ) account whose ε reads as the pure one (one release, or too few to gain) says
    # nothing more: it is left out, not stated beside the claim.
    redundant = not optimal and f"{opt['epsilon']:.4g}" == f"{basic['epsilon']:.4g}"
    return claim, [] if redundant else [Composition(*other)], cap


class Describable(Protocol):
    """A mechanism: anything whose `describe()` gives its name, parameters and guarantee."""

    def describe(self) -> dict[str, Any]: ...


class Uploading(Describable, Protocol):
    """A per-report mechanism that also says how many bytes one report uploads."""

    def upload_bytes(self, dim: int) -> int: ...


def mechanism_record(mechanism: Uploading, dim: int) -> dict[str, Any]:
    """privacy.json's "mechanism" for reports of `dim` inputs: its name, parameters, guarantee
    and the bytes each report uploads (summary.json repeats those)."""
    return {**mechanism.describe(), "upload_bytes_per_report": mechanism.upload_bytes(dim)}


def privacy_record(
    facts: Facts,
    *,
    mechanism: Describable | Mapping[str, Any] | None = None,
    ledger: PrivacyLedger | None = None,
    accountant: Accountant | Mapping[str, Any] | None = None,
    delta: float = 0.0,
    formal_key: str | None = None,
    fields: Mapping[str, Any] | None = None,
    order: Sequence[str] | None = None,
    with_accounting: bool | None = None,
) -> dict[str, Any]:
    """The privacy.json dict of a run (or of one part of it).

    Parts, each present only when given: "statement" and "headline" (composed from `facts`),
    "guarantee" (the claim's fields, null without one), "mechanism" (`mechanism.describe()`),
    "ledger" (`ledger.summary()`), "accounting" (`accountant.record(delta)`, or an account
    already taken; `with_accounting=True` writes the key even when there is none, as null),
    `formal_key` (whether a formal guarantee holds, when a system's layout has that key) and
    the system's `fields`. A ledger whose verdict on the guarantee differs from the facts'
    is refused.

    `order` lists the keys as privacy.json lays them out (default: statement, headline,
    guarantee, mechanism, the fields, formal_key, ledger, accounting); SPREAD_ACCOUNTING puts
    the account's own keys inline. It must name every part exactly once.
    """
    parts: dict[str, Any] = {"statement": statement(facts), "headline": headline(facts),
                             "guarantee": facts.guarantee()}
    if mechanism is not None:
        parts["mechanism"] = (mechanism.describe() if hasattr(mechanism, "describe")
                              else dict(mechanism))  # type: ignore[arg-type]
    if ledger is not None:
        parts["ledger"] = ledger.summary()
        if bool(parts["ledger"]["formal_guarantee"]) != facts.formal:
            raise ValueError("the ledger's verdict on a formal guarantee "
                             f"({parts['ledger']['formal_guarantee']}) contradicts the facts")
    if isinstance(accountant, Accountant):
        parts["accounting"] = accountant.record(delta)
    elif accountant is not None:
        parts["accounting"] = dict(accountant)
    elif with_accounting:
        parts["accounting"] = None
    if formal_key is not None:
        parts[formal_key] = facts.formal
    extra = dict(fields or {})
    clash = parts.keys() & extra.keys()
    if clash:
        raise ValueError(f"fields {sorted(clash)} clash with the record's own parts")
    parts |= extra
    if order is None:
        order = [k for k in (*COMPOSED, "mechanism", *extra,
                             formal_key, "ledger", "accounting") if k in parts]
    return _lay_out(parts, order)


def _lay_out(parts: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    used: list[str] = []
    for key in order:
        name = "accounting" if key == SPREAD_ACCOUNTING else key
        if name not in parts or name in used:
            raise ValueError(f"order names {key!r}, which is not a part of the record or is "
                             "named twice")
        used.append(name)
        if key == SPREAD_ACCOUNTING:
            inline = parts[name] or {}
            clash = inline.keys() & (parts.keys() | out.keys())
            if clash:
                raise ValueError(f"the account's keys {sorted(clash)} clash with the record's")
            out |= inline
        else:
            out[key] = parts[key]
    missing = [k for k in parts if k not in used]
    if missing:
        raise ValueError(f"order leaves out the record's parts {missing}")
    return out
