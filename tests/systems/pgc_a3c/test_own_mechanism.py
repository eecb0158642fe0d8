"""A user's own mechanism (examples/own_mechanism.py: Duchi et al.'s per-coordinate ε-LDP
mechanism, not in privrl) runs in a local PGC-A3C run, is audited through the same release,
is composed by the ledger, and is stated as declared, not verified (privrl.privacy.user).
Short 20-step episodes and a small network keep the tests fast.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from privrl.audit import audit_mechanism
from privrl.config import ConfigError
from privrl.privacy.user import MechanismRequest, user_mechanism
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
from privrl.systems.pgc_a3c.audit import audit_pgc_a3c
from privrl.systems.pgc_a3c.local import privacy_record, run_pgc_a3c, summarize

SMALL = {"max_episode_steps": 20, "hidden": 4, "parallel_agents": 3, "submissions": 6,
         "submissions_per_agent": 2}
NAME = "own_mechanism:duchi"


@pytest.fixture
def own(load_example: Any, spy_release: Any) -> tuple[Any, list[tuple]]:
    """The example module, its release spied on: the distinct parameter values of each call."""
    module = load_example("own_mechanism")
    calls = spy_release(module, "duchi_release")
    return module, calls


def test_a_user_mechanism_runs_locally_and_is_audited_on_the_same_release(own):
    _, calls = own
    cfg = PGCA3CConfig.from_preset("tuned", mechanism=NAME, epsilon=8.0, **SMALL)
    seen: list[dict] = []

    def progress(done, total, **figures):  # figures: the mean return, the ε spent so far
        seen.append({"done": done, "total": total, **figures})

    progress.takes_figures = True  # type: ignore[attr-defined]
    out = run_pgc_a3c(cfg, progress=progress)
    assert seen[-1]["done"] == seen[-1]["total"] == 6  # issue 53 item 5: figures as it goes
    assert seen[-1]["epsilon"] == pytest.approx(8.0) and seen[-1]["mean_return"] > 0
    run = set(calls)
    assert run, "the run did not release through the user's function"
    ledger = out.ledger.summary()  # T = 2 reports per agent of ε/T = 4 each, composed
    assert ledger["reports"] == 6 and ledger["per_agent_epsilon"]["max"] == pytest.approx(8.0)
    record = privacy_record(out)
    assert (f"ONLY AS VALID AS the guarantee declared by {NAME}, which privrl does not verify"
            in record["statement"])
    mech = record["mechanism"]
    assert mech["mechanism"] == "duchi-coordinates"
    assert f"declared by {NAME}, not verified by privrl" in mech["notion"]
    assert mech["params"]["epsilon"] == pytest.approx(4.0)
    # the ε is marked declared wherever it is written (issue 53 item 12)
    assert record["guarantee"]["verified_by_privrl"] is False
    assert record["headline"].startswith("declared 8-LDP")
    # the quick audit at the start of the run, recorded beside the claim (issue 53 item 4)
    lower = record["guarantee"]["audited_epsilon_lower_per_release"]
    assert 0 < lower <= 4.0 and mech["params"]["quick_audit"]["epsilon_lower"] == lower
    assert "quick audit at the start of the run found one release's ε ≥" in record["statement"]
    summary = summarize(out)
    assert summary["privacy"].startswith("declared 8-LDP")
    assert summary["epsilon_declared_by"] == NAME and not summary["epsilon_verified_by_privrl"]
    on_ray = privacy_record(out, "ray")
    assert "ONE Ray cluster" in on_ray["headline"] and "nobody but" not in on_ray["statement"]
    calls.clear()
    (r,) = audit_pgc_a3c(cfg, [8.0], samples=200, confidence=0.95)
    assert set(calls) == run  # the canary agent released with the run's numbers
    assert r.epsilon_claimed == pytest.approx(4.0)


def test_audit_mechanism_takes_a_user_mechanism_and_refutes_a_false_declaration(own):
    module, calls = own
    mech = user_mechanism(NAME, MechanismRequest(1.0, 0.0, 1.0, 4))
    honest = audit_mechanism(mech, key=jax.random.key(0), samples=20_000,
                             confidence=1 - 1e-6, dim=4)
    assert calls and not honest.violated, honest
    class Liar(module.DuchiCoordinates):
        """The same release spending ε = 4 while declaring ε = 1."""

        @property
        def guarantee(self) -> Any:
            return replace(super().guarantee, epsilon=1.0)

    broken = audit_mechanism(Liar(4.0, 0.5, 4), key=jax.random.key(0), samples=20_000,
                             confidence=1 - 1e-6, dim=4)
    assert broken.epsilon_claimed == 1.0 and broken.violated, broken


def test_a_declaration_beyond_the_request_or_not_a_mechanism_is_refused(own, monkeypatch):
    module, _ = own
    monkeypatch.setattr(module, "too_much", lambda r: module.DuchiCoordinates(
        2 * r.epsilon, r.clip, r.dim), raising=False)
    with pytest.raises(ConfigError, match=r"declares .* more than"):
        user_mechanism("own_mechanism:too_much", MechanismRequest(1.0, 0.0, 1.0, 4))
    monkeypatch.setattr(module, "not_one", lambda r: jnp.zeros(3), raising=False)
    with pytest.raises(ConfigError, match="must return a privrl"):
        user_mechanism("own_mechanism:not_one", MechanismRequest(1.0, 0.0, 1.0, 4))
    with pytest.raises(ConfigError, match="cannot import"):
        user_mechanism("no_such_module_here:f", MechanismRequest(1.0, 0.0, 1.0, 4))


def test_cli_refuses_a_bad_user_mechanism_in_one_line(fails_in_one_line):
    fails_in_one_line("pgc-a3c", ["--mechanism", "no_such_module_here:f"], "--mechanism")
    fails_in_one_line("pgc-a3c", ["--mechanism", "examples/own_mechanism.py:nothing"],
                      "--mechanism")
    fails_in_one_line("pgc-a3c", ["--mechanism", "gaussian"], "--mechanism")
    # imported only after every other option is checked: a bad one is named first
    fails_in_one_line("pgc-a3c", ["--mechanism", "no_such_module_here:f", "--trials", "0"],
                      "--trials")


def test_an_epsilon_delta_plugin_runs_under_an_epsilon_delta_budget(gauss_plugin):
    """Issue 53 item 4: under an (ε, δ) budget (optimal composition) a plug-in is asked for
    δ/(2T) per report and the ledger composes its (ε₀, δ₀) reports within (ε, δ); under a pure
    budget the refusal says what a plug-in must declare."""
    from privrl.privacy.accounting import optimal_pure_composition
    from privrl.systems.pgc_a3c.algorithm import budget_ledger, make_mechanism

    name = gauss_plugin
    cfg = PGCA3CConfig(mechanism=name, epsilon=8.0, submissions_per_agent=4,
                       budget_composition="optimal", delta=1e-5).resolved()
    mech = make_mechanism(cfg, 5)
    g = mech.guarantee
    assert g.delta == pytest.approx(1e-5 / 8) and 0 < g.epsilon < 8
    assert mech.params()["quick_audit"]["epsilon_lower"] <= g.epsilon  # audited, not refuted
    ledger = budget_ledger(cfg)
    ledger.charge([0, 1], g, 4)
    eps, delta = ledger.spent(0)
    assert delta == 1e-5 and eps == pytest.approx(
        optimal_pure_composition(g.epsilon, 4, 1e-5 / 2)) and eps <= 8.0 * (1 + 1e-9)
    basic = replace(cfg, budget_composition="basic")
    with pytest.raises(ConfigError, match=r"budget is pure ε, so a plug-in must declare δ = 0"):
        user_mechanism(name, MechanismRequest(2.0, 0.0, 1.0, 5))
    assert basic.privacy_plan().delta_per_report == 0.0
