"""Issue 53, item 9: a run that fails after some work keeps it: the run directory gets the
metrics so far, the policy so far and privacy.json counting every release made, marked as
stopped, and the last line says where (nothing was written before)."""

from __future__ import annotations

import json
import re
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


def _one_episode_per_call(episodes: int, target: int | None = None) -> int:
    """DP Q-learning's `local.chunk_size` for the two tests below: one episode per call."""
    return 1


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


def test_fedpg_dec_keeps_the_rounds_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    from privrl.systems.fedpg import local

    program = local.round_program
    monkeypatch.setattr(local, "round_program",
                        lambda *a: _fail_on_call(3, program(*a)))  # after two rounds
    out = tmp_path / "out"
    assert main(["run", "fedpg-dec", "--agents", "2", "--episodes", "40", "--batch-min", "2",
                 "--batch-max", "3", "--mechanism", "gaussian", "--epsilon", "5",
                 "--out", str(out), "--no-progress"]) == 1
    privacy = _check_kept(out, capsys.readouterr().err)
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert rows and {int(r.split(",")[1]) for r in rows} <= {0, 1}, rows[:3]
    # the third round's releases were charged before it failed: counted as made
    assert privacy["ledger"]["reports"] > 0


def test_dp_qlearning_keeps_its_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    """Its training is done before its one release: a failure after it (the random baseline)
    keeps it. Trained one episode per call, as the next test trains (its crash needs three
    calls): the same compiled program, found again in the session's cache (its chunk's
    length, not the run's, is what compiles)."""
    from privrl.systems.dp_qlearning import local

    monkeypatch.setattr(local, "chunk_size", _one_episode_per_call)
    monkeypatch.setattr(local, "random_baseline", _fail_on_call(1, local.random_baseline))
    out = tmp_path / "out"
    assert main(["run", "dp-qlearning", "--gp-scale", "0.2", "--trials", "2",
                 "--episodes", "3", "--out", str(out)]) == 1
    _check_kept(out, capsys.readouterr().err)
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0] == "seed,episode,return" and len(rows) == 1 + 2 * 3


def test_dp_qlearning_keeps_its_returns_from_a_crash_during_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Issue 53, item 9: a failure in the third of three one-episode calls keeps the returns of
    the two done (diagnostics) and no policy; its one release, the trained Q-function, was not
    made, so privacy.json says nothing was released and no ε spent."""
    from privrl.systems.dp_qlearning import local

    sharded = local.sharded
    monkeypatch.setattr(local, "chunk_size", _one_episode_per_call)
    monkeypatch.setattr(local, "sharded", lambda fn, devices: (
        _fail_on_call(3, sharded(fn, devices)) if fn.__name__ == "run_episodes"
        else sharded(fn, devices)))
    out = tmp_path / "out"
    assert main(["run", "dp-qlearning", "--gp-scale", "0.2", "--trials", "2", "--episodes", "3",
                 "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("privrl: error: the run failed "
                                                   "(FloatingPointError") and str(out) in err
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0] == "seed,episode,return" and len(rows) == 1 + 2 * 2, rows  # 2 seeds × 2
    assert not (out / "policy.npz").exists()  # the Q-function was never released
    privacy = json.loads((out / "privacy.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert privacy["epsilon_spent"] == 0 and privacy["delta_spent"] == 0
    assert privacy["released"].startswith("nothing") and "guarantee" not in privacy
    assert privacy["planned"]["released"].startswith("the trained Q-function")  # not made
    assert privacy["stopped"]["error"].startswith("FloatingPointError")
    assert summary["stopped"] == privacy["stopped"] and summary["episodes"] == 3
    assert summary["privacy"].startswith("no release") and "ε spent 0" in summary["privacy"]


def test_fedrl_keeps_the_epochs_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture) -> None:
    from privrl.selection import Selection
    from privrl.systems.fedrl.algorithm import FedRL, FedRLConfig, load_splits

    monkeypatch.setattr(Selection, "train", _fail_on_call(2, Selection.train))  # epoch 2
    out = tmp_path / "out"
    assert main(["run", "fedrl", "--bounded", "2", "--epochs", "3", "--updates-per-epoch",
                 "5", "--generated-maps", "40", "--buffer-size", "500", "--out",
                 str(out), "--progress-every", "0.001"]) == 1  # a line at every report
    err = capsys.readouterr().err
    privacy = _check_kept(out, err)
    # issue 53 item 5, without a terminal: the compile phase, then the count and mean return
    assert "training: compiling …" in err
    assert re.search(r"training: 1/3 epochs, mean return -?[0-9.]+, ε spent [0-9.e+]+, [0-9]+ s",
                     err), err
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert [r.split(",")[1] for r in rows] == ["1"]  # one seed, its first epoch
    summary = json.loads((out / "summary.json").read_text())
    assert summary["test"] == {} and summary["epochs_run"] == 1
    # epoch 2, which failed, counted as made: two epochs' training and validation releases
    algo = FedRL(FedRLConfig(bounded=2.0, epochs=3, updates_per_epoch=5, generated_maps=40,
                             buffer_size=500))
    valid = load_splits(algo.config).valid.count
    assert privacy["releases"] == algo.releases(2 * 5, 2, valid, 0)


def test_text2action_keeps_the_folds_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    from privrl.selection import Selection
    """The run is test_text2action.py's test_run_writes_the_parties_networks_per_fold_and_run's
    (the paper's unbounded noise, two trials): its training program, compiled once in the
    session (JAX's persistent cache). Its privacy.json counts the releases as a bounded run's
    does (only ε differs: none)."""
    from systems.fedrl_text.test_text2action import write_corpus

    monkeypatch.setattr(Selection, "train", _fail_on_call(2, Selection.train))  # fold 1
    out = tmp_path / "out"
    data = write_corpus(tmp_path / "data")
    assert main(["run", "fedrl-text2action", "--data", str(data), "--trials", "2",
                 "--folds", "0,1", "--epochs", "1", "--steps-per-epoch", "2", "--num-envs",
                 "2", "--batch-size", "4", "--buffer-size", "16", "--filters", "4",
                 "--hidden", "8", "--pos-dim", "4", "--tag-dim", "2", "--word-dim", "4",
                 "--w2v-epochs", "1", "--out", str(out), "--no-progress"]) == 1
    privacy = _check_kept(out, capsys.readouterr().err)
    # fold 0 done and tested; fold 1 failed in its first epoch, its releases counted
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs_run"] == [1, 0]
    # the same epoch's releases, less fold 0's noisy test (one text row of `width` outputs)
    width = summary["fold_info"][0]["width"]
    fold0, fold1 = privacy["fold0"]["releases"], privacy["fold1"]["releases"]
    assert {k: fold0[k] - fold1[k] for k in fold0} == {"alpha": width, "beta": width}
    assert len(summary["test"]["test-noise"]["per_fold_f1"]) == 1


def test_work_kept_from_other_processes_is_read_before_they_go() -> None:
    """`work_on_failure` (Ray's runners): the loop's results live in actors, so they are read
    when the loop fails, before the run shuts its cluster down; outside `keeping_work` nothing
    is read, and a read that fails leaves the failure as it was."""
    from privrl.output import RunFailedError, keeping_work, work_on_failure

    actors = {"theta": [1.0], "released": 0}
    written: list = []
    reads: list = []

    def read() -> dict:
        reads.append(1)
        return dict(actors)

    def loop(fail_at: int) -> None:
        with work_on_failure(read):
            for step in range(5):
                if step == fail_at:
                    raise FloatingPointError("simulated crash")
                actors["released"] += 1
        actors.clear()  # the cluster shut down: nothing to read any more

    with pytest.raises(FloatingPointError):  # no keeping_work: nothing read
        loop(2)
    assert reads == []
    actors.update(theta=[1.0], released=0)
    with pytest.raises(RunFailedError) as e, keeping_work(
            lambda: Path("/kept"), lambda result, path: written.append((result, path))):
        loop(3)
    assert written == [({"theta": [1.0], "released": 3}, Path("/kept"))]
    assert "kept in /kept" in str(e.value)
    with (pytest.raises(FloatingPointError),  # the read fails too: the failure as it was
          keeping_work(lambda: Path("/kept"), lambda result, path: written.append(result)),
          work_on_failure(lambda: 1 / 0)):
        raise FloatingPointError("simulated crash")
    assert len(written) == 1


def test_a_ray_run_that_fails_keeps_what_its_actors_hold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """`privrl run pgc-a3c --runtime ray` writes what its runner read from the actors when it
    failed (the runner replaced by one that fails after two accepted reports: no cluster)."""
    from privrl.output import work_on_failure
    from privrl.runtime import rules
    from privrl.systems.pgc_a3c import ray as pgc_ray
    from privrl.systems.pgc_a3c.algorithm import PGCA3C, budget_ledger

    def runner(config, directory: Path, **_):
        algo = PGCA3C(config)
        ledger = budget_ledger(config)
        scores = np.full(config.submissions, np.nan, np.float32)
        theta = np.zeros(algo.dim, np.float32)

        def so_far():
            return pgc_ray.RayRunOutput(config, scores[None].copy(), theta,
                                        {"accepted": ledger.num_reports}, ledger, directory,
                                        0.5, 2, {"address": "local"})

        with work_on_failure(so_far):
            for n in range(config.submissions):
                if n == 2:
                    raise FloatingPointError("simulated crash in the middle of training")
                ledger.charge(n, algo.mechanism.guarantee)
                scores[n] = 10.0 + n

    monkeypatch.setattr(rules, "require_extra", lambda runtime: None)
    monkeypatch.setattr(pgc_ray, "run_pgc_a3c_ray", runner)
    out = tmp_path / "out"
    assert main(["run", "pgc-a3c", "--runtime", "ray", "--submissions", "6", "--hidden", "4",
                 "--out", str(out), "--no-progress"]) == 1
    privacy = _check_kept(out, capsys.readouterr().err)
    assert privacy["ledger"]["reports"] == 2  # the two accepted reports
    assert (out / "theta_final.npy").is_file() and (out / "ray.json").is_file()
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert [float(r.split(",")[2]) for r in rows[:2]] == [10.0, 11.0]
