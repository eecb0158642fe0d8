"""The Ray runtime with a real local Ray cluster (2 CPUs): a run replays exactly, and survives an
agent actor killed mid-episode and the aggregator actor killed mid-buffer without applying or
charging anything twice; FedPG-Dec nodes gossiping peer to peer reproduce the local runner even
when nodes are killed mid-round. Plus the message when Ray is not installed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from privrl.federation.service import read_log, replay
from privrl.main import main
from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

ray = pytest.importorskip("ray")
from privrl.systems.fedpg.local import run_fedpg  # noqa: E402
from privrl.systems.fedpg.ray import run_fedpg_dec_ray  # noqa: E402
from privrl.systems.pgc_a3c.ray import run_pgc_a3c_ray  # noqa: E402


def _config(submissions: int, buffer: int) -> PGCA3CConfig:
    return PGCA3CConfig.from_preset("tuned", mechanism="laplace", epsilon=2.0,
                                    submissions=submissions, buffer_size=buffer)


def test_ray_run_completes_and_replays_exactly(ray_cluster: None, tmp_path: Path) -> None:
    out = run_pgc_a3c_ray(_config(16, 4), tmp_path / "agg", agents_in_flight=2,
                          checkpoint_every=2)
    assert out.status["accepted"] == 16 and out.status["updates"] == 4
    assert np.all(out.scores >= 1)
    np.testing.assert_array_equal(replay(tmp_path / "agg"), out.theta)
    assert out.ledger.num_reports == 16


def test_faults_lose_nothing_and_spend_nothing_twice(ray_cluster: None, tmp_path: Path) -> None:
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
    out = run_pgc_a3c_ray(cfg, tmp_path / "agg", agents_in_flight=2, checkpoint_every=1,
                          on_event=inject)
    assert killed == ["agent", "aggregator"]
    assert out.status["accepted"] == 20 and out.status["updates"] == 5
    records = read_log(tmp_path / "agg", out.theta.size)
    pairs = {(int(r["agent"]), int(r["index"])) for r in records}
    assert len(records) == len(pairs) == 20  # no duplicate in the report log
    assert out.ledger.num_reports == 20
    assert max(out.ledger.spent(a)[0] for a in range(20)) <= cfg.epsilon  # nobody over ε
    np.testing.assert_array_equal(replay(tmp_path / "agg"), out.theta)


def test_fedpg_dec_nodes_on_ray_equal_the_local_run_despite_killed_nodes(
        ray_cluster: None, tmp_path: Path) -> None:
    cfg = FedPGConfig.from_preset("paper", algorithm="dec", topology="exponential", agents=4,
                                  budget=80, max_episode_steps=100, mechanism="laplace",
                                  epsilon=50.0, clip=1.0)
    local = run_fedpg(cfg)
    killed: list[tuple[str, int]] = []

    def kill_and_wait(node: object) -> None:
        """ray.kill is asynchronous: wait until a new process answers, so the next call
        really meets the restarted node."""
        old = ray.get(node.pid.remote())
        ray.kill(node, no_restart=False)
        while ray.get(node.pid.remote()) == old:
            time.sleep(0.05)

    def inject(kind: str, info: dict) -> None:
        if kind == "stepped" and info["round"] == 1:
            # Node 1 has released round 1 and sent its shares; it dies before mixing, losing
            # its inbox: it must redo its step (same Report) and get its shares resent.
            kill_and_wait(info["nodes"][1])
            killed.append((kind, 1))
        if kind == "mixed" and info["round"] == 0:
            kill_and_wait(info["nodes"][2])  # restarts from its checkpoint
            killed.append((kind, 2))

    run, extra = run_fedpg_dec_ray(cfg, tmp_path / "nodes", on_event=inject)
    assert killed == [("mixed", 2), ("stepped", 1)]
    assert run.rounds_run == local.rounds_run >= 3
    np.testing.assert_array_equal(run.batch, local.batch)
    np.testing.assert_array_equal(run.inner_steps, local.inner_steps)
    np.testing.assert_allclose(run.mean_return, local.mean_return, rtol=1e-5)
    # Same float32 arithmetic; only the order of the push-sum sums can differ.
    np.testing.assert_allclose(run.z, local.z, atol=1e-5)
    # Each node released exactly one report per round (the redone step spent nothing more),
    # and every round mixed each in-neighbour's share exactly once.
    assert [run.ledger.reports_of(i) for i in range(4)] == [run.rounds_run] * 4
    assert max(run.ledger.spent(i)[0] for i in range(4)) == pytest.approx(
        cfg.epsilon * run.rounds_run)
    for node, rounds in enumerate(extra["gossip"]["senders_per_round"]):
        assert len(rounds) == run.rounds_run
        for t, senders in enumerate(rounds):
            p = run_topology_matrix(cfg, t)
            assert senders == [int(j) for j in np.flatnonzero(p[node])]
    reasons = [r["reason"] for rs in extra["gossip"]["rejected"].values() for r in rs]
    assert reasons and all(r.startswith(("duplicate", "stale")) for r in reasons)


def run_topology_matrix(cfg: FedPGConfig, t: int) -> np.ndarray:
    from privrl.systems.fedpg.algorithm import build_topology

    return build_topology(cfg.resolved()).matrix(t)


def test_cli_runs_fedpg_dec_on_ray(ray_cluster: None, tmp_path: Path) -> None:
    rc = main(["run", "fedpg-dec", "--runtime", "ray", "--agents", "3", "--budget", "40",
               "--out", str(tmp_path / "run"), "--no-progress"])
    assert rc == 0
    for name in ("config.json", "privacy.json", "summary.json", "metrics.csv", "ray.json",
                 "nodes/node0.pkl"):
        assert (tmp_path / "run" / name).exists(), name
    rc = main(["run", "fedpg-dec", "--address", "auto", "--out", str(tmp_path / "x"),
               "--no-progress"])
    assert rc == 2 and not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", ["pgc-a3c", "fedpg-dec"])
def test_missing_ray_says_how_to_install(command: str, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    rc = main(["run", command, "--runtime", "ray", "--out", str(tmp_path / "x"),
               "--no-progress"])
    assert rc == 2
    assert "pip install 'privrl[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_replay_command_checks_theta(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["replay", str(tmp_path)]) == 2  # not a run directory
    assert "not a Ray run directory" in capsys.readouterr().err
