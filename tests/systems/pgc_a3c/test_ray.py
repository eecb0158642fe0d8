"""PGC-A3C on Ray with a real local Ray cluster (2 CPUs): a run survives
an agent actor killed mid-episode and the aggregator actor killed mid-buffer without applying or
charging anything twice, and replays exactly; `privrl replay` checks θ."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.federation.service import read_log, replay
from privrl.main import main
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

ray = pytest.importorskip("ray")
from privrl.systems.pgc_a3c.ray import run_pgc_a3c_ray  # noqa: E402


def _config(submissions: int, buffer: int) -> PGCA3CConfig:
    return PGCA3CConfig.from_preset("tuned", mechanism="laplace", epsilon=2.0,
                                    submissions=submissions, buffer_size=buffer)


@pytest.mark.slow
def test_faults_lose_nothing_and_spend_nothing_twice(ray_cluster: None, tmp_path: Path) -> None:
    """One run with both faults (a run without any is this run's easy part: one Ray cluster
    run is a dozen seconds of actors starting and compiling)."""
    killed: list[str] = []

    def inject(kind: str, info: dict) -> None:
        if info["done"] == 4 and "agent" not in killed:
            # The other agent is mid-episode (its task is pending): kill its process.
            ray.kill(info["agents"][1 - info["slot"]], no_restart=False)
            killed.append("agent")
        if info["done"] == 10 and "aggregator" not in killed:
            # 10 accepted with |B| = 4: two reports sit in the buffer, last checkpoint at 8.
            ray.kill(info["aggregator"], no_restart=False)
            killed.append("aggregator")

    cfg = _config(20, 4)
    out = run_pgc_a3c_ray(cfg, tmp_path / "agg", agents_in_flight=2, checkpoint_every=2,
                          on_event=inject)
    assert killed == ["agent", "aggregator"]
    assert out.status["accepted"] == 20 and out.status["updates"] == 5
    assert np.all(out.scores >= 1)
    records = read_log(tmp_path / "agg", out.theta.size)
    pairs = {(int(r["agent"]), int(r["index"])) for r in records}
    assert len(records) == len(pairs) == 20  # no duplicate in the report log
    assert out.ledger.num_reports == 20
    assert max(out.ledger.spent(a)[0] for a in range(20)) <= cfg.epsilon  # nobody over ε
    np.testing.assert_array_equal(replay(tmp_path / "agg"), out.theta)


def test_a_failed_run_keeps_what_its_actors_accepted(ray_cluster: None,
                                                     tmp_path: Path) -> None:
    """A driver's loop that raises after 3 accepted reports (issue 53): inside keeping_work
    the run directory gets the scores, θ and the aggregator's ledger read from the live
    actors before the run ends, and θ is the one the aggregator's log replays to."""
    from privrl.output import RunFailedError, keeping_work
    from privrl.systems.pgc_a3c.local import save
    from privrl.systems.pgc_a3c.ray import as_run_output

    def fail(kind: str, info: dict) -> None:
        if info["done"] == 3:
            raise FloatingPointError("simulated crash in the middle of training")

    def write(result, path: Path) -> None:
        np.save(path / "theta_final.npy", result.theta)
        save(as_run_output(result), path, runtime="ray", files={"ray.json": result.record()})

    # The faults test's configuration (another length, one report a buffer so that each
    # accepted report moves θ): its actors' programs are in the session's compilation cache,
    # so these actors compile none of them again.
    cfg = _config(8, 1)
    with pytest.raises(RunFailedError), keeping_work(lambda: tmp_path, write):
        run_pgc_a3c_ray(cfg, tmp_path / "aggregator", agents_in_flight=2, on_event=fail)
    privacy = json.loads((tmp_path / "privacy.json").read_text())
    assert privacy["stopped"]["error"].startswith("FloatingPointError")
    assert privacy["ledger"]["reports"] == 3  # every report the aggregator accepted
    scores = [float(r.split(",")[2]) for r in
              (tmp_path / "metrics.csv").read_text().splitlines()[1:]]
    assert len(scores) == 3 and np.isfinite(scores).all()  # the three episodes' returns
    theta = np.load(tmp_path / "theta_final.npy", allow_pickle=False)
    np.testing.assert_array_equal(replay(tmp_path / "aggregator"), theta)


def test_replay_command_checks_theta(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["replay", str(tmp_path)]) == 2  # not a run directory
    assert "not a Ray run directory" in capsys.readouterr().err
