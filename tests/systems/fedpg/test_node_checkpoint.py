"""A FedPG-Dec node's checkpoint (the Ray runtime's) is a privrl run file: it restores the
node exactly, and a malicious pickle or a checkpoint of another node is refused, never run."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import optax
import pytest

from privrl.federation import topology as topo
from privrl.federation.gossip import GossipMessage, PushSumNode
from privrl.privacy import LaplaceMechanism, PrivacyLedger
from privrl.runfile import RunFileError
from privrl.systems.fedpg.ray import load_node, save_node

D = 4
GRAPH = topo.ring(3)


def _leaves(tree: object) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_a_node_restores_from_its_checkpoint(tmp_path: Path) -> None:
    mech = LaplaceMechanism(epsilon=5.0, clip=1.0)
    node = PushSumNode(1, GRAPH, np.ones(D, np.float32))
    node.apply(mech.privatize(jax.random.key(0), np.ones(D, np.float32)))
    assert node.receive(GossipMessage(0, 0, 1, np.full(D, 0.5, np.float32), 0.5)).accepted
    assert node.mix()
    opt = optax.adam(0.1)
    template = opt.init(np.zeros(D, np.float32))
    _, opt_state = opt.update(np.ones(D, np.float32), template)
    ledger = PrivacyLedger()
    ledger.charge(1, mech.guarantee)
    history = [{"mean_return": 9.5, "batch": 3, "steps": 1, "used_before": 0, "used": 7}]
    save_node(tmp_path / "node1.npz", node, opt_state, 7, ledger, history)

    g, o, used, led, hist, rel = load_node(tmp_path / "node1.npz", 1, GRAPH, template)
    assert rel is None
    assert g.round == 1 and np.array_equal(g.x, node.x) and g.w == node.w
    assert g.mixed_from == node.mixed_from == [[0, 1]]
    assert {r: m.x.tobytes() for r, m in g.last_outgoing.items()} == \
        {r: m.x.tobytes() for r, m in node.last_outgoing.items()}
    assert used == 7 and hist == history and led.summary() == ledger.summary()
    assert jax.tree_util.tree_structure(o) == jax.tree_util.tree_structure(opt_state)
    assert all(np.array_equal(x, y) for x, y in
               zip(_leaves(o), _leaves(opt_state), strict=True))
    with pytest.raises(RunFileError, match=r"node1\.npz: tampered.*node 1's, not node 2's"):
        load_node(tmp_path / "node1.npz", 2, GRAPH, template)
    with pytest.raises(RunFileError, match=r"node1\.npz: tampered.*state array"):
        load_node(tmp_path / "node1.npz", 1, GRAPH, optax.sgd(0.1, momentum=0.9).init(
            np.zeros(D + 1, np.float32)))


def test_a_malicious_pickle_in_place_of_a_node_checkpoint_is_refused(
        tmp_path: Path, plant_pickle) -> None:
    marker = plant_pickle(tmp_path / "node1.npz")
    with pytest.raises(RunFileError, match=r"node1\.npz: is a Python pickle"):
        load_node(tmp_path / "node1.npz", 1, GRAPH, ())
    assert not marker.exists()


def test_a_released_report_is_kept_so_a_restart_sends_the_same_one(tmp_path: Path) -> None:
    """After its step a node checkpoints the report it released (not the key): restarted
    before mixing, it re-sends that report instead of drawing new noise."""
    mech = LaplaceMechanism(epsilon=5.0, clip=1.0)
    node = PushSumNode(1, GRAPH, np.ones(D, np.float32))
    opt = optax.sgd(0.1)
    template = opt.init(np.zeros(D, np.float32))
    report = mech.privatize(jax.random.key(3), np.ones(D, np.float32))
    info = {"mean_return": 1.0, "batch": 2, "steps": 1, "used_before": 0, "used": 6}
    save_node(tmp_path / "node1.npz", node, template, 0, PrivacyLedger(), [],
              (0, np.asarray(report.value), template, info))
    *_, rel = load_node(tmp_path / "node1.npz", 1, GRAPH, template)
    assert rel[0] == 0 and rel[3] == info
    assert rel[1].tobytes() == np.asarray(report.value).tobytes()
