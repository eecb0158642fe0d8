"""FedPG-Cen on a real local Flower deployment (separate processes, TLS, SuperNode
authentication, SecAgg+), with a SuperNode killed during a round: the round completes with the
survivors, and the ε statement counts only the shares the threshold guarantees; its rounds'
B_t and N_t are the local runner's. The deployment is the documented secure-sum command's
(README's `privrl run fedpg-cen --runtime flower --mechanism distributed-gaussian`, shrunk as
tests/test_documented_commands.py shrinks every documented command: documents.CARRIED), so
that it starts once; the kill and the checks are this test's."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import threading
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from documents import carried, run_documented
from privrl.federation.flower_roster import Roster
from privrl.systems.fedpg import flower
from privrl.systems.fedpg.flower import agents_of
from privrl.systems.fedpg.local import run_fedpg

pytestmark = pytest.mark.processes

# What this test needs of the documented command's run: 40 episodes per agent (two rounds at
# least, the kill falling in the second), and a SecAgg+ stage that waits 40 s for the nodes'
# answers (not 120: the dead node's wait), long enough that a live node slowed by a busy
# machine (make test runs this beside the other tests) is not dropped as dead. (Live nodes
# answer each stage within 5 s here even at load 10; CI once saw round 1 halt with no
# survivors under a 20 s timeout. That record is exactly what a second node silent past the
# timeout gives: node 1 stopped (SIGSTOP) for 25 s of round 1 beside node 2's kill halts the
# round with no survivors after one SecAgg+ run, as SecAgg+ must with 1 < 2 nodes left; see
# benchmarks/log/36-session-15.md. The dead node's wait costs no wall time: this stage ends
# before the other.)
SETTINGS = {"--episodes": 40, "--stage-timeout": 40}


def test_the_documented_secure_sum_with_a_supernode_killed_mid_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        children_compile_as_tests: None) -> None:
    killed: list[int] = []
    procs: list = []

    def kill_node_2(deployment) -> None:
        """SuperNode 2 and its agent executor, at once (SIGKILL to their process groups)."""
        port = deployment.runtime_apis[2].split(":")[1]
        for proc in list(deployment.processes):
            argv = [str(a) for a in proc.args]
            agent = "privrl.systems.fedpg.flower" in argv and argv[argv.index("--node") + 1] == "2"
            node = (Path(argv[0]).name == "flower-supernode"
                    and argv[argv.index("--port") + 1] == port)
            if agent or node:
                os.killpg(proc.pid, signal.SIGKILL)
                killed.append(proc.pid)

    def on_round(t: int, deployment) -> None:
        procs[:] = deployment.processes
        # round 1 begins (its SETUP was answered behind round 0's unmask request): kill
        # node 2 during the key exchange, before it can send its masked vector (not before
        # 3.5 s: its key-share reply takes >= 0.5 s, then its SuperNode sleeps flwr's 3 s)
        if t == 1:
            threading.Timer(2.0, kill_node_2, (deployment,)).start()

    # The CLI's run, with this test's fault (`on_round`), a round's wait, and the nodes' own
    # directories where this test can read them (the CLI's are temporary).
    runs: list = []
    own = tmp_path / "agents-own"
    original = flower.run_fedpg_cen_flower

    def with_the_kill(plan: flower.FlowerPlan, directory: Path, stage_timeout_s: float,
                      **_: object) -> flower.FlowerCenRun:
        runs.append((plan, stage_timeout_s, original(
            plan, directory, stage_timeout_s, timeout_s=240.0, on_round=on_round,
            state_root=own)))
        return runs[-1][-1]

    monkeypatch.setattr(flower, "run_fedpg_cen_flower", with_the_kill)
    out = tmp_path / "run"
    run_documented(carried(__file__), out, lambda: capsys.readouterr().err, SETTINGS)
    (plan, stage_timeout_s, run), = runs
    cfg, nodes = plan.config, plan.nodes
    assert (nodes, plan.threshold, cfg.budget, stage_timeout_s) == (3, 2, 40, 40.0)
    # the agents each SuperNode holds; node 2's are lost with it
    held = [len(agents_of(i, nodes, cfg.agents)) for i in range(nodes)]
    assert len(killed) == 2
    assert len(run.rounds) >= 2
    # a node lost before its masked vector is left out at unmasking: one SecAgg+ run
    assert run.rounds[1]["secagg_runs"] == 1
    first, second = run.rounds[0], run.rounds[1]
    assert first["surviving_nodes"] == [0, 1, 2] and first["agents_in_sum"] == cfg.agents
    # the round completed without node 2 (its agents): the sum of the other two nodes' agents
    assert second["surviving_nodes"] == [0, 1] and second["agents_in_sum"] == held[0] + held[1], \
        _what_happened(run.rounds, out / "logs")
    assert "halted" not in second
    privacy = run.privacy()
    m = run.mechanism
    assert m.min_honest == sum(sorted(held)[:2])  # the fewest agents 2 surviving nodes hold
    # the fewest agents a sum revealed held: the two surviving nodes' (more than the bound)
    assert privacy["fewest_agents_in_a_revealed_sum"] == min(
        r["agents_in_sum"] for r in run.rounds) == held[0] + held[1] >= m.min_honest
    # each round counted once: ε of exactly the rounds run, within the budget
    assert privacy["guarantee"]["epsilon"] == m.epsilon(len(run.rounds)) <= cfg.epsilon
    assert privacy["guarantee"]["epsilon"] < m.epsilon(len(run.rounds) + 1)
    # every process the deployment started has been stopped
    assert procs and all(p.poll() is not None for p in procs)
    # θ₀, B_t and N_t follow the seed as in the local runner (the noise cannot: docs/flower.md)
    local = run_fedpg(dataclasses.replace(cfg, noise=None))
    n = min(len(run.rounds), local.batch.shape[1])
    assert n >= 2
    assert [r["batch"] for r in run.rounds[:n]] == local.batch[0, :n].astype(int).tolist()
    assert ([r["inner_steps"] for r in run.rounds[:n]]
            == local.inner_steps[0, :n].astype(int).tolist())
    # each node's state is its own (issue 52): none under the operator's run directory; in
    # the node's directory, mode 0700, a file of mode 0600
    assert not [p for p in out.rglob("*") if p.name == "node.npz" or p.name == "agents"]
    for i in range(3):
        assert stat.S_IMODE((own / f"node{i}").stat().st_mode) == 0o700
        assert stat.S_IMODE((own / f"node{i}" / "node.npz").stat().st_mode) == 0o600
        # the fleet roster (the default): each node's identity key is its own, mode 0600,
        # and every node was handed the roster of all three, outside the run directory
        assert stat.S_IMODE((own / f"node{i}" / "identity.key").stat().st_mode) == 0o600
        assert len(Roster.read(own / f"node{i}" / "roster.json")) == 3
    assert not [p for p in out.rglob("*") if p.name in ("identity.key", "roster.json")]
    stated = json.loads((out / "privacy.json").read_text())
    assert stated["trust_domain"]["runtime"] == "flower"
    assert stated["secure_sum"]["min_honest_surviving_agents"] == m.min_honest
    assert stated["secure_sum"]["roster"] is True  # every round's peers were roster nodes
    forged = stated["secure_sum"]["guarantee_against"]["server_forging_supernodes"]
    assert forged["epsilon"] == stated["guarantee"]["epsilon"]
    assert stated["headline"] == privacy["headline"]


def _what_happened(rounds: list[dict], logs: Path) -> str:
    """A failure's evidence: each round's stages (when each node answered, which did without an
    error) and the ends of the SuperNodes' and agents' logs (a node's refusals are logged there)."""
    files = [*sorted(logs.glob("supernode*.log")), *sorted(logs.glob("agent*.log"))]
    said = {p.name: p.read_text(errors="replace")[-2000:] for p in files}
    return json.dumps({"rounds": rounds, "logs": said}, indent=1)
