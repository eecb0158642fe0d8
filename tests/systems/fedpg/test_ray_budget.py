"""The Ray budget case (issue 50): a FedPG-Dec node on Ray enforces the run's `epsilon_budget`
itself, before anything leaves it, so that the budget a Ray run's privacy.json states is one
the nodes enforced. Two node actors in this process (no Ray: their peers are each other), so
the test is cheap; tests/systems/fedpg/test_ray.py runs the same nodes on a Ray cluster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.privacy.ledger import BudgetExceededError
from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.fedpg.ray import NodeActor

# Laplace at ε = 1 a round, each node's budget ε = 2: two rounds, then refused.
CFG = FedPGConfig(algorithm="dec", agents=2, budget=400, mechanism="laplace",
                  epsilon_per_report=1.0, epsilon_budget=2.0, clip=1.0, hidden=(8,),
                  max_episode_steps=20, seed=5, noise="seeded").resolved()


class _Peer:
    """A node's handle as `_send` uses it: `receive.remote(msg)` delivers at once."""

    def __init__(self, node: NodeActor) -> None:
        self.receive = type("Call", (), {"remote": staticmethod(node.receive)})


def _nodes(directory: Path) -> list[NodeActor]:
    names = ["n0", "n1"]
    nodes = [NodeActor(CFG, i, str(directory), names) for i in range(2)]
    for n in nodes:
        n.peers = {i: _Peer(m) for i, m in enumerate(nodes)}
    return nodes


def test_a_ray_node_refuses_a_round_past_the_runs_epsilon_budget(tmp_path: Path) -> None:
    nodes = _nodes(tmp_path)
    for t in range(2):
        for n in nodes:
            n.step(t)
        assert [n.mix(t) for n in nodes] == [[], []]
    x = [n.gossip.x.copy() for n in nodes]
    for n in nodes:
        with pytest.raises(BudgetExceededError):
            n.step(2)  # the node refuses whatever it is asked: nothing computed or sent
        assert not n.gossip.applied and np.array_equal(n.gossip.x, x[n.node])
        assert n.ledger.reports_of(n.node) == 2
        assert n.ledger.epsilon_budget == CFG.epsilon_budget
        assert not n.affords()  # what the driver asks before each round
    # a restarted node restores its ledger with the budget: still refused
    again = NodeActor(CFG, 0, str(tmp_path), ["n0", "n1"])
    assert again.ledger.reports_of(0) == 2 and not again.affords()
    with pytest.raises(BudgetExceededError):
        again.step(2)


def test_a_restarted_node_resends_its_released_round_and_charges_nothing(
        tmp_path: Path) -> None:
    nodes = _nodes(tmp_path)
    for n in nodes:
        n.step(0)
    value = np.asarray(nodes[0].gossip.x).copy()
    sent = nodes[0].gossip.last_outgoing
    again = NodeActor(CFG, 0, str(tmp_path), ["n0", "n1"])  # died before mixing round 0
    again.peers = {i: _Peer(m) for i, m in enumerate([again, nodes[1]])}
    again.step(0)  # the same report again, from its checkpoint
    assert again.ledger.reports_of(0) == 1
    np.testing.assert_array_equal(again.gossip.x, value)
    assert {r: m.x.tobytes() for r, m in again.gossip.last_outgoing.items()} == \
        {r: m.x.tobytes() for r, m in sent.items()}
