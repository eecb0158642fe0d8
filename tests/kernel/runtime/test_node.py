"""The one agent node (privrl.runtime.node) with a stand-in step: it refuses before spending,
re-sends what it released without charging again, charges before it computes, and keeps its
ledger and releases in a run file written before the output is returned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.federation.service import Submission
from privrl.privacy.ledger import BudgetExceededError, PrivacyLedger
from privrl.privacy.report import Guarantee, restore_report
from privrl.runfile import RunFileError
from privrl.runtime.node import AgentNode, ReleasedFile

G = Guarantee(1.0, 0.0, "ε-LDP", "one report", "replace one input")
DIM = 3


class Step:
    """Agents 0 and 2 release together; indices 0..4; the report is θ + index."""

    guarantee = G

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def check(self, agent: int, index: int) -> None:
        if not 0 <= index < 5:
            raise ValueError(f"index {index} is outside 0..4")

    def together(self, agent: int) -> list[int]:
        return [0, 2]

    def __call__(self, theta, agent, index):
        self.calls.append((agent, index))
        return {(a, index): (Submission(a, index, restore_report(
            np.asarray(theta, np.float32) + index + a, G)), float(index)) for a in (0, 2)}


class Store:
    def __init__(self) -> None:
        self.saved: list[list[tuple[int, int]]] = []

    def save(self, ledger, released) -> None:
        self.saved.append(sorted(released))


def test_the_node_protocol() -> None:
    step, store = Step(), Store()
    node = AgentNode(step, [0, 2], PrivacyLedger(2.0), DIM, store, ordered=True,
                     where="SuperNode")
    theta = np.zeros(DIM, np.float32)
    with pytest.raises(ValueError, match="not one of this SuperNode's"):
        node.release(1, 0, theta)
    with pytest.raises(ValueError, match="finite"):
        node.release(0, 0, np.full(DIM, np.nan))
    with pytest.raises(ValueError, match=r"outside 0\.\.4"):
        node.release(0, 5, theta)
    assert step.calls == [] and store.saved == [] and node.ledger.num_reports == 0
    sub, score = node.release(0, 1, theta)
    assert (sub.agent_id, sub.index, score) == (0, 1, 1.0)
    assert store.saved == [[(0, 1), (2, 1)]]  # saved before it was returned
    # its partner's output of the same step, and a retried request: re-sent, nothing spent
    assert node.release(2, 1, theta + 9)[0].report.value.tolist() == [3.0] * DIM
    assert node.release(0, 1, theta + 9)[0] is sub
    assert step.calls == [(0, 1)]
    assert node.ledger.reports_of(0) == 1 == node.ledger.reports_of(2)
    with pytest.raises(ValueError, match=r"outside 2\.\."):  # ordered: a past round stays unsent
        node.release(0, 0, theta)
    assert node.affords(0)
    node.release(0, 3, theta)
    assert not node.affords(0)
    with pytest.raises(BudgetExceededError):  # charged before computing: nothing computed
        node.release(2, 4, theta)
    assert step.calls == [(0, 1), (0, 3)] and node.ledger.reports_of(2) == 2
    node.forget()
    assert node.last() == -1


def test_releases_in_one_message_write_the_state_once_before_it_leaves() -> None:
    """`saving_once`: several releases (one batch message) write the state once, as the block
    ends, with every release in it; a refusal inside still leaves the earlier ones written;
    a block that released nothing writes nothing."""
    store = Store()
    node = AgentNode(Step(), [0, 2], PrivacyLedger(2.0), DIM, store)
    theta = np.zeros(DIM, np.float32)
    with node.saving_once():
        node.release(0, 0, theta)
        node.release(0, 1, theta)
        assert store.saved == []  # nothing has left: the caller sends after the block
    assert store.saved == [[(0, 0), (0, 1), (2, 0), (2, 1)]]
    with pytest.raises(BudgetExceededError), node.saving_once():
        node.release(2, 0, theta)  # re-sent, nothing new
        node.release(2, 2, theta)
    assert len(store.saved) == 1
    node.ledger = PrivacyLedger(3.0)
    with pytest.raises(ValueError), node.saving_once():
        node.release(0, 2, theta)
        node.release(0, 9, theta)
    assert store.saved[-1] == [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2)]
    node.release(0, 3, theta)  # outside a block: at once
    assert len(store.saved) == 3


def test_a_released_file_restores_the_ledger_and_the_reports(tmp_path: Path) -> None:
    file = ReleasedFile(tmp_path / "agents.npz", "test-node", G, DIM)
    assert file.load() is None
    node = AgentNode(Step(), [0, 2], PrivacyLedger(2.0), DIM, file)
    sub, _ = node.release(2, 1, np.ones(DIM))
    ledger, released = file.load()
    assert ledger.reports_of(2) == 1 and ledger.epsilon_budget == 2.0
    assert sorted(released) == [(0, 1), (2, 1)]
    np.testing.assert_array_equal(released[(2, 1)][0].report.value, sub.report.value)
    again = AgentNode(Step(), [0, 2], ledger, DIM, file, released)
    assert np.array_equal(again.release(2, 1, np.zeros(DIM))[0].report.value,
                          sub.report.value) and again.ledger.reports_of(2) == 1
    with pytest.raises(RunFileError, match="do not match"):
        ReleasedFile(tmp_path / "agents.npz", "test-node", G, DIM + 1).load()


def test_a_nodes_state_is_its_own(tmp_path: Path) -> None:
    """(Issue 52) A node's state file: mode 0600 in a directory of mode 0700 made for it; a
    directory that is a symbolic link, or open to others, is refused, and so is a state file
    others could have written."""
    import os
    import stat

    from privrl.runtime.node import private_dir, private_read, private_write

    own = tmp_path / "own" / "node0"
    private_write(own / "s.npz", "test-node", {"n": 1})
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    assert stat.S_IMODE((own / "s.npz").stat().st_mode) == 0o600
    assert private_read(own / "s.npz", "test-node") == {"n": 1}
    assert [p.name for p in own.iterdir()] == ["s.npz"]  # no temp file left
    os.chmod(own / "s.npz", 0o644)
    with pytest.raises(RunFileError, match="0600"):
        private_read(own / "s.npz", "test-node")
    (tmp_path / "link").symlink_to(own)
    with pytest.raises(ValueError, match="not a directory"):
        private_dir(tmp_path / "link")
    os.chmod(own, 0o755)
    with pytest.raises(ValueError, match="0700"):
        private_write(own / "s.npz", "test-node", {"n": 2})


def test_a_local_deployments_node_directories_lie_outside_the_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(Issue 52) `node_dirs`: fresh temporary directories of mode 0700, outside the run
    directory and removed after the block; a named state root's `node<i>` are kept; a state
    root under the run directory is refused before anything is made, and so is a temporary
    directory that would land there."""
    import stat
    import tempfile

    from privrl.runtime.node import node_dirs

    run = tmp_path / "run"
    run.mkdir()
    with node_dirs(2, run) as own:
        assert len(set(own)) == 2
        for d in own:
            assert not d.resolve().is_relative_to(run.resolve())
            assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert not any(d.exists() for d in own)
    with node_dirs(2, run, tmp_path / "mine") as own:
        assert own == [tmp_path / "mine" / "node0", tmp_path / "mine" / "node1"]
    assert all(d.is_dir() for d in own)
    with pytest.raises(ValueError, match="under the run directory"), \
            node_dirs(1, run, run / "agents"):
        pass
    assert list(run.iterdir()) == []
    monkeypatch.setenv("TMPDIR", str(run))
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    with pytest.raises(ValueError, match="under the run directory"), node_dirs(1, run):
        pass
    assert list(run.iterdir()) == []
