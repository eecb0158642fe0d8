"""One agent node: the release protocol of every runtime's agents, whatever carries it.

A Ray actor, a Flower agent executor or a test calls `AgentNode.release(agent, index, θ)`;
the node runs its system's pure agent step (`AgentStep`: the local runner's own code, so a
seeded remote run is the local run) under the one protocol that keeps an agent's guarantee
whatever the server or the driver asks:

1. **check the request**: an agent that is the node's own; with `ordered`, an index after the
   last one the node released (a round it was not asked for in time stays unreleased); the
   step's rules (an index inside the run, an episode budget not yet spent, ...); a θ of the
   model's length with finite entries (ValueError, nothing spent);
2. **re-send what it released**: asked again for a released (agent, index), the same output,
   no new noise, nothing charged (a retried request never yields a second, different report);
3. **charge before releasing**: every agent the step releases together is charged to the
   node's budget (its `PrivacyLedger`, or any `Budget`) before anything is computed; past an
   agent's budget it raises BudgetExceededError and nothing is recorded or released;
4. **durable state**: what it released and its ledger go to its `NodeStore` (a privrl run
   file, never a pickle, and never the noise root, in the node's own directory: mode 0700,
   files 0600, never the server operator's run directory; `private_write`) before the
   output is returned, so that a node restarted mid-run re-sends instead of drawing new
   noise, and spends nothing twice. (A node of a secure sum refuses instead of re-sending:
   privrl.systems.fedpg.flower.CenNode.) A transport that answers several releases in one
   message releases them inside `AgentNode.saving_once()`: the state is then written once,
   when the block ends, still before the message that carries them leaves.

The ledger is the caller's (built from the run's config by the system's ledger factory), so
a node enforces the budget the run's privacy.json states.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from privrl.federation.service import Submission
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.report import Guarantee, restore_report
from privrl.runfile import RunFileError, atomic_write, checked, dumps, read

__all__ = ["AgentNode", "AgentStep", "Budget", "NodeStore", "Released", "ReleasedFile",
           "check_theta", "new_private_dir", "node_dirs", "private_dir", "private_read",
           "private_write"]

Out = TypeVar("Out")
Key = tuple[int, int]  # (agent, index): one release


class AgentStep(Protocol[Out]):
    """A system's pure agent step as a node runs it."""

    guarantee: Guarantee  # what one release of one agent costs

    def check(self, agent: int, index: int) -> None:
        """The system's own rules for a request; ValueError to refuse it."""

    def together(self, agent: int) -> Sequence[int]:
        """The agents released (and charged) in the step that releases `agent`'s output:
        itself, or every agent of the node when one round computes them together."""

    def __call__(self, theta: np.ndarray | None, agent: int, index: int) -> Mapping[Key, Out]:
        """The outputs of `together(agent)` for `index` (keyed by (agent, index))."""


class Budget(Protocol):
    """What a node charges before it releases: a `PrivacyLedger` (built by the system's ledger
    factory with the run's budget), or another account with the same two calls (the secure
    sum's rounds its mechanism was calibrated for)."""

    def can_charge(self, agents: Any, guarantee: Any) -> bool:
        """Whether charging would pass (nothing is charged)."""

    def charge(self, agents: Any, guarantee: Any) -> None:
        """Record the release for `agents`, or raise BudgetExceededError recording nothing."""


class NodeStore(Protocol):
    """Where a node keeps what it must not lose across a restart."""

    def save(self, ledger: Budget, released: Mapping[Key, Any]) -> None:
        """Write the ledger and the released outputs (atomically)."""


def check_theta(theta: Any, dim: int) -> np.ndarray:
    """θ of a request as float32; ValueError unless it is `dim` finite numbers."""
    theta = np.asarray(theta, np.float32)
    if theta.shape != (dim,) or not np.all(np.isfinite(theta)):
        raise ValueError(f"θ must be {dim} finite floats")
    return theta


class AgentNode(Generic[Out]):
    """The agents `agents` one process hosts, releasing through `step` (module doc).

    `ledger`: the agents' ledger (built with the run's budget; or another `Budget`);
    `released`: restored by the caller with the ledger after a restart; `store`: None keeps
    the state in memory only; `dim`: θ's length, checked when a request carries θ; `ordered`:
    indices (rounds) only increase; `where`: how refusals name the node ("SuperNode")."""

    def __init__(self, step: AgentStep[Out], agents: Collection[int], ledger: Budget,
                 dim: int, store: NodeStore | None = None,
                 released: Mapping[Key, Out] | None = None, ordered: bool = False,
                 where: str = "node") -> None:
        self.step, self.agents, self.ledger, self.dim = step, frozenset(agents), ledger, dim
        self.store, self.ordered, self.where = store, ordered, where
        self.released: dict[Key, Out] = dict(released or {})
        self._deferred: bool | None = None  # inside `saving_once`: whether a save is due

    @contextlib.contextmanager
    def saving_once(self) -> Iterator[None]:
        """Releases inside the block write the node's state once, as the block ends (also on
        an error), instead of once each: for a transport that sends them in one message,
        sent after the block (nothing of them leaves before the write)."""
        if self._deferred is not None:  # nested: the outer block writes
            yield
            return
        self._deferred = False
        try:
            yield
        finally:
            due, self._deferred = self._deferred, None
            if due:
                self.save()

    def release(self, agent: int, index: int, theta: Any = None) -> Out:
        """`agent`'s output for `index` from θ (None: the step's input is the node's own
        state, not a request's); ValueError or BudgetExceededError, nothing released, to
        refuse."""
        if agent not in self.agents:
            raise ValueError(f"agent {agent} is not one of this {self.where}'s")
        done = self.released.get((agent, index))
        if done is not None:  # already public: the same output again, nothing new spent
            return done
        if self.ordered:
            last = self.last()
            if index <= last:
                raise ValueError(f"round {index} is outside {last + 1}..: before this "
                                 f"{self.where}'s last round {last}")
        self.step.check(agent, index)
        if theta is not None:
            theta = check_theta(theta, self.dim)
        ids = np.asarray(self.step.together(agent), np.int64)
        self.ledger.charge(ids, self.step.guarantee)  # before anything is computed or leaves
        self.released.update(self.step(theta, agent, index))
        if self._deferred is None:
            self.save()  # before anything leaves this process: a restart re-sends it
        else:
            self._deferred = True  # `saving_once` writes it before its caller sends
        return self.released[(agent, index)]

    def affords(self, agent: int) -> bool:
        """Whether `agent`'s next step fits its budget (nothing is charged)."""
        return self.ledger.can_charge(np.asarray(self.step.together(agent), np.int64),
                                      self.step.guarantee)

    def last(self) -> int:
        """The last index (round) released, -1 if none."""
        return max((i for _, i in self.released), default=-1)

    def forget(self) -> None:
        """Drop the released outputs (a transport that needs only the round in flight, once
        that round is past)."""
        self.released.clear()

    def save(self) -> None:
        if self.store is not None:
            self.store.save(self.ledger, self.released)


# --- a node's own files: the agent's trust domain, not the operator's ---------------------------
# A node's state says what its agents released; it belongs to the agents' owner. It lives in a
# directory of the node's own (mode 0700, owned by this user, never a symbolic link), never
# under the run directory of the server's operator, in files of mode 0600 written through a
# fresh temp file opened with O_CREAT | O_EXCL | O_NOFOLLOW and renamed into place.
def private_dir(directory: Path) -> Path:
    """`directory`, made (mode 0700) if missing; ValueError if it is a symbolic link, not a
    directory, another user's, or open to group or others."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{directory} is not a directory (a symbolic link is not followed)")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ValueError(f"{directory} must be this user's, mode 0700 (it is "
                         f"{stat.S_IMODE(st.st_mode):o}): a node's state is its agents' own")
    return directory


def new_private_dir(prefix: str) -> Path:
    """A fresh directory of the node's own (mode 0700) in the system's temporary directory:
    where a local deployment's node keeps its state, apart from the run directory."""
    return Path(tempfile.mkdtemp(prefix=prefix))


@contextlib.contextmanager
def node_dirs(nodes: int, run_dir: Path, state_root: Path | None = None
              ) -> Iterator[list[Path]]:
    """The own directories (mode 0700) of a local deployment's `nodes` nodes, apart from the
    operator's run directory `run_dir`: `state_root`/node<i> (made if missing, kept), or, with
    None, fresh temporary ones (`new_private_dir`) removed when the block ends. ValueError,
    nothing made, if `state_root` lies under `run_dir`; ValueError if a directory made lies
    under it anyway (a temporary directory inside the run directory), removed again."""
    run = Path(run_dir).resolve()
    if state_root is not None and Path(state_root).resolve().is_relative_to(run):
        raise ValueError(f"state_root {state_root} lies under the run directory {run_dir}: a "
                         "node's state is its agents' own, not the server operator's")
    own: list[Path] = []
    try:
        for i in range(nodes):
            own.append(new_private_dir(f"privrl-node{i}-") if state_root is None
                       else private_dir(Path(state_root) / f"node{i}"))
            if own[-1].resolve().is_relative_to(run):
                raise ValueError(f"the node directory {own[-1]} lies under the run directory "
                                 f"{run_dir}: give the nodes a state_root elsewhere")
        yield own
    finally:
        if state_root is None:
            for d in own:
                shutil.rmtree(d, ignore_errors=True)


def private_write(path: Path, kind: str, state: Any) -> None:
    """A run file of `kind` in the node's own directory (`private_dir`), mode 0600, atomically
    (a temp file created exclusively, never through a link, fsynced, then renamed)."""
    path = Path(path)
    private_dir(path.parent)
    atomic_write(path, dumps(kind, state), mode=0o600)


def private_read(path: Path, kind: str) -> Any:
    """What `private_write` wrote; RunFileError if the file or its directory could be another
    user's or written by group or others (then it is not the node's own state)."""
    path = Path(path)
    try:
        private_dir(path.parent)
    except ValueError as e:
        raise RunFileError(path, f"is not in a directory of the node's own ({e})") from None
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode) and (st.st_uid != os.getuid() or st.st_mode & 0o077):
        raise RunFileError(path, f"must be this user's, mode 0600 (it is "
                                 f"{stat.S_IMODE(st.st_mode):o}); nothing was loaded")
    return read(path, kind)


# --- a node's state as a run file: its ledger and the Submissions it released -----------------
Released = dict[Key, tuple[Submission, float]]  # (agent, index) -> (Submission, its score)


class ReleasedFile:
    """A node's `NodeStore` for Submissions (with a score each) in a privrl run file of
    `kind` in the node's own directory (`private_write`): its agents' ledger and every report
    it released, never its noise root."""

    def __init__(self, path: Path, kind: str, guarantee: Guarantee, dim: int) -> None:
        self.path, self.kind, self.guarantee, self.dim = Path(path), kind, guarantee, dim

    def save(self, ledger: PrivacyLedger, released: Mapping[Key, Any]) -> None:
        keys = sorted(released)
        private_write(self.path, self.kind, {
            "ledger": ledger.to_state(),
            "ids": np.array(keys, np.int64).reshape(-1, 2),
            "values": (np.stack([np.asarray(released[k][0].report.value, np.float32)
                                 for k in keys])
                       if keys else np.zeros((0, self.dim), np.float32)),
            "scores": np.array([released[k][1] for k in keys], np.float32)})

    def load(self) -> tuple[PrivacyLedger, Released] | None:
        """What `save` wrote (None: no file yet); RunFileError naming the file if it is not
        such a state for reports of length `dim`."""
        if not self.path.exists():
            return None
        state = private_read(self.path, self.kind)
        with checked(self.path):
            ledger = PrivacyLedger.from_state(state["ledger"])
            ids, values, scores = (np.asarray(state[k]) for k in ("ids", "values", "scores"))
            n = ids.shape[0]
            if ids.shape != (n, 2) or values.shape != (n, self.dim) or scores.shape != (n,):
                raise ValueError("the released reports do not match this run's model")
            released: Released = {}
            for (agent, index), value, score in zip(ids, values, scores, strict=True):
                report = restore_report(value.astype(np.float32), self.guarantee)
                released[(int(agent), int(index))] = (
                    Submission(int(agent), int(index), report), float(score))
            return ledger, released
