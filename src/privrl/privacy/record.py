"""One builder for privacy.json, so every system states its guarantee the same way.

A system's privacy record is made of the same few parts — the mechanism's description, the
ledger's composition, an accountant's account, whether a formal guarantee holds, and a
sentence that says what is protected — plus fields only that system has. `privacy_record`
reads those parts from the kernel objects themselves (never from copies a system made), lays
them out in the order the system's privacy.json has always had, and refuses a record whose
statement hides that there is no guarantee.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from privrl.privacy.accounting import Accountant
from privrl.privacy.ledger import PrivacyLedger

__all__ = ["NO_GUARANTEE", "SPREAD_ACCOUNTING", "privacy_record"]

NO_GUARANTEE = "NO PRIVACY GUARANTEE"
SPREAD_ACCOUNTING = "**accounting"  # in `order`: the account's keys inline, not under a key
# A statement of a record without a formal guarantee must say so ("no guarantee", "NO ε ...").
_DISCLAIMS = re.compile(r"\bno\b[^.]*\b(guarantee|ε)", re.IGNORECASE)


class Describable(Protocol):
    """A mechanism: anything whose `describe()` gives its name, parameters and guarantee."""

    def describe(self) -> dict[str, Any]: ...


Statement = str | Callable[[Mapping[str, Any]], str]


def privacy_record(
    statement: Statement | None = None,
    *,
    mechanism: Describable | Mapping[str, Any] | None = None,
    ledger: PrivacyLedger | None = None,
    accountant: Accountant | Mapping[str, Any] | None = None,
    delta: float = 0.0,
    formal_guarantee: bool | None = None,
    fields: Mapping[str, Any] | None = None,
    order: Sequence[str] | None = None,
    with_accounting: bool | None = None,
    formal_key: str = "formal_guarantee",
) -> dict[str, Any]:
    """The privacy.json dict of a run (or of one part of it).

    Parts, each present only when given: "mechanism" (`mechanism.describe()`), "ledger"
    (`ledger.summary()`), "accounting" (`accountant.record(delta)`, or an account already
    taken; `with_accounting=True` writes the key even when there is none, as null),
    "formal_guarantee" (only when passed explicitly; written under `formal_key`), "statement",
    and the system's `fields`.

    `statement` may be a function of the parts (it sees the ledger summary, the account and
    the derived "formal_guarantee"); without one, a record with no formal guarantee says
    NO PRIVACY GUARANTEE. Whether a guarantee holds is, first given, the explicit
    `formal_guarantee`, else the ledger's verdict, else an account's presence, else the
    mechanism's; a record without one whose statement does not disclaim it is refused.

    `order` lists the keys as privacy.json lays them out (default: statement, mechanism, the
    fields, formal_guarantee, ledger, accounting); SPREAD_ACCOUNTING puts the account's own
    keys inline. It must name every part exactly once.
    """
    parts: dict[str, Any] = {}
    if mechanism is not None:
        parts["mechanism"] = (mechanism.describe() if hasattr(mechanism, "describe")
                              else dict(mechanism))  # type: ignore[arg-type]
    if ledger is not None:
        parts["ledger"] = ledger.summary()
    if isinstance(accountant, Accountant):
        parts["accounting"] = accountant.record(delta)
    elif accountant is not None:
        parts["accounting"] = dict(accountant)
    elif with_accounting:
        parts["accounting"] = None
    formal = _formal(formal_guarantee, parts)
    if formal_guarantee is not None:
        parts[formal_key] = formal_guarantee
    text = statement(parts | {"formal_guarantee": formal}) if callable(statement) else statement
    if text is None:
        if formal is not False:
            raise ValueError("a record with a formal guarantee needs a statement of it")
        text = f"{NO_GUARANTEE}: non-private run (ε = ∞); nothing is protected."
    if formal is False and not _DISCLAIMS.search(text):
        raise ValueError(f"the record has no formal guarantee but its statement does not say "
                         f"so: {text!r}")
    parts["statement"] = text
    extra = dict(fields or {})
    clash = parts.keys() & extra.keys()
    if clash:
        raise ValueError(f"fields {sorted(clash)} clash with the record's own parts")
    parts |= extra
    if order is None:
        order = [k for k in ("statement", "mechanism", *extra, formal_key, "ledger",
                             "accounting") if k in parts]
    return _lay_out(parts, order)


def _formal(explicit: bool | None, parts: Mapping[str, Any]) -> bool | None:
    """Whether a formal guarantee holds; None where nothing given can tell."""
    if explicit is not None:
        return explicit
    if "ledger" in parts:
        return bool(parts["ledger"]["formal_guarantee"])
    if parts.get("accounting") is not None:
        return True
    if "mechanism" in parts and "private" in parts["mechanism"]:
        return bool(parts["mechanism"]["private"])
    return None


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
