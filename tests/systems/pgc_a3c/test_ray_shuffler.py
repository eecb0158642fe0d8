"""The PGC-A3C Ray runtime's shuffler (`--runtime ray --shuffle`), its actor classes called
in-process (no Ray started, so not in the `ray` group): every batch reaches the aggregator once,
in a uniformly random order drawn from the OS CSPRNG, without identities; θ is the reports
applied in that order; the shuffler charges the ledger; a restarted shuffler or aggregator loses
nothing and applies nothing twice."""

from __future__ import annotations

import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.federation.service import AggregatorSpec, Shuffled, Submission, read_log, replay
from privrl.federation.shuffler import Shuffler, read_orders
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.mechanisms import LaplaceMechanism
from privrl.systems.pgc_a3c.ray import AggregatorActor, ShufflerActor

DIM, AGENTS, BATCH = 8, 12, 4
MECH = LaplaceMechanism(epsilon=2.0, clip=1.0)
SPEC = AggregatorSpec(DIM, 1, "sgd", 0.5)


class Crash(Exception):
    """The shuffler's process dying at a chosen point."""


class Recorder:
    """The aggregator actor behind a channel that records every forwarded batch."""

    def __init__(self, agg: AggregatorActor) -> None:
        self.agg, self.batches = agg, []
        self.crash_before: int | None = None  # die before forwarding this batch number
        self.crash_after: int | None = None  # die after the aggregator took it, before its answer

    def submit_many(self, items: list[Shuffled]) -> list:
        if items[0].batch == self.crash_before:
            raise Crash
        self.batches.append(list(items))
        verdicts = self.agg.submit_many(items)
        if items[0].batch == self.crash_after:
            raise Crash
        return verdicts


def _aggregator(directory: Path) -> AggregatorActor:
    return AggregatorActor(SPEC, np.zeros(DIM, np.float32), AGENTS, None, MECH.guarantee,
                           str(directory), 2, BATCH)


def _subs(n: int) -> list[Submission]:
    return [Submission(a, 0, MECH.privatize(jax.random.key(a), jnp.arange(DIM, dtype=jnp.float32)))
            for a in range(n)]


def _applied(reports: list) -> np.ndarray:
    agg = SPEC.build()
    state = agg.init(np.zeros(DIM, np.float32))
    for r in reports:
        state = agg.submit(state, r)
    return np.asarray(state.theta)


def _values(items: list[Shuffled]) -> list[list[float]]:
    return [np.asarray(it.report.value).tolist() for it in items]


def _which(report: object, subs: list[Submission]) -> int:
    """The agent whose report this is (the test knows; the aggregator does not)."""
    hits = [s.agent_id for s in subs if np.array_equal(s.report.value, report.value)]
    assert len(hits) == 1
    return hits[0]


def test_each_batch_is_forwarded_once_as_a_permutation_without_identities(
        tmp_path: Path) -> None:
    agg = _aggregator(tmp_path / "aggregator")
    channel = Recorder(agg)
    shuffler = ShufflerActor(BATCH, AGENTS, DIM, PrivacyLedger(2.0), MECH.guarantee, channel,
                             str(tmp_path / "shuffler"))
    subs = _subs(10)
    for k, sub in enumerate(subs):
        assert shuffler.submit(sub).accepted
        assert len(channel.batches) == (k + 1) // BATCH  # forwarded as soon as a batch is full
    assert not shuffler.submit(subs[3]).accepted  # a retried (agent, index): never forwarded
    over = Submission(0, 1, MECH.privatize(jax.random.key(99), jnp.ones(DIM)))
    assert shuffler.submit(over).reason.startswith("over budget")
    status = shuffler.close()  # the last, partial batch
    assert status["batches"] == status["delivered"] == 3 and status["accepted"] == 10
    assert status["rejections"] == {"duplicate": 1, "over budget": 1}
    assert shuffler.submit(Submission(10, 0, subs[0].report)).reason.startswith("closed")

    assert [len(b) for b in channel.batches] == [4, 4, 2]
    order = []
    for b, items in enumerate(channel.batches):
        # What the aggregator receives: a batch number, a slot and the Report; no identity.
        assert all(type(it) is Shuffled and it._fields == ("batch", "slot", "report")
                   and (it.batch, it.slot) == (b, s) for s, it in enumerate(items))
        senders = [_which(it.report, subs) for it in items]
        assert sorted(senders) == list(range(4 * b, 4 * b + len(items)))  # a permutation
        order += senders
    assert sorted(order) == list(range(10))  # every report exactly once
    orders = read_orders(tmp_path / "shuffler", BATCH)  # what the shuffler drew and wrote
    assert [4 * r["batch"] + r["order"][s] for r in orders for s in range(r["size"])] == order

    # θ is the same reports applied in the shuffled order; the log and replay agree.
    agg.close()
    theta = _applied([subs[a].report for a in order])
    np.testing.assert_array_equal(agg.theta(), theta)
    np.testing.assert_array_equal(replay(tmp_path / "aggregator"), theta)
    log = read_log(tmp_path / "aggregator", DIM)
    assert [(int(r["agent"]), int(r["index"])) for r in log] == [  # (batch, slot) only
        (b, s) for b, n in enumerate((4, 4, 2)) for s in range(n)]
    # The shuffler charged every agent once; the aggregator holds no ledger at all.
    assert shuffler.ledger().num_reports == 10 and agg.ledger() is None
    assert all(shuffler.ledger().spent(a)[0] == 2.0 for a in range(10))


def test_the_order_is_uniform_and_not_reproducible() -> None:
    """600 batches of 3 (reports reused: the shuffler deduplicates by (agent, index)): all 6
    orders about equally often (χ², 5 df, far below 1e-6's 35.9), and a second shuffler fed the
    same submissions draws another sequence (OS CSPRNG, no seed)."""
    reports = [s.report for s in _subs(3)]

    def orders() -> list[tuple[int, ...]]:
        seen: list[tuple[int, ...]] = []

        def forward(items: list[Shuffled]) -> list:
            seen.append(tuple(next(k for k in range(3) if it.report is reports[k])
                              for it in items))
            return []

        shuffler = Shuffler(3, 600, DIM, PrivacyLedger(), MECH.guarantee, forward)
        for a, k in itertools.product(range(600), range(3)):
            shuffler.submit(Submission(a, k, reports[k]))
        return seen

    first = orders()
    counts = np.array([first.count(p) for p in itertools.permutations(range(3))])
    assert counts.sum() == 600 and ((counts - 100) ** 2 / 100).sum() < 35.9, counts
    assert orders() != first


def test_a_restarted_shuffler_or_aggregator_loses_nothing_and_applies_nothing_twice(
        tmp_path: Path) -> None:
    agg = _aggregator(tmp_path / "aggregator")
    channel = Recorder(agg)
    sdir = str(tmp_path / "shuffler")
    shuffler = ShufflerActor(BATCH, AGENTS, DIM, PrivacyLedger(2.0), MECH.guarantee, channel,
                             sdir)
    subs = _subs(12)
    for sub in subs[:4]:
        shuffler.submit(sub)
    channel.crash_after = 1  # batch 1 reaches the aggregator, the shuffler dies before the answer
    with pytest.raises(Crash):
        for sub in subs[4:8]:
            shuffler.submit(sub)
    channel.crash_after = None
    shuffler = ShufflerActor(None, None, None, None, None, channel, sdir)  # restarted
    assert len(channel.batches) == 3  # batch 1 again, in the same order
    assert _values(channel.batches[2]) == _values(channel.batches[1])
    assert agg.status()["accepted"] == 8 and agg.status()["rejections"] == {"duplicate": 4}
    assert shuffler.status()["rejected_by_aggregator"] == {}  # duplicates are expected here
    assert not shuffler.submit(subs[5]).accepted  # the ledger and dedup set came back
    assert shuffler.ledger().num_reports == 8

    shuffler.submit(subs[8])  # pending: survives the next crash
    channel.crash_before = 2  # batch 2's permutation is written, then the shuffler dies
    with pytest.raises(Crash):
        for sub in subs[9:12]:
            shuffler.submit(sub)
    written = read_orders(sdir, BATCH)[2]["order"].copy()
    channel.crash_before = None
    agg = _aggregator(tmp_path / "aggregator")  # the aggregator restarts too (from its files)
    channel.agg = agg
    shuffler = ShufflerActor(None, None, None, None, None, channel, sdir)
    assert [subs[8 + i].report.value.tolist() for i in written] == _values(channel.batches[-1])
    assert shuffler.close()["delivered"] == 3
    agg.close()
    assert agg.status()["accepted"] == 12 and shuffler.ledger().num_reports == 12
    order = [_which(it.report, subs) for items in channel.batches[:2] + channel.batches[3:]
             for it in items]
    assert sorted(order) == list(range(12))
    np.testing.assert_array_equal(agg.theta(), _applied([subs[a].report for a in order]))


def test_a_shuffled_batch_aggregator_takes_no_identified_submission(tmp_path: Path) -> None:
    agg = _aggregator(tmp_path)
    sub = _subs(1)[0]
    assert agg.submit(sub).reason.startswith("not a Shuffled item")
    assert agg.submit(Shuffled(0, BATCH, sub.report)).reason.startswith("no such batch slot")
    assert agg.submit(Shuffled(0, 0, sub.report)).accepted
    assert agg.submit(Shuffled(0, 0, sub.report)).reason.startswith("duplicate")
    with pytest.raises(ValueError, match="ledger"):
        AggregatorActor(SPEC, np.zeros(DIM, np.float32), AGENTS, PrivacyLedger(), MECH.guarantee,
                        str(tmp_path / "other"), 2, BATCH)
