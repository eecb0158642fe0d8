"""Issue 50, options from the config: each `privrl run` command's options are generated from
its config's field declarations (`privrl.config.option`), every tunable field is a flag, and
`--config FILE` (TOML, or a run's own config.json) sets fields under the options given.

Nothing here trains but `test_a_run_repeated_from_its_config_json_gives_the_same_metrics`
(two tiny PGC-A3C runs); the rest stop at the config (`_execute_pgc` replaced)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from privrl.main import build_app, main
from privrl.systems.pgc_a3c import cli as pgc_cli

# What a user tunes, per command: each must be a flag (issue 50).
TUNING = {
    "pgc-a3c": ["--learning-rate", "--gamma", "--hidden", "--entropy-coef", "--value-coef",
                "--clip", "--buffer"],
    "dp-reinforce": ["--learning-rate", "--gamma", "--hidden", "--batch-episodes", "--clip",
                     "--dropout"],
    "dp-dqn": ["--learning-rate", "--gamma", "--hidden", "--batch-size", "--clip", "--tau"],
    "ldp-reinforce": ["--learning-rate", "--gamma", "--hidden", "--iqr-scale", "--box-low"],
    "ldp-dqn": ["--learning-rate", "--gamma", "--hidden", "--batch-size", "--mode"],
    "fedpg-cen": ["--learning-rate", "--gamma", "--hidden", "--batch-min", "--clip",
                  "--minibatch"],
    "fedpg-dec": ["--learning-rate", "--gamma", "--hidden", "--batch-max", "--topology"],
    "fedrl": ["--learning-rate", "--gamma", "--batch-size", "--noise-std", "--target-period"],
    "fedrl-baseline": ["--learning-rate", "--gamma", "--batch-size", "--model"],
    "fedrl-text2action": ["--learning-rate", "--gamma", "--hidden", "--head-hidden"],
    "dp-qlearning": ["--learning-rate", "--gamma", "--hidden", "--batch-size", "--gp-scale"],
}


@pytest.fixture(scope="module")
def run_commands() -> dict[str, object]:
    root = typer.main.get_command(build_app())
    return dict(root.commands["run"].commands)  # type: ignore[attr-defined]


def test_every_run_command_is_covered(run_commands):
    assert set(run_commands) == set(TUNING)


@pytest.mark.parametrize("command", sorted(TUNING))
def test_every_tunable_field_is_a_flag_with_its_declared_help(command, run_commands):
    cmd = run_commands[command]
    flags = {o: p for p in cmd.params for o in p.opts}
    for flag in [*TUNING[command], "--config"]:
        assert flag in flags, f"{command}: no {flag}"
        assert flags[flag].help, f"{command}: {flag} has no help"
    assert all(p.help for p in cmd.params), f"{command}: an option without help"


@pytest.mark.parametrize("command", sorted(TUNING))
def test_every_run_command_refuses_a_bad_file_before_computing(command, tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("no_such_field = 1\n")
    out = tmp_path / "out"
    data = ["--data", str(tmp_path)] if command == "fedrl-text2action" else []
    assert main(["run", command, *data, "--config", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"privrl: error: {cfg}: no_such_field: not a field of"), err
    assert len(err.splitlines()) == 1 and not out.exists()


@pytest.fixture
def seen(monkeypatch) -> list:
    configs: list = []
    monkeypatch.setattr(pgc_cli, "_execute_pgc",
                        lambda config, out, show, *_: configs.append(config))
    return configs


def _run(*args: str) -> int:
    return main(["run", "pgc-a3c", *args, "--no-progress"])


def test_precedence_is_preset_then_file_then_flags(tmp_path: Path, seen: list) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text('preset = "tuned"\nlearning_rate = 0.02\ngamma = 0.9\nhidden = 12\n'
                   'gravities = [9.8]\n')
    assert _run("--config", str(cfg), "--gamma", "0.8", "--out", str(tmp_path / "a")) == 0
    (config,) = seen
    # tuned's value where neither says; the file's over the preset's; the flag's over the file's
    assert config.server_optimizer == "adam" and config.value_coef == 0.1
    assert (config.learning_rate, config.hidden, config.gravities) == (0.02, 12, (9.8,))
    assert config.gamma == 0.8


def test_new_tuning_flags_reach_the_config(tmp_path: Path, seen: list) -> None:
    assert _run("--learning-rate", "0.1", "--hidden", "4", "--entropy-coef", "0",
                "--use-bias", "--gravities", "9.6,9.7", "--reward", "STEP",
                "--out", str(tmp_path / "a")) == 0
    (config,) = seen
    assert (config.learning_rate, config.hidden, config.entropy_coef, config.use_bias,
            config.gravities, config.reward) == (0.1, 4, 0.0, True, (9.6, 9.7), "step")


@pytest.mark.parametrize(("text", "names"), [
    ("learning_rat = 0.1\n", "learning_rat: not a field of PGCA3CConfig"),
    ('learning_rate = "fast"\n', "learning_rate: must be a number, got 'fast'"),
    ("hidden = 1.5\n", "hidden: must be an integer"),
    ("use_bias = 1\n", "use_bias: must be true or false"),
    ("gravities = 9.8\n", "gravities: must be a list"),
    ("learning_rate = \n", "not a valid TOML file"),
    ("learning_rate = -1.0\n", "learning_rate: must be finite and > 0"),  # the config's check
    ('__import__("os").system("true")\n', "not a valid TOML file"),
])
def test_a_bad_file_is_one_line_naming_the_file_and_field(text, names, tmp_path, capsys, seen):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    assert _run("--config", str(cfg), "--out", str(tmp_path / "a")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"privrl: error: {cfg}: ") and names in err, err
    assert len(err.splitlines()) == 1 and seen == []


def test_an_oversized_or_missing_file_is_refused(tmp_path, capsys, seen):
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 200_000)
    assert _run("--config", str(big)) == 2
    assert f"{big}: larger than" in capsys.readouterr().err
    assert _run("--config", str(tmp_path / "none.toml")) == 2
    assert "none.toml: cannot read it" in capsys.readouterr().err
    assert seen == []


def test_a_run_config_json_is_checked(tmp_path, capsys, seen):
    doc = {"algorithm": "pgc-a3c", "config": {"hidden": 4}, "seed": 0, "command": [],
           "created": "", "versions": {}, "devices": 1}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    assert _run("--config", str(path), "--out", str(tmp_path / "a")) == 0
    assert seen[0].hidden == 4
    for bad, says in [({**doc, "algorithm": "fedpg-cen"}, "is a 'fedpg-cen' run's config"),
                      ({**doc, "extra": 1}, "extra: not a key of a run's config.json"),
                      ({**doc, "config": {"hidden": "4"}}, "hidden: must be an integer")]:
        path.write_text(json.dumps(bad))
        assert _run("--config", str(path)) == 2
        err = capsys.readouterr().err
        assert f"{path}: " in err and says in err, err
    path.write_text('{"algorithm": "pgc-a3c", "config": {"epsilon": NaN}}')
    assert _run("--config", str(path)) == 2
    assert "NaN is not JSON" in capsys.readouterr().err
    assert len(seen) == 1


def test_a_run_repeated_from_its_config_json_gives_the_same_metrics(tmp_path, capsys):
    # Flags over the preset, and the program of tests/systems/pgc_a3c/test_cli.py's tuned PRS
    # run (its flags; the seed is data, the target and window are read outside the program),
    # which one of the two finds in the persistent compilation cache.
    first, again = tmp_path / "first", tmp_path / "again"
    assert _run("--preset", "tuned", "--trials", "2", "--submissions", "50", "--mechanism",
                "prs", "--epsilon", "5", "--reward", "env", "--target-return", "0",
                "--score-window", "5", "--seed", "2", "--out", str(first)) == 0
    assert _run("--config", str(first / "config.json"), "--out", str(again)) == 0
    assert (first / "metrics.csv").read_bytes() == (again / "metrics.csv").read_bytes()
    assert json.loads((again / "config.json").read_text())["config"] == \
        json.loads((first / "config.json").read_text())["config"]


def test_a_nested_config_is_a_table_under_the_options(tmp_path, monkeypatch):
    from privrl.systems.dpsgd_rl import cli as dpsgd_cli

    seen: list = []
    monkeypatch.setattr(dpsgd_cli, "_execute", lambda name, cfg, out, show, *_:
                        seen.append(cfg))
    cfg = tmp_path / "ldp.toml"
    cfg.write_text('episodes = 7\n[obs]\nmode = "box"\nnoise_multiplier = 3.0\n'
                   'box_low = [-1, -1, -1, -1]\n')
    assert main(["run", "ldp-reinforce", "--config", str(cfg), "--noise-multiplier", "2",
                 "--no-progress"]) == 0
    (config,) = seen
    assert (config.episodes, config.dp, config.obs.mode, config.obs.noise_multiplier,
            config.obs.box_low) == (7, False, "box", 2.0, (-1.0, -1.0, -1.0, -1.0))
    assert config.obs.sigma == 0.1  # the command's default, under the file
    cfg.write_text("dp = true\n")  # a field the command fixes
    assert main(["run", "ldp-reinforce", "--config", str(cfg), "--no-progress"]) == 2


def test_a_fedpg_run_with_a_split_epsilon_repeats_from_its_config_json(tmp_path, capsys):
    """A run's config.json holds the total ε and the split it resolved to: the plan gives the
    same split again, and ε options beside it are refused."""
    first, again = tmp_path / "first", tmp_path / "again"
    args = ["run", "fedpg-dec", "--agents", "2", "--episodes", "24", "--mechanism", "laplace",
            "--no-progress"]
    assert main([*args, "--epsilon", "5", "--out", str(first)]) == 0
    run = ["run", "fedpg-dec", "--config", str(first / "config.json"), "--no-progress"]
    assert main([*run, "--out", str(again)]) == 0
    assert (first / "metrics.csv").read_bytes() == (again / "metrics.csv").read_bytes()
    assert json.loads((again / "privacy.json").read_text()) == \
        json.loads((first / "privacy.json").read_text())
    capsys.readouterr()
    assert main([*run, "--epsilon", "3", "--out", str(tmp_path / "no")]) == 2
    assert "sets the privacy request's fields" in capsys.readouterr().err
