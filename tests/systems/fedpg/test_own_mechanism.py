"""A user's own mechanism (examples/own_mechanism.py, not in privrl) in FedPG: a local
FedPG-Cen run releases every report through it (ε per release, as the pure mechanisms), the
ledger composes its declared guarantee, privacy.json says it is declared and not verified, and
`audit_fedpg` audits it through the same release. A tiny network and short episodes."""

from __future__ import annotations

import pytest

from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.fedpg.audit import audit_fedpg
from privrl.systems.fedpg.local import privacy_record, run_fedpg

NAME = "own_mechanism:duchi"
TINY = dict(agents=2, hidden=(4,), batch_min=2, batch_max=3, minibatch=1, inner_steps=1,
            max_episode_steps=20, budget=12)


def test_fedpg_runs_and_audits_a_user_mechanism_on_the_same_release(load_example, spy_release):
    module = load_example("own_mechanism")
    calls = spy_release(module, "duchi_release")
    cfg = FedPGConfig(mechanism=NAME, epsilon_per_report=3.0, clip=1.0, **TINY)
    seen: list[dict] = []

    def progress(done, total, **figures):  # issue 53 item 5: the count ends at its total
        seen.append({"done": done, "total": total, **figures})

    progress.takes_figures = True  # type: ignore[attr-defined]
    run = run_fedpg(cfg.resolved(), progress=progress)
    assert all(s["done"] <= s["total"] for s in seen) and seen[-1]["done"] == seen[-1]["total"]
    assert seen[-1]["epsilon"] > 0 and seen[-1]["mean_return"] is not None
    privacy = privacy_record(run)
    rounds = int(run.releases.max())
    assert calls and rounds > 0  # the run released through it
    assert privacy["ledger"]["reports"] == 2 * rounds
    assert privacy["ledger"]["per_agent_epsilon"]["max"] == pytest.approx(3.0 * rounds)
    assert f"declared by {NAME}, not verified by privrl" in privacy["mechanism"]["notion"]
    assert f"ONLY AS VALID AS the guarantee declared by {NAME}" in privacy["statement"]
    released = set(calls)
    calls.clear()
    (r,) = audit_fedpg(cfg, [3.0], samples=40, confidence=0.95)
    assert calls and set(calls) == released and r.epsilon_claimed == 3.0


def test_cli_refuses_a_bad_user_mechanism_after_the_other_options(fails_in_one_line):
    fails_in_one_line("fedpg-cen", ["--mechanism", "no_such_module_here:f", "--epsilon", "1"],
                      "--mechanism")
    fails_in_one_line("fedpg-cen", ["--mechanism", "no_such_module_here:f", "--epsilon", "1",
                                    "--budget", "0"], "--budget")


def test_an_epsilon_delta_plugin_gets_its_delta_under_an_epsilon_delta_budget(gauss_plugin):
    """Issue 53 item 4, FedPG's side (PGC-A3C's: tests/systems/pgc_a3c/test_own_mechanism.py):
    under an (ε, δ) budget (optimal composition) a plug-in is asked for δ/(2R) per report and
    declares it; under a pure budget the refusal says what a plug-in must declare."""
    from dataclasses import replace

    from privrl.config import ConfigError
    from privrl.systems.fedpg.algorithm import make_mechanism

    cfg = FedPGConfig(mechanism=gauss_plugin, epsilon=5.0,
                      budget_composition="optimal", delta=1e-5, audit_plugin=False).resolved()
    g = make_mechanism(cfg, 5).guarantee
    assert g.delta > 0 and g.delta == pytest.approx(1e-5 / (2 * cfg.max_rounds()))
    assert g.delta == cfg.privacy_plan().delta_per_report and 0 < g.epsilon < 5.0
    with pytest.raises(ConfigError, match=r"budget is pure ε, so a plug-in must declare δ = 0"):
        make_mechanism(replace(cfg, budget_composition="basic").resolved(), 5)
