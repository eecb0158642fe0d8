"""Push-sum nodes as message-passing peers (the Ray runtime's FedPG-Dec): a network of
`PushSumNode`s computes exactly what the vectorized push-sum computes, and bad or repeated
messages are rejected without touching a node."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl import runfile
from privrl.federation import topology as topo
from privrl.federation.gossip import GossipMessage, PushSumNode
from privrl.federation.pushsum import push_sum_apply, push_sum_init, push_sum_mix, push_sum_z
from privrl.privacy.mechanisms import IdentityMechanism


def _network(graph: topo.Topology, theta: np.ndarray) -> list[PushSumNode]:
    return [PushSumNode(k, graph, theta[k].copy()) for k in range(graph.num_nodes)]


def _bits(obj: Any) -> Any:
    """A snapshot with every array as its exact bytes, to compare bit for bit."""
    if isinstance(obj, dict):
        return {k: _bits(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_bits(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return (obj.dtype.str, obj.shape, obj.tobytes())
    return obj


def _saved(tmp_path: Path, snap: dict) -> Path:
    runfile.write(tmp_path / "node.npz", "node", snap)
    return tmp_path / "node.npz"


def _play_round(nodes: list[PushSumNode], deltas: np.ndarray) -> None:
    mech = IdentityMechanism()
    messages = [m for k, n in enumerate(nodes)
                for m in n.apply(mech.privatize(jax.random.key(0), jnp.asarray(deltas[k])))]
    for m in messages:
        assert nodes[m.receiver].receive(m).accepted
    assert all(n.mix() for n in nodes)


@pytest.mark.parametrize("graph", [topo.ring(5), topo.exponential(8),
                                   topo.random_directed(6, rounds=12, seed=1)],
                         ids=lambda g: g.name)
def test_message_passing_equals_vectorized_push_sum(graph: topo.Topology) -> None:
    k, d = graph.num_nodes, 4
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(k, d)).astype(np.float32)
    nodes = _network(graph, theta)
    state = push_sum_init(jnp.asarray(theta))
    mech = IdentityMechanism()
    for t in range(12):
        deltas = rng.normal(size=(k, d)).astype(np.float32)
        reports = jax.vmap(mech.privatize)(jax.random.split(jax.random.key(t), k),
                                           jnp.asarray(deltas))
        state = push_sum_mix(push_sum_apply(state, reports),
                             jnp.asarray(graph.matrix(t), jnp.float32))
        _play_round(nodes, deltas)
    z_vec = np.asarray(push_sum_z(state))
    z_msg = np.stack([n.z for n in nodes])
    # Same float32 products; only the order of the sums differs (P x vs sender order).
    np.testing.assert_allclose(z_msg, z_vec, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sum(n.w for n in nodes), k, rtol=1e-5)  # mass conserved
    for n in nodes:  # each round mixed the shares of exactly its in-neighbours
        for t, senders in enumerate(n.mixed_from):
            assert senders == list(np.flatnonzero(graph.matrix(t)[n.node]))


def test_bad_and_repeated_messages_leave_the_node_bit_identical() -> None:
    graph = topo.ring(3)  # 0 → 1 → 2 → 0
    nodes = _network(graph, np.arange(12, dtype=np.float32).reshape(3, 4))
    mech = IdentityMechanism()
    msgs = {n.node: n.apply(mech.privatize(jax.random.key(0), jnp.ones(4)))
            for n in nodes}
    good = msgs[0][0]  # node 0's share for node 1
    assert good.receiver == 1 and nodes[1].receive(good).accepted
    base = msgs[1][0]  # node 1's share for node 2, not delivered yet
    cases = [
        (1, good, "duplicate"),
        (2, base._replace(receiver=0), "misdelivered"),
        (2, base._replace(sender=0), "not an in-neighbour"),
        (2, base._replace(round=-1), "stale"),
        (2, base._replace(round=1), "early"),
        (2, base._replace(x=np.ones(5, np.float32)), "malformed"),
        (2, base._replace(x=np.full(4, np.nan, np.float32)), "malformed"),
        (2, base._replace(w=0.0), "malformed"),
        (2, base._replace(sender=2), "a node's own share"),
        (2, tuple(base), "not a GossipMessage"),
    ]
    before = {i: (_bits(nodes[i].snapshot()), copy.deepcopy(nodes[i].inbox))
              for i in (1, 2)}
    for i, msg, reason in cases:
        verdict = nodes[i].receive(msg)
        assert not verdict.accepted and verdict.reason.startswith(reason), (reason, verdict)
    assert len(nodes[1].rejections) + len(nodes[2].rejections) == len(cases)
    for i in (1, 2):
        nodes[i].rejections.clear()
        assert _bits(nodes[i].snapshot()) == before[i][0]
        assert nodes[i].inbox.keys() == before[i][1].keys()
        assert all(np.array_equal(nodes[i].inbox[j][0], before[i][1][j][0])
                   for j in nodes[i].inbox)
    assert nodes[2].receive(base).accepted  # the good share is still welcome


def test_a_node_mixes_only_when_every_in_neighbour_has_arrived_and_resends(
        tmp_path: Path) -> None:
    graph = topo.ring(3)
    nodes = _network(graph, np.zeros((3, 2), np.float32))
    mech = IdentityMechanism()
    assert nodes[0].missing() == [0]  # its own step first
    sent = [n.apply(mech.privatize(jax.random.key(0), jnp.ones(2)))[0] for n in nodes]
    assert nodes[1].missing() == [0] and not nodes[1].mix()
    # The share can be fetched again from the sender (as after the receiver's crash).
    again = nodes[0].outgoing(0, 1)
    assert again is sent[0]
    assert nodes[0].outgoing(1, 1) is None
    assert nodes[1].receive(again).accepted and nodes[1].mix()
    restored = PushSumNode.from_snapshot(
        runfile.read(_saved(tmp_path, nodes[1].snapshot()), "node"), graph)
    assert restored.round == 1 and np.array_equal(restored.x, nodes[1].x)
    assert isinstance(sent[0], GossipMessage)
