"""`privrl run pgc-a3c --runtime flower` through real processes: a SuperLink with TLS and
SuperNode authentication, a SuperNode and its agent executor, the ServerApp; the run
directory, its privacy record and replay; nothing left running afterwards.

Costly (each Flower process is a Python start; benchmarks/RESULTS.md), so one deployment with
one SuperNode checks everything it can at once, a bundle the agent did not pin included, and
that deployment is the documented command's (README's `privrl run pgc-a3c --runtime flower`,
shrunk as tests/test_documented_commands.py shrinks every documented command: documents.CARRIED).
Routing between several SuperNodes, the agents' refusals and the server's checks are
tests/systems/pgc_a3c/test_flower.py's, in one process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psutil
import pytest

pytest.importorskip("flwr")

from documents import carried, run_documented
from privrl.main import main

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore:GitWildMatchPattern:DeprecationWarning")]

# What this test needs of the documented command's run: seeded noise and one agent a round,
# so that the run is the local runner's (below); four submissions are enough for that.
SETTINGS = {"--noise": "seeded", "--parallel-agents": 1, "--submissions": 4,
            "--score-window": 2}


def test_the_documented_flower_command_runs_and_leaves_nothing_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        children_compile_as_tests: None) -> None:
    """The documented command through `privrl run` (it exits 0 and writes README's files);
    then, on the same deployment (its processes cost more than the runs), the server side
    submits another bundle than the agents pinned (here: naming its own ClientApp, as an
    operator who wanted to run code on the agents would): every agent answers with an error,
    nothing is released or accepted, and the run says why. Every process of the deployment
    compiles as this test does (`children_compile_as_tests`), so the ServerApp's θ is
    bit-equal to this process's replay of its log."""
    from privrl.federation.flower import RESULTS
    from privrl.runtime import flower as rt

    submit = rt.LocalDeployment.run
    foreign: dict = {}

    def and_a_foreign_bundle(self: rt.LocalDeployment, app: Path, done: Path,
                             timeout_s: float | None = None) -> str:
        setup = tmp_path / "foreign-aggregator"  # the aggregator's setup, still unused
        shutil.copytree(done.parent, setup)
        said = submit(self, app, done, timeout_s)
        # The agent's state: in its node's own directory (`--state-dir`), not the run's.
        argv = next([str(a) for a in p.args] for p in self.processes
                    if "--state-dir" in [str(a) for a in p.args])
        state = Path(argv[argv.index("--state-dir") + 1]) / "agent.npz"
        foreign["state"] = state
        released = state.read_bytes()
        evil = tmp_path / "foreign-app"
        shutil.copytree(app, evil)
        # The bundle now carries code of its own and names it as the ClientApp.
        (evil / "operator_app.py").write_text(
            "from flwr.clientapp import ClientApp\nclient_app = ClientApp()\n")
        toml = evil / "pyproject.toml"
        toml.write_text(toml.read_text()
                        .replace("privrl.systems.pgc_a3c.flower:client_app",
                                 "operator_app:client_app")
                        .replace(str(done.parent.resolve()), str(setup.resolve())))
        submit(self, evil, setup / RESULTS, 300)
        foreign.update(json.loads((setup / RESULTS).read_text()),
                       state_unchanged=state.read_bytes() == released)
        return said

    monkeypatch.setattr(rt.LocalDeployment, "run", and_a_foreign_bundle)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    out = tmp_path / "run"
    args = run_documented(carried(__file__), out, lambda: capsys.readouterr().err, SETTINGS)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert [p for p in left if p.status() != psutil.STATUS_ZOMBIE] == []
    cfg = json.loads((out / "config.json").read_text())["config"]
    n, nodes = cfg["submissions"], int(args[args.index("--supernodes") + 1])
    assert (n, cfg["parallel_agents"], nodes) == (4, 1, 1)
    results = json.loads((out / "aggregator" / "flower.json").read_text())
    assert results["refused"] == [] and results["status"]["accepted"] == n
    assert len(results["nodes"]) == nodes
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["trust_domain"]["runtime"] == "flower"
    assert privacy["noise_keys"]["mode"] == "seeded"  # (the default, secret: test_flower.py)
    assert privacy["ledger"]["per_agent_epsilon"]["max"] == pytest.approx(cfg["epsilon"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"] == 1 and len(summary["fst"]) == 1
    # TLS with the run's certificate; each SuperNode registered and authenticated by its key.
    logs = out / "logs"
    assert "Uvicorn running on https://127.0.0.1" in (logs / "superlink.log").read_text()
    assert "SuperNode ID" in (logs / "supernode0.log").read_text()
    # The credentials lived in a private temporary directory, removed with the deployment.
    assert not any(p.suffix in (".key", ".crt") for p in out.rglob("*"))
    assert main(["replay", str(out)]) == 0
    # The foreign bundle: refused by the agent, nothing accepted, the agent's state untouched.
    assert foreign["status"]["accepted"] == 0 and len(foreign["refused"]) == n
    assert all("runs only the app bundle it trusts" in r["reason"]
               for r in foreign["refused"])
    assert foreign["state_unchanged"]
    # The node's state lay outside the run directory, and went with the deployment.
    assert not foreign["state"].resolve().is_relative_to(out.resolve())
    assert not foreign["state"].parent.exists()
    # Seeded, one agent a round: the local runner's run (scores exactly; θ to float32 rounding,
    # as tests/systems/pgc_a3c/test_flower.py states).
    local = [a for i, a in enumerate(args) if not (
        a in ("--runtime", "--supernodes", "--out") or args[i - 1] in ("--runtime",
                                                                      "--supernodes", "--out"))]
    assert main([*local, "--out", str(tmp_path / "local")]) == 0
    assert ((out / "metrics.csv").read_text()
            == (tmp_path / "local" / "metrics.csv").read_text())


def _flower_processes_of(work: Path) -> list[int]:
    """The processes running with this deployment's Flower home (its private work directory):
    the SuperLink's detached flower-superexec and flwr-serverapp included."""
    pids = []
    for pid in psutil.pids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"FLWR_HOME={work}/".encode() in env:
            pids.append(pid)
    return pids


def test_a_supernode_killed_mid_run_costs_its_agents_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, children_compile_as_tests: None) -> None:
    """Two SuperNodes, rounds of two; SuperNode 1 is killed (SIGKILL) once a report has been
    accepted. The run ends with SuperNode 0's reports, says which SuperNode left, and its
    privacy.json counts every agent of SuperNode 1 as having spent its whole budget; then no
    process of the deployment is left, Flower's detached ServerApp included."""
    import os
    import signal

    from privrl.federation.flower import PROGRESS
    from privrl.runtime import flower as rt

    check, seen = rt.LocalDeployment.check, {}

    def and_kill(self: rt.LocalDeployment) -> None:
        seen["work"] = self.work
        progress = tmp_path / "run" / "aggregator" / PROGRESS
        if ("killed" not in seen and progress.exists()
                and json.loads(progress.read_text())["status"]["accepted"] >= 1):
            node = next(p for p in self.processes if self.names[p.pid] == "supernode1")
            os.kill(node.pid, signal.SIGKILL)
            seen["killed"] = True
        check(self)

    monkeypatch.setattr(rt.LocalDeployment, "check", and_kill)
    out = tmp_path / "run"
    rc = main(["run", "pgc-a3c", "--runtime", "flower", "--supernodes", "2", "--preset",
               "tuned", "--mechanism", "laplace", "--epsilon", "2", "--submissions", "8",
               "--parallel-agents", "2", "--score-window", "2", "--no-progress",
               "--out", str(out)])
    assert rc == 0 and seen.get("killed")
    flower_json = json.loads((out / "flower.json").read_text())
    assert flower_json["dead_supernodes"] == [1]
    accepted = flower_json["aggregator"]["accepted"]
    assert 1 <= accepted < 8
    privacy = json.loads((out / "privacy.json").read_text())
    ledger = privacy["ledger"]
    assert ledger["agents"] == 8  # node 1's four agents too, each at its whole budget
    assert ledger["per_agent_epsilon"]["min"] == pytest.approx(2.0)
    assert json.loads((out / "summary.json").read_text())["trials"] == 1
    assert main(["replay", str(out)]) == 0
    assert _flower_processes_of(seen["work"]) == []
