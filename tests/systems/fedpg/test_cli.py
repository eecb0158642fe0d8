"""`--epsilon` is each agent's total over the run for every FedPG mechanism (issue 38): a pure
ε-LDP mechanism splits it over the most rounds the episode budget allows, and the ledger
enforces it; `--epsilon-per-report` is the per-release value under its own name."""

from __future__ import annotations

import json

import pytest

from privrl import main as cli
from privrl.systems.fedpg import local as runner
from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.fedpg.cli import per_release_epsilon

SMALL = ["--agents", "2", "--episodes", "40", "--batch-min", "2", "--batch-max", "3",
         "--no-progress"]


def test_epsilon_is_each_agents_total_over_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "fedpg-cen", "--mechanism", "laplace", "--epsilon", "2", *SMALL,
                     "--out", str(out)]) == 0
    heading = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "each agent's total ε ≤ 2 over the run" in heading
    config = json.loads((out / "config.json").read_text())["config"]
    privacy = json.loads((out / "privacy.json").read_text())
    rounds = FedPGConfig(agents=2, budget=40, batch_min=2, batch_max=3).max_rounds()
    assert config["epsilon"] == pytest.approx(2 / rounds) and config["epsilon_budget"] == 2
    spent = privacy["ledger"]["per_agent_epsilon"]["max"]
    summary = json.loads((out / "summary.json").read_text())
    assert spent == pytest.approx(2 / rounds * summary["rounds"]) and spent <= 2


def test_optimal_composition_gives_each_release_more_of_the_total():
    basic = FedPGConfig(mechanism="laplace", epsilon=2.0, clip=1.0, budget=400)
    optimal = FedPGConfig(mechanism="laplace", epsilon=2.0, clip=1.0, budget=400,
                          budget_composition="optimal", delta=1e-5)
    assert per_release_epsilon(basic) == pytest.approx(2 / basic.max_rounds())
    assert per_release_epsilon(optimal) > per_release_epsilon(basic)


@pytest.fixture
def no_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("computation started despite invalid options")

    monkeypatch.setattr(runner, "run_fedpg", forbidden)


@pytest.mark.parametrize(("args", "flag"), [
    (["--mechanism", "gaussian", "--epsilon-per-report", "1"], "--epsilon-per-report"),
    (["--mechanism", "laplace", "--epsilon", "1", "--epsilon-per-report", "1"],
     "--epsilon-per-report"),
    (["--mechanism", "laplace", "--epsilon", "1", "--epsilon-budget", "1"], "--epsilon-budget"),
    (["--mechanism", "laplace", "--epsilon-per-report", "inf"], "--epsilon-per-report"),
])
def test_per_report_epsilon_is_refused_where_it_does_not_apply(args, flag, capsys, tmp_path,
                                                               no_compute):
    assert cli.main(["run", "fedpg-cen", *args, *SMALL, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("mechanism", ["gaussian", "distributed-gaussian"])
def test_the_heading_states_each_agents_total_epsilon(mechanism, monkeypatch, capsys, tmp_path):
    """The calibrated mechanisms' heading names the whole-run ε, not only one round's."""
    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(runner, "run_fedpg", stop)
    with pytest.raises(Stop):
        cli.main(["run", "fedpg-cen", "--mechanism", mechanism, "--epsilon", "3", *SMALL,
                  "--out", str(tmp_path / "r")])
    err = " ".join(capsys.readouterr().err.split())
    assert "each agent's total ε ≤ 3 at δ = 1e-05 over the run" in err, err
