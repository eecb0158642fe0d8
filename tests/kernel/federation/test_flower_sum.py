"""SecAgg+ carrying the distributed discrete Gaussian's integers (privrl.federation.flower_sum),
run in one process: Flower's real server workflow and client mod, the messages routed by a grid
that calls each node's handler (no SuperLink), so a node can be dropped mid-round."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Iterable

import jax
import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp.grid import Grid

from privrl.federation.flower_roster import NodeIdentity, Roster
from privrl.federation.flower_sum import (
    AHEAD,
    Refused,
    SecAggPins,
    node_payload,
    payload_bits,
    read_ahead,
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

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Each message delivered at once; its reply waits for `pull_messages`. A dead node's
        reply is the error the SuperLink sends for a node no longer online."""
        self.replies: dict[str, Message] = getattr(self, "replies", {})
        self.sent = getattr(self, "sent", 0)
        ids = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            stage = str(msg.content.config_records["secaggplus_configs"].get("stage"))
            self.sent += 1
            msg.metadata.__dict__["_message_id"] = f"m{self.sent}-{node}"  # as the SuperLink
            ids.append(msg.metadata.message_id)
            if node in self.dead or self.drop(stage, node):
                self.dead.add(node)
                self.replies[ids[-1]] = Message(
                    error=Error(ErrorCode.NODE_UNAVAILABLE, "node offline"), reply_to=msg)
                continue
            # a copy, as the wire delivers one (the server reuses one content for every node)
            reply = self.handlers[node](copy.deepcopy(msg), self.contexts[node])
            if reply.has_content():
                self.seen.append((node, reply.content))
            self.replies[ids[-1]] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


def four_nodes() -> tuple[int, DiscreteGaussianSum, dict[int, np.ndarray]]:
    """The tests' fleet: 4 SuperNodes (ids 100-103), one agent each, 3 honest; payload bits,
    the mechanism and each node's update (seeded)."""
    bits = payload_bits(4)
    mech = DiscreteGaussianSum(clip=1.0, dim=6, agents=4, min_honest=3, noise_multiplier=1.0,
                               bits=bits)
    rng = np.random.default_rng(0)
    return bits, mech, {100 + i: rng.normal(size=6) * 0.3 for i in range(4)}


def node_handler(mech: DiscreteGaussianSum, vectors: dict[int, np.ndarray],
                 record: dict[int, np.ndarray] | None = None, roster: Roster | None = None,
                 prepared: dict[int, tuple] | None = None,
                 ) -> Callable[[int], Callable[[Message, Context], Message]]:
    """Node n's handler: SecAgg+'s mod around the agent's release of its vector (with
    `roster`: node n signs with IDENTITIES[n] and checks its peers against the roster; with
    `prepared`: what rode its key exchange, and whether it had released then)."""

    def make(node: int) -> Callable[[Message, Context], Message]:
        sent: dict[int, np.ndarray] = {}

        def release(msg: Message, ctx: Context) -> Message:
            arrays, config = read_fit(msg.content)
            assert config["round"] in (3, 4, 5) and arrays[0].shape == (2,)
            # a round asked again gets the message released for it (as privrl's nodes)
            if config["round"] not in sent:
                sent[config["round"]] = mech.message(jax.random.key(node), vectors[node])
            y = sent[config["round"]]
            if record is not None:
                record[node] = y
            return Message(sum_reply(node_payload(y, mech.bits)), reply_to=msg)

        def prepare(arrays: list[np.ndarray], config: dict) -> None:
            assert prepared is not None
            prepared[node] = (arrays, config, bool(sent))

        return secagg_node(release, SecAggPins(len(vectors), len(vectors) // 2 + 1, mech.bits),
                           *((IDENTITIES[node], roster) if roster else (None, None)),
                           prepare=None if prepared is None else prepare)

    return make


# The fleet's identities (nodes 100, 101, ...): whoever deploys the agents hands every node
# the roster of their public keys.
IDENTITIES = {100 + i: NodeIdentity.generate() for i in range(6)}


def roster_of(nodes: Iterable[int]) -> Roster:
    return Roster(frozenset(IDENTITIES[n].public for n in nodes))


def run_round(nodes: int, drop=lambda s, n: False, record=None, roster: bool = False,
              prepared=None):
    bits = payload_bits(nodes)
    mech = DiscreteGaussianSum(clip=1.0, dim=6, agents=nodes, min_honest=nodes - 1,
                               noise_multiplier=1.0, bits=bits)
    rng = np.random.default_rng(0)
    vectors = {100 + i: rng.normal(size=6) * 0.3 for i in range(nodes)}
    make = node_handler(mech, vectors, record, roster_of(vectors) if roster else None,
                        prepared)
    grid = LoopGrid({n: make(n) for n in vectors}, drop)
    out = secure_sum_round(grid, context(), list(vectors), [np.zeros(2)], {"round": 3}, 3,
                           bits, nodes - 1, None)
    return mech, vectors, grid, out


@pytest.mark.parametrize("roster", [False, True], ids=["no-roster", "roster"])
def test_the_secure_sum_is_the_modular_sum_of_the_messages(roster: bool):
    mech, vectors, _grid, out = run_round(4, roster=roster)
    assert out.survivors == sorted(vectors)
    decoded = np.asarray(mech.decode(out.total).value)
    truth = sum(v * min(1, 1 / np.linalg.norm(v)) for v in vectors.values())
    # the noise of 4 shares: std sqrt(4·s²)·γ per coordinate; 6 coordinates within 5 std
    std = np.sqrt(4 * mech.share_variance) * mech.gamma
    assert np.max(np.abs(decoded - truth)) < 5 * std
    # each of the four stages timed, and each node's reply in it (flower.json shows them)
    assert len(out.stages) == 4 and out.arrivals.keys() == out.stages.keys()
    for stage, (start, end) in out.stages.items():
        assert out.arrivals[stage].keys() == vectors.keys()
        assert all(start <= a <= end for a in out.arrivals[stage].values())


@pytest.mark.parametrize("roster", [False, True], ids=["no-roster", "roster"])
def test_the_rounds_instructions_ride_the_key_exchange(roster: bool):
    """θ and the round's config ride SHARE_KEYS (`ahead_record`): every node gets them before
    it is asked for its masked vector (so it can compute its payload while the keys travel),
    and the sum revealed is still the sum of the payloads sent at the collect stage."""
    from flwr.app import ConfigRecord
    from flwr.common import ndarray_to_bytes

    prepared: dict[int, tuple] = {}
    payloads: dict[int, np.ndarray] = {}
    mech, vectors, _grid, out = run_round(4, record=payloads, roster=roster, prepared=prepared)
    assert sorted(prepared) == sorted(vectors)
    for arrays, config, released in prepared.values():
        assert not released and config == {"round": 3}
        assert len(arrays) == 1 and np.array_equal(arrays[0], np.zeros(2))
    assert np.array_equal(out.total, np.mod(sum(payloads.values()), 1 << mech.bits))
    zipped = io.BytesIO()
    np.savez(zipped, theta=np.zeros(2))  # np.load would hand back an NpzFile, not an array
    for arrays in ([b"x"], [b""], [zipped.getvalue()], [ndarray_to_bytes(np.zeros(2))[:-1]],
                   "not a list"):
        bad = RecordDict({AHEAD: ConfigRecord({"round": 3, AHEAD: arrays})})
        with pytest.raises(Refused, match="malformed"):
            read_ahead(bad)


class _Tampering(LoopGrid):
    """A server whose SHARE_KEYS request to node 101 carries malformed fit instructions."""

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        from flwr.app import ConfigRecord

        messages = list(messages)
        for m in messages:
            if m.metadata.dst_node_id == 101 and AHEAD in m.content.config_records:
                m.content.config_records[AHEAD] = ConfigRecord({"round": 3, AHEAD: [b""]})
        return super().push_messages(messages)


def test_a_node_refuses_a_key_exchange_carrying_malformed_instructions():
    """Malformed fit instructions riding SHARE_KEYS: the node refuses that request (a Flower
    error, its keys' reply withheld), prepares nothing and drops out of the run; the others
    still reveal the sum of their own payloads."""
    bits, mech, vectors = four_nodes()
    payloads: dict[int, np.ndarray] = {}
    prepared: dict[int, tuple] = {}
    make = node_handler(mech, vectors, payloads, prepared=prepared)
    grid = _Tampering({n: make(n) for n in vectors})
    out = secure_sum_round(grid, context(), list(vectors), [np.zeros(2)], {"round": 3}, 3,
                           bits, 3, None)
    assert sorted(prepared) == sorted(payloads) == out.survivors == [100, 102, 103]
    assert [r["stage"] for r in grid.handlers[101].refusals] == ["share_keys"]
    assert "malformed" in grid.handlers[101].refusals[0]["reason"]
    assert np.array_equal(out.total, np.mod(sum(payloads.values()), 1 << bits))


def test_the_next_rounds_setup_waits_behind_this_rounds_unmask():
    """`NextSetup`: round 4's SETUP requests are pushed right after round 3's UNMASK requests
    (a SuperNode takes a waiting message as soon as it has answered, instead of after flwr's
    3 s sleep), and round 4 adopts them instead of pushing its own; each round reveals its
    own sum. Round 5 asks fewer nodes than were set up ahead: it pushes its own SETUP."""
    from privrl.federation.flower_sum import NextSetup

    bits, mech, vectors = four_nodes()
    payloads: dict[int, np.ndarray] = {}
    make = node_handler(mech, vectors, payloads)
    grid = LoopGrid({n: make(n) for n in vectors})
    pushed: list[tuple[str, str]] = []  # (stage, round) of each request, in push order
    push = grid.push_messages

    def noting(messages):
        messages = list(messages)
        pushed.extend((str(m.content.config_records["secaggplus_configs"]["stage"]),
                       m.metadata.group_id) for m in messages)
        return push(messages)

    grid.push_messages = noting
    ahead = NextSetup()
    for t, nodes in ((3, list(vectors)), (4, list(vectors)), (5, list(vectors)[:3])):
        before = len(pushed)
        out, tries, alive = secure_sum(grid, context(), nodes, [np.zeros(2)], {"round": t}, t,
                                       bits, 3, None, next_setup=ahead)
        assert tries == 1 and out.survivors == alive == nodes
        assert np.array_equal(out.total, np.mod(sum(payloads[n] for n in nodes), 1 << bits))
        stages = [(s, int(g)) for s, g in pushed[before:]]
        own_setup = [("setup", t)] * len(nodes) if t != 4 else []
        assert stages == own_setup + [("share_keys", t)] * len(nodes) + [
            ("collect_masked_vectors", t)] * len(nodes) + [("unmask", t)] * len(nodes) + [
            ("setup", t + 1)] * len(nodes)


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


@pytest.mark.parametrize("stage", ["setup", "share_keys"])
def test_a_node_dead_before_its_key_shares_does_not_halt_the_run(stage: str):
    # node 101 dies at SETUP or while keys are shared: the survivors hold no share of its key
    # and no mask with it; Flower 1.42's workflow would still ask them for its key shares and halt
    # (a second run would need every node to add its message to a second sum, which it
    # refuses); the run leaves the node out at unmasking and reveals the others' sum.
    bits, mech, vectors = four_nodes()
    make = node_handler(mech, vectors)
    grid = LoopGrid({n: make(n) for n in vectors},
                    drop=lambda s, n: n == 101 and s == stage)
    out, tries, alive = secure_sum(grid, context(), list(vectors), [np.zeros(2)],
                                   {"round": 3}, 3, bits, 3, None)
    assert tries == 1 and out.survivors == alive == [100, 102, 103]
    decoded = np.asarray(mech.decode(out.total).value)
    truth = sum(v * min(1, 1 / np.linalg.norm(v)) for n, v in vectors.items() if n != 101)
    assert np.max(np.abs(decoded - truth)) < 5 * np.sqrt(4 * mech.share_variance) * mech.gamma


# --- a server that deviates from the protocol (issue 52) -----------------------------------------
# Each attack is the server's own code: Flower's real workflow where it serves, crafted messages
# where it deviates. A node is `secagg_node` around a release that re-sends the same message
# when asked for a round again (as privrl's nodes did: a restarted or retried round).
def _target_after(unmasked: list[np.ndarray], bits: int) -> np.ndarray:
    """The payload y of one node's masked vector once its masks are removed ([0]: weight)."""
    return np.mod(np.asarray(unmasked[1], np.int64), 1 << bits)


def test_running_a_round_twice_reveals_no_single_nodes_message():
    """Attack: one SecAgg+ run of round 3 over all nodes, then another over all but the target;
    the difference of the two sums would be the target's message."""
    payloads: dict[int, np.ndarray] = {}
    mech, vectors, grid, first = run_round(4, record=payloads)
    target, bits = 101, mech.bits
    assert first.total is not None
    second = secure_sum_round(grid, context(), [n for n in vectors if n != target],
                              [np.zeros(2)], {"round": 3}, 3, bits, 3, None)
    if second.total is not None:
        recovered = np.mod(first.total - second.total, 1 << bits)
        assert not np.array_equal(recovered, payloads[target]), "the target's message leaked"
    assert second.total is None  # every node refuses a second sum of a round it took part in


def _rogue_unmask(active_of: Callable[[int, list[int]], list[int]],
                  dead_of: Callable[[int, list[int]], list[int]], reveal: tuple[int, ...] = (101,),
                  nodes: int = 4, threshold: int = 3):
    """Flower's workflow through the masked vectors of `nodes` nodes 100, 101, ...; then the
    server sends node n the unmask request (active_of(n, alive), dead_of(n, alive)) and tries
    to unmask the sum of the nodes `reveal` alone: their private masks (from their seeds'
    shares) and their pairwise masks with every other node (from its key's shares). Returns
    (what it recovered or None, the true sum of their payloads, the replies)."""
    from flwr.app import ConfigRecord, MessageType
    from flwr.common import bytes_to_ndarray, ndarrays_to_parameters
    from flwr.common.secure_aggregation.crypto.shamir import combine_shares
    from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        parameters_addition,
        parameters_mod,
        parameters_subtraction,
    )
    from flwr.common.secure_aggregation.secaggplus_constants import (
        RECORD_KEY_CONFIGS,
        Key,
        Stage,
    )
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
    from flwr.compat.common import recorddict_compat as compat
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey
    from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
    from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

    from privrl.federation.flower_sum import MODULUS_RANGE, _SumStrategy

    bits = payload_bits(nodes)
    mech = DiscreteGaussianSum(clip=1.0, dim=6, agents=nodes, min_honest=threshold,
                               noise_multiplier=1.0, bits=bits)
    rng = np.random.default_rng(0)
    vectors = {100 + i: rng.normal(size=6) * 0.3 for i in range(nodes)}
    payloads: dict[int, np.ndarray] = {}
    make = node_handler(mech, vectors, payloads)
    grid = LoopGrid({n: make(n) for n in vectors})
    legacy = LegacyContext(context(), strategy=_SumStrategy(list(vectors), {"round": 3}))
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
        {WorkflowKey.CURRENT_ROUND: 3})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([np.zeros(2)]), keep_input=True)
    flow = SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=threshold,
                              max_weight=1.0, clipping_range=float(1 << (bits - 1)),
                              quantization_range=1 << bits, modulus_range=MODULUS_RANGE)
    state = WorkflowState()
    assert flow.setup_stage(grid, legacy, state) and flow.share_keys_stage(grid, legacy, state)
    assert flow.collect_masked_vectors_stage(grid, legacy, state)
    masked = {n: [bytes_to_ndarray(b) for b in c.config_records[RECORD_KEY_CONFIGS]
                  ["masked_params"]] for n, c in grid.seen if
              "masked_params" in c.config_records[RECORD_KEY_CONFIGS]}
    alive = sorted(state.active_node_ids)
    truth = np.mod(sum(payloads[n].astype(np.int64) for n in reveal), 1 << bits)
    replies = grid.send_and_receive([Message(
        RecordDict({RECORD_KEY_CONFIGS: ConfigRecord({
            Key.STAGE: Stage.UNMASK, Key.ACTIVE_NODE_ID_LIST: active_of(n, alive),
            Key.DEAD_NODE_ID_LIST: dead_of(n, alive)})}),
        dst_node_id=n, message_type=MessageType.TRAIN, group_id="3") for n in alive])
    seeds: dict[int, list[bytes]] = {n: [] for n in alive}
    keys: dict[int, list[bytes]] = {n: [] for n in alive}
    for n, r in zip(alive, replies, strict=True):
        if r.has_error():
            continue
        rec = r.content.config_records[RECORD_KEY_CONFIGS]
        for i, (owner, share) in enumerate(zip(rec[Key.NODE_ID_LIST], rec[Key.SHARE_LIST],
                                               strict=True)):
            (seeds if i < len(active_of(n, alive)) else keys)[owner].append(share)
    # a pairwise mask of i in `reveal` and j outside it: from either one's key (ECDH)
    known = {n: bytes_to_private_key(combine_shares(k)) for n, k in keys.items()
             if len(k) >= threshold}
    others = [j for j in alive if j not in reveal]
    if any(len(seeds[i]) < threshold for i in reveal) or \
            any(i not in known and j not in known for i in reveal for j in others):
        return None, truth, replies
    shapes = [a.shape for a in masked[reveal[0]]]
    vec = masked[reveal[0]]
    for i in reveal[1:]:
        vec = parameters_addition(vec, masked[i])
    for i in reveal:
        vec = parameters_subtraction(vec, pseudo_rand_gen(combine_shares(seeds[i]),
                                                          MODULUS_RANGE, shapes))
        for j in others:
            sk, pk = (known[i], j) if i in known else (known[j], i)
            pair = pseudo_rand_gen(generate_shared_key(
                sk, bytes_to_public_key(state.nid_to_publickeys[pk][0])), MODULUS_RANGE, shapes)
            vec = (parameters_subtraction if i > j else parameters_addition)(vec, pair)
    return _target_after(parameters_mod(vec, MODULUS_RANGE), bits), truth, replies


def test_an_unmask_request_naming_a_node_active_and_dead_reveals_nothing():
    """Attack: every node is asked for the target's private-mask share (active) and its key
    share (dead) in one unmask request; with both, the server strips the target's masks."""
    got, truth, replies = _rogue_unmask(lambda n, alive: alive, lambda n, alive: [101])
    if got is not None:
        assert not np.array_equal(got, truth), "the target's message leaked"
    assert all(r.has_error() for r in replies)  # every node refuses the request


def test_a_node_answers_only_secagg_train_messages():
    """Attack: the round's fit request sent as another message type, which Flower's mod passes
    to the node's release unmasked."""
    from flwr.app import MessageType
    from flwr.common import FitIns, ndarrays_to_parameters
    from flwr.compat.common import recorddict_compat as compat

    _, mech, _ = four_nodes()
    payloads: dict[int, np.ndarray] = {}
    handler = node_handler(mech, {100: np.full(6, 0.1)}, payloads)(100)
    content = compat.fitins_to_recorddict(
        FitIns(ndarrays_to_parameters([np.zeros(2)]), {"round": 3}), keep_input=True)
    msg = Message(content, dst_node_id=100, message_type=MessageType.QUERY)
    msg.metadata.__dict__["_message_id"] = "m0-100"
    reply = handler(msg, context(100))
    assert not payloads, "the node released its message outside SecAgg+"
    assert reply.has_error()


def _setup_reply(**changes: object) -> tuple[Message, object]:
    """A SETUP of 4 nodes, threshold 3, with `changes`, sent to a node that pinned 4 nodes,
    threshold 3 and 29-bit integers; its reply and the node's guard."""
    from flwr.app import ConfigRecord, MessageType
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

    pins = SecAggPins(4, 3, payload_bits(4))
    guard = secagg_node(lambda m, c: m, pins)
    configs = {Key.STAGE: "setup", Key.SAMPLE_NUMBER: 4, Key.SHARE_NUMBER: 4,
               Key.THRESHOLD: 3, **pins.setup(), **changes}
    msg = Message(RecordDict({RECORD_KEY_CONFIGS: ConfigRecord(configs)}), dst_node_id=100,
                  message_type=MessageType.TRAIN, group_id="3")
    msg.metadata.__dict__["_message_id"] = "m0-100"
    return guard(msg, context(100)), guard


@pytest.mark.parametrize("changes", [
    {"threshold": 2}, {"sample_num": 5, "share_num": 5}, {"share_num": 3},
    {"mod_range": 1 << 16}, {"target_range": 1 << 20}, {"clipping_range": 1.0},
    {"max_weight": 2.0}], ids=lambda c: next(iter(c)))
def test_a_node_refuses_a_setup_other_than_the_one_it_pinned(changes: dict):
    reply, _ = _setup_reply()
    assert not reply.has_error()  # the SETUP it pinned is answered
    reply, guard = _setup_reply(**changes)
    assert reply.has_error() and len(guard.refusals) == 1


@pytest.mark.parametrize("lists", [
    (lambda n, alive: alive[:2], lambda n, alive: alive[2:]),  # 2 active: below threshold 3
    (lambda n, alive: alive, lambda n, alive: [999]),  # a node whose shares it never got
    (lambda n, alive: [a for a in alive if a != n], lambda n, alive: [n]),  # itself dead
], ids=["below-threshold", "unknown-node", "itself-dead"])
def test_a_node_refuses_an_unmask_request_inconsistent_with_its_run(lists):
    _got, _truth, replies = _rogue_unmask(*lists)
    assert all(r.has_error() for r in replies)


def test_a_deviating_server_reveals_no_sum_smaller_than_the_mechanism_counts():
    """What the checks cannot stop, and the ε must count (fewest_revealed): 5 nodes, threshold
    3. Each node gets a request it accepts (itself and 3 nodes active, 2 dead, disjoint), but
    the lists differ from node to node, so that the seeds of nodes 100 and 101 and the keys of
    the other three are each shared by >= 3 nodes: the sum of 2 nodes' messages is revealed,
    fewer than the threshold, as many as fewest_revealed(5, 3) = 2 (and at the default
    threshold N − 1 no fewer than it: fewest_revealed(5, 4) = 4)."""
    from privrl.federation.flower_sum import fewest_revealed

    views = {100: ([100, 101, 102], [103, 104]), 101: ([100, 101, 103], [102, 104]),
             102: ([102, 100, 101], [103, 104]), 103: ([103, 100, 101], [102, 104]),
             104: ([104, 100, 101], [102, 103])}
    got, truth, replies = _rogue_unmask(lambda n, alive: views[n][0],
                                        lambda n, alive: views[n][1], reveal=(100, 101),
                                        nodes=5, threshold=3)
    assert not any(r.has_error() for r in replies)
    assert got is not None and np.array_equal(got, truth)
    assert fewest_revealed(5, 3) == 2 and fewest_revealed(5, 4) == 4


# --- a server that forges SuperNodes (issue 52): the fleet roster ---------------------------------
def _forged(sealed_by: NodeIdentity | None):
    """A SuperNode the server runs itself: Flower's plain mod around a known payload (zeros),
    its keys unsigned or signed by an identity that is not on the fleet's roster."""
    from flwr.client.mod import secaggplus_mod

    bits = payload_bits(4)

    def release(msg: Message, ctx: Context) -> Message:
        return Message(sum_reply(node_payload(np.zeros(6, np.int64), bits)), reply_to=msg)

    if sealed_by is None:
        return lambda msg, ctx: secaggplus_mod(msg, ctx, release)
    return secagg_node(release, SecAggPins(4, 3, bits), sealed_by,
                       Roster(frozenset({sealed_by.public})))


@pytest.mark.parametrize("roster,forged_keys", [
    (False, "unsigned"), (True, "unsigned"), (True, "signed-off-roster")])
def test_a_server_forging_supernodes_recovers_no_nodes_message(roster: bool, forged_keys: str):
    """Attack: the server runs SecAgg+ honestly over one genuine node (100) and three of its
    own, whose payloads (zeros) it knows: the revealed sum is the genuine node's message.
    Without a roster it recovers it (the attack is real); with one, the node refuses the
    forged peers at SHARE_KEYS and nothing of it leaves."""
    bits, mech, _ = four_nodes()
    payloads: dict[int, np.ndarray] = {}
    honest = node_handler(mech, {n: np.full(6, 0.1) for n in range(100, 104)}, payloads,
                          roster_of(range(100, 104)) if roster else None)(100)
    handlers = {100: honest, **{900 + i: _forged(
        None if forged_keys == "unsigned" else NodeIdentity.generate()) for i in range(3)}}
    grid = LoopGrid(handlers)
    out = secure_sum_round(grid, context(), list(handlers), [np.zeros(2)], {"round": 3}, 3,
                           bits, 3, None)
    if not roster:
        assert np.array_equal(out.total, payloads[100])  # the genuine node's message alone
        return
    # the server's own three may still sum among themselves: the genuine node is not in it
    assert 100 not in out.survivors and not payloads, "the node released its message"
    assert not any(n == 100 and "ctxts" in c.config_records["secaggplus_configs"]
                   for n, c in grid.seen), "the node handed out shares of its secrets"
    assert "not on the roster" in honest.refusals[0]["reason"]


class _Substituting(LoopGrid):
    """A grid whose server, in the SHARE_KEYS request to `target`, replaces the other nodes'
    pk2 by keys of its own (keeping whatever seal they carried): the target then encrypts
    its shares for them to the server."""

    def __init__(self, handlers, target: int) -> None:
        super().__init__(handlers)
        from flwr.supercore.primitives.asymmetric import generate_key_pairs

        self.target, self.keys = target, {}
        for n in handlers:
            if n != target:
                self.keys[n] = generate_key_pairs()

    def push_messages(self, messages):
        from flwr.supercore.primitives.asymmetric import public_key_to_bytes

        messages = list(messages)
        for msg in messages:
            rec = msg.content.config_records["secaggplus_configs"]
            if rec.get("stage") == "share_keys" and msg.metadata.dst_node_id == self.target:
                for n, (_sk, pk) in self.keys.items():
                    pk1, sealed = rec[str(n)]
                    tail = sealed[sealed.index(b"-----END PUBLIC KEY-----\n") + 25:]
                    rec[str(n)] = [pk1, public_key_to_bytes(pk) + tail]
        return super().push_messages(messages)

    def stolen_seed(self) -> bytes | None:
        """The target's private-mask seed, if the server decrypted >= 3 of its shares."""
        from flwr.common.secure_aggregation.crypto.shamir import combine_shares
        from flwr.common.secure_aggregation.crypto.symmetric_encryption import (
            decrypt,
            generate_shared_key,
        )
        from flwr.common.secure_aggregation.secaggplus_utils import (
            share_keys_plaintext_separate,
        )
        from flwr.supercore.primitives.asymmetric import bytes_to_public_key

        replies = [c.config_records["secaggplus_configs"] for n, c in self.seen
                   if n == self.target]
        pk2 = next(r["pk2"] for r in replies if "pk2" in r)
        pk2 = pk2[:pk2.index(b"-----END PUBLIC KEY-----\n") + 25]
        shares = []
        for r in replies:
            for dst, ct in zip(r.get("dsts", []), r.get("ctxts", []), strict=True):
                key = generate_shared_key(self.keys[dst][0], bytes_to_public_key(pk2))
                shares.append(share_keys_plaintext_separate(decrypt(key, ct))[2])
        return combine_shares(shares) if len(shares) >= 3 else None


@pytest.mark.parametrize("roster", [False, True], ids=["no-roster", "roster"])
def test_a_substituted_key_recovers_nothing(roster: bool):
    """Attack: the server gives the target (node 100) its own pk2 in place of each other
    node's. Without a roster the target encrypts 3 shares of its private-mask seed to the
    server, which recombines the seed (and likewise the key of its pairwise masks); with
    one, the substituted keys carry no valid signature and the target refuses."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE

    bits, mech, _ = four_nodes()
    vectors = {n: np.full(6, 0.1) for n in range(100, 104)}
    make = node_handler(mech, vectors, None, roster_of(vectors) if roster else None)
    grid = _Substituting({n: make(n) for n in vectors}, target=100)
    out = secure_sum_round(grid, context(), list(vectors), [np.zeros(2)], {"round": 3}, 3,
                           bits, 3, None)
    seed = grid.stolen_seed()
    if not roster:
        state = grid.contexts[100].state.config_records[RECORD_KEY_STATE]
        assert seed is not None and seed == state["rd_seed"]  # the attack is real
        return
    assert seed is None and 100 not in out.survivors  # the other three may sum alone
    assert "not the ones its identity signed" in grid.handlers[100].refusals[0]["reason"]


def test_a_roster_refuses_an_identity_standing_for_two_nodes():
    """A server replaying one roster node's signed keys under a second node id: the seal
    binds the node id, and one identity may stand for one node only."""
    from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes

    from privrl.federation.flower_roster import RosterError, seal, unseal

    me = IDENTITIES[100]
    pk1, pk2 = (public_key_to_bytes(generate_key_pairs()[1]) for _ in range(2))
    sealed = seal(me, 1, "3", 100, pk1, pk2)
    roster = roster_of([100, 101])
    assert unseal(roster, 1, "3", {100: (pk1, sealed)}) == {100: (pk1, pk2)}
    with pytest.raises(RosterError, match="not the ones"):  # under another node id
        unseal(roster, 1, "3", {101: (pk1, sealed)})
    with pytest.raises(RosterError, match="one identity"):  # standing for two nodes
        unseal(roster, 1, "3", {100: (pk1, sealed), 101: (pk1, sealed)})
    with pytest.raises(RosterError, match="not the ones"):  # in another round
        unseal(roster, 1, "4", {100: (pk1, sealed)})
    with pytest.raises(RosterError, match="not on the roster"):
        unseal(roster_of([101]), 1, "3", {100: (pk1, sealed)})
