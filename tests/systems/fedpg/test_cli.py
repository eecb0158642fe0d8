"""`--epsilon` is each agent's total over the run for every FedPG mechanism (issue 38): a pure
ε-LDP mechanism splits it over the most rounds the episode budget allows, and the ledger
enforces it; `--epsilon-per-report` is the per-release value under its own name."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from privrl import main as cli
from privrl.systems.fedpg import local as runner
from privrl.systems.fedpg.algorithm import FedPGConfig

SMALL = ["--agents", "2", "--episodes", "40", "--batch-min", "2", "--batch-max", "3",
         "--no-progress"]


def test_epsilon_is_each_agents_total_over_the_run(tmp_path, capsys, plot_titles):
    out = tmp_path / "run"
    assert cli.main(["run", "fedpg-cen", "--mechanism", "laplace", "--epsilon", "2", *SMALL,
                     "--out", str(out)]) == 0
    heading = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    title = plot_titles["returns.png"]  # system, task, mechanism, ε (issue 53 item 7)
    assert "FedPG-Cen" in title and "CartPole" in title and "laplace, ε = " in title, title
    assert "each agent's total ε ≤ 2 over the run" in heading
    config = json.loads((out / "config.json").read_text())["config"]
    privacy = json.loads((out / "privacy.json").read_text())
    rounds = FedPGConfig(agents=2, budget=40, batch_min=2, batch_max=3).max_rounds()
    # the config states the request (the total) and the plan's split of it
    assert config["epsilon"] == 2 and config["epsilon_budget"] is None
    assert config["epsilon_per_report"] == pytest.approx(2 / rounds)
    spent = privacy["ledger"]["per_agent_epsilon"]["max"]
    summary = json.loads((out / "summary.json").read_text())
    assert spent == pytest.approx(2 / rounds * summary["rounds"]) and spent <= 2
    # an unspent budget is stated with its reason (issue 53 item 8): the split assumes the
    # cheapest rounds (B_min + b·N_min = 2 + 4 episodes); SCSG's random sizes cost more
    assert spent < 2 * (1 - 1e-3)
    assert "of the budget ε = 2 spent" in privacy["headline"]
    assert f"Unspent budget: each agent spent at most ε = {spent:.4g} of its 2" in (
        privacy["statement"])
    assert f"split evenly over the {rounds} rounds" in privacy["statement"]


def test_optimal_composition_gives_each_release_more_of_the_total():
    basic = FedPGConfig(mechanism="laplace", epsilon=2.0, clip=1.0, budget=400).resolved()
    optimal = FedPGConfig(mechanism="laplace", epsilon=2.0, clip=1.0, budget=400,
                          budget_composition="optimal", delta=1e-5).resolved()
    assert basic.epsilon_per_report == pytest.approx(2 / basic.max_rounds())
    assert optimal.epsilon_per_report > basic.epsilon_per_report
    # the ledger of every runtime enforces the total, by the budget's composition
    assert basic.privacy_plan().ledger().epsilon_budget == 2.0
    assert optimal.privacy_plan().ledger().mode == "optimal"


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


# `--preset` (issue 39): the preset's fields hold unless a flag is given.
CONTINUOUS = {"preset": "continuous", "log_std": "parameter", "gamma": 0.9, "hidden": [64, 64],
              "batch_min": 4, "batch_max": 8, "importance_clip": 2.0, "learning_rate": 3e-4,
              "uniform_start": True}


def test_preset_continuous_runs_on_a_box_task(tmp_path):
    out = tmp_path / "run"
    assert cli.main(["run", "fedpg-cen", "--preset", "continuous", "--env", "gymnax:Pendulum-v1",
                     "--agents", "2", "--episodes", "16", "--max-steps", "20", "--no-progress",
                     "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert {k: config[k] for k in CONTINUOUS} == CONTINUOUS
    assert (config["agents"], config["budget"], config["max_episode_steps"]) == (2, 16, 20)
    # issue 51: the random baseline of a Box task (uniform torques: a negative return) and
    # the verdict
    summary = json.loads((out / "summary.json").read_text())
    assert summary["random_return"] < 0 and summary["learned"] in (True, False)
    assert summary["learned_test"]["final_values"] >= 2


@pytest.fixture
def captured_config(monkeypatch):
    """The config a run command hands the runner (the run itself is stopped)."""
    class Stop(Exception):
        pass

    seen: list[FedPGConfig] = []

    def stop(cfg, **kwargs):
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(runner, "run_fedpg", stop)

    def run(args: list[str], tmp_path) -> FedPGConfig:
        with pytest.raises(Stop):
            cli.main(["run", *args, "--no-progress", "--out", str(tmp_path / "r")])
        return seen[-1]
    return run


@pytest.mark.parametrize("command", ["fedpg-cen", "fedpg-dec"])
def test_a_flag_given_overrides_the_preset_and_only_it(command, captured_config, tmp_path):
    cfg = captured_config([command, "--preset", "continuous", "--batch-min", "5",
                           "--learning-rate", "1e-3", "--env", "gymnax:Pendulum-v1"], tmp_path)
    assert (cfg.preset, cfg.batch_min, cfg.learning_rate) == ("continuous", 5, 1e-3)
    assert (cfg.batch_max, cfg.importance_clip, cfg.gamma, cfg.log_std) == (8, 2.0, 0.9,
                                                                           "parameter")


@pytest.mark.parametrize("command", ["fedpg-cen", "fedpg-dec"])
def test_no_flag_is_the_paper_preset_exactly(command, captured_config, tmp_path):
    """Every option left out is the dataclass's (FedPG-BR's) value, as before --preset."""
    cfg = captured_config([command], tmp_path)
    # The task fills in its own target and step limit (CartPole-v1's 475 and 500).
    assert replace(cfg, target_return=None, max_episode_steps=None) == FedPGConfig(
        algorithm=cfg.algorithm)


@pytest.mark.parametrize("command", ["fedpg-cen", "fedpg-dec"])
def test_an_unknown_preset_is_refused(command, capsys, tmp_path, no_compute):
    assert cli.main(["run", command, "--preset", "tuned", *SMALL,
                     "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--preset" in err[0] and "continuous" in err[0], err
    assert not (tmp_path / "r").exists()
