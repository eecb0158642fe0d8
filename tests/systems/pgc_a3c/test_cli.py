"""The command line: one-line errors before any computation, run directories, reproducibility."""

import contextlib
import io
import json
from pathlib import Path

import pytest

from privrl import main as cli
from privrl.systems.pgc_a3c import local


@pytest.fixture
def no_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("computation started despite invalid options")

    monkeypatch.setattr(local, "run_pgc_a3c", forbidden)


@pytest.mark.parametrize(
    "args, option",
    [
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--epsilon", "nan"], "--epsilon"),
        (["--epsilon", "inf"], "--epsilon"),
        (["--epsilon", "abc"], "--epsilon"),
        (["--clip", "0"], "--clip"),
        (["--clip", "-0.5"], "--clip"),
        (["--clip", "nan"], "--clip"),
        (["--trials", "0"], "--trials"),
        (["--submissions", "0"], "--submissions"),
        (["--parallel-agents", "0"], "--parallel-agents"),
        (["--buffer", "0"], "--buffer"),
        (["--seed", "-3"], "--seed"),
        (["--submissions-per-agent", "0"], "--submissions-per-agent"),
        (["--mechanism", "gaussian"], "--mechanism"),
        (["--mechanism", "none", "--epsilon", "3"], "--epsilon"),
        (["--mechanism", "prs", "--d-hat", "0"], "--d-hat"),
        (["--mechanism", "prs", "--d-hat", "113"], "--d-hat"),
        (["--d-hat", "2"], "--d-hat"),
        (["--noise", "public"], "--noise"),
        (["--mechanism", "prs", "--secure-noise"], "--secure-noise"),
        (["--delta", "0"], "--delta"),
        (["--budget-composition", "advanced"], "--budget-composition"),
        (["--mechanism", "none", "--budget-composition", "optimal"], "--budget-composition"),
        (["--env", "gymnasium:NoSuchEnv-v0"], "--env: cannot make Gymnasium environment"),
        (["--env", "gymnasium:CartPole-v1", "--private", "gravty=9:10"],
         "--private: gymnasium:CartPole-v1's environment (CartPoleEnv) has no attribute"),
        (["--env", "gymnasium:CartPole-v1", "--private", "kinematics_integrator=1,2"],
         "--private"),
        (["--env", "os:getcwd"], "--env: os:getcwd() must return"),
        (["--target-return", "nan"], "--target-return: must be finite"),
        (["--target-return", "-inf"], "--target-return: must be finite"),
        (["--target-return", "abc"], "--target-return"),
        (["--score-window", "0"], "--score-window"),
        (["--reward", "bonus"], "--reward"),
        (["--mechanism", "prs", "--secure-noise"], "--secure-noise: float-safe noise is for "
         "the laplace mechanism only, got prs: prs adds no Laplace or Gaussian noise"),
    ],
)
def test_invalid_option_one_line_exit_2(args, option, capsys, tmp_path, no_compute):
    out = tmp_path / "run"
    rc = cli.main(["run", "pgc-a3c", *args, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and option in err, err
    assert not out.exists()


def test_existing_nonempty_out_is_refused(capsys, tmp_path, no_compute):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    rc = cli.main(["run", "pgc-a3c", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--out" in err and len(err.splitlines()) == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "precious"


def test_help_explains_every_option(capsys):
    assert cli.main(["run", "pgc-a3c", "--help"]) == 0
    text = capsys.readouterr().out
    for opt in ["--mechanism", "--epsilon", "--trials", "--submissions", "--parallel-agents",
                "--buffer", "--clip", "--seed", "--out", "--d-hat", "--submissions-per-agent",
                "--budget-composition", "--delta"]:
        assert opt in text
    assert cli.main(["--help"]) == 0
    assert "run" in capsys.readouterr().out


def test_budget_composition_and_delta_reach_the_config(monkeypatch, tmp_path):
    import typer

    seen = {}

    def capture(config, *args, **kwargs):
        seen["config"] = config
        raise typer.Exit(0)

    monkeypatch.setattr(local, "run_pgc_a3c", capture)
    assert cli.main(["run", "pgc-a3c", "--budget-composition", "optimal", "--delta", "1e-6",
                     "--submissions-per-agent", "4", "--out", str(tmp_path / "r"),
                     "--no-progress"]) == 0
    cfg = seen["config"]
    assert (cfg.budget_composition, cfg.delta, cfg.submissions_per_agent) == ("optimal", 1e-6, 4)


def _config_of(monkeypatch, tmp_path: Path, *extra: str):
    """The config `privrl run pgc-a3c EXTRA` would run, captured where the run would start (the
    tests of writing it to config.json run the command whole)."""
    import typer

    seen = []

    def capture(config, *args, **kwargs):
        seen.append(config)
        raise typer.Exit(0)

    with monkeypatch.context() as m:
        m.setattr(local, "run_pgc_a3c", capture)
        assert cli.main(["run", "pgc-a3c", "--out", str(tmp_path / ("".join(extra) or "default")),
                         "--no-progress", *extra]) == 0
    (config,) = seen
    return config


def _run(tmp_path: Path, name: str, *extra: str) -> Path:
    out = tmp_path / name
    args = ["run", "pgc-a3c", "--trials", "2", "--submissions", "50", "--out", str(out),
            "--no-progress", *extra]
    assert cli.main(args) == 0
    return out


def test_heading_states_each_agents_whole_run_epsilon_never_a_reports(tmp_path, capsys):
    """Two reports per agent of ε = 5 each: the heading printed before the run names the
    agent's budget over the run (10), the results line and privacy.json's headline the
    composed whole-run ε, and a report's ε appears only labelled per release."""
    out = _run(tmp_path, "h", "--epsilon", "10", "--submissions-per-agent", "2")
    printed = capsys.readouterr()
    assert "each agent's total ε ≤ 10 over the run" in printed.err
    assert "ε = 5" not in printed.err and "per agent report" not in printed.err
    privacy = json.loads((out / "privacy.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert privacy["guarantee"]["epsilon"] == pytest.approx(10.0)
    assert privacy["epsilon_per_report"] == pytest.approx(5.0)
    assert summary["privacy"] == privacy["headline"]
    assert privacy["headline"].startswith("10-LDP for all of one agent's reports, over the")
    assert "; per release 5-LDP" in privacy["headline"]


def test_run_writes_results_and_same_seed_same_results(tmp_path, capsys, plot_titles):
    a = _run(tmp_path, "a", "--epsilon", "10", "--seed", "4")
    printed = capsys.readouterr().out
    assert "Results written to" in printed and "median FST" in printed
    for f in ["config.json", "metrics.csv", "privacy.json", "summary.json", "plots/scores.png"]:
        assert (a / f).is_file(), f
    summary = json.loads((a / "summary.json").read_text())
    for key in ["algorithm", "mechanism", "epsilon", "trials", "median_fst", "success_ratio",
                "fst"]:
        assert key in summary
    assert summary["algorithm"] == "pgc-a3c" and summary["epsilon"] == 10.0
    assert len(summary["fst"]) == 2
    privacy = json.loads((a / "privacy.json").read_text())
    assert privacy["ledger"]["per_agent_epsilon"]["max"] == 10.0
    assert privacy["ledger"]["agents"] == 2 * 50
    assert privacy["mechanism"]["mechanism"] == "laplace"
    assert privacy["trust_domain"]["runtime"] == "local"  # one process: a simulation
    # the plot names the system, the task, the mechanism and ε (issue 53 item 7)
    title = plot_titles["scores.png"]
    assert title.startswith("PGC-A3C on gymnax:CartPole-v1\nlaplace, ε = 10 per agent"), title
    config = json.loads((a / "config.json").read_text())
    assert config["seed"] == 4 and config["versions"]["jax"]
    rows = (a / "metrics.csv").read_text().splitlines()
    assert rows[0] == "trial,submission,score,mu" and len(rows) == 1 + 2 * 50

    b = _run(tmp_path, "b", "--epsilon", "10", "--seed", "4")
    assert (a / "metrics.csv").read_text() == (b / "metrics.csv").read_text()
    c = _run(tmp_path, "c", "--epsilon", "10", "--seed", "5")
    assert (a / "metrics.csv").read_text() != (c / "metrics.csv").read_text()
    # Seeded noise (the local default) is stated plainly as a simulation's guarantee.
    assert privacy["noise_keys"]["mode"] == "seeded" and "SIMULATION ONLY" in privacy["statement"]
    assert "not a deployment" in summary["noise"] and "noise keys" in printed
    # Secret noise: same seed, yet other noise (so other results), and the record says so.
    d = _run(tmp_path, "d", "--epsilon", "10", "--seed", "4", "--noise", "secret")
    assert (a / "metrics.csv").read_text() != (d / "metrics.csv").read_text()
    secret = json.loads((d / "privacy.json").read_text())
    assert secret["noise_keys"]["mode"] == "secret" and "SIMULATION" not in secret["statement"]
    assert json.loads((d / "config.json").read_text())["config"]["noise"] == "secret"


def test_secure_noise_makes_a_float_safe_laplace_with_the_same_epsilon():
    """The run itself compiles for seconds; its record is checked in benchmarks/bench_secure.py
    (the end-to-end timing run). Here: the config reaches the mechanism and the record."""
    from privrl.privacy.noise import noise_fields, record_mode
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig, make_mechanism

    cfg = PGCA3CConfig.from_preset("paper", epsilon=10.0, secure_noise=True).resolved()
    mech = make_mechanism(cfg, 112)
    assert mech.secure and mech.guarantee.epsilon == 10.0
    assert "discrete" in mech.describe()["params"]["secure"]
    assert noise_fields(record_mode(cfg.noise, cfg.secure_noise))["noise_keys"]["mode"] == "secure"


@pytest.fixture(scope="module")
def tuned_prs_run(tmp_path_factory):
    """One tuned-preset PRS run (ε = 5) with --reward env, --target-return 0 and
    --score-window 5 (flags over the preset): the tests of the tuned preset's defaults and of the
    target options both inspect it (one program compiled, not two). Returns (out, stdout)."""
    out = tmp_path_factory.mktemp("tuned") / "tuned"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["run", "pgc-a3c", "--trials", "2", "--submissions", "50", "--out",
                         str(out), "--no-progress", "--preset", "tuned", "--mechanism", "prs",
                         "--epsilon", "5", "--reward", "env", "--target-return", "0",
                         "--score-window", "5"]) == 0
    return out, printed.getvalue()


def test_target_score_and_window_reach_config_summary_and_fst(tuned_prs_run):
    """--target-return/--score-window are what the FST counts: a target of 0 is reached by the
    first window of CartPole returns (every episode lasts >= 1 step), so FST = 1 (μ_n is the
    forward window from n), and the window reaches metrics.csv's μ."""
    out, printed = tuned_prs_run
    config = json.loads((out / "config.json").read_text())["config"]
    assert (config["target_score"], config["score_window"]) == (0.0, 5)
    assert (config["reward"], config["server_optimizer"]) == ("env", "adam")  # flag over preset
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["target_score"], summary["score_window"]) == (0.0, 5)
    assert summary["fst"] == [1, 1] and summary["success_ratio"] == 1.0
    rows = [r.split(",") for r in (out / "metrics.csv").read_text().splitlines()[1:51]]
    scores = [float(r[2]) for r in rows]
    assert float(rows[0][3]) == pytest.approx(sum(scores[:5]) / 5)
    assert "median FST (μ ≥ 0)" in printed


def test_a_run_states_its_random_baseline_and_whether_it_learned(tuned_prs_run):
    """Issue 51: summary.json carries the random policy's return on the run's task (CartPole:
    about 22), its CI and the verdict with its test; the table shows the baseline and the last
    printed line says whether the run learned, as summary.json does."""
    out, printed = tuned_prs_run
    summary = json.loads((out / "summary.json").read_text())
    assert 15 < summary["random_return"] < 30  # a uniform-random CartPole policy: ≈ 22
    lo, hi = summary["random_return_ci"]
    assert lo < summary["random_return"] < hi
    assert summary["random_episodes"] == 2 * summary["final_window"]  # as many as the final's
    test = summary["learned_test"]
    assert "Welch" in test["test"] and test["level"] == 0.95
    assert summary["learned"] is (test["difference_lower"] > 0)
    lines = [" ".join(line.split()) for line in printed.strip().split("\n\n")]
    last = " ".join(printed.split()).rsplit("plots/scores.png)", 1)[1].strip()
    assert last.startswith("Learned:" if summary["learned"] else "Did not learn:"), lines
    assert "random policy's return (95% CI" in printed


def test_target_note_names_the_target_used():
    from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig
    from privrl.systems.pgc_a3c.local import target_note

    def resolved(**kw):
        return PGCA3C(PGCA3CConfig(**kw)).config

    assert target_note(resolved()) is None  # CartPole: 195 is its target
    note = target_note(resolved(env="gymnax:Acrobot-v1", target_score=-90.0, score_window=20))
    assert "20 consecutive returns reaching -90" in note
    # Acrobot's own target (Gymnasium's reward_threshold); FourRooms states none
    assert "reaching -100" in target_note(resolved(env="gymnax:Acrobot-v1"))
    assert "set --target-return" in target_note(resolved(env="gymnax:FourRooms-misc"))


def test_non_private_run_says_so(tmp_path, capsys):
    out = _run(tmp_path, "np", "--mechanism", "none")
    printed = capsys.readouterr().out
    assert "NO PRIVACY GUARANTEE" in printed
    assert "noise keys" not in printed and "seeded" not in printed  # no noise, no key line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epsilon"] == "inf" and "noise" not in summary
    assert summary["privacy"].startswith("NO PRIVACY GUARANTEE")
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["statement"].startswith("NO PRIVACY GUARANTEE")
    assert privacy["ledger"]["formal_guarantee"] is False and "noise_keys" not in privacy


def test_default_out_never_overwrites(tmp_path, monkeypatch):
    """Two commands without --out write two run directories. The first command runs whole (the
    shape of `_run`'s runs: their program); the second is handed the first's output, since
    where a command writes (`new_run_dir`, before the run) is what this test checks, not what
    the run computes (test_run_writes_results_and_same_seed_same_results repeats runs)."""
    monkeypatch.chdir(tmp_path)
    real, outputs = local.run_pgc_a3c, []

    def first_run_once(*args: object, **kwargs: object) -> local.RunOutput:
        if not outputs:
            outputs.append(real(*args, **kwargs))
        return outputs[0]

    monkeypatch.setattr(local, "run_pgc_a3c", first_run_once)
    for _ in range(2):
        assert cli.main(["run", "pgc-a3c", "--trials", "2", "--submissions", "50",
                         "--no-progress"]) == 0
    assert len(outputs) == 1
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 2 and len(set(runs)) == 2


def test_tuned_preset_from_cli(tuned_prs_run, tmp_path, monkeypatch):
    out, _ = tuned_prs_run
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["preset"] == "tuned" and config["server_optimizer"] == "adam"
    assert config["buffer_size"] == 10 and config["clip"] == 1.0  # tuned defaults for prs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preset"] == "tuned" and summary["epsilon"] == 5.0
    # Explicit options override the preset.
    assert _config_of(monkeypatch, tmp_path, "--preset", "tuned", "--buffer", "3").buffer_size == 3


def test_tuned_ldp_preset_from_cli(tmp_path, monkeypatch):
    """tuned-ldp is tuned with its own P, network and per-mechanism (clip, |B|); an explicit
    --parallel-agents still wins over the preset's. The config the command would run,
    resolved as its run resolves what config.json records (`PGCA3C(config).config`; the run
    only fills in the noise keys' default): that a run writes it there is
    test_tuned_preset_from_cli's check; a PrivUnit run compiles its program whole (host
    callbacks: no persistent cache), for nothing this test reads."""
    from privrl.systems.pgc_a3c.algorithm import PGCA3C

    config = PGCA3C(_config_of(monkeypatch, tmp_path, "--preset", "tuned-ldp", "--mechanism",
                               "privunit", "--epsilon", "1")).config.to_dict()
    assert config["server_optimizer"] == "adam" and config["reward"] == "failure"
    assert (config["parallel_agents"], config["hidden"]) == (3, 16)
    assert (config["buffer_size"], config["clip"]) == (1, 0.05)
    over = _config_of(monkeypatch, tmp_path, "--preset", "tuned-ldp", "--parallel-agents", "9")
    assert over.parallel_agents == 9
    assert _config_of(monkeypatch, tmp_path).parallel_agents == 9  # the paper preset keeps P = 9


def test_compilation_cache_location(monkeypatch, tmp_path):
    from privrl.compute.devices import use_compilation_cache

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("PRIVRL_CACHE_DIR", "off")
    assert use_compilation_cache() is None
    assert "JAX_COMPILATION_CACHE_DIR" not in __import__("os").environ
    monkeypatch.setenv("PRIVRL_CACHE_DIR", str(tmp_path))
    assert use_compilation_cache() == str(tmp_path)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")
    assert use_compilation_cache() == "/elsewhere"  # an explicit JAX setting wins
