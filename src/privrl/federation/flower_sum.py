"""A real secure sum over Flower: SecAgg+ carrying the distributed discrete Gaussian's integers.

Flower's SecAgg+ (`SecAggPlusWorkflow` on the server, `secaggplus_mod` on each SuperNode) masks
every node's vector with pairwise and private masks modulo M = `modulus_range` and reveals only
the sum of the vectors of the nodes that survive, recovering the masks of nodes that drop out
from the Shamir shares the survivors hold, provided at least `reconstruction_threshold` do.
It quantizes floats itself; privrl's messages are already integers modulo T = 2^b
(`privrl.privacy.discrete_sum`), and SecAgg+ carries them exactly when:

- quantization_range = T, clipping_range = T/2, max_weight = 1 and every node reports
  num_examples = 1: a node sends the float y − T/2 of its integer y ∈ [0, T), which Flower's
  quantizer maps back to y exactly (an integer in float64, scale 1, no rounding) as int32
  (T <= 2^31);
- n·T < M = 2^32 for the n nodes: the masked sum of the y's never wraps modulo M, so the
  server's dequantized mean v gives Σ y = n·(v + T/2) exactly (`payload_sum`), and
  Σ y mod T is the modular sum of the agents' messages.

A node hosting several agents sends the sum of their messages modulo T (they share a trust
domain: the node). The server sees the sum over surviving nodes and which nodes survived,
never one node's vector. `secure_sum_round` runs one round; `node_payload` and `payload_sum`
are the two conversions. flwr is the optional `flower` extra.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flwr.app import ConfigRecord, Context, Error, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarray_to_bytes,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid, ServerApp

from privrl.federation.aggregator import check_report
from privrl.federation.flower import (
    _wait_for_nodes,
    ask_for_submissions,
    send_and_receive,
)
from privrl.federation.flower_roster import NodeIdentity, Roster, RosterError, seal, unseal
from privrl.federation.service import submission_problem
from privrl.federation.star import average_reports
from privrl.privacy.discrete_sum import secure_sum_bits
from privrl.privacy.report import Guarantee

__all__ = ["AHEAD", "MODULUS_RANGE", "REFUSED", "SETUP", "STOP", "SUM_RESULTS", "NextSetup",
           "Refused", "SecAggGuard", "SecAggPins", "SumRound", "ahead_record", "cen_server_app",
           "fewest_at_threshold", "fewest_revealed", "node_payload", "payload_bits",
           "payload_sum", "read_ahead", "read_fit", "secagg_node", "secure_sum",
           "secure_sum_round", "serve_cen", "sum_reply", "wait_for", "write_atomic"]

_log = logging.getLogger(__name__)
MODULUS_RANGE = 1 << 32  # SecAgg+'s modulus M (Flower's default and largest)


def payload_bits(nodes: int) -> int:
    """The largest b with nodes·2^b < M (SecAgg+ also sums the nodes' weights T modulo M,
    and a total of M would read as 0): the agents' modulus T = 2^b (the mechanism's own
    `secure_sum_bits`, which a local run simulates)."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    return secure_sum_bits(nodes)


def node_payload(total: np.ndarray, bits: int) -> np.ndarray:
    """A node's integer vector y ∈ [0, 2^b) as the floats y − 2^(b−1) it hands to SecAgg+."""
    y = np.asarray(total, np.int64)
    if y.min(initial=0) < 0 or y.max(initial=0) >= 1 << bits:
        raise ValueError(f"a node's vector must lie in [0, 2^{bits})")
    return y.astype(np.float64) - float(1 << (bits - 1))


def payload_sum(mean: np.ndarray, nodes: int, bits: int) -> np.ndarray:
    """Σ y mod 2^b from what SecAgg+ returns for `nodes` surviving nodes: the dequantized mean
    v = Σ y / n − 2^(b−1) (module doc)."""
    v = np.asarray(mean, np.float64)
    total = np.rint(nodes * (v + float(1 << (bits - 1))))
    if not np.all(np.isfinite(total)) or total.min(initial=0) < 0 \
            or total.max(initial=0) >= nodes * float(1 << bits):
        raise ValueError("the secure sum is not a sum of node vectors in range")
    return np.mod(total.astype(np.int64), 1 << bits)


# --- the agent side's reply ------------------------------------------------------------------
def read_fit(content: RecordDict) -> tuple[list[np.ndarray], dict[str, Any]]:
    """What the server asks of a node in a round: its broadcast arrays and config."""
    fitins = compat.recorddict_to_fitins(content, keep_input=True)
    return parameters_to_ndarrays(fitins.parameters), dict(fitins.config)


def sum_reply(payload: np.ndarray) -> RecordDict:
    """A node's answer to the collect stage: its payload as the FitRes that secaggplus_mod
    masks (num_examples = 1, so SecAgg+'s weight is exactly 1; no metrics)."""
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([payload]), 1, {})
    return compat.fitres_to_recorddict(res, keep_input=True)


REFUSED = 0x5052  # the Error code of a node's refusal (the reason says why)
Handler = Callable[[Message, Context], Message]


@dataclass(frozen=True)
class SecAggPins:
    """What a node fixes before any SecAgg+ run, from its own config (never the server's
    word): at most `nodes` SuperNodes take part, a run reveals a sum only with >= `threshold`
    of them (a strict majority of `nodes`, and enough that the fewest agents they can hold are
    the honest shares its ε counts), and SecAgg+ carries its `bits`-bit integers exactly
    (module doc)."""

    nodes: int
    threshold: int
    bits: int

    def __post_init__(self) -> None:
        if not self.nodes // 2 < self.threshold <= self.nodes:
            raise ValueError(f"a pinned threshold must be a strict majority of the "
                             f"{self.nodes} SuperNodes, got {self.threshold}")

    @classmethod
    def of(cls, agents_per_node: list[int], min_honest: int, bits: int) -> SecAggPins:
        """The smallest threshold that is a strict majority of the nodes and whose fewest
        surviving agents hold `min_honest` noise shares (ValueError if none does)."""
        n = len(agents_per_node)
        for t in range(n // 2 + 1, n + 1):
            if fewest_at_threshold(agents_per_node, fewest_revealed(n, t)) >= min_honest:
                return cls(n, t, bits)
        raise ValueError(f"no threshold of {n} SuperNodes holds {min_honest} agents")

    def setup(self) -> dict[str, Any]:
        """The SETUP values SecAgg+ must use to carry the integers exactly (module doc)."""
        return {Key.CLIPPING_RANGE: float(1 << (self.bits - 1)),
                Key.TARGET_RANGE: 1 << self.bits, Key.MOD_RANGE: MODULUS_RANGE,
                Key.MAX_WEIGHT: 1.0}


class Refused(ValueError):
    """A request a node will not answer (the reason says which rule it breaks)."""


class SecAggGuard:
    """A SuperNode's task handler: Flower's SecAgg+ client mod around `release` (the node's
    answer to the collect stage, `sum_reply`), answering only what an honest SecAgg+ server
    asks. Flower's mod trusts the server's word; this wrapper checks, before the mod sees a
    message (docs/flower.md, "A server that deviates"):

    - only SecAgg+ train messages: the mod hands any other message type to `release` unmasked;
    - SETUP: the threshold is >= the pinned one; at most the pinned number of nodes, every
      one a neighbour of every other (shares = nodes); the ranges that carry the integers;
    - SHARE_KEYS: the peers are at most the nodes of SETUP and at least its threshold, the
      node among them;
    - COLLECT: a round whose message this node never handed to a SecAgg+ run (a node adds
      to at most one secure sum per round: two sums over sets that differ by one node give
      that node's message), from key shares of its peers only;
    - UNMASK: the active and dead lists are disjoint, hold no node twice, name only nodes
      whose shares it holds (itself and the collect stage's sources), the node itself active,
      and at least the pinned threshold active (the revealed sum holds the shares its ε
      counts). One request naming a node both active and dead would hand the server both of
      that node's secrets; Flower's `_unmask` does not check.

    With a fleet roster (`identity`, this node's key, and `roster`, the identities every node
    was handed by whoever deploys the agents; privrl.federation.flower_roster), the node also
    signs its SETUP keys, and at SHARE_KEYS accepts only peers whose keys a distinct roster
    identity signed for this run, round and node id: a server can add no SuperNode of its own
    and substitute no honest node's key, so every peer is a genuine node.

    Anything else is refused: the node answers with a Flower error, drops out of that run
    (it answers the run's later stages only after a new SETUP), and the refusal is kept in
    `refusals` (and logged). `round_of(message)`: the round a collect request is for.
    `prepare(arrays, config)`: called with the fit instructions riding a SHARE_KEYS request
    it accepted (`read_ahead`), once its reply is made; the node may start computing its
    payload, which leaves only as the collect stage's answer, after every check above."""

    def __init__(self, release: Handler, pins: SecAggPins,
                 round_of: Callable[[Message], int] | None = None,
                 identity: NodeIdentity | None = None, roster: Roster | None = None,
                 prepare: Callable[[list[np.ndarray], dict[str, Any]], None] | None = None
                 ) -> None:
        if (identity is None) != (roster is None):
            raise ValueError("a roster check needs both the node's identity and the roster")
        self.release, self.pins, self.prepare = release, pins, prepare
        self.identity, self.roster = identity, roster
        self.round_of = round_of or (lambda m: read_fit(m.content)[1]["round"])
        self.summed: set[int] = set()  # rounds whose message went into a SecAgg+ run
        self.refusals: list[dict[str, Any]] = []
        self._run: dict[str, Any] | None = None  # the run in progress, as this node saw it

    def __call__(self, message: Message, context: Context) -> Message:
        stage = self._stage_of(message)  # now: Flower's mod consumes the request's configs
        try:
            self._check(message)
            reply = secaggplus_mod(message, context, self._collect)
            if self.identity is not None and self._run is not None \
                    and self._run["stage"] == Stage.SETUP:
                self._seal(reply)
            if self.prepare is not None and self._run is not None \
                    and self._run["stage"] == Stage.SHARE_KEYS \
                    and (ahead := read_ahead(message.content)) is not None:
                self.prepare(*ahead)
        except Exception as e:  # whatever fails (a forged ciphertext, a spent budget): a
            # refusal, and nothing else leaves
            reason = f"{type(e).__name__}: {e}"
            self.refusals.append({"stage": stage, "reason": reason})
            _log.warning("SecAgg+ request refused: %s", reason)
            self._run = None
            return Message(Error(code=REFUSED, reason=reason), reply_to=message)
        if self._run is not None and self._run["stage"] == Stage.UNMASK:
            self._run = None  # the run is over: only a new SETUP starts another
        return reply

    @staticmethod
    def _stage_of(message: Message) -> str:
        try:
            return str(message.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE])
        except (KeyError, TypeError):
            return "?"

    def _check(self, message: Message) -> None:
        if message.metadata.message_type != MessageType.TRAIN:
            raise Refused(f"a {message.metadata.message_type!r} message: this node answers "
                          "only SecAgg+ train messages")
        configs = message.content.config_records.get(RECORD_KEY_CONFIGS)
        if configs is None or not isinstance(configs.get(Key.STAGE), str):
            raise Refused("not a SecAgg+ message")
        stage, run = configs[Key.STAGE], self._run
        if stage == Stage.SETUP:
            self._run = None
            self._run = self._setup(configs, int(message.metadata.dst_node_id))
            self._run.update(run_id=int(message.metadata.run_id),
                             group=str(message.metadata.group_id))
            return
        order = Stage.all()
        if run is None or stage not in order or order.index(stage) != \
                order.index(run["stage"]) + 1:
            raise Refused(f"stage {stage!r} out of order")
        if stage == Stage.SHARE_KEYS:
            peers = {_node_id(k) for k in configs if k != Key.STAGE}
            if not (run["threshold"] <= len(peers) <= run["sample"] and run["me"] in peers):
                raise Refused(f"{len(peers)} peers, not {run['threshold']}..{run['sample']} "
                              "with this node among them")
            if self.roster is not None:
                self._unseal(configs, run)
            run["peers"] = peers
        elif stage == Stage.COLLECT_MASKED_VECTORS:
            t = self.round_of(message)
            if isinstance(t, bool) or not isinstance(t, int):
                raise Refused(f"round {t!r} is not an integer")
            if t in self.summed:
                raise Refused(f"round {t}'s message already went into a secure sum (a node "
                              "adds to one per round)")
            sources = _ints(configs.get(Key.SOURCE_LIST), "sources")
            if not set(sources) <= run["peers"] - {run["me"]}:
                raise Refused("key shares from nodes that are not this run's peers")
            run["round"], run["holds"] = t, set(sources) | {run["me"]}
        elif stage == Stage.UNMASK:
            active = _ints(configs.get(Key.ACTIVE_NODE_ID_LIST), "active nodes")
            dead = _ints(configs.get(Key.DEAD_NODE_ID_LIST), "dead nodes")
            if set(active) & set(dead):
                raise Refused(f"nodes {sorted(set(active) & set(dead))} listed both active "
                              "and dead (their private mask and key together unmask them)")
            if not (set(active) | set(dead)) <= run["holds"]:
                raise Refused("shares asked of nodes whose shares this node does not hold")
            if run["me"] not in active:
                raise Refused("this node listed as dead after it sent its masked vector")
            if len(active) < max(self.pins.threshold, run["threshold"]):
                raise Refused(f"{len(active)} active nodes: the sum would reveal fewer than "
                              f"the threshold {self.pins.threshold} this node's ε counts")
        run["stage"] = stage

    def _setup(self, configs: Any, me: int) -> dict[str, Any]:
        pins = self.pins
        sample, shares, threshold = (configs.get(k) for k in (
            Key.SAMPLE_NUMBER, Key.SHARE_NUMBER, Key.THRESHOLD))
        if not all(type(v) is int for v in (sample, shares, threshold)):
            raise Refused("SETUP's node counts are not integers")
        if threshold < pins.threshold:
            raise Refused(f"threshold {threshold} below the {pins.threshold} this node pinned")
        if not threshold <= sample <= pins.nodes or shares != sample:
            raise Refused(f"{sample} nodes with {shares} shares each: SecAgg+ here runs over "
                          f"{pins.threshold}..{pins.nodes} nodes, each a neighbour of all")
        for k, v in pins.setup().items():
            if configs.get(k) != v or type(configs.get(k)) is not type(v):
                raise Refused(f"SETUP's {k} is {configs.get(k)!r}, not {v!r}")
        return {"stage": Stage.SETUP, "me": me, "sample": sample, "threshold": threshold}

    def _seal(self, reply: Message) -> None:
        """SETUP's reply with this node's pk2 sealed: signed with its identity for the run,
        round and node id (flower_roster.seal)."""
        assert self.identity is not None and self._run is not None
        keys = reply.content.config_records[RECORD_KEY_CONFIGS]
        keys[Key.PUBLIC_KEY_2] = seal(self.identity, self._run["run_id"], self._run["group"],
                                      self._run["me"], keys[Key.PUBLIC_KEY_1],
                                      keys[Key.PUBLIC_KEY_2])

    def _unseal(self, configs: Any, run: dict[str, Any]) -> None:
        """SHARE_KEYS' peers checked against the roster (flower_roster.unseal), their seals
        removed before Flower's mod reads the keys; Refused if any is not a roster node's."""
        assert self.roster is not None
        keys: dict[int, tuple[bytes, bytes]] = {}
        for k, v in configs.items():
            if k == Key.STAGE:
                continue
            if not (isinstance(v, list) and len(v) == 2 and all(type(b) is bytes for b in v)):
                raise Refused(f"node {k}'s keys are not two byte strings")
            keys[_node_id(k)] = (v[0], v[1])
        try:
            plain = unseal(self.roster, run["run_id"], run["group"], keys)
        except RosterError as e:
            raise Refused(f"a peer that is not on the roster: {e}") from None
        for nid, (pk1, pk2) in plain.items():
            configs[str(nid)] = [pk1, pk2]

    def _collect(self, message: Message, context: Context) -> Message:
        assert self._run is not None and "round" in self._run
        reply = self.release(message, context)
        self.summed.add(self._run["round"])  # released into this run: never into another
        return reply


def _node_id(key: str) -> int:
    if not key.isdigit():
        raise Refused(f"{key!r} is not a node id")
    return int(key)


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or any(type(v) is not int for v in value) \
            or len(set(value)) != len(value):
        raise Refused(f"the {what} are not a list of distinct node ids")
    return value


def secagg_node(release: Handler, pins: SecAggPins, identity: NodeIdentity | None = None,
                roster: Roster | None = None,
                prepare: Callable[[list[np.ndarray], dict[str, Any]], None] | None = None
                ) -> SecAggGuard:
    """A SuperNode's task handler: `SecAggGuard` around `release` (checking its peers against
    `roster` when given, signing its keys with `identity`; `prepare`: as the guard's)."""
    return SecAggGuard(release, pins, identity=identity, roster=roster, prepare=prepare)


# --- the server side -------------------------------------------------------------------------
class _Node(ClientProxy):
    """A SuperNode as the legacy Strategy API names it; only its id is used."""

    def __init__(self, node_id: int) -> None:
        super().__init__(str(node_id))
        self.node_id = node_id

    def get_properties(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError

    def get_parameters(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError

    def fit(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError

    def evaluate(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError

    def reconnect(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError


class _SumStrategy(Strategy):
    """Asks every node of the round, and keeps what SecAgg+ hands to `aggregate_fit`: the
    dequantized mean of the surviving nodes' vectors and which nodes those are."""

    def __init__(self, nodes: list[int], config: dict[str, Any]) -> None:
        self.nodes, self.config = nodes, config
        self.mean: np.ndarray | None = None
        self.survivors: list[int] = []

    def initialize_parameters(self, client_manager: Any) -> Parameters | None:
        return None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any
                      ) -> list[tuple[ClientProxy, FitIns]]:
        return [(_Node(n), FitIns(parameters, dict(self.config))) for n in self.nodes]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[Any]) -> tuple[Parameters | None, dict[str, Any]]:
        if results:
            # SecAgg+ sets every result's parameters to the one aggregate
            (self.mean,) = parameters_to_ndarrays(results[0][1].parameters)
            self.survivors = sorted(int(p.node_id) for p, _ in results)
        return None, {}

    def configure_evaluate(self, *a: Any, **k: Any) -> list[Any]:
        return []

    def aggregate_evaluate(self, *a: Any, **k: Any) -> tuple[None, dict[str, Any]]:
        return None, {}

    def evaluate(self, *a: Any, **k: Any) -> None:
        return None


@dataclass(frozen=True)
class SumRound:
    """What one secure-sum round revealed: Σ y mod 2^b over the surviving nodes (None if the
    protocol halted: fewer than the threshold survived), and which nodes those are."""

    total: np.ndarray | None
    survivors: list[int]
    # the nodes that answered each SecAgg+ stage without an error, and each stage's (push,
    # last reply) times, time.monotonic (`_Watched`)
    answered: dict[str, set[int]] = field(default_factory=dict)
    stages: dict[str, tuple[float, float]] = field(default_factory=dict)
    arrivals: dict[str, dict[int, float]] = field(default_factory=dict)  # each reply's pull


AHEAD = "privrl.ahead"  # the round's fit instructions, riding its SHARE_KEYS requests


def ahead_record(broadcast: list[np.ndarray], config: dict[str, Any]) -> ConfigRecord:
    """What rides a run's SHARE_KEYS requests: the arrays and config its collect stage will
    carry (`read_ahead`), so that a node can compute its message while the keys travel."""
    return ConfigRecord({**config, AHEAD: [ndarray_to_bytes(np.asarray(a)) for a in broadcast]})


def read_ahead(content: RecordDict) -> tuple[list[np.ndarray], dict[str, Any]] | None:
    """The (arrays, config) riding a request (`ahead_record`); None if none does."""
    record = content.config_records.get(AHEAD)
    if record is None:
        return None
    config = dict(record)
    arrays = config.pop(AHEAD, None)
    if not isinstance(arrays, list) or not all(type(b) is bytes for b in arrays):
        raise Refused("the fit instructions riding the request are malformed")
    try:  # .npy only (what `ahead_record` writes): np.load would also open a zip archive
        # (an NpzFile, not an array) and raise EOFError or BadZipFile on some bytes
        return [np.lib.format.read_array(io.BytesIO(b), allow_pickle=False)
                for b in arrays], config
    except ValueError as e:
        raise Refused(f"the arrays riding the request are malformed: {e}") from None


class NextSetup:
    """The next round's SETUP requests, pushed right behind this round's UNMASK requests.

    A SuperNode asks the SuperLink for its next message as soon as it has pushed a reply, and
    sleeps flwr 1.42's fixed 3 s when none is waiting. The ServerApp can push a stage only
    once every node answered the one before, so each stage costs a node one such sleep; but a
    run's SETUP depends on nothing the previous run revealed (only on the nodes, the threshold
    and the ranges), so it can wait at the SuperLink behind the previous run's unmask request
    (flwr's SuperLink hands a node its messages in the order they were created). A node then
    answers it right after its unmask reply, and a round costs three sleeps, not four. The
    node checks it as any SETUP (`SecAggGuard`): nothing about what it may reveal changes.

    `_Watched` pushes them (`push`) when this run's nodes all answered its first two stages
    (the nodes the next round asks) and the next round's SETUP adopts them (`adopt`) when it
    asks the same nodes for the same SETUP; otherwise it pushes its own, as without this."""

    def __init__(self) -> None:
        self.pending: tuple[str, dict[str, Any], dict[int, str]] | None = None

    def push(self, grid: Grid, group: str, setup: dict[str, Any], nodes: list[int]) -> None:
        messages = [Message(RecordDict({RECORD_KEY_CONFIGS: ConfigRecord(dict(setup))}),
                            dst_node_id=n, message_type=MessageType.TRAIN, group_id=group)
                    for n in nodes]
        ids = list(grid.push_messages(messages))
        self.pending = (group, dict(setup), dict(zip(nodes, ids, strict=True)))

    def adopt(self, messages: list[Message]) -> list[str] | None:
        """The ids of the requests pushed ahead, if `messages` are those requests (the same
        round, nodes and SETUP); None (and they are dropped) otherwise."""
        pending, self.pending = self.pending, None
        if pending is None:
            return None
        group, setup, ids = pending
        if sorted(m.metadata.dst_node_id for m in messages) != sorted(ids) or any(
                m.metadata.group_id != group
                or dict(m.content.config_records[RECORD_KEY_CONFIGS]) != setup
                for m in messages):
            return None
        return list(ids.values())


class _Watched(Grid):
    """A grid that notes which nodes answered each SecAgg+ stage without an error, and when
    the stage's requests left and its last reply came (time.monotonic); `ahead` rides every
    SHARE_KEYS request (`ahead_record`); with `next_setup`, the next round's SETUP requests
    follow this run's UNMASK requests (`NextSetup`), and this run's SETUP adopts those pushed
    by the previous run."""

    def __init__(self, grid: Grid, ahead: ConfigRecord | None = None,
                 next_setup: NextSetup | None = None, round_: int = 0) -> None:
        self.grid, self.ahead, self.next_setup, self.round = grid, ahead, next_setup, round_
        self.answered: dict[str, set[int]] = {}
        self.times: dict[str, tuple[float, float]] = {}
        self.arrivals: dict[str, dict[int, float]] = {}  # each node's reply, by stage
        self.setup: tuple[dict[str, Any], list[int]] | None = None  # this run's SETUP, nodes

    def set_run(self, run: Any) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        return self.grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self.grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Any:
        return self.grid.get_node_ids()

    def push_messages(self, messages: Any) -> Any:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Any) -> Any:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> Any:
        messages = list(messages)
        stage = str(messages[0].content.config_records[RECORD_KEY_CONFIGS].get(Key.STAGE)
                    if messages else "")
        if stage == Stage.SHARE_KEYS and self.ahead is not None:
            for m in messages:
                m.content.config_records[AHEAD] = self.ahead
        start = time.monotonic()
        pushed = None
        if stage == Stage.SETUP and messages:
            self.setup = (dict(messages[0].content.config_records[RECORD_KEY_CONFIGS]),
                          sorted(m.metadata.dst_node_id for m in messages))
            if self.next_setup is not None:
                pushed = self.next_setup.adopt(messages)
        if stage == Stage.UNMASK and self.next_setup is not None and self.setup is not None:
            pushed = list(self.grid.push_messages(messages))
            setup, nodes = self.setup
            if all(n in self.answered.get(s, ()) for s in (Stage.SETUP, Stage.SHARE_KEYS)
                   for n in nodes):  # the next round asks these same nodes
                self.next_setup.push(self.grid, str(self.round + 1), setup, nodes)
        # pull every 0.1 s, not at Flower's 3 s polls
        arrivals: dict[int, float] = {}
        replies = send_and_receive(self.grid, messages, timeout, pushed=pushed,
                                   arrivals=arrivals)
        self.times[stage] = (start, time.monotonic())
        self.arrivals[stage] = arrivals
        self.answered[stage] = {r.metadata.src_node_id for r in replies if not r.has_error()}
        return replies


class _SecAggPlus(SecAggPlusWorkflow):
    """Flower's SecAgg+ workflow, asking at unmasking only for what the survivors hold.

    Flower 1.42 lists as dead every node sampled at SETUP that sent no masked vector, and
    asks every survivor for its share of each one's key. A node that stopped before handing
    out its key shares (SHARE_KEYS) left no share with anyone and no pairwise mask in anyone's
    vector, so the request cannot be answered and the whole run halts. Here, once the key
    shares are exchanged, the nodes of the run are those that handed theirs out: a node lost
    before then is no dropout to unmask, and the run completes with the others (a node lost
    after it is unmasked as before)."""

    def share_keys_stage(self, grid: Grid, context: LegacyContext, state: Any) -> bool:
        ok = super().share_keys_stage(grid, context, state)
        kept = set(state.active_node_ids)
        state.sampled_node_ids = kept
        state.nid_to_neighbours = {n: nb & kept for n, nb in state.nid_to_neighbours.items()
                                   if n in kept}
        return ok


def secure_sum_round(grid: Grid, context: Context, nodes: list[int], broadcast: list[np.ndarray],
                     config: dict[str, Any], round_: int, bits: int, threshold: int,
                     timeout_s: float | None, next_setup: NextSetup | None = None) -> SumRound:
    """One SecAgg+ run over `nodes` (every node a neighbour of every other: SecAgg+ on the
    complete graph): each receives `broadcast` and `config`, answers the collect stage with
    its payload (`sum_reply`), and the sum is revealed only if >= `threshold` nodes survive;
    `timeout_s` bounds each stage's wait for replies (a node silent past it is dropped).
    `broadcast` and `config` also ride the key exchange (`ahead_record`): a node may compute
    its payload while its key shares travel, and sends it only when the collect stage asks.
    `next_setup`: round `round_` + 1's SETUP follows this run's UNMASK (`NextSetup`)."""
    n = len(nodes)
    if not 2 <= threshold <= n:
        raise ValueError(f"SecAgg+ over {n} nodes needs a threshold in [2, {n}], got "
                         f"{threshold}")
    if n * (1 << bits) >= MODULUS_RANGE:
        raise ValueError(f"{n} nodes × 2^{bits} exceed SecAgg+'s modulus 2^32")
    strategy = _SumStrategy(nodes, config)
    legacy = LegacyContext(context, strategy=strategy)
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
        {WorkflowKey.CURRENT_ROUND: int(round_)})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters(broadcast), keep_input=True)
    workflow = _SecAggPlus(
        num_shares=1.0, reconstruction_threshold=threshold, max_weight=1.0,
        clipping_range=float(1 << (bits - 1)), quantization_range=1 << bits,
        modulus_range=MODULUS_RANGE, timeout=timeout_s)
    watched = _Watched(grid, ahead_record(broadcast, config), next_setup, round_)
    workflow(watched, legacy)
    if strategy.mean is None:
        return SumRound(None, [], watched.answered, watched.times, watched.arrivals)
    return SumRound(payload_sum(strategy.mean, len(strategy.survivors), bits),
                    strategy.survivors, watched.answered, watched.times, watched.arrivals)


def secure_sum(grid: Grid, context: Context, nodes: list[int], broadcast: list[np.ndarray],
               config: dict[str, Any], round_: int, bits: int, threshold: int,
               timeout_s: float | None, attempts: int = 3, next_setup: NextSetup | None = None
               ) -> tuple[SumRound, int, list[int]]:
    """`secure_sum_round`, run again without the nodes that stopped answering while it halts
    before any node sent its masked vector (at most `attempts` runs). A run that took a
    node's message is never repeated: the node refuses to add its message of a round to a
    second sum (`SecAggGuard`), since two sums over sets that differ by one node give that
    node's message. Nodes lost before they hand out their key shares no longer halt a run
    (`_SecAggPlus`). Returns the round, the runs used, and the nodes that answered the last
    run's first two stages (ask only those next round). `next_setup`: as
    `secure_sum_round`'s."""
    alive = list(nodes)
    out = SumRound(None, [])
    for attempt in range(1, attempts + 1):
        out = secure_sum_round(grid, context, alive, broadcast, config, round_, bits,
                               threshold, timeout_s, next_setup)
        early = [out.answered.get(s) for s in (Stage.SETUP, Stage.SHARE_KEYS)]
        alive = [n for n in alive if all(a is None or n in a for a in early)]
        if out.total is not None or len(alive) < threshold \
                or out.answered.get(Stage.COLLECT_MASKED_VECTORS):
            return out, attempt, alive
    return out, attempts, alive


# --- FedPG-Cen's ServerApp: the secure sum of every round --------------------------------------
# The ServerApp and the server's learner (privrl.systems.fedpg.flower, in the process that
# started the run: the server operator's trust domain) exchange files in one directory:
#   SETUP         written once by whoever starts the run: the mechanism's parameters, the
#                 nodes, each node's agent count, the threshold and each stage's timeout;
#   ask-<t>.npz   the learner: θ₀ᵗ and B_t of round t (or STOP: no more rounds);
#   sum-<t>.npz   the ServerApp: μ_t = (revealed sum)/(agents in it), or no μ when the
#                 protocol halted, with the surviving slots.
# Each file is written whole and renamed into place, so the reader never sees half of one.
SETUP = "secure-sum.json"
STOP = "stop"
SUM_RESULTS = "flower.json"


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` then rename tmp to `path` (tmp keeps the suffix: np.savez adds one)."""
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    write(tmp)
    os.replace(tmp, path)


def wait_for(paths: list[Path], wait_s: float, poll_s: float = 0.05) -> Path:
    """The first of `paths` that exists; TimeoutError after wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        for p in paths:
            if p.exists():
                return p
        if time.monotonic() > deadline:
            raise TimeoutError(f"none of {[p.name for p in paths]} appeared in {wait_s:g} s")
        time.sleep(poll_s)


def surviving_agents(agents_per_node: list[int], slots: list[int]) -> int:
    return sum(agents_per_node[s] for s in slots)


def fewest_at_threshold(agents_per_node: list[int], threshold: int) -> int:
    """The fewest agents that `threshold` surviving nodes can hold."""
    return sum(sorted(agents_per_node)[:threshold])


def fewest_revealed(nodes: int, threshold: int) -> int:
    """The fewest SuperNodes whose messages a sum revealed by one SecAgg+ run can hold, when
    the server deviates but every node in the run is a genuine one (`SecAggGuard` checks
    each node answers). The server may show each node other active and dead lists (SecAgg+
    in Flower has no round in which nodes compare them). It unmasks a sum over a set S by
    reconstructing, for each node outside S, its key (from >= t nodes listing it dead). A
    node lists itself and >= t nodes active, from the <= n of the run, so at most n − t
    dead: (n − |S|)·t <= n·(n − t), |S| >= n(2t − n)/t, smallest at n = N. At t = N − 1
    (the default) and t = N this is t: deviating, the server reveals no smaller sum than
    by dropping nodes down to the threshold."""
    if not nodes // 2 < threshold <= nodes:
        raise ValueError(f"the threshold must be a strict majority of the {nodes} nodes, "
                         f"got {threshold}")
    return -(-nodes * (2 * threshold - nodes) // threshold)


RoundFn = Callable[[int, np.ndarray, int], tuple[np.ndarray, dict[str, Any]]]


def serve_cen(grid: Grid, context: Context, directory: Path, wait_s: float = 60.0,
              learner_wait_s: float = 3600.0) -> dict[str, Any]:
    """FedPG-Cen's aggregator: for each round the learner asks for, μ_t from the agents with
    θ₀ᵗ broadcast, back to the learner: the secure sum of the distributed discrete Gaussian
    (`_sum_rounds`), or under a local mechanism the mean of the agents' checked Reports
    (`_report_rounds`; SETUP says which). Returns (and writes to SUM_RESULTS) what each
    round revealed about who took part."""
    setup = json.loads((directory / SETUP).read_text())
    reports = setup.get("reports")
    # each refuses a setup it cannot serve before anything is asked
    rounds_of = (_sum_rounds(grid, context, setup) if reports is None
                 else _report_rounds(grid, reports))
    ids = _wait_for_nodes(grid, len(setup["agents_per_node"]) if reports is None
                          else int(reports["nodes"]), wait_s)
    one_round = rounds_of(ids)
    rounds: list[dict[str, Any]] = []
    t = 0
    while True:
        got = wait_for([directory / f"ask-{t}.npz", directory / STOP], learner_wait_s)
        if got.name == STOP:
            break
        with np.load(got, allow_pickle=False) as ask:
            theta, batch = np.asarray(ask["theta"], np.float32), int(ask["batch"])
        mu, out = one_round(t, theta, batch)
        write_atomic(directory / f"sum-{t}.npz",
                     lambda p, mu=mu, out=out: np.savez(p, mu=mu, info=json.dumps(out)))
        rounds.append(out)
        t += 1
    results = {"nodes": ids, "rounds": rounds}
    (directory / SUM_RESULTS).write_text(json.dumps(results))
    return results


def _sum_rounds(grid: Grid, context: Context, setup: dict[str, Any]
                ) -> Callable[[list[int]], RoundFn]:
    """distributed-gaussian: round t is one secure sum over the nodes that answered last
    round's key exchange; μ_t = (revealed sum) / (agents in it). Refuses at once (ValueError)
    a threshold that could reveal a sum of fewer shares than the ε statement counts on."""
    from privrl.privacy.discrete_sum import DiscreteGaussianSum

    mech = DiscreteGaussianSum(**setup["mechanism"])
    per_node = [int(a) for a in setup["agents_per_node"]]
    threshold, timeout = int(setup["threshold"]), setup["stage_timeout"]
    mech.check_threshold(fewest_at_threshold(per_node, fewest_revealed(len(per_node),
                                                                       threshold)))
    ids: list[int] = []
    alive: list[int] = []  # the nodes that answered last round's key exchange
    next_setup = NextSetup()  # each round's SETUP follows the last round's UNMASK

    def one_round(t: int, theta: np.ndarray, batch: int) -> tuple[np.ndarray, dict[str, Any]]:
        nonlocal alive
        start = time.monotonic()
        res, tries, alive = secure_sum(grid, context, alive, [theta],
                                       {"round": t, "batch": batch}, t, mech.bits, threshold,
                                       timeout, next_setup=next_setup)
        slots = sorted(ids.index(n) for n in res.survivors)
        count = surviving_agents(per_node, slots)
        out: dict[str, Any] = {"round": t, "surviving_nodes": slots, "agents_in_sum": count,
                               "secagg_runs": tries,
                               # where the round's time went: the last run's stages, from
                               # their requests' push to their last reply, s after its start
                               "stage_seconds": {k: [round(a - start, 3), round(b - start, 3)]
                                                 for k, (a, b) in res.stages.items()},
                               # and when each node's (slot's) reply came, s after the
                               # round's start, and which answered without an error
                               "stage_replies": {k: {str(ids.index(n)): round(a - start, 3)
                                                     for n, a in v.items() if n in ids}
                                                 for k, v in res.arrivals.items()},
                               "stage_answers": {k: sorted(ids.index(n) for n in v if n in ids)
                                                 for k, v in res.answered.items()}}
        if res.total is None:
            out["halted"] = "fewer than the threshold of nodes survived: nothing revealed"
            return np.zeros(0, np.float32), out
        return np.asarray(mech.decode(res.total).value, np.float32) / np.float32(count), out

    def on(nodes: list[int]) -> RoundFn:
        ids[:], alive[:] = nodes, nodes
        return one_round

    return on


def _report_rounds(grid: Grid, setup: dict[str, Any]) -> Callable[[list[int]], RoundFn]:
    """A local mechanism: round t asks every agent a for its Report (agent a, index t) from
    θ₀ᵗ on the node of slot a mod N, checks each reply as the aggregator service does
    (`collect_reports`) and hands back μ_t, the mean of the accepted Reports
    (privrl.federation.star.average_reports, the local runner's average)."""
    agents, dim = int(setup["agents"]), int(setup["dim"])
    guarantee = Guarantee.from_state(setup["guarantee"])
    timeout = float(setup["reply_timeout"])
    accepted: set[tuple[int, int]] = set()
    ids: list[int] = []

    def one_round(t: int, theta: np.ndarray, batch: int) -> tuple[np.ndarray, dict[str, Any]]:
        del batch  # each agent draws B_t from the run's seed itself
        good, refused = collect_reports(grid, ids, theta, t, agents, dim, guarantee, accepted,
                                        timeout)
        out: dict[str, Any] = {"round": t, "agents_in_mean": len(good),
                               "accepted_agents": [s.agent_id for s in good],
                               "refused": refused}
        if not good:
            out["halted"] = "no agent's report was accepted: θ stays"
            return np.zeros(0, np.float32), out
        batch_of = jax.tree_util.tree_map(lambda *v: jnp.stack(v), *[s.report for s in good])
        return np.asarray(average_reports(batch_of), np.float32), out

    def on(nodes: list[int]) -> RoundFn:
        ids[:] = nodes
        return one_round

    return on


def collect_reports(grid: Grid, ids: list[int], theta: np.ndarray, round_: int, agents: int,
                    dim: int, guarantee: Any, accepted: set[tuple[int, int]],
                    timeout_s: float | None) -> tuple[list[Any], list[dict[str, Any]]]:
    """Round `round_`'s Reports: agent a (on node ids[a mod N]) is asked for its submission
    (a, round_) from θ; a reply is used only if it is a well-formed Submission
    (privrl.federation.flower.read_submission), the one asked for, and passes the aggregator
    service's checks (`submission_problem`: a finite float32 value of length `dim`, the run's
    mechanism's guarantee, an agent of the run, a first report for its (agent, index), which
    `accepted` then records). Returns the accepted Submissions in agent order and the
    refusals ({"agent", "reason"}): a refusal costs the round that agent's report only."""
    def check(report: Any) -> None:
        check_report(report, dim)

    asks = [(a, round_) for a in range(agents)]
    good, refused = [], []
    for (a, _), (sub, _, reason) in zip(asks, ask_for_submissions(grid, ids, theta, asks, dim,
                                                                  timeout_s), strict=True):
        if reason is None:
            reason = submission_problem(sub, agents, accepted, check, guarantee)
        if reason is None:
            accepted.add((a, round_))
            good.append(sub)
        else:
            refused.append({"agent": a, "reason": reason})
    return good, refused


cen_server_app = ServerApp()


@cen_server_app.main()
def _cen_main(grid: Grid, context: Context) -> None:
    directory = Path(str(context.run_config["aggregator-dir"]))
    try:
        serve_cen(grid, context, directory)
    except Exception as e:  # whoever waits for SUM_RESULTS learns why there are none
        (directory / SUM_RESULTS).write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        raise
