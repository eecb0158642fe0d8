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
buffer, ledger, position in the log) is written to `checkpoint.npz` atomically (temp file +
rename). No file here is a pickle: the setup and checkpoints are privrl run files (plain arrays
and JSON, `privrl.runfile`), the log is a versioned header and fixed-size numeric records, so a
tampered directory raises `RunFileError` naming the file and runs no code.
`AggregatorService.restore(dir)` loads the last checkpoint and re-applies the log records after
it, so nothing accepted is lost. Since the aggregator is deterministic
post-processing of the reports, `replay(dir)` rebuilds θ exactly from θ₀ and the log.

Shuffle model (`shuffled_batch` k ≥ 1): the service takes `Shuffled` items (batch number, slot
< k, Report) from a shuffler (privrl.federation.shuffler) instead of Submissions. It never sees
an agent id, so it has no ledger (the shuffler charges) and deduplicates by (batch, slot); its
log's two id columns then hold (batch, slot), not (agent, index).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from privrl.federation.aggregator import (
    AggregatorState,
    BufferedAggregator,
    InvalidReportError,
    named_optimizer,
)
from privrl.privacy.ledger import BudgetExceededError, PrivacyLedger
from privrl.privacy.report import Guarantee, Report, restore_report
from privrl.runfile import (
    RunFileError,
    atomic_write,
    checked,
    opened,
    read,
    tree_from_leaves,
    write,
)

__all__ = ["CHECKPOINT", "LOG", "REJECTED", "SETUP", "AggregatorService", "AggregatorSpec",
           "RunFileError", "Shuffled", "Submission", "Verdict", "atomic_write", "read_log",
           "replay"]

LOG = "reports.bin"
REJECTED = "rejected.jsonl"
CHECKPOINT = "checkpoint.npz"
SETUP = "service.npz"
_SETUP_KIND, _CHECKPOINT_KIND = "aggregator-setup", "aggregator-checkpoint"
# The log starts with a header (magic, format version, report length d); then the records.
_LOG_MAGIC = b"privrl-reports\0\0"
_LOG_VERSION = 1
_LOG_HEADER = np.dtype([("magic", "S16"), ("version", "<i8"), ("dim", "<i8")])


class Submission(NamedTuple):
    """What an agent sends: who it is, which of its submissions this is, and its Report."""

    agent_id: int
    index: int
    report: Report


class Shuffled(NamedTuple):
    """What a shuffler forwards: no agent id, only the report's batch and its slot in the
    batch's uniformly random order (privrl.federation.shuffler)."""

    batch: int
    slot: int
    report: Report


# What a run file's aggregator spec may declare (far above any run privrl makes).
MAX_DIM, MAX_BUFFER, MAX_BUFFERED, MAX_LEARNING_RATE = 1 << 28, 1 << 20, 1 << 28, 1e3


@dataclass(frozen=True)
class AggregatorSpec:
    """A BufferedAggregator described by value (optax transforms cannot be pickled): what a
    checkpoint directory or a remote process needs to rebuild the same aggregator."""

    dim: int
    buffer_size: int = 1
    optimizer: str = "sgd"  # "sgd" | "adam"
    learning_rate: float = 0.5

    def build(self) -> BufferedAggregator:
        # one optimizer object per (name, rate): aggregators built alike share `submit`'s program
        tx = named_optimizer(self.optimizer, self.learning_rate)
        return BufferedAggregator(self.dim, self.buffer_size, self.learning_rate, tx)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> AggregatorSpec:
        """The spec a run file recorded (`dataclasses.asdict` of one); ValueError if bad."""
        ok = (isinstance(state, dict) and set(state) == {f.name for f in dataclasses.fields(cls)}
              and all(isinstance(state[k], int) and not isinstance(state[k], bool)
                      for k in ("dim", "buffer_size"))
              and isinstance(state["optimizer"], str)
              and isinstance(state["learning_rate"], int | float))
        if not ok:
            raise ValueError(f"not an aggregator spec: {state!r}")
        # Bounds before anything is allocated (a buffer of 2**40 reports was a MemoryError);
        # a learning rate of NaN or 1e308 would replay into NaN.
        if not (1 <= state["dim"] <= MAX_DIM and 1 <= state["buffer_size"] <= MAX_BUFFER
                and state["dim"] * state["buffer_size"] <= MAX_BUFFERED
                and math.isfinite(state["learning_rate"])
                and 0 < state["learning_rate"] <= MAX_LEARNING_RATE):
            raise ValueError(f"aggregator spec out of bounds: {state!r}")
        return cls(**state)


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reason: str | None = None


def _record_dtype(dim: int) -> np.dtype:
    return np.dtype([("agent", "<i8"), ("index", "<i8"), ("value", "<f4", (dim,))])


def _log_header(dim: int) -> bytes:
    return np.array([(_LOG_MAGIC, _LOG_VERSION, dim)], _LOG_HEADER).tobytes()


def read_log(directory: Path, dim: int, name: str = LOG) -> np.ndarray:
    """All complete records of the accepted-report log (a torn last record is ignored).
    RunFileError if the file is not a report log for reports of length `dim`. `name`: another
    log of the same format in `directory` (a shuffler's intake log)."""
    path = Path(directory) / name
    if not path.exists() and not path.is_symlink():
        return np.zeros(0, _record_dtype(dim))
    with opened(path, None) as (f, total):  # no link followed; any length: mapped, not read
        try:
            raw = f.read(_LOG_HEADER.itemsize)
        except OSError as e:  # unreadable...
            raise RunFileError(path, f"cannot be read ({e.strerror or e}); nothing was loaded"
                               ) from None
        if not raw:  # created, the header not yet written when the process died
            return np.zeros(0, _record_dtype(dim))
        n = _LOG_HEADER.itemsize
        if raw != _log_header(dim):
            head = np.frombuffer(raw, _LOG_HEADER)[0] if len(raw) >= n else None
            if head is None or head["magic"] != _LOG_MAGIC.rstrip(b"\0"):
                raise RunFileError(path, "is not a privrl report log; nothing was loaded")
            if head["version"] != _LOG_VERSION:
                raise RunFileError(path, f"has format version {int(head['version'])}; this "
                                         f"privrl reads version {_LOG_VERSION}")
            raise RunFileError(path, f"holds reports of length {int(head['dim'])}, "
                                     f"expected {dim}")
        count = (total - n) // _record_dtype(dim).itemsize  # a torn last record is ignored
        if count == 0:
            return np.zeros(0, _record_dtype(dim))
        # Mapped read-only: a record costs memory only when it is read (a log of a million
        # records was read whole, and copied, before its first record was checked).
        return np.memmap(f, _record_dtype(dim), mode="r", offset=n, shape=(count,))


class AggregatorService:
    """A BufferedAggregator with identity checks, a ledger, a durable log and checkpoints.

    With `shuffled_batch` k ≥ 1 it takes `Shuffled` items (batch, slot < k) from a shuffler
    instead of Submissions, and `ledger` must be None: the shuffler, which sees identities,
    charges them (the module docstring)."""

    def __init__(self, spec: AggregatorSpec, theta0: np.ndarray, num_agents: int,
                 ledger: PrivacyLedger | None, guarantee: Guarantee,
                 directory: str | os.PathLike | None = None,
                 checkpoint_every: int = 100, shuffled_batch: int = 0) -> None:
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        if shuffled_batch < 0 or (ledger is None) != (shuffled_batch > 0):
            raise ValueError("a ledger belongs to an aggregator of identified submissions; "
                             "one of shuffled batches (shuffled_batch >= 1) has none")
        self.shuffled_batch = int(shuffled_batch)
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
            setup = {"spec": dataclasses.asdict(spec), "theta0": np.asarray(theta0, np.float32),
                     "num_agents": self.num_agents, "ledger": _ledger_state(ledger),
                     "guarantee": guarantee.to_state(),
                     "checkpoint_every": self.checkpoint_every,
                     **({"shuffled_batch": self.shuffled_batch} if self.shuffled_batch else {})}
            if not (self.directory / SETUP).exists():
                write(self.directory / SETUP, _SETUP_KIND, setup)
            self._log = open(self.directory / LOG, "ab")  # noqa: SIM115 - lives with the service
            if self._log.tell() == 0:
                self._log.write(_log_header(spec.dim))
                self._log.flush()

    # --- the protocol --------------------------------------------------------------------
    def submit(self, sub: Any) -> Verdict:
        """Accept the submission or reject it with a reason; rejected ones change nothing."""
        reason = self._reject_reason(sub)
        if reason is None and self.ledger is not None:
            try:
                self.ledger.charge(int(sub.agent_id), sub.report.guarantee)
            except BudgetExceededError as e:
                reason = f"over budget: {e}"
        if reason is not None:
            self._reject(sub, reason)
            return Verdict(False, reason)
        first, second = sub[0], sub[1]  # (agent, index), or (batch, slot) when shuffled
        self._apply(first, second, sub.report)
        self._append(first, second, np.asarray(sub.report.value, np.float32))
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
        blob = {"state": [np.asarray(x) for x in jax.tree_util.tree_leaves(self.state)],
                "ledger": _ledger_state(self.ledger), "logged": self.logged,
                "rejections": self.rejections}
        write(self.directory / CHECKPOINT, _CHECKPOINT_KIND, blob)
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
        svc = _from_setup(directory)
        start = 0
        path = directory / CHECKPOINT
        if path.exists():
            blob = read(path, _CHECKPOINT_KIND)
            with checked(path):
                svc.state = tree_from_leaves(svc.state, blob["state"])
                svc.ledger = _ledger_from_state(blob["ledger"], svc.shuffled_batch)
                rejections, start = blob["rejections"], blob["logged"]
                if not (isinstance(rejections, dict)
                        and all(isinstance(v, int) for v in rejections.values())
                        and isinstance(start, int) and start >= 0):
                    raise ValueError("bad rejection counts or log position")
                svc.rejections = rejections
        records = read_log(directory, svc.aggregator.dim)
        if start > len(records):
            raise RunFileError(directory / LOG, f"holds {len(records)} reports, but the "
                                                f"checkpoint says {start} were accepted")
        seen: set[tuple[int, int]] = set()
        for i, r in enumerate(records[:start]):  # each checked as replay checks it
            check_record(directory / LOG, i, r, svc, seen)
            svc.accepted.add((int(r["agent"]), int(r["index"])))
        svc.logged = start
        for i, r in enumerate(records[start:], start):  # after the checkpoint: re-apply, charge
            report = check_record(directory / LOG, i, r, svc, seen, charge=True)
            svc._apply(int(r["agent"]), int(r["index"]), report)
        svc._last_checkpoint_updates = int(svc.state.updates)
        svc.directory = directory
        log = directory / LOG
        if not log.exists() or log.stat().st_size == 0:
            log.write_bytes(_log_header(svc.aggregator.dim))
        svc._log = open(log, "r+b")  # noqa: SIM115
        svc._log.truncate(_LOG_HEADER.itemsize
                          + len(records) * _record_dtype(svc.aggregator.dim).itemsize)
        svc._log.seek(0, os.SEEK_END)
        return svc

    # --- internals -----------------------------------------------------------------------
    def _reject_reason(self, sub: Any) -> str | None:
        if self.shuffled_batch:
            return self._shuffled_reason(sub)
        return submission_problem(sub, self.num_agents, self.accepted, self.aggregator.check,
                                  self.guarantee)

    def _shuffled_reason(self, item: Any) -> str | None:
        if not isinstance(item, Shuffled):
            return f"not a Shuffled item (this aggregator takes shuffled batches only): " \
                   f"{type(item).__name__}"
        batch, slot = item.batch, item.slot
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool)
                   for v in (batch, slot)):
            return "batch and slot must be integers"
        if batch < 0 or not 0 <= slot < self.shuffled_batch:
            return f"no such batch slot ({batch}, {slot}) (slots are 0..{self.shuffled_batch - 1})"
        if (int(batch), int(slot)) in self.accepted:
            return f"duplicate: batch {batch} slot {slot} was already accepted"
        return report_problem(item.report, self.aggregator.check, self.guarantee)

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
            ids = ({"batch": getattr(sub, "batch", None), "slot": getattr(sub, "slot", None)}
                   if self.shuffled_batch else {"agent": getattr(sub, "agent_id", None),
                                                "index": getattr(sub, "index", None)})
            with open(self.directory / REJECTED, "a") as f:
                f.write(json.dumps({**ids, "reason": reason}, default=str) + "\n")


def submission_problem(sub: Any, num_agents: int, accepted: set[tuple[int, int]],
                       check: Any, guarantee: Guarantee) -> str | None:
    """Why an identified submission must be refused (None: it may be accepted): not a
    Submission, bad or unknown ids, a duplicate (agent, index) in `accepted`, a malformed report
    (`check` raises InvalidReportError) or one from another mechanism than `guarantee`'s."""
    if not isinstance(sub, Submission):
        return f"not a Submission: {type(sub).__name__}"
    agent, index = sub.agent_id, sub.index
    if not all(isinstance(v, int | np.integer) and not isinstance(v, bool)
               for v in (agent, index)):
        return "agent id and submission index must be integers"
    if not 0 <= agent < num_agents:
        return f"unknown agent {agent} (agents are 0..{num_agents - 1})"
    if index < 0:
        return f"negative submission index {index}"
    if (int(agent), int(index)) in accepted:
        return f"duplicate: agent {agent} submission {index} was already accepted"
    return report_problem(sub.report, check, guarantee)


def report_problem(report: Any, check: Any, guarantee: Guarantee) -> str | None:
    try:
        check(report)
    except InvalidReportError as e:
        return f"malformed: {e}"
    if report.guarantee != guarantee:
        return (f"wrong mechanism: the report promises {report.guarantee.describe()}, "
                f"this run expects {guarantee.describe()}")
    return None


def _ledger_state(ledger: PrivacyLedger | None) -> dict[str, Any] | None:
    return None if ledger is None else ledger.to_state()


def _ledger_from_state(state: Any, shuffled_batch: int) -> PrivacyLedger | None:
    """The ledger a run file recorded; none (and only none) for a shuffled-batch aggregator."""
    if shuffled_batch:
        if state is not None:
            raise ValueError("a shuffled-batch aggregator has no ledger")
        return None
    return PrivacyLedger.from_state(state)


def _from_setup(directory: Path) -> AggregatorService:
    """A fresh service (no directory) as the run's setup file describes it."""
    path = directory / SETUP
    setup = read(path, _SETUP_KIND)
    with checked(path):
        theta0 = np.asarray(setup["theta0"])
        spec = AggregatorSpec.from_state(setup["spec"])
        if theta0.dtype != np.float32 or theta0.shape != (spec.dim,):
            raise ValueError(f"θ₀ has shape {theta0.shape} and dtype {theta0.dtype}")
        shuffled = setup.get("shuffled_batch", 0)  # absent: identified submissions
        for name, value in (("num_agents", setup["num_agents"]),
                            ("checkpoint_every", setup["checkpoint_every"]),
                            ("shuffled_batch", shuffled)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer")
        return AggregatorService(spec, theta0, setup["num_agents"],
                                 _ledger_from_state(setup["ledger"], shuffled),
                                 Guarantee.from_state(setup["guarantee"]), None,
                                 setup["checkpoint_every"], shuffled)


def replay(directory: str | os.PathLike) -> np.ndarray:
    """θ rebuilt from θ₀ and the accepted-report log alone, through a fresh aggregator.

    The log is checked as it is replayed, not only its result: every record's agent is one of
    the run's, at most one record per (agent, index), every value finite and of the run's
    mechanism (`check_record`); the first record that fails is one RunFileError naming it."""
    directory = Path(directory)
    svc = _from_setup(directory)
    agg, state = svc.aggregator, svc.state
    seen: set[tuple[int, int]] = set()
    for i, r in enumerate(read_log(directory, agg.dim)):
        state = agg.submit(state, check_record(directory / LOG, i, r, svc, seen, charge=True))
    return np.asarray(state.theta)


def check_record(path: Path, i: int, record: np.void, svc: AggregatorService,
                 seen: set[tuple[int, int]], charge: bool = False) -> Report:
    """Log record `i` as the Report it claims to be, or RunFileError naming it: (agent,
    index) with an agent of the run and an index >= 0 (under a shuffler: (batch >= 0, slot <
    its batch size)), never seen before, and a finite value that passes the aggregator's
    check. `charge`: charge it to `svc`'s ledger too, a record over its agent's budget being an
    error as well (a log can then hold no more records than the budgets allow)."""
    first, second = int(record["agent"]), int(record["index"])
    k = svc.shuffled_batch
    what = f"(batch {first}, slot {second})" if k else f"(agent {first}, index {second})"
    valid = (first >= 0 and 0 <= second < k) if k else (0 <= first < svc.num_agents
                                                       and second >= 0)
    if not valid or (first, second) in seen:
        raise RunFileError(path, f"record {i}: {what} is "
                                 f"{'repeated' if valid else 'outside the run'}; "
                                 "nothing was replayed")
    seen.add((first, second))
    report = restore_report(record["value"], svc.guarantee)
    try:
        svc.aggregator.check(report)
    except InvalidReportError as e:
        raise RunFileError(path, f"record {i}: {e}; nothing was replayed") from None
    if charge and svc.ledger is not None:
        try:
            svc.ledger.charge(first, svc.guarantee)
        except BudgetExceededError as e:
            raise RunFileError(path, f"record {i}: over its agent's budget ({e}): the log "
                                     "disagrees with the run; nothing was replayed") from None
    return report
