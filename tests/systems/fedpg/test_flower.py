"""FedPG-Cen's agents on Flower, in process (privrl.systems.fedpg.flower.CenNode): what a
SuperNode releases, and what it refuses whatever the server asks."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from privrl.config import ConfigError
from privrl.privacy.ledger import BudgetExceededError
from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.fedpg.flower import CenNode, ServerLearner, flower_mechanism

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
