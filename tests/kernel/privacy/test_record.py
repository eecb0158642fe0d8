"""Tests for the one privacy statement: systems give facts, privacy.privacy.record composes the
statement and its headline from them (the whole run's ε first, a release's labelled per
release), lays out privacy.json, and never lets a record hide a missing guarantee."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from privrl.privacy import (
    Accountant,
    IdentityMechanism,
    LaplaceMechanism,
    PrivacyEvent,
    PrivacyLedger,
)
from privrl.privacy.accounting import pure_composition_record
from privrl.privacy.record import (
    COMPOSED,
    NO_GUARANTEE,
    SIMULATION_ONLY,
    SPREAD_ACCOUNTING,
    Budget,
    CentralShuffle,
    Claim,
    Composition,
    Facts,
    Releases,
    Trust,
    headline,
    privacy_record,
    pure_ldp,
    statement,
)
from privrl.privacy.shuffle import shuffle_record

CLAIM = Claim(2.0, 0.0, "LDP", "local, untrusted aggregator", "all of one agent's reports",
              "basic composition")
ONE = Releases("each agent", "its clipped gradient", "the laplace mechanism", 4, 0.5)


def _charged(mechanism: LaplaceMechanism | IdentityMechanism, agents: int = 3,
             count: int = 2) -> PrivacyLedger:
    ledger = PrivacyLedger()
    ledger.charge(list(range(agents)), mechanism.guarantee, count)
    return ledger


def test_headline_states_the_whole_run_and_labels_the_release() -> None:
    line = headline(Facts(CLAIM, releases=ONE, noise="secret"))
    assert line == ("2-LDP for all of one agent's reports, over the whole run (local, untrusted "
                    "aggregator; basic composition); per release 0.5-LDP")
    approx = Claim(1.2034, 1e-5, "DP", "central", "one agent's whole data", "the pld accountant")
    assert headline(Facts(approx, noise="seeded")).startswith(
        "(ε = 1.203, δ = 1e-05)-DP for one agent's whole data, over the whole run (central; the "
        "pld accountant)")
    assert headline(Facts(approx, noise="seeded")).endswith("[simulation: seeded noise]")


def test_statement_composes_every_part_in_order() -> None:
    account = shuffle_record(0.5, 100, 1e-6, batches=4)
    facts = Facts(
        CLAIM, releases=ONE, also=[Composition(1.5, 1e-5, "the optimal composition theorem")],
        budget=Budget(2.0, 0.0, "basic composition", "the ledger refuses a report beyond it"),
        shuffle=CentralShuffle.of(account, "aggregator"),
        trust=Trust("nobody but the agent itself", "the aggregator's updates"),
        condition="the constant C", not_protected="the rewards", noise="seeded")
    text = statement(facts)
    parts = [
        "2-LDP for all of one agent's reports, over the whole run (local, untrusted "
        "aggregator), by basic composition.",
        "Each agent released its clipped gradient (4 release(s) at most), randomized by the "
        "laplace mechanism. Each release alone is 0.5-LDP (per release).",
        "Also (ε = 1.5, δ = 1e-05)-LDP by the optimal composition theorem.",
        "Budget 2-LDP per unit, enforced before every release (basic composition): the ledger "
        "refuses a report beyond it.",
        "Shuffled: the aggregator receives each round's reports (at least 100)",
        f"an agent's 4 rounds together are (ε = {account['central_epsilon']:.4g}, δ = 4e-06)-DP",
        "Trust: nobody but the agent itself. Post-processing (no privacy cost): the "
        "aggregator's updates.",
        "ONLY AS VALID AS the constant C.",
        "Not protected: the rewards.",
        SIMULATION_ONLY,
    ]
    at = [text.index(p) for p in parts]
    assert at == sorted(at) and at[0] == 0 and text.endswith(SIMULATION_ONLY)
    assert "SIMULATION" not in statement(Facts(CLAIM, noise="secret"))


def test_no_guarantee_is_said_first_and_never_as_a_simulation() -> None:
    facts = Facts(None, "no mechanism (as in the paper)", noise="seeded")
    assert statement(facts) == f"{NO_GUARANTEE}: no mechanism (as in the paper)."
    assert headline(facts) == f"{NO_GUARANTEE}: no mechanism (as in the paper)"
    with pytest.raises(ValueError, match="say why"):
        Facts(None)
    with pytest.raises(ValueError, match="cannot also"):
        Facts(CLAIM, "no reason")
    with pytest.raises(ValueError, match="finite"):
        Claim(float("inf"), 0.0, "LDP", "local", "unit", "how")


def test_record_lays_out_the_composed_parts_and_the_kernel_objects() -> None:
    mech = LaplaceMechanism(epsilon=0.5, clip=1.0)
    ledger = _charged(mech)
    facts = Facts(CLAIM, releases=ONE)
    rec = privacy_record(facts, mechanism=mech, ledger=ledger, fields={"agent_ids": "index"})
    assert list(rec) == [*COMPOSED, "mechanism", "agent_ids", "ledger"]
    assert rec["statement"] == statement(facts) and rec["headline"] == headline(facts)
    assert rec["guarantee"] == {**CLAIM.to_dict(), "whole_run": True}
    assert rec["guarantee"]["epsilon"] == 2.0
    assert rec["mechanism"] == mech.describe() and rec["ledger"] == ledger.summary()
    assert "formal_guarantee" not in rec  # only written when a layout names the key


def test_a_record_contradicting_the_ledger_is_refused() -> None:
    none = IdentityMechanism()
    with pytest.raises(ValueError, match="contradicts"):
        privacy_record(Facts(CLAIM), mechanism=none, ledger=_charged(none))
    private = LaplaceMechanism(1.0, 1.0)
    with pytest.raises(ValueError, match="contradicts"):
        privacy_record(Facts(None, "none"), ledger=_charged(private))
    rec = privacy_record(Facts(None, "raw data released"), ledger=_charged(none),
                         formal_key="private")
    assert rec["private"] is False and rec["guarantee"] is None
    assert rec["statement"].startswith(NO_GUARANTEE)
    json.dumps(rec, allow_nan=False)  # ε = ∞ is written as "inf"


def test_accountant_record_under_its_key_or_spread_inline() -> None:
    acc = Accountant("rdp")
    acc.compose(PrivacyEvent("gaussian", 1.1), 10)
    under = privacy_record(Facts(CLAIM), accountant=acc, delta=1e-5, with_accounting=True)
    assert under["accounting"] == acc.record(1e-5)
    spread = privacy_record(
        Facts(CLAIM), accountant=acc, delta=1e-5, formal_key="formal_guarantee",
        fields={"clip": 1.0}, order=["formal_guarantee", "clip", SPREAD_ACCOUNTING, *COMPOSED])
    assert list(spread)[:2] == ["formal_guarantee", "clip"]
    assert list(spread)[-3:] == list(COMPOSED)
    assert spread["epsilon"] == acc.epsilon(1e-5) and "accounting" not in spread
    assert privacy_record(Facts(CLAIM), with_accounting=True)["accounting"] is None


def test_layout_must_name_every_part_once() -> None:
    facts = Facts(CLAIM)
    with pytest.raises(ValueError, match="leaves out"):
        privacy_record(facts, fields={"a": 1}, order=[*COMPOSED])
    with pytest.raises(ValueError, match="not a part"):
        privacy_record(facts, order=[*COMPOSED, "nope"])
    with pytest.raises(ValueError, match="clash"):
        privacy_record(facts, fields={"statement": "other"})


@pytest.mark.parametrize("enforced", ["basic", "optimal"])
def test_pure_ldp_claims_the_composition_the_ledger_enforces(enforced: str) -> None:
    composed = pure_composition_record(0.1, 50, 1e-5, enforced)
    claim, (other,), budget = pure_ldp(composed, "local", "one agent's reports", "refused", 3.0)
    basic, opt = composed["basic"], composed["optimal"]
    assert opt["epsilon"] < basic["epsilon"] == pytest.approx(5.0)
    mine, theirs = (opt, basic) if enforced == "optimal" else (basic, opt)
    assert (claim.epsilon, claim.delta) == (mine["epsilon"], mine["delta"])
    assert (other.epsilon, other.delta) == (theirs["epsilon"], theirs["delta"])
    assert "as the ledger enforces" in claim.how
    assert budget == Budget(3.0, 1e-5 if enforced == "optimal" else 0.0,
                            "optimal composition" if enforced == "optimal"
                            else "pure, basic composition", "refused")
    assert pure_ldp(composed, "local", "unit", "refused", None)[2] is None


def test_a_declared_epsilon_is_marked_wherever_it_is_written() -> None:
    """Issue 53 item 12: a user mechanism's ε, unverified, is "declared" in the headline, the
    statement (whole run, per release, other compositions) and the guarantee object."""
    facts = Facts(CLAIM, releases=ONE, also=[Composition(1.5, 1e-5, "optimal composition")],
                  trust=Trust("nobody but the agent itself"), declared_by="mine.py:m")
    line = headline(facts)
    assert line.startswith("declared 2-LDP for") and "per release declared 0.5-LDP" in line
    text = statement(facts)
    assert text.startswith("Declared 2-LDP for") and "alone is declared 0.5-LDP" in text
    assert "Also declared (ε = 1.5" in text
    record = privacy_record(facts)
    assert record["guarantee"]["declared_by"] == "mine.py:m"
    assert record["guarantee"]["verified_by_privrl"] is False
    assert "verified_by_privrl" not in privacy_record(Facts(CLAIM))["guarantee"]


def test_on_ray_the_cluster_is_named_as_one_trust_domain() -> None:
    """On Ray anyone who can connect to the cluster can read an agent's secrets: the headline,
    statement and guarantee name the cluster, not "nobody but the agent itself"."""
    facts = Facts(CLAIM, releases=ONE, trust=Trust("nobody but the agent itself", "updates"),
                  runtime="ray")
    for text in (headline(facts), statement(facts), privacy_record(facts)["guarantee"]["scope"]):
        assert "ONE Ray cluster, one trust domain" in text and "untrusted aggregator" not in text
    assert "nobody but the agent" not in statement(facts)
    assert "Trust: everyone who can connect to the Ray cluster" in statement(facts)
    local = replace(facts, runtime="local")
    assert "Trust: nobody but the agent itself" in statement(local)
    with pytest.raises(ValueError, match="unknown runtime"):
        replace(facts, runtime="moon")


def test_one_release_gets_no_redundant_composition_sentence() -> None:
    """Issue 53 item 8: one ε = 5 release is not also "(ε = 5, δ = 1e-05) by the optimal
    composition theorem"; where the optimal account gains, it is still stated."""
    one = pure_ldp(pure_composition_record(5.0, 1, 1e-5), "local", "unit", "refused", 5.0)
    assert one[1] == []
    assert "Also" not in statement(Facts(one[0], also=one[1]))
    many = pure_ldp(pure_composition_record(0.1, 50, 1e-5), "local", "unit", "refused", 5.0)
    assert len(many[1]) == 1 and "Also (ε = " in statement(Facts(many[0], also=many[1]))
