"""PGC-A3C as Flower apps, in one process: the ServerApp's loop (`serve_pgc`) against the
agents' handlers through a grid that delivers Flower messages by calling them. What travels is
what a deployment sends (Flower records, checked on arrival); the processes, TLS and node
authentication are tests/systems/pgc_a3c/test_flower_deployment.py's."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from privrl.compute.sharding import setting_trial_keys
from privrl.federation.flower import (
    RESULTS,
    WireError,
    read_submission,
    request_content,
    serve_pgc,
    submission_content,
)
from privrl.federation.service import LOG, AggregatorService, AggregatorSpec, Submission
from privrl.privacy.ledger import BudgetExceededError
from privrl.runtime.flower import refusal
from privrl.systems.pgc_a3c import flower
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig, budget_ledger, lone_agent
from privrl.systems.pgc_a3c.local import run_pgc_a3c

# flwr 1.42 builds bundles with a pathspec pattern class pathspec deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")

CFG = PGCA3CConfig(trials=1, submissions=6, parallel_agents=1, epsilon=10, seed=3,
                   server_optimizer="sgd", noise="seeded")


@pytest.fixture(autouse=True)
def _run_identity(call_grid: Any) -> None:
    """A message names its run, as in a ServerApp's process (`call_grid` sets it)."""


def _setup(cfg: PGCA3CConfig, directory: Path) -> None:
    """The aggregator's setup as run_pgc_a3c_flower writes it."""
    cfg = cfg.resolved()
    algo, _ = lone_agent(cfg)
    theta0 = np.asarray(algo.init(setting_trial_keys(cfg.seed, 1, 1, 1, 1)[0]).agg.theta)
    AggregatorService(AggregatorSpec(algo.dim, cfg.buffer_size, cfg.server_optimizer,
                                     cfg.learning_rate), theta0, cfg.submissions,
                      budget_ledger(cfg), algo.mechanism.guarantee, directory).close()


def test_seeded_flower_run_is_the_local_run(tmp_path: Path, call_grid: Any) -> None:
    """Two SuperNodes' agents (0, 2, 4 and 1, 3, 5), one submission per round: the scores are
    the local runner's and θ equals its θ to float32 rounding. The local runner computes a
    round inside one compiled scan, a Flower agent one submission per compiled call: XLA may
    fuse the two differently, so θ agrees to 1e-6 (it measured 5e-10 on θ of size ~0.5), not
    bit for bit."""
    local = run_pgc_a3c(dataclasses.replace(CFG))
    _setup(CFG, tmp_path)
    agents = [flower.FlowerAgent(CFG, i, 2) for i in range(2)]
    grid = call_grid({101: agents[0].handle, 202: agents[1].handle})
    out = serve_pgc(grid, tmp_path, CFG.submissions, 1, 1, 2)  # type: ignore[arg-type]
    assert out["refused"] == [] and out["status"]["accepted"] == 6
    np.testing.assert_array_equal(np.array(out["scores"], np.float32), local.scores[0])
    theta = AggregatorService.restore(tmp_path).theta()
    np.testing.assert_allclose(theta, local.theta[0], rtol=0, atol=1e-6)
    assert json.loads((tmp_path / RESULTS).read_text())["scores"] == out["scores"]
    # Every message to a node asked for its own agents only; each agent charged its own.
    for m in grid.sent:
        for agent in m.content.config_records["asks"]["agents"]:
            assert [101, 202][agent % 2] == m.metadata.dst_node_id
    assert agents[0].ledger.summary()["agents"] == 3 == agents[1].ledger.summary()["agents"]


def test_a_ray_agent_actor_releases_what_a_flower_agent_does() -> None:
    """Both runtimes' agents release through PGC-A3C's one agent step with the local runner's
    keys (privrl.systems.pgc_a3c.agent): seeded, the same request gives the same Submission
    and score (so a Ray run with one agent in flight is the local run, as Flower's is above)."""
    from privrl.systems.pgc_a3c.ray import AgentActor

    agent, actor = flower.FlowerAgent(CFG, 0, 1), AgentActor(CFG.resolved())
    theta = np.full(agent.dim, 0.01, np.float32)
    for a, i in ((0, 0), (3, 0)):
        (sub, score), (ray_sub, ray_score) = agent.release(theta, a, i), actor.run(theta, a, i)
        assert (ray_sub.agent_id, ray_sub.index, ray_score) == (a, i, score)
        np.testing.assert_array_equal(ray_sub.report.value, sub.report.value)


def test_secret_noise_is_the_default_and_differs_from_the_seeded_run(tmp_path: Path) -> None:
    """Without `noise`, an agent draws its root from os.urandom in its own process: the same
    request gives another report than a seeded agent (and than another secret agent). Two
    reports per agent: the configs of the restart and budget tests below, whose agent steps
    (secret and seeded) these agents share (`step_program`: one compile each, not two)."""
    cfg = dataclasses.replace(CFG, noise=None, submissions_per_agent=2)
    a, b = flower.FlowerAgent(cfg, 0, 1), flower.FlowerAgent(cfg, 0, 1)
    seeded = flower.FlowerAgent(dataclasses.replace(cfg, noise="seeded"), 0, 1)
    assert a.config.noise == "secret"
    theta = np.zeros(a.dim, np.float32)
    ra, rb, rs = (x.release(theta, 0, 0)[0].report.value for x in (a, b, seeded))
    assert not np.array_equal(ra, rb) and not np.array_equal(ra, rs)


def test_an_agent_refuses_past_its_budget_and_resends_what_it_released() -> None:
    """Each agent's own ledger: submissions_per_agent = 2 at ε = 10 (5 a report). Asked again
    for a released (agent, index), the agent re-sends the same report and spends nothing; asked
    for an index past its budget, a foreign agent or a bad θ, it releases nothing."""
    cfg = dataclasses.replace(CFG, submissions_per_agent=2)
    agent = flower.FlowerAgent(cfg, 0, 2)
    theta = np.zeros(agent.dim, np.float32)
    first, _ = agent.release(theta, 2, 0)
    again, _ = agent.release(theta + 1, 2, 0)
    assert again is first
    assert agent.ledger.summary()["per_agent_epsilon"]["max"] == pytest.approx(5.0)
    agent.release(theta, 2, 1)
    assert agent.ledger.summary()["per_agent_epsilon"]["max"] == pytest.approx(10.0)
    # A server that asks past the budget: the ledger refuses before anything is computed.
    agent.released.clear()
    with pytest.raises(BudgetExceededError):
        agent.release(theta, 2, 0)
    for bad in ({"agent_id": 1, "index": 0}, {"agent_id": 2, "index": 2},
                {"agent_id": 99, "index": 0}):
        reply = agent.handle(Message(request_content(theta, **bad), dst_node_id=1,
                                     message_type="train"))
        assert reply.has_error() and reply.error.code == flower.REFUSED
    nan = np.full(agent.dim, np.nan, np.float32)
    reply = agent.handle(Message(request_content(nan, 0, 0), dst_node_id=1,
                                 message_type="train"))
    assert reply.has_error() and "NaN" in reply.error.reason
    assert (0, 0) not in agent.released


def _reply(sub: Submission, **change: Any) -> RecordDict:
    content = submission_content(sub, 3.0)
    for record, value in change.items():
        content[record] = value
    return content


def test_the_server_checks_every_reply_before_using_it(tmp_path: Path) -> None:
    """What a reply must be: a float32 value of the model's shape, integer ids, a guarantee's
    fields; then the service refuses a non-finite value, another mechanism, a second report for
    one (agent, index) and an agent outside the run, and changes nothing."""
    agent = flower.FlowerAgent(CFG, 0, 1)
    sub, _ = agent.release(np.zeros(agent.dim, np.float32), 0, 0)
    dim = agent.dim
    good = read_submission(submission_content(sub, 3.0), dim)[0]
    np.testing.assert_array_equal(good.report.value, sub.report.value)
    assert good.report.guarantee == sub.report.guarantee
    value = np.asarray(sub.report.value)
    for bad in (
        {"report": ArrayRecord({"value": Array(value.astype(np.float64))})},
        {"report": ArrayRecord({"value": Array(value[:-1])})},
        {"report": ArrayRecord({"value": Array(value), "more": Array(value)})},
        # A record that declares float32 (dim,) over the bytes of another array.
        {"report": ArrayRecord({"value": Array(dtype="float32", shape=(dim,), stype="numpy.ndarray",
                                               data=Array(value.astype(np.float64)).data)})},
        {"ids": ConfigRecord({"agent": 0.0, "index": 0})},
        {"guarantee": ConfigRecord({"epsilon": 1.0, "rogue": 1})},
    ):
        with pytest.raises(WireError):
            read_submission(_reply(sub, **bad), dim)
    _setup(CFG, tmp_path)
    svc = AggregatorService.restore(tmp_path)
    theta = svc.theta()
    nan = _reply(sub, report=ArrayRecord({"value": Array(np.full(dim, np.nan, np.float32))}))
    other = _reply(sub, guarantee=ConfigRecord({**dict(_reply(sub)["guarantee"]),
                                                "epsilon": 1.0}))
    outside = _reply(sub, ids=ConfigRecord({"agent": 6, "index": 0}))
    for content, reason in ((nan, "malformed"), (other, "wrong mechanism"),
                            (outside, "unknown agent")):
        verdict = svc.submit(read_submission(content, dim)[0])
        assert not verdict.accepted and verdict.reason.startswith(reason)
    assert svc.submit(good).accepted
    assert svc.submit(read_submission(submission_content(sub, 3.0), dim)[0]).reason.startswith(
        "duplicate")
    assert svc.status()["accepted"] == 1 and not np.array_equal(svc.theta(), theta)


def test_a_batch_travels_as_one_record_whatever_its_size_and_is_checked_whole() -> None:
    """A round's request to a SuperNode and its reply each move as the same few Flower objects
    (one HTTP request each per hop) for 1 ask as for 6: one config record, θ and the values
    as float32 bytes, each distinct guarantee once. Read back, each ask gets its own
    Submission (value, ids, guarantee, score) or refusal, in order; a request or reply that
    is not one well-formed batch is refused whole."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    from privrl.federation.flower import (
        batch_content,
        batch_reply_content,
        read_batch,
        read_batch_reply,
    )

    cfg = dataclasses.replace(CFG, submissions=12)
    agent = flower.FlowerAgent(cfg, 0, 1)
    theta, dim = np.linspace(-1, 1, agent.dim, dtype=np.float32), agent.dim
    subs = [agent.release(theta, a, 0) for a in range(6)]
    items: list[Any] = [subs[0], "spent", subs[2], subs[3], "not mine", subs[5]]

    def objects(content: RecordDict) -> int:
        return len(get_all_nested_objects(Message(content, dst_node_id=1, message_type="train")))

    asks = [(a, 0) for a in range(6)]
    assert objects(batch_content(theta, asks)) == objects(batch_content(theta, asks[:1])) == 3
    assert objects(batch_reply_content(items)) == objects(batch_reply_content(items[:1])) == 3
    got_theta, got_asks = read_batch(batch_content(theta, asks), dim)
    np.testing.assert_array_equal(got_theta, theta)
    assert got_asks == asks
    got = read_batch_reply(batch_reply_content(items), dim, 6)
    assert got[1] == "the agent refused: spent" and got[4] == "the agent refused: not mine"
    for i in (0, 2, 3, 5):
        sub, score = got[i]
        assert (sub.agent_id, sub.index, score) == (i, 0, subs[i][1])
        np.testing.assert_array_equal(sub.report.value, subs[i][0].report.value)
        assert sub.report.guarantee == subs[i][0].report.guarantee
    assert read_batch_reply(batch_reply_content(["no", "no"]), dim, 2) == [
        "the agent refused: no"] * 2

    def changed(content: RecordDict, record: str, **values: Any) -> RecordDict:
        content[record] = ConfigRecord({**dict(content[record]), **values})
        return content

    values = b"".join(np.asarray(subs[i][0].report.value, np.float32).tobytes()
                      for i in (0, 2, 3, 5))
    for bad in ({"size": 5}, {"released": [0, 2, 3, 3]}, {"refused": [1]}, {"agents": [0, 2, 3]},
                {"scores": [1, 2, 3, 4]}, {"guarantee": [0, 0, 0, 1]},
                {"agents": [0.0, 2.0, 3.0, 5.0]}, {"g0.rogue": 1}, {"g00.epsilon": 1.0},
                {"more": 1},
                {"values": values[:-4]}, {"values": values + values[:4]},
                {"values": np.frombuffer(values, np.float32).astype(np.float64).tobytes()}):
        with pytest.raises(WireError):
            read_batch_reply(changed(batch_reply_content(items), "answers", **bad), dim, 6)
    nan = theta.copy()
    nan[3] = np.nan
    for bad in ({"theta": theta[:-1].tobytes()}, {"theta": nan.tobytes()},
                {"theta": theta.astype(np.float64).tobytes()}, {"indices": [0]},
                {"agents": []}, {"more": 1}):
        with pytest.raises(WireError):
            read_batch(changed(batch_content(theta, asks), "asks", **bad), dim)


def test_a_refusing_or_silent_agent_costs_the_run_only_its_submission(tmp_path: Path,
                                                                     call_grid: Any) -> None:
    """One SuperNode refuses everything (as the bundle's own ClientApp does), the other
    answers: the run goes on, its refusals named per submission, nothing applied for them."""
    _setup(CFG, tmp_path)
    agent = flower.FlowerAgent(CFG, 1, 2)

    def refuse(m: Message) -> Message:
        return refusal(m, "privrl.systems.pgc_a3c.flower")

    out = serve_pgc(call_grid({7: refuse, 8: agent.handle}), tmp_path, 6, 1, 1, 2)  # type: ignore[arg-type]
    assert [r["submission"] for r in out["refused"]] == [0, 2, 4]
    assert all("privrl's agent executor" in r["reason"] for r in out["refused"])
    assert out["status"]["accepted"] == 3
    assert [s is None for s in out["scores"]] == [True, False] * 3


class _Heartbeat:
    def __init__(self, *args: Any) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _Client:
    def close(self) -> None:
        pass


def test_the_agent_executor_runs_only_the_bundle_it_pinned(tmp_path: Path, monkeypatch) -> None:
    """The executor's task: a bundle whose SHA-256 is not the pinned one (here: the same app
    with another ClientApp named, as a server that ships its own code would send) gets an
    error and the agent's handler never sees its message; the pinned bundle reaches it."""
    from flwr.app import Context
    from flwr.cli.build import build_fab_from_disk
    from flwr.supercore.fab import Fab

    from privrl.runtime import flower as rt

    def bundle(name: str, clientapp: str) -> bytes:
        app = rt.write_app(tmp_path / name, "privrl-pgc-a3c", "privrl.federation.flower:server_app",
                           clientapp, {"nodes": 2})
        return build_fab_from_disk(app)

    trusted = bundle("ours", "privrl.systems.pgc_a3c.flower:client_app")
    theirs = bundle("theirs", "evil.module:client_app")
    assert rt.fab_hash(tmp_path / "ours") == rt.hashlib.sha256(trusted).hexdigest()
    request = Message(request_content(np.zeros(3, np.float32), 0, 0), dst_node_id=1,
                      message_type="train")
    context = Context(1, 1, {}, RecordDict(), {})
    seen: list[Message] = []
    pushed: list[tuple[Message, str]] = []

    def handle(m: Message, c: Context) -> Message:
        seen.append(m)
        return Message(RecordDict(), reply_to=m)

    monkeypatch.setattr(rt, "_runtime_client", lambda *a: _Client())
    monkeypatch.setattr(rt, "HeartbeatSender", _Heartbeat)
    monkeypatch.setattr(rt, "push_message", lambda c, reply, ctx: pushed.append((reply, "")))
    monkeypatch.setattr(rt, "push_task_output",
                        lambda c, ctx, status, details: pushed.append((None, status)))
    for content in (theirs, trusted):
        fab = Fab(rt.hashlib.sha256(content).hexdigest(), content, {})
        monkeypatch.setattr(rt, "pull_task_input", lambda c, fab=fab: (request, context, None, fab))
        rt._run_task("127.0.0.1:1", "token", handle, rt.hashlib.sha256(trusted).hexdigest())
    (refusal, _), (_, failed), (answer, _), (_, completed) = pushed
    assert refusal.has_error() and refusal.error.code == rt.UNTRUSTED_BUNDLE
    assert failed == "failed" and completed == "completed"
    assert not answer.has_error() and seen == [request]


def test_a_restarted_agent_resends_its_report_and_keeps_its_ledger(tmp_path: Path) -> None:
    """Secret noise: a restarted executor draws a new root, yet asked again for a released
    (agent, index) it sends the report it released before (kept with its ledger in its state
    file, written before the report left), so one (agent, index) never has two reports and its
    budget is not spent again; the root itself is never written."""
    cfg = dataclasses.replace(CFG, noise="secret", submissions_per_agent=2)
    theta = np.zeros(flower.FlowerAgent(cfg, 0, 1).dim, np.float32)
    first = flower.FlowerAgent(cfg, 0, 1, tmp_path)
    sub, score = first.release(theta, 0, 0)
    again = flower.FlowerAgent(cfg, 0, 1, tmp_path)  # the restart
    root = np.asarray(jax.random.key_data(first._noise))
    assert not np.array_equal(np.asarray(jax.random.key_data(again._noise)), root)
    sub2, score2 = again.release(theta, 0, 0)
    np.testing.assert_array_equal(sub2.report.value, sub.report.value)
    assert score2 == score and sub2.report.guarantee == sub.report.guarantee
    assert again.ledger.summary()["per_agent_epsilon"]["max"] == pytest.approx(5.0)
    again.release(theta, 0, 1)
    third = flower.FlowerAgent(cfg, 0, 1, tmp_path)
    assert third.ledger.summary()["per_agent_epsilon"]["max"] == pytest.approx(10.0)
    assert sorted(third.released) == [(0, 0), (0, 1)]
    raw = (tmp_path / flower.AGENT_STATE).read_bytes()
    assert root.tobytes() not in raw


def test_a_run_with_refusals_writes_its_accepted_submissions_in_order() -> None:
    """metrics.csv's rows are the accepted submissions, in order, without holes."""
    out = flower.FlowerRunOutput(
        CFG.resolved(), np.array([[1.0, np.nan, 3.0, np.nan, 5.0, 6.0]], np.float32),
        np.zeros(3, np.float32), {}, budget_ledger(CFG.resolved()), [], 2, 1.0)
    run = flower.as_run_output(out)
    assert run.submitted.tolist() == [4]
    np.testing.assert_array_equal(run.scores[0, :4], [1, 3, 5, 6])
    assert np.isnan(run.scores[0, 4:]).all()


def test_a_round_is_one_message_per_supernode_and_a_dead_one_costs_its_agents_budget(
        tmp_path: Path, call_grid: Any) -> None:
    """Rounds of P = 4 over two SuperNodes: each round sends each SuperNode ONE message with
    all its agents' asks, and the replies are applied in submission order. SuperNode 0 then
    dies (Flower answers for it: node unavailable): the run goes on with SuperNode 1, asks
    node 0 nothing more, and the run's ledger counts every agent of node 0 as having spent
    its whole budget, the ask in flight included."""
    from flwr.app import Error
    from flwr.common.constant import ErrorCode

    cfg = dataclasses.replace(CFG, submissions=12, parallel_agents=4)
    _setup(cfg, tmp_path)
    agents = [flower.FlowerAgent(cfg, i, 2) for i in range(2)]
    calls = []

    def node0(m: Message) -> Message:
        calls.append(m)
        if len(calls) > 1:  # its second round: gone
            return Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="offline"),
                           reply_to=m)
        return agents[0].handle(m)

    grid = call_grid({7: node0, 8: agents[1].handle})
    out = serve_pgc(grid, tmp_path, 12, 1, 4, 2)  # type: ignore[arg-type]
    rounds = [grid.sent[0:2], grid.sent[2:4], grid.sent[4:5]]
    assert [len(r) for r in rounds] == [2, 2, 1] and len(grid.sent) == 5
    assert [m.content.config_records["asks"]["agents"] for m in rounds[0]] == [[0, 2], [1, 3]]
    assert out["dead"] == [0] and out["unanswered"] == [[4, 0], [6, 0]]
    assert [r["submission"] for r in out["refused"]] == [4, 6, 8, 10]
    assert "left the run" in out["refused"][-1]["reason"]
    assert out["status"]["accepted"] == 8
    assert [s is None for s in out["scores"]] == [False] * 4 + [True, False] * 4
    svc = AggregatorService.restore(tmp_path)
    ledger, presumed = flower.spent_ledger(svc.ledger, svc.guarantee, svc.accepted, out, 2,
                                           12, 1, aborted=False)
    assert presumed == {4: 1, 6: 1, 8: 1, 10: 1}
    assert all(ledger.spent(a)[0] == pytest.approx(10.0) for a in range(12))
    assert svc.ledger.spent(4) == (0.0, 0.0)  # the aggregator's own record: what it received
    # An abort mid-round: the asks in flight (PROGRESS) that were not accepted count too.
    _, presumed = flower.spent_ledger(svc.ledger, svc.guarantee, svc.accepted,
                                      {"asked": [[1, 0], [4, 0]]}, 2, 12, 1, aborted=True)
    assert presumed == {4: 1}


def test_an_aborted_run_keeps_what_was_released_and_one_process_per_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--one-process-per-agent` starts one SuperNode per agent (here 3). The deployment
    (no processes here) ends early, its SuperLink gone, with a round in flight: the run still
    writes privacy.json, summary.json and the aggregator's report log, its ledger counting the
    asks in flight as released, and exits 1 saying why. Each agent executor keeps its state in
    its node's own directory (mode 0700), outside the run directory, removed after the run
    (issue 52). Bad uses of the option exit 2."""
    import stat

    from privrl.federation.flower import PROGRESS
    from privrl.main import main
    from privrl.runtime import flower as rt

    started, state_dirs = [], []

    def enter(self: rt.LocalDeployment) -> rt.LocalDeployment:
        started.append(self.nodes)
        self.superexec_secret = tmp_path / "secret"
        return self

    def run(self: rt.LocalDeployment, app: Path, done: Path, timeout_s: Any = None) -> str:
        (done.parent / PROGRESS).write_text(json.dumps({"asked": [[0, 0], [1, 0]],
                                                        "scores": [None] * 3}))
        raise RuntimeError("flower-superlink exited during the run")

    monkeypatch.setattr(rt.LocalDeployment, "__enter__", enter)
    monkeypatch.setattr(rt.LocalDeployment, "__exit__", lambda self, *e: None)
    def spawn(self: rt.LocalDeployment, name: str, argv: list[str]) -> None:
        state = Path(argv[argv.index("--state-dir") + 1])
        state_dirs.append((state, stat.S_IMODE(state.stat().st_mode)))

    monkeypatch.setattr(rt.LocalDeployment, "spawn", spawn)
    monkeypatch.setattr(rt.LocalDeployment, "run", run)
    args = ["run", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "2", "--submissions", "3",
            "--parallel-agents", "2", "--no-progress"]
    out = tmp_path / "run"
    assert main([*args, "--runtime", "flower", "--one-process-per-agent",
                 "--out", str(out)]) == 1
    assert started == [3]
    assert len({d for d, _ in state_dirs}) == 3 and {m for _, m in state_dirs} == {0o700}
    assert not any(d.resolve().is_relative_to(out.resolve()) or d.exists()
                   for d, _ in state_dirs)
    ledger = json.loads((out / "privacy.json").read_text())["ledger"]
    assert ledger["agents"] == 2 and ledger["per_agent_epsilon"]["max"] == pytest.approx(2.0)
    flower_json = json.loads((out / "flower.json").read_text())
    assert flower_json["presumed_released"] == {"0": 1, "1": 1}
    assert "superlink exited" in flower_json["error"]
    assert json.loads((out / "summary.json").read_text())["trials"] == 1
    assert (out / "aggregator" / LOG).exists()
    assert main([*args, "--one-process-per-agent", "--out", str(tmp_path / "b")]) == 2
    assert main([*args, "--submissions", "65", "--runtime", "flower",
                 "--one-process-per-agent", "--out", str(tmp_path / "c")]) == 2
    assert started == [3] and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_deployment_processes_send_no_flower_telemetry_unless_the_user_asks(monkeypatch,
                                                                           tmp_path):
    """flwr 1.42 posts usage events to telemetry.flower.ai unless FLWR_TELEMETRY_ENABLED=0:
    the processes a local deployment starts get it off, and a user's own setting stands."""
    from privrl.runtime.flower import process_env

    monkeypatch.delenv("FLWR_TELEMETRY_ENABLED", raising=False)
    env = process_env(tmp_path / "home", tmp_path / "bin")
    assert env["FLWR_TELEMETRY_ENABLED"] == "0"
    assert env["FLWR_HOME"] == str(tmp_path / "home")
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "1")
    assert process_env(tmp_path / "home", tmp_path / "bin")["FLWR_TELEMETRY_ENABLED"] == "1"
