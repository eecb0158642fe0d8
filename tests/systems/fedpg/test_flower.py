"""FedPG-Cen's agents on Flower, in process (privrl.systems.fedpg.flower.CenNode): what a
SuperNode releases, and what it refuses whatever the server asks."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from privrl.config import ConfigError
from privrl.federation.flower_sum import SETUP, STOP, SUM_RESULTS, serve_cen
from privrl.privacy.ledger import BudgetExceededError
from privrl.systems.fedpg import flower
from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.fedpg.flower import (
    CenNode,
    ReportNode,
    ServerLearner,
    flower_mechanism,
    plan_run,
)
from privrl.systems.fedpg.local import run_fedpg

CFG = FedPGConfig(algorithm="cen", agents=6, budget=100, mechanism="distributed-gaussian",
                  epsilon=2.0, delta=1e-5, sampling_rate=1.0, clip=1.0, hidden=(8,))


@pytest.fixture(scope="module")
def learner() -> ServerLearner:
    return ServerLearner(CFG)


def test_the_mechanism_counts_the_agents_the_threshold_guarantees(learner: ServerLearner):
    cfg, dim = learner.config, learner.algo.dim
    mech = flower_mechanism(cfg, dim, 3, 2)  # 2 of 3 nodes survive: >= 4 of the 6 agents
    assert mech.min_honest == 4 and mech.agents == 6
    assert mech.epsilon(cfg.calibration_rounds()) <= 2.0
    assert mech.bits == 30  # 3 nodes × 2^30 < 2^32
    with pytest.raises(ConfigError, match="only 4 agents"):
        flower_mechanism(cfg.__class__(**{**cfg.to_dict(), "min_honest": 5}), dim, 3, 2)


def test_a_node_releases_once_per_round_and_refuses_past_its_budget(learner: ServerLearner,
                                                                    tmp_path):
    mech = flower_mechanism(learner.config, learner.algo.dim, 3, 2)
    node = CenNode(CFG, 1, 3, mech, allowed_rounds=2, directory=tmp_path)
    assert node.ids == [1, 4]
    theta = np.asarray(learner.theta[0], np.float32)
    first = node.release(theta, 15, 0)
    assert first.shape == (learner.algo.dim,) and first.min() >= 0
    assert first.max() < 1 << mech.bits
    # asked again (a retried round): the same message, nothing new spent
    assert np.array_equal(node.release(theta, 15, 0), first) and node.rounds_charged == 1
    with pytest.raises(ValueError, match="before this node's last round"):
        node.release(theta, 15, -1)
    with pytest.raises(ValueError, match="B_t"):
        node.release(theta, 99, 1)
    with pytest.raises(ValueError, match="finite"):
        node.release(np.full_like(theta, np.nan), 15, 1)
    assert node.rounds_charged == 1  # refusals spend nothing
    # a restarted executor (a new process: a new secret root) resumes from its state file:
    # round 0 again is the message already released, and it is not charged again
    again = CenNode(CFG, 1, 3, mech, allowed_rounds=2, directory=tmp_path)
    assert again.rounds_charged == 1 and np.array_equal(again.release(theta, 15, 0), first)
    node = again
    node.release(theta, 12, 2)  # round 1 never asked of it (left out): nothing spent on it
    with pytest.raises(ValueError, match="before this node's last round"):
        node.release(theta, 12, 1)
    with pytest.raises(BudgetExceededError):
        node.release(theta, 12, 3)
    assert node.rounds_charged == 2 and sorted(node.released) == [0, 2]


# --- a local mechanism: each agent's Report -----------------------------------------------------
REPORTS = FedPGConfig(algorithm="cen", agents=4, budget=45, mechanism="gaussian",
                      noise_multiplier=1.0, clip=1.0, hidden=(8,), seed=5, noise="seeded")


def _serve_reports(cfg: FedPGConfig, nodes: list[ReportNode], directory: Path, grid_of: Any
                   ) -> tuple[ServerLearner, list[dict], Any]:
    """The Flower run in one process: the ServerApp's loop (serve_cen, in a thread, its nodes
    reached through `grid_of`) and the server's learner exchanging files in `directory`, as a
    deployment does."""
    learner = ServerLearner(cfg)
    plan = plan_run(cfg, len(nodes))
    (directory / SETUP).write_text(json.dumps(flower._setup(plan, learner, 30.0)))
    grid = grid_of({101 * (i + 1): n.handle for i, n in enumerate(nodes)})
    served: dict = {}
    server = threading.Thread(target=lambda: served.update(serve_cen(grid, None, directory)))
    server.start()
    rounds, t = [], 0
    try:
        while learner.used < cfg.budget:
            rounds.append(learner.round(t, directory, 60.0))
            t += 1
    finally:
        (directory / STOP).write_text("done")
        server.join(60.0)
    return learner, rounds, grid


def test_seeded_report_run_on_flower_is_the_local_run(tmp_path: Path, call_grid: Any) -> None:
    """Gaussian Reports from 4 agents on 2 SuperNodes (agents 0, 2 and 1, 3), the ServerApp's
    checks and average, the learner's SCSG steps: with seeded noise every round's B_t and N_t
    are the local runner's and θ equals its θ to float32 rounding. The local runner computes
    a round in one compiled program, a node its agents' reports in another and the learner
    the SCSG loop in a third: XLA may fuse them differently, so θ agrees to 1e-6 (measured
    1.2e-10 over its 2 rounds), not bit for bit."""
    local = run_fedpg(REPORTS)
    nodes = [ReportNode(REPORTS, i, 2) for i in range(2)]
    learner, rounds, grid = _serve_reports(REPORTS, nodes, tmp_path, call_grid)
    assert [r["batch"] for r in rounds] == local.batch[0].astype(int).tolist()
    assert [r["inner_steps"] for r in rounds] == local.inner_steps[0].astype(int).tolist()
    assert all(r["agents_in_mean"] == 4 and r["refused"] == [] for r in rounds)
    theta = np.asarray(learner.theta[0])
    gap = float(np.max(np.abs(theta - local.z[0, 0])))
    assert gap <= 1e-6, f"θ differs from the local run's by {gap:.3g}"
    # every request went to the node of its agent; each agent charged its own ledger once a round
    for m in grid.sent:
        assert [101, 202][m.content.config_records["ask"]["agent"] % 2] == m.metadata.dst_node_id
    assert all(n.ledger.reports_of(a) == len(rounds) for n in nodes for a in n.ids)
    results = json.loads((tmp_path / SUM_RESULTS).read_text())
    assert [r["accepted_agents"] for r in results["rounds"]] == [[0, 1, 2, 3]] * len(rounds)
