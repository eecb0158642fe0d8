"""Tests for the one privacy.json builder: it reads the ledger, mechanism and accountant itself,
keeps the layout it is given, and never lets a record without a guarantee hide that fact."""

from __future__ import annotations

import json

import pytest

from privrl.privacy import (
    Accountant,
    IdentityMechanism,
    LaplaceMechanism,
    PrivacyEvent,
    PrivacyLedger,
)
from privrl.privacy.record import NO_GUARANTEE, SPREAD_ACCOUNTING, privacy_record


def _charged(mechanism: LaplaceMechanism | IdentityMechanism, agents: int = 3,
             count: int = 2) -> PrivacyLedger:
    ledger = PrivacyLedger()
    ledger.charge(list(range(agents)), mechanism.guarantee, count)
    return ledger


def test_pure_epsilon_ledger_composes_and_keeps_the_default_layout() -> None:
    mech = LaplaceMechanism(epsilon=0.5, clip=1.0)
    ledger = _charged(mech)
    rec = privacy_record(
        lambda parts: f"ε = {parts['ledger']['per_agent_epsilon']['max']:g} per agent",
        mechanism=mech, ledger=ledger, fields={"agent_ids": "index"})
    assert list(rec) == ["statement", "mechanism", "agent_ids", "ledger"]
    assert rec["statement"] == "ε = 1 per agent"  # 2 releases of ε = 0.5, basic composition
    assert rec["mechanism"] == mech.describe()
    assert rec["ledger"] == ledger.summary()
    assert rec["ledger"]["formal_guarantee"] is True
    assert "formal_guarantee" not in rec  # only written when a system states it explicitly


def test_non_private_ledger_says_no_privacy_guarantee() -> None:
    mech = IdentityMechanism()
    rec = privacy_record(mechanism=mech, ledger=_charged(mech), formal_guarantee=None)
    assert rec["statement"].startswith(NO_GUARANTEE)
    assert rec["ledger"]["formal_guarantee"] is False
    explicit = privacy_record(ledger=_charged(mech), formal_guarantee=False)
    assert explicit["formal_guarantee"] is False
    assert explicit["statement"].startswith(NO_GUARANTEE)


def test_a_statement_that_hides_the_missing_guarantee_is_refused() -> None:
    mech = IdentityMechanism()
    with pytest.raises(ValueError, match="does not say so"):
        privacy_record("each agent is 1-LDP", mechanism=mech, ledger=_charged(mech))
    with pytest.raises(ValueError, match="needs a statement"):
        privacy_record(formal_guarantee=True)


def test_accountant_record_under_its_key_or_spread_inline() -> None:
    acc = Accountant("rdp")
    acc.compose(PrivacyEvent("gaussian", 1.1), 10)
    under = privacy_record("gaussian", accountant=acc, delta=1e-5, with_accounting=True)
    assert under["accounting"] == acc.record(1e-5)
    assert under["accounting"]["epsilon"] == pytest.approx(acc.epsilon(1e-5))
    spread = privacy_record(
        lambda parts: f"ε = {parts['accounting']['epsilon']:.3g}", accountant=acc,
        delta=1e-5, formal_guarantee=True, fields={"clip": 1.0},
        order=["formal_guarantee", "clip", SPREAD_ACCOUNTING, "statement"])
    assert list(spread)[:2] == ["formal_guarantee", "clip"]
    assert list(spread)[-1] == "statement"
    assert spread["epsilon"] == acc.epsilon(1e-5)
    assert spread["statement"] == f"ε = {acc.epsilon(1e-5):.3g}"
    assert "accounting" not in spread
    # No account at all: the key is still written (as null) when asked for.
    assert privacy_record("x", ledger=_charged(LaplaceMechanism(1.0, 1.0)),
                          with_accounting=True)["accounting"] is None


def test_layout_must_name_every_part_once() -> None:
    with pytest.raises(ValueError, match="leaves out"):
        privacy_record("s", fields={"a": 1, "b": 2}, order=["statement", "a"])
    with pytest.raises(ValueError, match="not a part"):
        privacy_record("s", order=["statement", "nope"])
    with pytest.raises(ValueError, match="clash"):
        privacy_record("s", fields={"statement": "other"})


def test_formal_key_renames_the_flag_and_the_record_is_strict_json() -> None:
    rec = privacy_record("NO ε IS CLAIMED", formal_guarantee=False, formal_key="private",
                         fields={"epsilon": "not claimed"})
    assert rec == {"statement": "NO ε IS CLAIMED", "epsilon": "not claimed", "private": False}
    ledger = _charged(IdentityMechanism())
    json.dumps(privacy_record(ledger=ledger), allow_nan=False)  # ε = ∞ is written as "inf"
