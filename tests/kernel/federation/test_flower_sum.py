"""SecAgg+ carrying the distributed discrete Gaussian's integers (privrl.federation.flower_sum),
run in one process: Flower's real server workflow and client mod, the messages routed by a grid
that calls each node's handler (no SuperLink), so a node can be dropped mid-round."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import jax
import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict
from flwr.serverapp.grid import Grid

from privrl.federation.flower_sum import (
    node_payload,
    payload_bits,
    read_fit,
    secagg_node,
    secure_sum,
    secure_sum_round,
    sum_reply,
)
from privrl.privacy.discrete_sum import DiscreteGaussianSum


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """What a ServerApp process has set when it creates messages."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value, raising=False)


def context(node: int = 0) -> Context:
    return Context(run_id=1, node_id=node, node_config={}, state=RecordDict(), run_config={})


class LoopGrid(Grid):
    """Routes each message to its node's handler in this process. `drop(stage, node)`: True
    makes the node silent from then on (a SuperNode killed mid-round)."""

    def __init__(self, handlers: dict[int, Callable[[Message, Context], Message]],
                 drop: Callable[[str, int], bool] = lambda s, n: False) -> None:
        self.handlers, self.drop = handlers, drop
        self.contexts = {n: context(n) for n in handlers}
        self.dead: set[int] = set()
        self.seen: list[tuple[int, RecordDict]] = []  # every reply the server received

    def set_run(self, run):
        raise NotImplementedError

    @property
    def run(self):
        raise NotImplementedError

    def create_message(self, *a, **k):
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        return list(self.handlers)

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None):
        replies = []
        for i, msg in enumerate(messages):
            node = msg.metadata.dst_node_id
            stage = str(msg.content.config_records["secaggplus_configs"].get("stage"))
            if node in self.dead or self.drop(stage, node):
                self.dead.add(node)
                continue
            msg.metadata.__dict__["_message_id"] = f"m{i}-{node}"  # as the SuperLink would
            # a copy, as the wire delivers one (the server reuses one content for every node)
            reply = self.handlers[node](copy.deepcopy(msg), self.contexts[node])
            if reply.has_content():
                self.seen.append((node, reply.content))
            replies.append(reply)
        return replies


def node_handler(mech: DiscreteGaussianSum, vectors: dict[int, np.ndarray],
                 record: dict[int, np.ndarray] | None = None,
                 ) -> Callable[[int], Callable[[Message, Context], Message]]:
    """Node n's handler: SecAgg+'s mod around the agent's release of its vector."""

    def make(node: int) -> Callable[[Message, Context], Message]:
        def release(msg: Message, ctx: Context) -> Message:
            arrays, config = read_fit(msg.content)
            assert config["round"] == 3 and arrays[0].shape == (2,)
            y = mech.message(jax.random.key(node), vectors[node])
            if record is not None:
                record[node] = y
            return Message(sum_reply(node_payload(y, mech.bits)), reply_to=msg)

        return secagg_node(release)

    return make


def run_round(nodes: int, drop=lambda s, n: False, record=None):
    bits = payload_bits(nodes)
    mech = DiscreteGaussianSum(clip=1.0, dim=6, agents=nodes, min_honest=nodes - 1,
                               noise_multiplier=1.0, bits=bits)
    rng = np.random.default_rng(0)
    vectors = {100 + i: rng.normal(size=6) * 0.3 for i in range(nodes)}
    make = node_handler(mech, vectors, record)
    grid = LoopGrid({n: make(n) for n in vectors}, drop)
    out = secure_sum_round(grid, context(), list(vectors), [np.zeros(2)], {"round": 3}, 3,
                           bits, nodes - 1, None)
    return mech, vectors, grid, out


def test_the_secure_sum_is_the_modular_sum_of_the_messages():
    mech, vectors, _grid, out = run_round(4)
    assert out.survivors == sorted(vectors)
    decoded = np.asarray(mech.decode(out.total).value)
    truth = sum(v * min(1, 1 / np.linalg.norm(v)) for v in vectors.values())
    # the noise of 4 shares: std sqrt(4·s²)·γ per coordinate; 6 coordinates within 5 std
    std = np.sqrt(4 * mech.share_variance) * mech.gamma
    assert np.max(np.abs(decoded - truth)) < 5 * std


def test_payload_round_trip_is_exact():
    from privrl.federation.flower_sum import payload_sum

    bits = payload_bits(5)
    assert 5 * (1 << bits) < 1 << 32 <= 10 * (1 << bits)
    ys = np.random.default_rng(1).integers(0, 1 << bits, size=(5, 50))
    # what SecAgg+ computes from the payloads: Σ (p + T/2) − 5·T/2, then / 5
    mean = sum(node_payload(y, bits) for y in ys) / 5
    assert np.array_equal(payload_sum(mean, 5, bits), np.mod(ys.sum(axis=0), 1 << bits))


def test_no_reply_reveals_one_nodes_vector():
    """The server's view of a node: key material and its masked vector (its payload plus
    masks modulo 2^32); the payload itself is in no reply, and its masked vector differs
    from it modulo T in almost every coordinate."""
    from flwr.common import bytes_to_ndarray

    payloads: dict[int, np.ndarray] = {}
    mech, vectors, grid, out = run_round(3, record=payloads)
    assert out.total is not None and set(payloads) == set(vectors)
    masked = 0
    for node, content in grid.seen:
        assert all(len(rec) == 0 for rec in content.array_records.values())
        rec = content.config_records["secaggplus_configs"]
        if "masked_params" in rec:
            masked += 1
            vec = bytes_to_ndarray(rec["masked_params"][1])  # [0]: the weight
            same = np.mod(vec.astype(np.int64), 1 << mech.bits) == payloads[node]
            assert same.sum() <= 1  # chance agreement: probability 2^-29 per coordinate
    assert masked == 3


def test_a_node_killed_mid_round_is_recovered():
    # node 101 answers the setup and key-sharing stages, then dies before sending its masked
    # vector: the survivors' shares remove its pairwise masks; the sum holds the 3 others.
    mech, vectors, _grid, out = run_round(
        4, drop=lambda stage, n: n == 101 and stage == "collect_masked_vectors")
    assert out.survivors == [100, 102, 103]
    decoded = np.asarray(mech.decode(out.total).value)
    truth = sum(v * min(1, 1 / np.linalg.norm(v)) for n, v in vectors.items() if n != 101)
    std = np.sqrt(4 * mech.share_variance) * mech.gamma
    assert np.max(np.abs(decoded - truth)) < 5 * std


def test_too_few_survivors_reveal_nothing():
    _mech, _vectors, _grid, out = run_round(
        4, drop=lambda stage, n: n in (101, 102) and stage == "collect_masked_vectors")
    assert out.total is None and out.survivors == []


def test_a_node_dead_before_its_key_shares_is_left_out_of_a_second_run():
    # node 101 dies during the key-sharing stage: the survivors hold no share of its key, and
    # Flower's SecAgg+ halts (nothing revealed); the second run leaves it out from the start.
    bits = payload_bits(4)
    mech = DiscreteGaussianSum(clip=1.0, dim=6, agents=4, min_honest=3, noise_multiplier=1.0,
                               bits=bits)
    rng = np.random.default_rng(0)
    vectors = {100 + i: rng.normal(size=6) * 0.3 for i in range(4)}
    make = node_handler(mech, vectors)
    grid = LoopGrid({n: make(n) for n in vectors},
                    drop=lambda stage, n: n == 101 and stage == "share_keys")
    out, tries, alive = secure_sum(grid, context(), list(vectors), [np.zeros(2)],
                                   {"round": 3}, 3, bits, 3, None)
    assert tries == 2 and out.survivors == alive == [100, 102, 103]
    decoded = np.asarray(mech.decode(out.total).value)
    truth = sum(v * min(1, 1 / np.linalg.norm(v)) for n, v in vectors.items() if n != 101)
    assert np.max(np.abs(decoded - truth)) < 5 * np.sqrt(4 * mech.share_variance) * mech.gamma
