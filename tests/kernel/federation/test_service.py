"""The aggregator service: at-most-once acceptance, rejections that change nothing, a durable
log, crash recovery from checkpoint + log, and exact replay."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.federation import AggregatorService, AggregatorSpec, Submission, replay
from privrl.privacy import LaplaceMechanism, PrivacyLedger
from privrl.runfile import RunFileError

DIM = 8
MECH = LaplaceMechanism(epsilon=2.0, clip=1.0)


def _service(directory: Path | None, budget: float = 4.0, every: int = 3) -> AggregatorService:
    spec = AggregatorSpec(DIM, buffer_size=2, optimizer="adam", learning_rate=0.1)
    return AggregatorService(spec, np.zeros(DIM, np.float32), num_agents=5,
                             ledger=PrivacyLedger(epsilon_budget=budget),
                             guarantee=MECH.guarantee, directory=directory,
                             checkpoint_every=every)


def _sub(agent: int, index: int, seed: int | None = None) -> Submission:
    key = jax.random.key(seed if seed is not None else 100 * agent + index)
    return Submission(agent, index, MECH.privatize(key, jnp.arange(DIM, dtype=jnp.float32)))


def _same(a: object, b: object) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in
               zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True))


def test_duplicates_are_rejected_and_change_nothing(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    assert svc.submit(_sub(1, 0)).accepted
    before = svc.state
    verdict = svc.submit(_sub(1, 0))
    assert not verdict.accepted and verdict.reason.startswith("duplicate")
    assert _same(before, svc.state)
    assert svc.ledger.spent(1)[0] == 2.0  # charged once
    assert svc.submit(_sub(1, 1)).accepted  # the next index is new
    logged = [json.loads(x) for x in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert logged[0]["agent"] == 1 and logged[0]["reason"].startswith("duplicate")


@pytest.mark.parametrize(("make", "kind"), [
    (lambda: Submission(9, 0, _sub(0, 0).report), "unknown agent"),
    (lambda: Submission(0, -1, _sub(0, 0).report), "negative submission index"),
    (lambda: Submission(0, 0, jnp.zeros(DIM)), "malformed"),
    (lambda: Submission(0, 0, MECH.privatize(jax.random.key(0), jnp.full(DIM, jnp.nan))),
     "malformed"),
    (lambda: Submission(0, 0, LaplaceMechanism(1.0, 1.0).privatize(jax.random.key(0),
                                                                  jnp.ones(DIM))),
     "wrong mechanism"),
    (lambda: ("not", "a", "submission"), "not a Submission"),
])
def test_bad_submissions_are_rejected_with_a_reason(make, kind: str) -> None:
    svc = _service(None)
    assert svc.submit(_sub(2, 0)).accepted
    before = svc.state
    verdict = svc.submit(make())
    assert not verdict.accepted and verdict.reason.startswith(kind)
    assert _same(before, svc.state) and svc.logged == 1


def test_over_budget_is_rejected_before_anything_is_applied() -> None:
    svc = _service(None, budget=4.0)
    assert svc.submit(_sub(3, 0)).accepted and svc.submit(_sub(3, 1)).accepted
    before = svc.state
    verdict = svc.submit(_sub(3, 2))
    assert not verdict.accepted and verdict.reason.startswith("over budget")
    assert _same(before, svc.state) and svc.ledger.spent(3)[0] == 4.0


def test_crash_recovery_restores_checkpoint_and_reapplies_the_log(tmp_path: Path) -> None:
    live = _service(tmp_path, budget=100.0, every=3)
    for n in range(11):  # 11 reports, |B| = 2: 5 updates, one report still in the buffer
        assert live.submit(_sub(n % 5, n // 5)).accepted
    # The process dies here: no close(), the last checkpoint was at 3 updates.
    restored = AggregatorService.restore(tmp_path)
    assert _same(live.state, restored.state)  # θ, optimizer state, buffer, counters
    assert restored.logged == 11 and restored.ledger.num_reports == 11
    for a in range(5):
        assert restored.ledger.spent(a) == live.ledger.spent(a)
    assert not restored.submit(_sub(0, 0)).accepted  # still knows what it accepted
    assert restored.submit(_sub(1, 3)).accepted
    restored.close()
    np.testing.assert_array_equal(replay(tmp_path), restored.theta())


def test_torn_last_record_is_ignored(tmp_path: Path) -> None:
    live = _service(tmp_path, budget=100.0)
    for n in range(4):
        live.submit(_sub(n, 0))
    theta_after_3 = _service(None, budget=100.0)
    for n in range(3):
        theta_after_3.submit(_sub(n, 0))
    with open(tmp_path / "reports.bin", "r+b") as f:  # a write cut short by a crash
        f.truncate((tmp_path / "reports.bin").stat().st_size - 5)
    restored = AggregatorService.restore(tmp_path)
    assert restored.logged == 3
    np.testing.assert_array_equal(restored.theta(), theta_after_3.theta())
    assert restored.submit(_sub(3, 0)).accepted  # the torn report can be resubmitted


def _finished_run(directory: Path) -> AggregatorService:
    svc = _service(directory, budget=100.0, every=1)
    for n in range(5):
        assert svc.submit(_sub(n, 0)).accepted
    svc.close()
    return svc


@pytest.mark.parametrize("name", ["service.npz", "checkpoint.npz", "reports.bin"])
def test_a_malicious_pickle_in_place_of_a_run_file_is_refused(
        tmp_path: Path, plant_pickle, name: str) -> None:
    _finished_run(tmp_path)
    marker = plant_pickle(tmp_path / name)
    # replay reads θ₀ and the log only; recovery reads the checkpoint too
    for load in (AggregatorService.restore, *([replay] if name != "checkpoint.npz" else [])):
        with pytest.raises(RunFileError) as e:
            load(tmp_path)
        assert str(e.value).startswith(str(tmp_path / name)) and "\n" not in str(e.value)
    assert not marker.exists()


def test_tampered_run_files_are_refused(tmp_path: Path) -> None:
    from privrl import runfile

    svc = _finished_run(tmp_path)
    setup = runfile.read(tmp_path / "service.npz", "aggregator-setup")
    runfile.write(tmp_path / "service.npz", "aggregator-setup",
                  {**setup, "theta0": np.zeros(DIM + 1, np.float32)})
    with pytest.raises(RunFileError, match=r"service.npz: tampered or inconsistent"):
        replay(tmp_path)
    runfile.write(tmp_path / "service.npz", "aggregator-setup", setup)
    np.testing.assert_array_equal(replay(tmp_path), svc.theta())  # restored: fine again
    ck = runfile.read(tmp_path / "checkpoint.npz", "aggregator-checkpoint")
    runfile.write(tmp_path / "checkpoint.npz", "aggregator-checkpoint",
                  {**ck, "state": ck["state"][:-1]})
    with pytest.raises(RunFileError, match=r"checkpoint.npz: tampered"):
        AggregatorService.restore(tmp_path)
    runfile.write(tmp_path / "checkpoint.npz", "aggregator-setup", ck)  # another kind
    with pytest.raises(RunFileError, match="expected 'aggregator-checkpoint'"):
        AggregatorService.restore(tmp_path)
    (tmp_path / "reports.bin").write_bytes(np.zeros(10, np.int64).tobytes())
    with pytest.raises(RunFileError, match=r"reports.bin: is not a privrl report log"):
        replay(tmp_path)


def test_a_restored_ledger_and_guarantee_are_the_same(tmp_path: Path) -> None:
    svc = _finished_run(tmp_path)
    back = AggregatorService.restore(tmp_path)
    assert back.guarantee == MECH.guarantee
    assert back.ledger.summary() == svc.ledger.summary()


def test_replay_command_refuses_a_pickled_run_file(tmp_path: Path, plant_pickle,
                                                   capsys: pytest.CaptureFixture) -> None:
    from privrl.main import main

    _finished_run(tmp_path / "aggregator")
    np.save(tmp_path / "theta_final.npy", np.zeros(DIM, np.float32))
    marker = plant_pickle(tmp_path / "aggregator" / "service.npz")
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "service.npz" in err and "pickle" in err and len(err.splitlines()) == 1
    assert not marker.exists()


@pytest.mark.product_compile  # this process's replay against the installed command's
def test_replay_exit_status_is_the_verdict_of_the_installed_command(tmp_path: Path) -> None:
    """`privrl replay` exits 0 when θ replays exactly, and non-zero on MISMATCH (a script or a
    CI job trusts the status): through the installed executable, as a user runs it."""
    import os
    import subprocess
    import sys

    _finished_run(tmp_path / "aggregator")
    theta = replay(tmp_path / "aggregator")
    exe = Path(sys.executable).parent / "privrl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # this checkout's privrl

    def status() -> tuple[int, str]:
        done = subprocess.run([str(exe), "replay", str(tmp_path)], capture_output=True,
                              text=True, env=env, timeout=120)
        return done.returncode, done.stdout + done.stderr

    np.save(tmp_path / "theta_final.npy", theta)
    rc, out = status()
    assert rc == 0 and "equals the run's final θ exactly" in out
    np.save(tmp_path / "theta_final.npy", theta + 1.0)
    rc, out = status()
    assert rc == 1 and "MISMATCH" in out
    (tmp_path / "aggregator" / "reports.bin").unlink()  # the reproduction
    rc, out = status()
    assert rc != 0, out


def _tamper(directory: Path, change) -> None:
    """Rewrite the accepted-report log's records through `change(records) -> records`."""
    from privrl.federation.service import _LOG_HEADER, LOG, read_log

    raw = (directory / LOG).read_bytes()
    n = _LOG_HEADER.itemsize
    records = read_log(directory, DIM)
    (directory / LOG).write_bytes(raw[:n] + change(records.copy()).tobytes())


def _set(row: int, field: str, value: object):
    def change(records: np.ndarray) -> np.ndarray:
        records[field][row] = value
        return records
    return change


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: np.concatenate([r, r[:1]]), r"record 5: \(agent 0, index 0\) is repeated"),
    (_set(2, "agent", 2**40), r"record 2: .* outside the run"),
    (_set(1, "index", -3), r"record 1: .* outside the run"),
    (_set(3, "value", np.nan), r"record 3: .*NaN or inf"),
])
def test_replay_checks_every_record_it_replays(tmp_path: Path, change, message: str) -> None:
    """A forged or corrupted log is refused at the record that is wrong, with one line naming
    the file and the record (issue 43, item 4), and `privrl replay` exits 2."""
    from privrl.main import main

    _finished_run(tmp_path / "aggregator")
    np.save(tmp_path / "theta_final.npy", replay(tmp_path / "aggregator"))
    _tamper(tmp_path / "aggregator", change)
    with pytest.raises(RunFileError, match=r"reports\.bin: " + message):
        replay(tmp_path / "aggregator")
    assert main(["replay", str(tmp_path)]) == 2


def test_a_directory_in_place_of_the_log_is_one_error(tmp_path: Path) -> None:
    from privrl.federation.service import LOG

    _finished_run(tmp_path)
    (tmp_path / LOG).unlink()
    (tmp_path / LOG).mkdir()
    with pytest.raises(RunFileError, match=r"reports\.bin: cannot be read"):
        replay(tmp_path)


@pytest.mark.parametrize("tamper", ["duplicate", "huge agent", "logged 0"])
def test_restore_names_the_inconsistent_record(tmp_path: Path, tamper: str) -> None:
    """A duplicated record after the checkpoint, an agent id of 2**40 (once: MemoryError) or a
    checkpoint claiming no record was logged (once: BudgetExceededError) is one RunFileError
    naming the log and the record (issue 43, item 5)."""
    from privrl.runfile import read, write

    svc = _service(tmp_path, budget=4.0, every=3)  # ε = 2 per report: two per agent
    for n in range(5):
        assert svc.submit(_sub(n, 0)).accepted
    assert svc.submit(_sub(0, 1)).accepted  # agent 0 has spent its budget
    svc.close()
    if tamper == "duplicate":
        _tamper(tmp_path, lambda r: np.concatenate([r, r[-1:]]))
    elif tamper == "huge agent":
        _tamper(tmp_path, _set(5, "agent", 2**40))
    else:
        blob = read(tmp_path / "checkpoint.npz", "aggregator-checkpoint")
        blob["logged"] = 0
        write(tmp_path / "checkpoint.npz", "aggregator-checkpoint", blob)
    with pytest.raises(RunFileError, match=r"reports\.bin: record \d+: "):
        AggregatorService.restore(tmp_path)


@pytest.mark.parametrize("final", ["shape 2**40", "float64", "spec buffer 2**40", "lr nan"])
def test_replay_refuses_an_impossible_run_in_one_line(tmp_path: Path, final: str,
                                                      capsys: pytest.CaptureFixture) -> None:
    """θ_final declaring 2**40 floats (once a MemoryError), saved as float64 (once "equals
    exactly"), or a spec whose buffer or learning rate no run has (issue 43, items 2 and 4)."""
    from privrl.federation.service import SETUP
    from privrl.main import main
    from privrl.runfile import read, write

    _finished_run(tmp_path / "aggregator")
    theta = replay(tmp_path / "aggregator")
    np.save(tmp_path / "theta_final.npy", theta)
    if final == "shape 2**40":
        header = np.lib.format.header_data_from_array_1_0(theta)
        header["shape"] = (2**40,)
        with open(tmp_path / "theta_final.npy", "wb") as f:
            np.lib.format.write_array_header_1_0(f, header)
            f.write(theta.tobytes())
    elif final == "float64":
        np.save(tmp_path / "theta_final.npy", theta.astype(np.float64))
    else:
        setup = read(tmp_path / "aggregator" / SETUP, "aggregator-setup")
        if final == "lr nan":
            setup["spec"]["learning_rate"] = float("nan")
        else:
            setup["spec"]["buffer_size"] = 2**40
        write(tmp_path / "aggregator" / SETUP, "aggregator-setup", setup)
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("privrl: error:") and len(err.splitlines()) == 1, err


def test_replay_refuses_a_log_over_an_agents_budget(tmp_path: Path) -> None:
    """ε = 2 per report, a budget of 4: a log holding a third report of agent 0 (a new index,
    a valid value) is not this run's (issue 43, item 4: budget consistency); it also bounds
    how long a forged log can make replay run."""
    svc = _service(tmp_path, budget=4.0, every=100)
    assert svc.submit(_sub(0, 0)).accepted and svc.submit(_sub(0, 1)).accepted
    svc.close()
    replay(tmp_path)  # the run's own log replays

    def third(records: np.ndarray) -> np.ndarray:
        extra = records[-1:].copy()
        extra["index"] = 2
        return np.concatenate([records, extra])

    _tamper(tmp_path, third)
    with pytest.raises(RunFileError, match=r"record 2: over its agent's budget"):
        replay(tmp_path)
