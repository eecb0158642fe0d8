"""FedPG-Cen's agents on Flower, in process (privrl.systems.fedpg.flower): what a SuperNode
releases (CenNode: its share of the secure sum; ReportNode: each agent's Report under a local
mechanism), what it refuses whatever the server asks, what the ServerApp checks, and a seeded
run through the ServerApp's loop equal to the local run."""

from __future__ import annotations

import dataclasses
import json
import stat
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from privrl.config import ConfigError
from privrl.evaluation import verdict_line
from privrl.federation.flower_sum import STOP, SUM_RESULTS, serve_cen
from privrl.output import save
from privrl.policy import read_saved
from privrl.privacy.discrete_sum import DiscreteGaussianSum
from privrl.privacy.ledger import BudgetExceededError
from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.fedpg.flower import (
    CenNode,
    ReportNode,
    ServerLearner,
    flower_mechanism,
    learn,
    plan_run,
    prepare_run,
    record,
)
from privrl.systems.fedpg.local import privacy_record, run_fedpg

# flwr 1.42 builds bundles with a pathspec pattern class pathspec deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")

CFG = FedPGConfig(algorithm="cen", agents=6, budget=100, mechanism="distributed-gaussian",
                  epsilon=2.0, delta=1e-5, sampling_rate=1.0, clip=1.0, hidden=(8,))


@pytest.fixture(scope="module")
def learner() -> ServerLearner:
    return ServerLearner(CFG)


def test_the_mechanism_counts_the_agents_the_threshold_guarantees(learner: ServerLearner):
    cfg, dim = learner.config, learner.algo.dim
    mech = flower_mechanism(cfg, dim, 3, 2)  # 2 of 3 nodes survive: >= 4 of the 6 agents
    assert mech.min_honest == 4 and mech.agents == 6
    assert mech.epsilon(cfg.calibration_rounds()) <= 2.0
    assert mech.bits == 30  # 3 nodes × 2^30 < 2^32
    with pytest.raises(ConfigError, match="only 4 agents"):
        flower_mechanism(cfg.__class__(**{**cfg.to_dict(), "min_honest": 5}), dim, 3, 2)


def test_a_node_releases_once_per_round_and_refuses_past_its_budget(learner: ServerLearner,
                                                                    tmp_path):
    mech = flower_mechanism(learner.config, learner.algo.dim, 3, 2)
    own = tmp_path / "node1"  # the node's own directory (made 0700)
    node = CenNode(CFG, 1, 3, mech, allowed_rounds=2, directory=own)
    assert node.ids == [1, 4]
    b = [node.batch(t) for t in range(4)]  # B_t: the seed's, as the learner draws it
    assert b[:2] == [int(learner._draw(t)[0]) for t in range(2)]
    theta = np.asarray(learner.theta[0], np.float32)
    first = node.release(theta, b[0], 0)
    assert first.shape == (learner.algo.dim,) and first.min() >= 0
    assert first.max() < 1 << mech.bits
    # asked again (a retried round): refused, nothing new spent; a second secure sum of the
    # round without this node would give its message (issue 52)
    with pytest.raises(ValueError, match="already went into a secure sum"):
        node.release(theta, b[0], 0)
    assert node.rounds_charged == 1
    # its state is its own: mode 0600 in a 0700 directory, no message in it
    state = own / "node.npz"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    assert first.tobytes() not in state.read_bytes()
    with pytest.raises(ValueError, match="before this node's last round"):
        node.release(theta, b[0], -1)
    with pytest.raises(ValueError, match="B_t"):  # the server cannot choose B_t
        node.release(theta, b[1] + 1, 1)
    with pytest.raises(ValueError, match="finite"):
        node.release(np.full_like(theta, np.nan), b[1], 1)
    assert node.rounds_charged == 1  # refusals spend nothing
    # a restarted executor (a new process: a new secret root) resumes from its state file:
    # round 0 again is refused, and it is not charged again
    again = CenNode(CFG, 1, 3, mech, allowed_rounds=2, directory=own)
    with pytest.raises(ValueError, match="already went into a secure sum"):
        again.release(theta, b[0], 0)
    assert again.rounds_charged == 1
    node = again
    node.release(theta, b[2], 2)  # round 1 never asked of it (left out): nothing spent on it
    with pytest.raises(ValueError, match="before this node's last round"):
        node.release(theta, b[1], 1)
    with pytest.raises(BudgetExceededError):
        node.release(theta, b[3], 3)
    assert node.rounds_charged == 2 and sorted(node.released) == [0, 2]


def test_a_seeded_node_sums_the_local_runners_gradients(learner: ServerLearner):
    """Seeded, a node plays the local runner's round (its episodes, `CenRound.estimates`) and
    sends the sum of its agents' messages of those μ_tᵏ: decoded, it differs from the sum of
    the clipped μ_tᵏ only by each agent's rounding (< γ a coordinate) and noise share (here
    with little noise, to see the signal: each coordinate within 6 standard deviations of the
    2 shares' sum, γ·6·sqrt(2 s²))."""
    seeded = dataclasses.replace(CFG, noise="seeded")
    mech = DiscreteGaussianSum(clip=1.0, dim=learner.algo.dim, agents=6, min_honest=4,
                               noise_multiplier=0.005, bits=30)
    node = CenNode(seeded, 1, 3, mech, allowed_rounds=2)
    theta = np.asarray(learner.theta[0], np.float32)
    # the agents' μ_tᵏ without a mechanism, from a node releasing each agent's raw Report
    # (the local run's reports: test_seeded_report_run_on_flower_is_the_local_run)
    raw = ReportNode(dataclasses.replace(seeded, mechanism="none", epsilon=None,
                                         sampling_rate=None), 1, 3)
    mu = np.stack([raw.release(theta, a, 0)[0].report.value for a in node.ids])
    clipped = mu * np.minimum(1.0, CFG.clip / np.linalg.norm(mu, axis=1, keepdims=True))
    got = np.asarray(mech.decode(node.release(theta, node.batch(0), 0)).value)
    bound = mech.gamma * (2 + 6 * np.sqrt(2 * mech.share_variance))
    assert np.max(np.abs(got - clipped.sum(axis=0))) <= bound
    assert np.max(np.abs(clipped.sum(axis=0))) > 10 * bound  # the check can tell


TINY = dict(hidden=(4,), batch_min=2, batch_max=3, minibatch=1, inner_steps=1,
            max_episode_steps=20, budget=12)


def test_a_local_and_a_flower_run_state_the_same_epsilon():
    """(Issue 50) The same distributed-gaussian request (ε, δ, rounds, clip, m = 4 honest
    shares) gives a local run and a Flower run (3 SuperNodes, threshold 2: >= 4 of the 6
    agents in a sum) the same mechanism by the same calibration, and their privacy
    statements the same ε over the same rounds: the local run's privacy.json and the
    Flower run's (`FlowerCenRun.privacy`, over as many rounds, every agent in every sum)."""
    from privrl.systems.fedpg.flower import FlowerCenRun

    cfg = dataclasses.replace(CFG, min_honest=4, **TINY)
    run = run_fedpg(cfg)
    local = privacy_record(run)
    plan = plan_run(cfg, 3, 2)
    mech = plan.mechanism
    assert (mech.min_honest, mech.bits) == (4, 30)
    rounds = run.rounds_run
    flower = FlowerCenRun(plan.config, mech, [{"agents_in_sum": 6}] * rounds,
                          np.zeros(mech.dim, np.float32), 3, 2, 0.0).privacy()
    assert rounds >= 2
    assert flower["guarantee"]["epsilon"] == local["guarantee"]["epsilon"] == \
        mech.epsilon(rounds) <= 2.0
    # one record path: the same guarantee, account and trust model, word for word
    for part in ("guarantee", "accounting", "trust_model"):  # (its modulus may differ)
        assert flower[part] == local[part], part
    # the same noise too (the local modulus 2^29 for one agent per SuperNode is wider than
    # this grid needs, so the grid is the deployment's): the local run predicts its learning
    p = local["mechanism"]["params"]
    assert (p["noise_multiplier"], p["l2_bound_grid_steps"], p["share_variance_grid_steps2"],
            p["gamma"]) == (mech.noise_multiplier, mech.radius, mech.share_variance,
                            mech.gamma)


def test_the_statement_says_what_holds_against_each_server():
    """(Issue 52) privacy.json's secure_sum.guarantee_against, by the mechanism's accountant:
    a server that deviates but relays only genuine SuperNodes faces the stated ε (a sum it can
    reveal holds the threshold's agents: 2 of 3 SuperNodes, 4 of 6 agents); so does one that
    forges SuperNodes, which the fleet roster refuses (the default); without a roster
    (--no-roster), that one faces only the 2 shares of one node's own agents."""
    from privrl.systems.fedpg.flower import FlowerCenRun

    for roster in (True, False):
        plan = plan_run(dataclasses.replace(CFG, roster=roster, **TINY), 3, 2)
        mech = plan.mechanism
        run = FlowerCenRun(plan.config, mech, [{"agents_in_sum": 6}] * 3,
                           np.zeros(mech.dim, np.float32), 3, 2, 0.0)
        privacy = run.privacy()
        assert privacy["secure_sum"]["roster"] is roster
        against = privacy["secure_sum"]["guarantee_against"]
        stated = privacy["guarantee"]["epsilon"]
        assert against["honest_but_curious_server"]["epsilon"] == stated == mech.epsilon(3)
        assert against["deviating_server"]["epsilon"] == stated
        assert against["deviating_server"]["honest_shares"] == mech.min_honest == 4
        forged = against["server_forging_supernodes"]
        if roster:
            assert forged["honest_shares"] == 4 and forged["epsilon"] == stated
            assert "refused" in forged["what"]
        else:
            assert forged["honest_shares"] == 2
            assert forged["epsilon"] == mech.epsilon(3, 2) > stated
    # 5 SuperNodes at threshold 3: a deviating server can reveal a sum of 2 of them (each
    # node lists <= 2 dead: (5 − |S|)·3 <= 5·2), 2 of the 5 agents: not a majority, refused
    # (threshold 4 reveals >= 4)
    five = dataclasses.replace(CFG, agents=5, **TINY)
    with pytest.raises(ConfigError, match="threshold"):
        plan_run(five, 5, 3)
    assert plan_run(five, 5, 4).mechanism.min_honest == 4


def test_a_seeded_flower_sum_is_the_local_rounds_sum():
    """Seeded, a SuperNode's message sum is made by the local round's release function with
    the local round's keys: the secure sum modulo 2^b of every agent's message (one node
    hosting all 6: the modular sum does not depend on how agents are grouped into nodes)
    decodes, over K, to the local round's μ_t (`CenRound.mu`): the same integers, up to the
    float32 rounding of the division by K (XLA may multiply by 1/K: one ulp); another noise
    share or rounding would move a coordinate by about γ·sqrt(K s²), far more."""
    import jax

    from privrl.systems.fedpg.algorithm import FedPG
    from privrl.systems.fedpg.flower import round_plan

    seeded = dataclasses.replace(CFG, noise="seeded", **TINY)
    algo = FedPG(dataclasses.replace(seeded, trials=1))
    mech = algo.mechanism
    node = CenNode(seeded, 0, 1, mech, allowed_rounds=2)
    theta = node.state.gossip.x[0]

    @jax.jit
    def local_mu(theta: jax.Array) -> jax.Array:
        plan, state = round_plan(node.algo, node.state, theta, jax.numpy.int32(0))
        variant = node.algo.variant
        return variant.mu(state, plan, variant.episodes(node.algo.source, plan))[0][0]

    total = node.release(np.asarray(theta, np.float32), node.batch(0), 0)
    got = np.asarray(mech.decode(total).value, np.float32) / np.float32(6)
    np.testing.assert_allclose(got, np.asarray(local_mu(theta)), rtol=2.5e-7, atol=0)
    assert np.max(np.abs(got)) > 0


def test_a_node_computes_its_message_ahead_but_sends_only_what_the_collect_stage_asks():
    """The round's θ and B_t ride the key exchange (`CenNode.prepare`): the node computes its
    message then, and at the collect stage sends that message only for the same round and θ
    (seeded: exactly the message it would compute then); for another θ it computes afresh.
    Nothing is computed ahead for a request it would refuse."""
    from privrl.systems.fedpg.algorithm import FedPG

    seeded = dataclasses.replace(CFG, noise="seeded", **TINY)
    node = CenNode(seeded, 0, 1, FedPG(dataclasses.replace(seeded, trials=1)).mechanism,
                   allowed_rounds=3)
    theta = np.asarray(node.state.gossip.x[0], np.float32)
    computed: list[int] = []
    compute = node._message

    def counted(theta: np.ndarray, t: int) -> np.ndarray:
        computed.append(t)
        return compute(theta, t)

    node._message = counted  # type: ignore[method-assign]
    node.prepare([theta], {"round": 0, "batch": node.batch(0)})
    assert node._ahead is not None and node._ahead[2].result() is not None
    assert computed == [0]
    assert np.array_equal(node.release(theta, node.batch(0), 0), compute(theta, 0))
    assert computed == [0]  # the message computed ahead was sent
    other = theta + np.float32(0.5)
    node.prepare([theta], {"round": 1, "batch": node.batch(1)})
    node._ahead[2].result()
    assert np.array_equal(node.release(other, node.batch(1), 1), compute(other, 1))
    assert computed == [0, 1, 1]  # the collect stage's θ differed: computed afresh
    for arrays, config in [([theta], {"round": 1, "batch": node.batch(1)}),  # released
                           ([theta], {"round": 2, "batch": node.batch(2) + 1}),  # not B_t
                           ([np.full_like(theta, np.nan)], {"round": 2, "batch": node.batch(2)}),
                           ([theta], {"round": True, "batch": node.batch(2)}),
                           ([theta], {"batch": node.batch(2)})]:
        node.prepare(arrays, config)
        assert node._ahead is None
    assert computed == [0, 1, 1] and node.rounds_charged == 2
    gate = threading.Event()
    node._pool.submit(gate.wait)  # the worker busy: what prepare submits waits its turn
    try:
        node.prepare([theta], {"round": 2, "batch": node.batch(2)})
        replaced = node._ahead[2]
        node.prepare([other], {"round": 2, "batch": node.batch(2)})
        assert replaced.cancelled()  # a server's repeated key exchanges queue no computation
    finally:
        gate.set()
    node._ahead[2].result()
    assert computed == [0, 1, 1, 2]


# --- a local mechanism: each agent's Report -----------------------------------------------------
REPORTS = FedPGConfig(algorithm="cen", agents=4, budget=45, mechanism="gaussian",
                      noise_multiplier=1.0, clip=1.0, hidden=(8,), seed=5, noise="seeded")


def _serve_reports(cfg: FedPGConfig, nodes: list[ReportNode], directory: Path, grid_of: Any
                   ) -> tuple[Any, Any]:
    """The Flower run in one process: the run prepared as for a deployment (`prepare_run`),
    the ServerApp's loop (serve_cen, in a thread, its nodes reached through `grid_of`) and the
    server's learner (`learn`) exchanging files in `directory/aggregator`."""
    plan = plan_run(cfg, len(nodes))
    learner, *_ = prepare_run(plan, directory, 30.0)
    grid = grid_of({101 * (i + 1): n.handle for i, n in enumerate(nodes)})
    server = threading.Thread(target=serve_cen, args=(grid, None, directory / "aggregator"))
    server.start()
    try:
        run = learn(plan, learner, directory, 120.0)
    finally:
        (directory / "aggregator" / STOP).write_text("done")
        server.join(60.0)
    return run, grid


def test_seeded_report_run_on_flower_is_the_local_run(tmp_path: Path, call_grid: Any) -> None:
    """Gaussian Reports from 4 agents on 2 SuperNodes (agents 0, 2 and 1, 3), the ServerApp's
    checks and average, the learner's SCSG steps: with seeded noise every round's B_t and N_t
    are the local runner's and θ equals its θ to float32 rounding. The local runner computes
    a round in one compiled program, a node its agents' reports in another and the learner
    the SCSG loop in a third: XLA may fuse them differently, so θ agrees to 1e-6 (measured
    1.2e-10 over its 2 rounds), not bit for bit."""
    local = run_fedpg(REPORTS)
    nodes = [ReportNode(REPORTS, i, 2) for i in range(2)]
    run, grid = _serve_reports(REPORTS, nodes, tmp_path, call_grid)
    rounds = run.rounds
    assert [r["batch"] for r in rounds] == local.batch[0].astype(int).tolist()
    assert [r["inner_steps"] for r in rounds] == local.inner_steps[0].astype(int).tolist()
    assert all(r["agents_in_mean"] == 4 and r["refused"] == [] for r in rounds)
    gap = float(np.max(np.abs(run.theta - local.z[0, 0])))
    assert gap <= 1e-6, f"θ differs from the local run's by {gap:.3g}"
    # every request went to the node of its agent; each agent charged its own ledger once a round
    for m in grid.sent:
        assert [101, 202][m.content.config_records["ask"]["agent"] % 2] == m.metadata.dst_node_id
    assert all(n.ledger.reports_of(a) == len(rounds) for n in nodes for a in n.ids)
    results = json.loads((tmp_path / "aggregator" / SUM_RESULTS).read_text())
    assert [r["accepted_agents"] for r in results["rounds"]] == [[0, 1, 2, 3]] * len(rounds)
    # the statement is the local runner's, of the Reports the server accepted; the run
    # directory names the runtime's trust domain
    assert run.privacy()["guarantee"] == privacy_record(local)["guarantee"]
    assert run.privacy()["guarantee"]["epsilon"] > 0
    save(record(run), tmp_path / "out")
    stated = json.loads((tmp_path / "out" / "privacy.json").read_text())
    assert stated["trust_domain"]["runtime"] == "flower"
    # like every run, it states its random baseline and whether it learned (its final policy's
    # returns: the server sees no agent's), in summary.json and in its last line
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["random_episodes"] >= 2 and summary["learned_test"]["final_values"] == \
        summary["random_episodes"]
    assert summary["random_return_ci"][0] <= summary["random_return"] <= \
        summary["random_return_ci"][1]
    assert "final policy" in summary["final_returns_of"]
    assert verdict_line(summary).startswith(("Learned", "Did not learn"))
    _, saved, _ = read_saved(tmp_path / "out")  # policy.npz: the server's θ, as locally
    assert np.array_equal(saved.reshape(-1), run.theta)
    # B_t and N_t follow the seed: a node counts its agents' episodes as the local runner does
    # and refuses the round past the episode budget, whatever the server asks
    n = len(rounds)
    assert nodes[0].used_before(n - 1) < REPORTS.budget <= nodes[0].used_before(n)
    with pytest.raises(ValueError, match="episode budget"):
        nodes[0].release(run.theta, 0, n)


LAPLACE = FedPGConfig(algorithm="cen", agents=4, budget=200, mechanism="laplace",
                      epsilon_per_report=1.0,
                      epsilon_budget=2.0, clip=1.0, hidden=(8,), seed=5, noise="seeded")


def test_a_report_node_refuses_past_its_budget_and_resends_what_it_released(tmp_path: Path):
    """Node 1 of 2 (agents 1 and 3), Laplace at ε = 1 a report, each agent's budget ε = 2."""
    node = ReportNode(LAPLACE, 1, 2, tmp_path)
    theta = np.zeros(node.dim, np.float32)
    with pytest.raises(ValueError, match="not one of this SuperNode's"):
        node.release(theta, 0, 0)
    sub, score = node.release(theta, 1, 0)
    assert (sub.agent_id, sub.index) == (1, 0) and np.isnan(score)  # returns stay home
    assert sub.report.guarantee == node.guarantee
    # its agents release a round together; asked again (any θ) it re-sends, spending nothing
    assert node.release(theta + 1, 3, 0)[0].index == 0
    assert np.array_equal(node.release(theta + 1, 1, 0)[0].report.value, sub.report.value)
    assert node.ledger.reports_of(1) == 1 == node.ledger.reports_of(3)
    for bad, match in ((np.full_like(theta, np.nan), "finite"),
                       (theta[:-1], "finite")):
        with pytest.raises(ValueError, match=match):
            node.release(bad, 1, 1)
    with pytest.raises(ValueError, match="outside"):
        node.release(theta, 1, LAPLACE.max_rounds() + 1)
    assert node.ledger.reports_of(1) == 1  # refusals spend nothing
    # a restarted executor resumes its ledger and re-sends the released round
    node = ReportNode(LAPLACE, 1, 2, tmp_path)
    assert node.ledger.reports_of(1) == 1
    assert np.array_equal(node.release(theta, 1, 0)[0].report.value, sub.report.value)
    node.release(theta, 1, 2)  # round 1 never asked of it: nothing spent on it
    with pytest.raises(ValueError, match="outside"):
        node.release(theta, 1, 1)
    with pytest.raises(BudgetExceededError):
        node.release(theta, 1, 3)  # a third report would be ε = 3 > 2
    assert node.ledger.reports_of(1) == 2 == node.ledger.reports_of(3)
    assert sorted(node.released) == [(1, 0), (1, 2), (3, 0), (3, 2)]
    # Without `noise`, the node draws its root from os.urandom and plays its own agents'
    # lanes only: another report than the seeded node's, and than another secret node's
    secret = [ReportNode(dataclasses.replace(LAPLACE, noise=None), 1, 2) for _ in range(2)]
    assert secret[0].config.noise == "secret" and secret[0].lanes is not None
    values = [n.release(theta, 1, 0)[0].report.value for n in secret]
    assert all(np.all(np.isfinite(v)) for v in values)
    assert not np.array_equal(values[0], values[1])
    assert not np.array_equal(values[0], sub.report.value)


def test_the_server_checks_every_report_before_using_it(tmp_path: Path, call_grid: Any):
    """One node hosting the 4 agents answers round 0; what reaches the server is altered per
    agent: agent 1's value holds NaN, agent 2's report claims another mechanism, agent 3's
    reply is agent 0's submission. Only agent 0's is accepted, each refusal says why, and
    agent 0 asked for round 0 again is a duplicate."""
    from privrl.federation.flower import submission_content
    from privrl.federation.flower_sum import collect_reports
    from privrl.federation.service import Submission
    from privrl.privacy.report import restore_report

    node = ReportNode(LAPLACE, 0, 1)
    other = dataclasses.replace(node.guarantee, epsilon=0.5)

    def tamper(message: Any) -> Any:
        reply = node.handle(message)
        sub, _ = node.released[(message.content.config_records["ask"]["agent"], 0)]
        value = np.asarray(sub.report.value)
        forged = {1: Submission(1, 0, restore_report(np.full_like(value, np.nan),
                                                     node.guarantee)),
                  2: Submission(2, 0, restore_report(value, other)),
                  3: node.released[(0, 0)][0]}.get(sub.agent_id)
        if forged is not None:
            reply.content = submission_content(forged, 0.0)
        return reply

    theta = np.zeros(node.dim, np.float32)
    accepted: set = set()
    good, refused = collect_reports(call_grid({7: tamper}), [7], theta, 0, 4, node.dim,
                                    node.guarantee, accepted, None)
    assert [s.agent_id for s in good] == [0] and accepted == {(0, 0)}
    reasons = {r["agent"]: r["reason"] for r in refused}
    assert reasons[1].startswith("malformed") and "NaN" in reasons[1]
    assert reasons[2].startswith("wrong mechanism")
    assert reasons[3].startswith("not the submission asked for")
    good, refused = collect_reports(call_grid({7: node.handle}), [7], theta, 0, 4, node.dim,
                                    node.guarantee, accepted, None)
    assert [s.agent_id for s in good] == [1, 2, 3]
    assert refused[0]["agent"] == 0 and refused[0]["reason"].startswith("duplicate")


def test_an_agent_executor_takes_a_secure_sum_only_with_its_roster(tmp_path: Path, capsys):
    """(Issue 52) The roster is the agent's own: the executor refuses a secure sum without
    --roster (unless it passes --no-roster itself, whatever the server's config says), a
    roster without its state directory (the identity key's home), and a file that is no
    roster, each in one line, exit 2, before anything is computed."""
    from privrl.systems.fedpg.flower import main

    config = tmp_path / "agent-config.json"
    config.write_text(json.dumps({"config": {"roster": False}, "mechanism": {"clip": 1.0},
                                  "allowed_rounds": 1}))
    (tmp_path / "bad.json").write_text('{"supernodes": ["00"]}')
    state = tmp_path / "state"
    base = ["--config", str(config), "--node", "0", "--nodes", "3", "--runtime-api", "x:1",
            "--trusted-fab", "0" * 64]
    for extra, says in (([], "pass --roster FILE"),
                        (["--roster", str(tmp_path / "bad.json")], "--roster needs --state-dir"),
                        (["--roster", str(tmp_path / "bad.json"), "--state-dir", str(state)],
                         "not a roster")):
        with pytest.raises(SystemExit) as e:
            main(base + extra)
        assert e.value.code == 2 and says in capsys.readouterr().err
