"""Issue 53, item 9: a run that fails after some work keeps it: the run directory gets the
metrics so far, the policy so far and privacy.json counting every release made, marked as
stopped, and the last line says where (nothing was written before)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from privrl.main import main


def _fail_on_call(n: int, original):
    calls = []

    def fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise FloatingPointError("simulated crash in the middle of training")
        return original(*args, **kwargs)
    return fails


def _check_kept(out: Path, err: str) -> dict:
    assert err.strip().splitlines()[-1] == (
        "privrl: error: the run failed (FloatingPointError: simulated crash in the middle of "
        f"training); what it had done is kept in {out} (config.json, metrics so far, the "
        "policy so far, privacy.json counting every release made)")
    for name in ("config.json", "metrics.csv", "privacy.json", "summary.json", "policy.npz"):
        assert (out / name).is_file(), name
    privacy = json.loads((out / "privacy.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert privacy["stopped"]["error"].startswith("FloatingPointError")
    assert summary["stopped"] == privacy["stopped"]
    return privacy


def test_pgc_a3c_keeps_the_chunks_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    from privrl.systems.pgc_a3c import local

    monkeypatch.setattr(local, "_chunk_rounds", lambda *a: 1)  # a chunk per round of 3
    monkeypatch.setattr(local.ShardedTrials, "run_chunk",
                        _fail_on_call(3, local.ShardedTrials.run_chunk))
    out = tmp_path / "out"
    assert main(["run", "pgc-a3c", "--submissions", "9", "--parallel-agents", "3",
                 "--hidden", "4", "--max-steps", "20", "--out", str(out),
                 "--no-progress"]) == 1
    privacy = _check_kept(out, capsys.readouterr().err)
    lines = (out / "metrics.csv").read_text().splitlines()
    scores = np.array([float(v.split(",")[2]) for v in lines[1:]])
    assert scores.shape == (6,) and np.isfinite(scores).all()  # two rounds of three
    # the third round's 3 reports were charged before the crash: counted as made
    assert privacy["ledger"]["reports"] == 9


def test_dp_reinforce_keeps_the_episodes_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    from privrl.systems.dpsgd_rl import local

    monkeypatch.setattr(local, "run_episodic", partial(local.run_episodic, chunk=2))
    monkeypatch.setattr(local, "_compact", _fail_on_call(1, local._compact))  # after chunk 1
    out = tmp_path / "out"
    assert main(["run", "dp-reinforce", "--episodes", "4", "--batch-episodes", "2",
                 "--max-steps", "20", "--out", str(out), "--no-progress"]) == 1
    privacy = _check_kept(out, capsys.readouterr().err)
    assert privacy["stopped"]["note"].startswith("the run failed before its end")
    summary = json.loads((out / "summary.json").read_text())
    assert max(summary["updates"]) == 2  # the first chunk's two updates, not four


def test_a_failure_before_any_work_writes_nothing(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from privrl.systems.pgc_a3c import local

    monkeypatch.setattr(local.ShardedTrials, "run_chunk",
                        _fail_on_call(1, local.ShardedTrials.run_chunk))
    out = tmp_path / "out"
    with pytest.raises(FloatingPointError):
        main(["run", "pgc-a3c", "--submissions", "3", "--parallel-agents", "3", "--hidden",
              "4", "--max-steps", "20", "--out", str(out), "--no-progress"])
    assert not out.exists()
