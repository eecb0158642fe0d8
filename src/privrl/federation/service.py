"""The aggregator as a long-lived service: deduplication, validation, a ledger, an append-only
log of accepted reports, atomic checkpoints, crash recovery and exact replay.

Transport-agnostic: the Ray runner wraps it in an actor, tests call it directly. Every report
arrives as a `Submission` (agent id, submission index, Report). A submission is accepted at most
once: a retried or duplicated (agent, index) is rejected and logged, so no agent's privacy is
spent twice and no gradient is applied twice. Rejected submissions (duplicate, unknown agent,
malformed, from another mechanism, over budget) leave the state bit-identical and are logged
with the reason.

Durability. Every accepted report is appended to `reports.bin` (fixed-size records: agent id,
index, d float32 values) and flushed before `submit` returns, so it survives the death of the
process. Every `checkpoint_every` θ updates, and on `close()`, the state (θ, optimizer state,
buffer, ledger, position in the log) is written to `checkpoint.pkl` atomically (temp file +
rename). `AggregatorService.restore(dir)` loads the last checkpoint and re-applies the log
records after it, so nothing accepted is lost. Since the aggregator is deterministic
post-processing of the reports, `replay(dir)` rebuilds θ exactly from θ₀ and the log.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import optax

from privrl.federation.aggregator import AggregatorState, BufferedAggregator, InvalidReportError
from privrl.privacy.ledger import BudgetExceededError, PrivacyLedger
from privrl.privacy.report import Guarantee, Report, restore_report

LOG = "reports.bin"
REJECTED = "rejected.jsonl"
CHECKPOINT = "checkpoint.pkl"
SETUP = "service.pkl"
_HEADER = np.dtype([("agent", "<i8"), ("index", "<i8")])


class Submission(NamedTuple):
    """What an agent sends: who it is, which of its submissions this is, and its Report."""

    agent_id: int
    index: int
    report: Report


@dataclass(frozen=True)
class AggregatorSpec:
    """A BufferedAggregator described by value (optax transforms cannot be pickled): what a
    checkpoint directory or a remote process needs to rebuild the same aggregator."""

    dim: int
    buffer_size: int = 1
    optimizer: str = "sgd"  # "sgd" | "adam"
    learning_rate: float = 0.5

    def build(self) -> BufferedAggregator:
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")
        tx = {"sgd": optax.sgd, "adam": optax.adam}[self.optimizer](self.learning_rate)
        return BufferedAggregator(self.dim, self.buffer_size, self.learning_rate, tx)


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reason: str | None = None


def _record_dtype(dim: int) -> np.dtype:
    return np.dtype([("agent", "<i8"), ("index", "<i8"), ("value", "<f4", (dim,))])


def read_log(directory: Path, dim: int) -> np.ndarray:
    """All complete records of the accepted-report log (a torn last record is ignored)."""
    path = Path(directory) / LOG
    if not path.exists():
        return np.zeros(0, _record_dtype(dim))
    raw = path.read_bytes()
    size = _record_dtype(dim).itemsize
    return np.frombuffer(raw[: len(raw) // size * size], _record_dtype(dim))


class AggregatorService:
    """A BufferedAggregator with identity checks, a ledger, a durable log and checkpoints."""

    def __init__(self, spec: AggregatorSpec, theta0: np.ndarray, num_agents: int,
                 ledger: PrivacyLedger, guarantee: Guarantee,
                 directory: str | os.PathLike | None = None,
                 checkpoint_every: int = 100) -> None:
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        self.spec = spec
        self.aggregator = aggregator = spec.build()
        self.num_agents = int(num_agents)
        self.ledger = ledger
        self.guarantee = guarantee  # what the run's mechanism promises; others are refused
        self.state: AggregatorState = aggregator.init(np.asarray(theta0, np.float32))
        self.accepted: set[tuple[int, int]] = set()
        self.logged = 0  # records in the log (== reports accepted)
        self.rejections: dict[str, int] = {}
        self.checkpoint_every = int(checkpoint_every)
        self._last_checkpoint_updates = 0
        self.directory = None if directory is None else Path(directory)
        self._log = None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            setup = {"spec": spec, "theta0": np.asarray(theta0, np.float32),
                     "num_agents": self.num_agents, "ledger": ledger, "guarantee": guarantee,
                     "checkpoint_every": self.checkpoint_every}
            if not (self.directory / SETUP).exists():
                atomic_write(self.directory / SETUP, pickle.dumps(setup))
            self._log = open(self.directory / LOG, "ab")  # noqa: SIM115 - lives with the service

    # --- the protocol --------------------------------------------------------------------
    def submit(self, sub: Any) -> Verdict:
        """Accept the submission or reject it with a reason; rejected ones change nothing."""
        reason = self._reject_reason(sub)
        if reason is None:
            try:
                self.ledger.charge(int(sub.agent_id), sub.report.guarantee)
            except BudgetExceededError as e:
                reason = f"over budget: {e}"
        if reason is not None:
            self._reject(sub, reason)
            return Verdict(False, reason)
        self._apply(sub.agent_id, sub.index, sub.report)
        self._append(sub.agent_id, sub.index, np.asarray(sub.report.value, np.float32))
        if int(self.state.updates) - self._last_checkpoint_updates >= self.checkpoint_every:
            self.checkpoint()
        return Verdict(True)

    def submit_many(self, subs: list[Any]) -> list[Verdict]:
        """Several submissions in one call (in order): the batched transport's entry point."""
        return [self.submit(s) for s in subs]

    def theta(self) -> np.ndarray:
        return np.asarray(self.state.theta)

    def status(self) -> dict[str, Any]:
        return {"accepted": self.logged, "updates": int(self.state.updates),
                "buffered": int(self.state.count), "rejections": dict(self.rejections)}

    # --- durability ----------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write θ, optimizer state, buffer, ledger and the log position atomically."""
        if self.directory is None:
            return
        blob = {"state": jax.tree_util.tree_map(np.asarray, self.state),
                "ledger": self.ledger, "logged": self.logged, "rejections": self.rejections}
        atomic_write(self.directory / CHECKPOINT, pickle.dumps(blob))
        self._last_checkpoint_updates = int(self.state.updates)

    def close(self) -> None:
        self.checkpoint()
        if self._log is not None:
            self._log.close()
            self._log = None

    @classmethod
    def restore(cls, directory: str | os.PathLike) -> AggregatorService:
        """The service as it was: last checkpoint, then every log record after it re-applied."""
        directory = Path(directory)
        setup = pickle.loads((directory / SETUP).read_bytes())
        svc = cls(setup["spec"], setup["theta0"], setup["num_agents"], setup["ledger"],
                  setup["guarantee"], None, setup["checkpoint_every"])
        start = 0
        if (directory / CHECKPOINT).exists():
            blob = pickle.loads((directory / CHECKPOINT).read_bytes())
            svc.state = jax.tree_util.tree_map(jax.numpy.asarray, blob["state"])
            svc.ledger = blob["ledger"]
            svc.rejections = blob["rejections"]
            start = blob["logged"]
        records = read_log(directory, svc.aggregator.dim)
        for r in records[:start]:
            svc.accepted.add((int(r["agent"]), int(r["index"])))
        svc.logged = start
        for r in records[start:]:  # accepted after the checkpoint: re-apply, charge again
            report = restore_report(r["value"], svc.guarantee)
            svc.ledger.charge(int(r["agent"]), svc.guarantee)
            svc._apply(int(r["agent"]), int(r["index"]), report)
        svc._last_checkpoint_updates = int(svc.state.updates)
        svc.directory = directory
        svc._log = open(directory / LOG, "r+b")  # noqa: SIM115
        svc._log.truncate(len(records) * _record_dtype(svc.aggregator.dim).itemsize)
        svc._log.seek(0, os.SEEK_END)
        return svc

    # --- internals -----------------------------------------------------------------------
    def _reject_reason(self, sub: Any) -> str | None:
        if not isinstance(sub, Submission):
            return f"not a Submission: {type(sub).__name__}"
        agent, index = sub.agent_id, sub.index
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool)
                   for v in (agent, index)):
            return "agent id and submission index must be integers"
        if not 0 <= agent < self.num_agents:
            return f"unknown agent {agent} (agents are 0..{self.num_agents - 1})"
        if index < 0:
            return f"negative submission index {index}"
        if (int(agent), int(index)) in self.accepted:
            return f"duplicate: agent {agent} submission {index} was already accepted"
        try:
            self.aggregator.check(sub.report)
        except InvalidReportError as e:
            return f"malformed: {e}"
        if sub.report.guarantee != self.guarantee:
            return (f"wrong mechanism: the report promises {sub.report.guarantee.describe()}, "
                    f"this run expects {self.guarantee.describe()}")
        return None

    def _apply(self, agent: int, index: int, report: Report) -> None:
        self.state = self.aggregator.submit(self.state, report)
        self.accepted.add((int(agent), int(index)))
        self.logged += 1

    def _append(self, agent: int, index: int, value: np.ndarray) -> None:
        if self._log is None:
            return
        rec = np.zeros(1, _record_dtype(self.aggregator.dim))
        rec["agent"], rec["index"], rec["value"] = agent, index, value
        self._log.write(rec.tobytes())
        self._log.flush()  # in the OS before submit returns: survives this process dying

    def _reject(self, sub: Any, reason: str) -> None:
        kind = reason.split(":")[0]
        self.rejections[kind] = self.rejections.get(kind, 0) + 1
        if self.directory is not None:
            with open(self.directory / REJECTED, "a") as f:
                f.write(json.dumps({"agent": getattr(sub, "agent_id", None),
                                    "index": getattr(sub, "index", None),
                                    "reason": reason}, default=str) + "\n")


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def replay(directory: str | os.PathLike) -> np.ndarray:
    """θ rebuilt from θ₀ and the accepted-report log alone, through a fresh aggregator."""
    directory = Path(directory)
    setup = pickle.loads((directory / SETUP).read_bytes())
    agg = setup["spec"].build()
    state = agg.init(setup["theta0"])
    for r in read_log(directory, agg.dim):
        state = agg.submit(state, restore_report(r["value"], setup["guarantee"]))
    return np.asarray(state.theta)
