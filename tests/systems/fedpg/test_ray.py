"""FedPG-Dec on Ray with a real local Ray cluster (2 CPUs): nodes gossiping peer to peer
reproduce the local runner even when nodes are killed mid-round, the privacy budget included;
the CLI runs it, on a gymnax task and on a Gymnasium task (each node's episodes played on the
host in its actor)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from privrl.main import main
from privrl.systems.fedpg.algorithm import FedPGConfig

ray = pytest.importorskip("ray")
from privrl.systems.fedpg.local import run_fedpg, summarize  # noqa: E402
from privrl.systems.fedpg.ray import run_fedpg_dec_ray  # noqa: E402


@pytest.mark.slow
def test_fedpg_dec_nodes_on_ray_equal_the_local_run_despite_killed_nodes(
        ray_cluster: None, tmp_path: Path) -> None:
    # K = 3: a mean over 3 nodes is not exact in binary, so the Ray driver must report a round
    # through the local round's own arithmetic (float32) to equal it
    # Each node's budget ε = 100 affords 2 of the 3 rounds the episodes allow: the nodes
    # enforce it (a library call states no budget no node enforced), and the run ends there
    # as the local run does (tests/systems/fedpg/test_ray_budget.py: a node's refusal).
    cfg = FedPGConfig.from_preset("paper", algorithm="dec", topology="exponential", agents=3,
                                  budget=80, max_episode_steps=100, mechanism="laplace",
                                  epsilon_per_report=50.0, epsilon_budget=100.0, clip=1.0,
                                  noise="seeded")
    local = run_fedpg(cfg)  # seeded noise: the Ray run must release the very same reports
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
    assert run.rounds_run == local.rounds_run == 2
    assert run.privacy_budget_spent.tolist() == local.privacy_budget_spent.tolist() == [True]
    budget = ("epsilon_budget_per_agent", "trials_ended_by_privacy_budget")
    assert [summarize(run)[k] for k in budget] == [summarize(local)[k] for k in budget]
    np.testing.assert_array_equal(run.batch, local.batch)
    np.testing.assert_array_equal(run.inner_steps, local.inner_steps)
    np.testing.assert_allclose(run.mean_return, local.mean_return, rtol=1e-5)
    # Same float32 arithmetic; only the order of the push-sum sums can differ.
    np.testing.assert_allclose(run.z, local.z, atol=1e-5)
    # Each node released exactly one report per round (the redone step spent nothing more),
    # and every round mixed each in-neighbour's share exactly once.
    assert [run.ledger.reports_of(i) for i in range(3)] == [run.rounds_run] * 3
    assert max(run.ledger.spent(i)[0] for i in range(3)) == pytest.approx(
        cfg.epsilon_per_report * run.rounds_run)
    for node, rounds in enumerate(extra["gossip"]["senders_per_round"]):
        assert len(rounds) == run.rounds_run
        for t, senders in enumerate(rounds):
            p = run_topology_matrix(cfg, t)
            assert senders == [int(j) for j in np.flatnonzero(p[node])]
    reasons = [r["reason"] for rs in extra["gossip"]["rejected"].values() for r in rs]
    assert reasons and all(r.startswith(("duplicate", "stale")) for r in reasons)


def test_the_cluster_keeps_no_idle_workers(ray_cluster: None) -> None:
    """The tests' cluster, as `privrl.runtime.ray.start_ray`'s, prestarts no Python workers
    (`NO_IDLE_WORKERS`): there the actors carry the job's runtime_env, so Ray starts workers of
    their own for them and prestarted ones would idle to the end. Checked after the run above
    (its actors started, two killed and restarted): no worker of this process's cluster is
    idle."""
    import psutil

    def title(p: psutil.Process) -> str:
        try:
            return (p.cmdline() or [""])[0]
        except psutil.Error:
            return ""

    workers = [title(p) for p in psutil.Process().children(recursive=True)]
    assert "ray::RuntimeEnvAgent" in workers  # the cluster's processes are this one's
    assert [w for w in workers if w.startswith("ray::IDLE")] == []


def run_topology_matrix(cfg: FedPGConfig, t: int) -> np.ndarray:
    from privrl.systems.fedpg.algorithm import build_topology

    return build_topology(cfg.resolved()).matrix(t)


@pytest.mark.slow
def test_cli_runs_fedpg_dec_on_ray(ray_cluster: None, tmp_path: Path) -> None:
    """One CLI run on Ray, on a Gymnasium task (each node plays its episodes on the host, in
    its own actor; gymnax nodes on Ray: the test above): the run directory, the Ray runtime's
    default secret noise keys, the gossip record; `--address` without `--runtime ray` fails."""
    rc = main(["run", "fedpg-dec", "--address", "auto", "--out", str(tmp_path / "x"),
               "--no-progress"])
    assert rc == 2 and not (tmp_path / "x").exists()
    out = tmp_path / "gym"
    rc = main(["run", "fedpg-dec", "--runtime", "ray", "--env", "gymnasium:CartPole-v1",
               "--private", "gravity=9.7,9.9", "--agents", "2", "--episodes", "2",
               "--batch-min", "1", "--batch-max", "1", "--minibatch", "1", "--mechanism",
               "laplace", "--epsilon-per-report", "10", "--out", str(out), "--no-progress"])
    assert rc == 0
    for name in ("config.json", "privacy.json", "summary.json", "metrics.csv", "ray.json",
                 "nodes/node0.npz", "nodes/node1.npz"):
        assert (out / name).exists(), name
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["noise_keys"]["mode"] == "secret"  # the Ray runtime's default
    assert privacy["trust_domain"]["domains"] == "one Ray cluster"  # not one per agent
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["env"] == "gymnasium:CartPole-v1"
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert rows and all(float(r.split(",")[-1]) >= 1 for r in rows)  # CartPole: +1 a step
    gossip = json.loads((out / "ray.json").read_text())["gossip"]
    assert gossip["nodes"] == 2 and gossip["rounds"] == len(rows)
