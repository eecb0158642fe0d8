"""One push-sum node as a message-passing peer: what FedPG-Dec runs when its nodes are separate
processes (the Ray runtime) instead of rows of one vectorized state (privrl.federation.pushsum).

A node holds its numerator x_k and weight w_k. In round t it

1. applies its own released update (a `Report`): x_k ← x_k + w_k·Δ̃_k (a step on z = x / w);
2. splits (x_k, w_k) along column k of the round's column-stochastic mixing matrix P (from the
   public `Topology`, which every node knows): the share
   p_ik·(x_k, w_k) goes to out-neighbour i as a `GossipMessage`, p_kk·(x_k, w_k) stays;
3. once it holds the round-t share of every in-neighbour j (P[k, j] > 0), sets
   x_k ← Σ_j p_kj x_j and w_k ← Σ_j p_kj w_j, summed in sender order.

That is exactly `push_sum_mix(push_sum_apply(...))` of the vectorized runner, row by row. Every
message is post-processing of released Reports, so gossip spends no privacy.

Reliability: a node accepts each (round, sender) at most once; a duplicate (a retry, a resend
after a crash), a message from a node that is not an in-neighbour this round, for a finished
round, or with a wrong shape, a non-finite value or a weight share ≤ 0 is rejected with its
reason and leaves the node bit-identical. The node keeps its last round's outgoing shares so a
peer that lost its inbox in a crash can ask for them again (`outgoing`). `snapshot` and
`from_snapshot` give the state as plain values and arrays for atomic checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from privrl.federation.topology import Topology
from privrl.privacy.report import Report


class GossipMessage(NamedTuple):
    """A push-sum share from `sender` to `receiver` for `round`."""

    round: int
    sender: int
    receiver: int
    x: np.ndarray  # p_ik · x_k, shape (d,)
    w: float  # p_ik · w_k


@dataclass
class GossipVerdict:
    accepted: bool
    reason: str | None = None


@dataclass
class PushSumNode:
    """Node `node` of a push-sum network; `x`, `w` as in privrl.federation.pushsum."""

    node: int
    topology: Topology
    x: np.ndarray
    w: float = 1.0
    round: int = 0  # the round being played; rounds < round are mixed
    applied: bool = False  # this round's own update has been applied
    inbox: dict[int, tuple[np.ndarray, float]] = field(default_factory=dict)
    last_outgoing: dict[int, GossipMessage] = field(default_factory=dict)
    mixed_from: list[list[int]] = field(default_factory=list)  # senders of each mixed round
    rejections: list[dict[str, Any]] = field(default_factory=list)

    @property
    def mixing(self) -> np.ndarray:
        """This round's mixing matrix P (float32, as the vectorized runner uses it)."""
        return self.topology.matrix(self.round).astype(np.float32)

    @property
    def z(self) -> np.ndarray:
        """The de-biased parameter x / w."""
        return self.x / np.float32(self.w)

    # --- this node's own step ------------------------------------------------------------
    def apply(self, report: Report) -> list[GossipMessage]:
        """Apply this round's released update and split (x, w) along P[:, node]; returns the
        messages for the out-neighbours (the node's own share goes to its inbox)."""
        if self.applied:
            raise RuntimeError(f"node {self.node}: round {self.round} was already applied")
        p = self.mixing
        x = (self.x + np.float32(self.w) * np.asarray(report.value, np.float32)).astype(
            np.float32)
        self.x, self.applied = x, True
        column = p[:, self.node]
        out = {int(i): GossipMessage(self.round, self.node, int(i),
                                     (column[i] * x).astype(np.float32),
                                     float(column[i] * np.float32(self.w)))
               for i in np.flatnonzero(column)}
        own = out.pop(self.node, None)
        if own is not None:
            self.inbox[self.node] = (own.x, own.w)
        self.last_outgoing = out
        return list(out.values())

    def outgoing(self, round_: int, receiver: int) -> GossipMessage | None:
        """This node's share for `receiver` in `round_`, kept for resending after a crash."""
        msg = self.last_outgoing.get(receiver)
        return msg if msg is not None and msg.round == round_ else None

    # --- peers' messages -----------------------------------------------------------------
    def receive(self, msg: Any) -> GossipVerdict:
        reason = self._reject_reason(msg)
        if reason is not None:
            self.rejections.append({"round": getattr(msg, "round", None),
                                    "sender": getattr(msg, "sender", None), "reason": reason})
            return GossipVerdict(False, reason)
        self.inbox[int(msg.sender)] = (np.asarray(msg.x, np.float32), float(msg.w))
        return GossipVerdict(True)

    def missing(self) -> list[int]:
        """In-neighbours whose share for this round has not arrived (this node if its own
        update is not applied yet)."""
        if not self.applied:
            return [self.node]
        row = self.mixing[self.node]
        return [int(j) for j in np.flatnonzero(row) if int(j) not in self.inbox]

    def mix(self) -> bool:
        """Finish the round if every in-neighbour's share is here; False (and nothing
        changes) otherwise."""
        if self.missing():
            return False
        senders = sorted(self.inbox)
        x = np.zeros_like(self.x)
        w = np.float32(0.0)
        for j in senders:
            x = x + self.inbox[j][0]
            w = w + np.float32(self.inbox[j][1])
        self.x, self.w = x.astype(np.float32), float(w)
        self.mixed_from.append(senders)
        self.inbox, self.applied = {}, False
        self.round += 1
        return True

    # --- checkpoints ---------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The state after a mix as plain values and arrays (what a checkpoint stores, as a
        privrl run file: no pickled objects). The topology is public and not stored."""
        return {"node": self.node, "x": self.x.copy(), "w": self.w, "round": self.round,
                "last_outgoing": [m._asdict() for m in self.last_outgoing.values()],
                "mixed_from": [list(s) for s in self.mixed_from],
                "rejections": [{k: _plain(v) for k, v in r.items()} for r in self.rejections]}

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any], topology: Topology) -> PushSumNode:
        """The node a snapshot describes, on `topology`; ValueError if the snapshot does not
        fit it (a tampered or foreign checkpoint)."""
        node, k = snap["node"], topology.num_nodes
        x = np.asarray(snap["x"])
        if not (isinstance(node, int) and 0 <= node < k and x.ndim == 1
                and x.dtype == np.float32 and isinstance(snap["round"], int)
                and snap["round"] >= 0 and isinstance(snap["w"], int | float)):
            raise ValueError("not a push-sum node snapshot for this topology")
        outgoing = {}
        for m in snap["last_outgoing"]:
            mx = np.asarray(m["x"])
            if not (isinstance(m["receiver"], int) and 0 <= m["receiver"] < k
                    and mx.shape == x.shape and mx.dtype == np.float32):
                raise ValueError("a kept outgoing share does not fit this node")
            outgoing[m["receiver"]] = GossipMessage(int(m["round"]), int(m["sender"]),
                                                    int(m["receiver"]), mx, float(m["w"]))
        mixed = [[int(j) for j in s] for s in snap["mixed_from"]]
        rejections = [dict(r) for r in snap["rejections"]]
        return cls(node, topology, x, float(snap["w"]), snap["round"],
                   last_outgoing=outgoing, mixed_from=mixed, rejections=rejections)

    # --- internals -----------------------------------------------------------------------
    def _reject_reason(self, msg: Any) -> str | None:
        if not isinstance(msg, GossipMessage):
            return f"not a GossipMessage: {type(msg).__name__}"
        if msg.receiver != self.node:
            return f"misdelivered: addressed to node {msg.receiver}, this is node {self.node}"
        if msg.round < self.round:
            return f"stale: round {msg.round} is already mixed (now {self.round})"
        if msg.round > self.round:
            return f"early: round {msg.round} has not started (now {self.round})"
        row = self.mixing[self.node]
        if msg.sender == self.node:
            return "a node's own share is not a message"
        if not (isinstance(msg.sender, int | np.integer) and 0 <= msg.sender < row.size
                and row[msg.sender] > 0):
            return f"not an in-neighbour: node {msg.sender} in round {msg.round}"
        if int(msg.sender) in self.inbox:
            return f"duplicate: node {msg.sender}'s share for round {msg.round} already arrived"
        x = np.asarray(msg.x)
        if x.shape != self.x.shape:
            return f"malformed: shape {x.shape}, expected {self.x.shape}"
        if not (np.all(np.isfinite(x)) and np.isfinite(msg.w)) or msg.w <= 0:
            return "malformed: non-finite values or a weight share <= 0"
        return None


def _plain(v: Any) -> int | str | None:
    """A rejection's field as a plain value (a malformed message may carry anything)."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, int | np.integer) and not isinstance(v, bool):
        return int(v)
    return repr(v)
