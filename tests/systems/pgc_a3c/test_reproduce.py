"""`privrl reproduce pgc-a3c`: the sweep machinery on a tiny cap, resume, and the tables."""

import json
import math
import shutil

import numpy as np
import pytest

from privrl import main as cli
from privrl.systems.pgc_a3c import local
from privrl.systems.pgc_a3c import reproduce as rep
from privrl.systems.pgc_a3c.reproduce import Setting, SweepConfig, compute_tables, tables_markdown

TINY = SweepConfig(preset="tuned", trials=2, cap=300, epsilons=(10.0,), mechanisms=("laplace",))


def test_tables_from_synthetic_fst_match_hand_values():
    cfg = SweepConfig(trials=4, cap=10, epsilons=(1.0,), mechanisms=("laplace",))
    fst = {"none-epsinf": np.array([1.0, 1.0, 2.0, 2.0]),  # curve 0.5, 1, 1, ... (area 9.5)
           "laplace-eps1": np.array([5.0, np.inf, 3.0, 10.0])}
    t = compute_tables(cfg, fst)
    assert t["median_fst"]["laplace"][math.inf] == 1.5
    assert t["median_fst"]["laplace"][1.0] == 7.5  # median of 3, 5, 10, ∞
    assert t["success_ratio"]["laplace"][1.0] == 0.75
    # curve: n=1,2: 0; n=3,4: .25; n=5..9: .5; n=10: .75 → area 0.5 + 2.5 + 0.75 = 3.75
    assert t["relative_auc"]["laplace"][1.0] == pytest.approx(3.75 / 9.5)
    assert t["relative_auc"]["laplace"][math.inf] == 1.0
    md = tables_markdown(cfg, t)
    assert "| Lap (paper) | 18377.0 |" in md and "| Lap (privrl) | 7.5 |" in md


def test_sweep_writes_tables_plots_raw_and_resumes(tmp_path, monkeypatch):
    calls = []
    real = local.run_pgc_a3c

    def crash_on_second(config, **kw):
        calls.append(config.mechanism)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the second setting
        return real(config, **kw)

    monkeypatch.setattr(local, "run_pgc_a3c", crash_on_second)
    with pytest.raises(KeyboardInterrupt):  # each setting alone, saved as it finishes
        rep.run_sweep(TINY, tmp_path, log=lambda m: None, one_program=False)
    first = tmp_path / "settings" / "none-epsinf" / "summary.json"
    assert first.is_file() and not (tmp_path / "settings" / "laplace-eps10").exists()
    stamp = first.stat().st_mtime_ns

    monkeypatch.setattr(local, "run_pgc_a3c", lambda config, **kw: (calls.append(
        config.mechanism), real(config, **kw))[1])
    tables = rep.run_sweep(TINY, tmp_path, log=lambda m: None)  # one setting left: alone
    assert calls == ["none", "laplace", "laplace"]  # the finished setting was not redone
    assert first.stat().st_mtime_ns == stamp
    for f in ["tables.md", "tables.json", "raw/trials.csv", "privacy.json",
              "plots/fig2_average_score_laplace.png", "plots/fig3_success_ratio_laplace.png"]:
        assert (tmp_path / f).is_file(), f
    rows = (tmp_path / "raw" / "trials.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2
    privacy = json.loads((tmp_path / "privacy.json").read_text())
    assert privacy["laplace-eps10"]["ledger"]["per_agent_epsilon"]["max"] == 10.0
    assert privacy["none-epsinf"]["statement"].startswith("NO PRIVACY GUARANTEE")
    assert set(tables["success_ratio"]["laplace"]) == {10.0, math.inf}


@pytest.fixture(scope="module")
def one_program_sweep(tmp_path_factory):
    """TINY swept by default (its settings as one program), recording which runner ran which
    settings: one sweep that the tests below inspect (each compiles and runs the same program)."""
    path = tmp_path_factory.mktemp("one-program-sweep")
    calls = []
    real = local.run_pgc_a3c_settings
    with pytest.MonkeyPatch.context() as m:
        m.setattr(local, "run_pgc_a3c", lambda *a, **k: pytest.fail("ran alone"))
        m.setattr(local, "run_pgc_a3c_settings", lambda configs, **kw: (calls.append(
            [c.mechanism for c in configs]), real(configs, **kw))[1])
        rep.run_sweep(TINY, path, log=lambda m: None)
    return path, calls


def test_sweep_runs_its_settings_as_one_program_by_default(one_program_sweep):
    path, calls = one_program_sweep
    assert calls == [["none", "laplace"]]
    for name in ("none-epsinf", "laplace-eps10"):
        summary = json.loads((path / "settings" / name / "summary.json").read_text())
        assert summary["one_program"]["settings"] == 2 and summary["trials"] == 2
        assert (path / "settings" / name / "scores.npz").is_file()
    privacy = json.loads((path / "privacy.json").read_text())
    assert privacy["laplace-eps10"]["ledger"]["per_agent_epsilon"]["max"] == 10.0
    assert privacy["none-epsinf"]["statement"].startswith("NO PRIVACY GUARANTEE")


def test_resume_refuses_a_different_sweep(one_program_sweep, tmp_path):
    """A finished sweep of 2 trials (a copy: the refusal must not touch it) resumed with 3, every
    other option TINY's."""
    path = tmp_path / "sweep"
    shutil.copytree(one_program_sweep[0], path)
    rc = cli.main(["reproduce", "pgc-a3c", "--resume", str(path), "--preset", "tuned",
                   "--submissions", "300", "--mechanisms", "laplace", "--epsilon", "10",
                   "--trials", "3", "--no-progress"])
    assert rc == 2


def test_reproduce_cli_validates_before_running(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rep, "run_sweep", lambda *a, **k: pytest.fail("ran"))
    assert cli.main(["reproduce", "pgc-a3c", "--trials", "0", "--no-progress"]) == 2
    assert "--trials" in capsys.readouterr().err
    assert cli.main(["reproduce", "pgc-a3c", "--resume", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert cli.main(["reproduce", "pgc-a3c", "--out", str(tmp_path / "a"), "--resume",
                     str(tmp_path)]) == 2
    for args, flag in [(["--mechanisms", "laplace,gauss"], "--mechanisms"),
                       (["--epsilon", "1,0"], "--epsilon"), (["--epsilon", "x"], "--epsilon")]:
        assert cli.main(["reproduce", "pgc-a3c", *args, "--out", str(tmp_path / "b"),
                         "--no-progress"]) == 2
        assert flag in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_mechanisms_the_paper_did_not_run_get_rows_without_paper_numbers():
    cfg = SweepConfig(trials=2, cap=10, epsilons=(1.0,), mechanisms=("laplace", "privunit"))
    fst = {"none-epsinf": np.array([1.0, 2.0]), "laplace-eps1": np.array([5.0, np.inf]),
           "privunit-eps1": np.array([3.0, 4.0])}
    md = tables_markdown(cfg, compute_tables(cfg, fst))
    assert "| PrivUnit2 (privrl) | 3.5 |" in md and "PrivUnit2 (paper)" not in md
    assert "| Lap (paper) | 18377.0 |" in md


def test_setting_names():
    assert Setting("none", math.inf).name == "none-epsinf"
    assert Setting("prs", 2.0).name == "prs-eps2"
    assert [s.name for s in TINY.settings()] == ["none-epsinf", "laplace-eps10"]
