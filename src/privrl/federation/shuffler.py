"""The shuffler of the shuffle model: between the agents and the aggregator, it strips identities
and forwards each batch of reports in a uniformly random order. Transport-agnostic, like
`AggregatorService`: the Ray runner wraps it in an actor, tests call it directly.

What it does. Agents' `Submission`s (agent id, submission index, Report) arrive one at a time.
The shuffler accepts each (agent, index) at most once, validates the report as the aggregator
would (shape, dtype, finite, the run's mechanism), charges the agent's ledger (refusing
anything over budget) and appends the submission to its intake log. Every `batch_size`
accepted submissions (and the rest at `close()`) form a batch: it draws a uniformly random
permutation of the batch from the OS CSPRNG (`random.SystemRandom`: `os.urandom`, nothing a
config or seed determines), writes it down, and forwards the batch to the aggregator as
`Shuffled(batch, slot, report)` items in that order. Nothing forwarded names an agent.

Who charges the ledger: the shuffler. It is the one party that sees identities anyway, it must
deduplicate by (agent, index) for the same reason (only it can tell a retried submission from a
new one), and it refuses an over-budget report before the report reaches anyone else. An
agent-side ledger would be lost with a restarted agent process; the aggregator cannot charge
anyone, since it never learns who sent what.

Trust model. The shuffler is trusted with identities and reports: it sees who sent which
report, and its intake log (its own directory) holds both. The central (ε, δ) of
amplification by shuffling (privrl.privacy.shuffle) holds against the aggregator only if the
shuffler is honest: it hides identities, permutes uniformly with randomness the aggregator
cannot know, and does not collude with the aggregator. Against the shuffler, or an aggregator
colluding with it (or anyone who reads the shuffler's directory), only the local ε₀ of every
report holds. What the aggregator still learns: which batch a report was in and the batch's
size (the analysis allows that: who took part in a batch is not hidden, only who sent which
report).

Fault tolerance (the aggregator service's guarantees, kept across a shuffler restart).
Intake records are flushed before `submit` returns; a batch's permutation is flushed before the
batch is forwarded, and a batch counts as delivered once the aggregator has answered (a
delivery mark, flushed). `Shuffler.restore(dir, forward)` rebuilds the dedup set and the ledger
from the intake log, re-forwards every batch whose permutation is written but whose delivery is
not, in the same order, and keeps the rest as the pending batch. The aggregator accepts each
(batch, slot) at most once, so a re-forwarded batch adds nothing twice; a retried submission is
a duplicate at the shuffler, so nothing is charged twice; nothing accepted is lost.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privrl.federation.aggregator import BufferedAggregator
from privrl.federation.service import (
    Shuffled,
    Verdict,
    _log_header,
    _record_dtype,
    read_log,
    submission_problem,
)
from privrl.privacy.ledger import BudgetExceededError, PrivacyLedger
from privrl.privacy.report import Guarantee, Report, restore_report
from privrl.runfile import MAX_BYTES, RunFileError, checked, opened, read, write

__all__ = ["DELIVERED", "INTAKE", "ORDERS", "SHUFFLER_SETUP", "Forward", "Shuffler",
           "read_orders"]

INTAKE = "intake.bin"  # accepted submissions with identities, the report log's format
ORDERS = "orders.bin"  # each batch's permutation
DELIVERED = "delivered.bin"  # one int64 per batch the aggregator has answered for
SHUFFLER_SETUP = "shuffler.npz"
_SETUP_KIND = "shuffler-setup"
_ORDERS_MAGIC = b"privrl-orders\0\0\0"
_ORDERS_VERSION = 1
_ORDERS_HEADER = np.dtype([("magic", "S16"), ("version", "<i8"), ("batch_size", "<i8")])

# The aggregator's side of the channel: a list of Shuffled items in, their verdicts out.
Forward = Callable[[list[Shuffled]], Sequence[Verdict]]


def _orders_dtype(batch_size: int) -> np.dtype:
    # order[slot] = position in the batch (intake order) of the report forwarded in `slot`;
    # a partial last batch uses the first `size` entries, the rest are -1.
    return np.dtype([("batch", "<i8"), ("size", "<i8"), ("order", "<i8", (batch_size,))])


def _orders_header(batch_size: int) -> bytes:
    return np.array([(_ORDERS_MAGIC, _ORDERS_VERSION, batch_size)], _ORDERS_HEADER).tobytes()


def read_orders(directory: str | os.PathLike, batch_size: int) -> np.ndarray:
    """Every complete permutation record of a shuffler's directory (a torn last one is
    ignored: that batch was never forwarded). RunFileError if it is not an orders file."""
    path = Path(directory) / ORDERS
    raw = b""
    if path.exists() or path.is_symlink():  # no link followed; bounded: a file of orders
        with opened(path, MAX_BYTES) as (f, _):
            raw = f.read()
    if not raw:
        return np.zeros(0, _orders_dtype(batch_size))
    n = _ORDERS_HEADER.itemsize
    if raw[:n] != _orders_header(batch_size):
        raise RunFileError(path, f"is not a privrl shuffler's orders file for batches of "
                                 f"{batch_size}; nothing was loaded")
    size = _orders_dtype(batch_size).itemsize
    body = raw[n:]
    return np.frombuffer(body[: len(body) // size * size], _orders_dtype(batch_size))


class Shuffler:
    """Collects `batch_size` accepted submissions, then forwards them to `forward` in a
    uniformly random order (OS CSPRNG) without identities; charges `ledger` per agent. See the
    module docstring for what it is trusted with and how it survives a restart."""

    def __init__(self, batch_size: int, num_agents: int, dim: int, ledger: PrivacyLedger,
                 guarantee: Guarantee, forward: Forward,
                 directory: str | os.PathLike | None = None) -> None:
        for name, value in (("batch_size", batch_size), ("num_agents", num_agents),
                            ("dim", dim)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.batch_size, self.num_agents = int(batch_size), int(num_agents)
        self.ledger, self.guarantee, self.forward = ledger, guarantee, forward
        self._check = BufferedAggregator(int(dim)).check  # shape, dtype, finite
        self.dim = int(dim)
        self.accepted: set[tuple[int, int]] = set()
        self.pending: list[Report] = []  # accepted, not yet in a batch (intake order)
        self.batches = 0  # batches formed (permutation drawn and written)
        self.delivered = 0  # batches the aggregator has answered for
        self.rejections: dict[str, int] = {}
        self.forward_rejections: dict[str, int] = {}  # the aggregator's, beyond duplicates
        self.closed = False
        self._rng = random.SystemRandom()  # os.urandom: not derivable from any config or seed
        self.directory = None if directory is None else Path(directory)
        self._files: dict[str, Any] = {}
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not (self.directory / SHUFFLER_SETUP).exists():
                write(self.directory / SHUFFLER_SETUP, _SETUP_KIND, {
                    "batch_size": self.batch_size, "num_agents": self.num_agents,
                    "dim": self.dim, "ledger": ledger.to_state(),
                    "guarantee": guarantee.to_state()})
            self._open()

    # --- the protocol --------------------------------------------------------------------
    def submit(self, sub: Any) -> Verdict:
        """Accept the submission (and forward a batch once `batch_size` are waiting) or
        reject it with a reason; a rejected one changes nothing and is never forwarded."""
        reason = ("closed: the run's last batch was already forwarded" if self.closed else
                  submission_problem(sub, self.num_agents, self.accepted, self._check,
                                     self.guarantee))
        if reason is None:
            try:
                self.ledger.charge(int(sub.agent_id), sub.report.guarantee)
            except BudgetExceededError as e:
                reason = f"over budget: {e}"
        if reason is not None:
            kind = reason.split(":")[0]
            self.rejections[kind] = self.rejections.get(kind, 0) + 1
            return Verdict(False, reason)
        self.accepted.add((int(sub.agent_id), int(sub.index)))
        self.pending.append(sub.report)
        self._write(INTAKE, _intake_record(self.dim, sub.agent_id, sub.index, sub.report))
        if len(self.pending) >= self.batch_size:
            self._release(self.batch_size)
        return Verdict(True)

    def close(self) -> dict[str, Any]:
        """Forward what is left as a last (smaller) batch; no submission is accepted after."""
        if self.pending:
            self._release(len(self.pending))
        self.closed = True
        for f in self._files.values():
            f.close()
        self._files = {}
        return self.status()

    def status(self) -> dict[str, Any]:
        return {"accepted": len(self.accepted), "batches": self.batches,
                "delivered": self.delivered, "pending": len(self.pending),
                "batch_size": self.batch_size, "rejections": dict(self.rejections),
                "rejected_by_aggregator": dict(self.forward_rejections)}

    # --- batches -------------------------------------------------------------------------
    def _release(self, size: int) -> None:
        reports, self.pending = self.pending[:size], self.pending[size:]
        order = list(range(size))
        self._rng.shuffle(order)  # Fisher-Yates with os.urandom: uniform over permutations
        rec = np.full(1, -1, _orders_dtype(self.batch_size))
        rec["batch"], rec["size"], rec["order"][0, :size] = self.batches, size, order
        self._write(ORDERS, rec.tobytes())  # written before anything leaves
        self.batches += 1
        self._deliver(self.batches - 1, [reports[i] for i in order])

    def _deliver(self, batch: int, shuffled: list[Report]) -> None:
        verdicts = self.forward([Shuffled(batch, slot, r) for slot, r in enumerate(shuffled)])
        for v in verdicts:  # a duplicate is a re-forwarded batch the aggregator already had
            if not v.accepted and not (v.reason or "").startswith("duplicate"):
                kind = (v.reason or "").split(":")[0]
                self.forward_rejections[kind] = self.forward_rejections.get(kind, 0) + 1
        self._write(DELIVERED, np.array([batch], "<i8").tobytes())
        self.delivered = batch + 1

    # --- durability ----------------------------------------------------------------------
    def _open(self) -> None:
        assert self.directory is not None
        for name, header in ((INTAKE, _log_header(self.dim)),
                             (ORDERS, _orders_header(self.batch_size)), (DELIVERED, b"")):
            f = open(self.directory / name, "ab")  # noqa: SIM115 - lives with the shuffler
            if f.tell() == 0 and header:
                f.write(header)
                f.flush()
            self._files[name] = f

    def _write(self, name: str, data: bytes) -> None:
        f = self._files.get(name)
        if f is not None:
            f.write(data)
            f.flush()  # in the OS before the call returns: survives this process dying

    @classmethod
    def restore(cls, directory: str | os.PathLike, forward: Forward) -> Shuffler:
        """The shuffler as it was: the intake log re-charged and deduplicated, every batch
        that was formed but not delivered forwarded again in its written order, the rest
        pending."""
        directory = Path(directory)
        path = directory / SHUFFLER_SETUP
        setup = read(path, _SETUP_KIND)
        with checked(path):
            ints = [setup[k] for k in ("batch_size", "num_agents", "dim")]
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
                raise ValueError("batch_size, num_agents and dim must be integers")
            svc = cls(*ints, PrivacyLedger.from_state(setup["ledger"]),
                      Guarantee.from_state(setup["guarantee"]), forward, None)
        intake = read_log(directory, svc.dim, INTAKE)
        orders = read_orders(directory, svc.batch_size)
        delivered_path = directory / DELIVERED
        delivered = 0
        if delivered_path.exists() or delivered_path.is_symlink():  # its length is the count
            with opened(delivered_path, None) as (_, size):
                delivered = size // 8
        formed = int(np.sum(orders["size"])) if len(orders) else 0
        if (formed > len(intake) or delivered > len(orders)
                or np.any(orders["batch"] != np.arange(len(orders)))):
            raise RunFileError(directory, f"inconsistent shuffler files: {len(intake)} intake "
                                          f"records, {len(orders)} batches of {formed} "
                                          f"reports, {delivered} delivered")
        if len(intake):
            agents, counts = np.unique(intake["agent"], return_counts=True)
            svc.ledger.charge(agents, svc.guarantee, counts)  # charged when first accepted
        svc.accepted = {(int(r["agent"]), int(r["index"])) for r in intake}
        reports = [restore_report(r["value"], svc.guarantee) for r in intake]
        # Cut torn tails, then open the files, so that re-delivery marks are written.
        for name, keep in ((INTAKE, len(_log_header(svc.dim))
                            + len(intake) * _record_dtype(svc.dim).itemsize),
                           (ORDERS, _ORDERS_HEADER.itemsize
                            + len(orders) * _orders_dtype(svc.batch_size).itemsize),
                           (DELIVERED, delivered * 8)):
            if (directory / name).exists() and os.path.getsize(directory / name) > keep:
                os.truncate(directory / name, keep)
        svc.directory = directory
        svc._open()
        svc.batches, svc.delivered = len(orders), delivered
        start = 0
        for rec in orders:
            size = int(rec["size"])
            if int(rec["batch"]) >= delivered:
                batch = reports[start : start + size]
                svc._deliver(int(rec["batch"]), [batch[int(i)] for i in rec["order"][:size]])
            start += size
        svc.pending = reports[formed:]
        if len(svc.pending) >= svc.batch_size:  # died between the intake and the permutation
            svc._release(svc.batch_size)
        if len(orders) and int(orders["size"][-1]) < svc.batch_size:
            svc.closed = True  # the last (partial) batch was formed: the run had ended
        return svc


def _intake_record(dim: int, agent: int, index: int, report: Report) -> bytes:
    rec = np.zeros(1, _record_dtype(dim))
    rec["agent"], rec["index"], rec["value"] = agent, index, np.asarray(report.value, np.float32)
    return rec.tobytes()

