"""PGC-A3C's agent side on Flower: what one SuperNode's agents compute and release.

A `FlowerAgent` lives in the agent's own process (privrl.runtime.flower's agent executor,
beside its SuperNode) for the whole run. It holds what never leaves that process: the
environment and its private dynamics, the agent's parameters while it computes, its secret
noise root (`os.urandom` in this process, `noise="secret"`, the default here), the mechanism
and its OWN ledger. Asked by the server for submission `index` of agent `agent_id` from θ, it
follows the one agent-node protocol (privrl.runtime.node.AgentNode: check the request, re-send
a released report, charge its own ledger before releasing and refuse past the agent's budget
whatever the server asks, keep its state in a run file before the report leaves) around
PGC-A3C's `AgentStep`: the local runner's agent-side code (`PGCA3C.agent_reports` of
`lone_agent`, the release path every runtime and the audit share) with the local runner's
keys: with `noise="seeded"` and `parallel_agents=1` a Flower run's submissions are the local
run's (tests/systems/pgc_a3c/test_flower.py states the tolerance on θ). Under secret noise
the root keys the agent's dynamics and episodes too, as everywhere.

Only the Submission (its Report) and the episode's score leave (privrl.federation.flower's
records). The score is the episode's return, sent for the learning curve as the Ray runtime
sends it; it is not protected by the mechanism (docs/flower.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context, Message

from privrl.compute.sharding import setting_trial_keys
from privrl.federation.service import AggregatorService, AggregatorSpec, Submission
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.noise import secret_keys
from privrl.runtime.flower import REFUSED, answer_request, refusing_client_app
from privrl.runtime.node import AgentNode, Released, ReleasedFile, node_dirs, private_dir
from privrl.systems.pgc_a3c.agent import AgentStep
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig, budget_ledger, lone_agent
from privrl.systems.pgc_a3c.runtimes import check_runtime

__all__ = ["REFUSED", "FlowerAgent", "FlowerRunOutput", "as_run_output", "client_app",
           "config_from_dict", "main", "run_pgc_a3c_flower", "spent_ledger"]

AGENT_STATE = "agent.npz"  # an agent's ledger and released reports (never its noise root)
_STATE_KIND = "flower-agent"


class FlowerAgent:
    """The agents a SuperNode hosts: ids a with a mod `nodes` == `node` (see module doc), an
    `AgentNode` running PGC-A3C's `AgentStep`.

    `directory`: the node's own directory (`privrl.runtime.node.private_dir`: mode 0700,
    made if missing, refused if it is not the node's own; never under the server operator's
    run directory) where the agent keeps its ledger and the reports it released (a privrl run
    file of mode 0600, written atomically after each release and before it is sent), so that
    an executor restarted mid-run resumes both: it re-sends a released report instead of
    drawing new noise, and its budget is not spent again. The noise root is never written."""

    def __init__(self, config: PGCA3CConfig, node: int, nodes: int,
                 directory: Path | None = None) -> None:
        if not 0 <= node < nodes:
            raise ValueError(f"node must be in 0..{nodes - 1}, got {node}")
        if directory is not None:
            private_dir(directory)  # refused before anything is computed if not its own
        cfg = dataclasses.replace(config, trials=1, noise=config.noise or "secret").resolved()
        self.config, self.node, self.nodes = cfg, node, nodes
        self.num_agents = math.ceil(cfg.submissions / cfg.submissions_per_agent)
        # Secret noise: this process's own root from os.urandom, in memory only, passed to the
        # jitted program as an argument (a constant would reach the compilation cache).
        self._noise = secret_keys() if cfg.noise == "secret" else None
        self.step = AgentStep(cfg, self._noise)
        self.dim, self.guarantee = self.step.dim, self.step.guarantee
        store = (None if directory is None else
                 ReleasedFile(Path(directory) / AGENT_STATE, _STATE_KIND, self.guarantee,
                              self.dim))
        ledger, released = (store and store.load()) or (budget_ledger(cfg), {})
        self.agent = AgentNode(self.step, range(node, self.num_agents, nodes), ledger,
                               self.dim, store, released, where="SuperNode")

    @property
    def ledger(self) -> PrivacyLedger:
        return self.agent.ledger

    @property
    def released(self) -> Released:
        return self.agent.released

    def release(self, theta: np.ndarray, agent_id: int, index: int) -> tuple[Submission, float]:
        """Submission `index` of agent `agent_id` from θ; ValueError or BudgetExceededError
        (nothing released) when it must refuse."""
        return self.agent.release(agent_id, index, theta)

    def handle(self, message: Message, context: Context | None = None) -> Message:
        """A server request in, the Submission or a refusal (a Flower Error) out. A batch's
        releases write the agents' state once, before the reply is built."""
        with self.agent.saving_once():
            return answer_request(message, self.dim, self.release)


def config_from_dict(data: dict[str, Any]) -> PGCA3CConfig:
    """The config a run's config.json-style dict describes (its "inf" strings as floats,
    its lists as the tuples the dataclass holds)."""
    fields = {f.name: f for f in dataclasses.fields(PGCA3CConfig)}
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"not PGC-A3C config fields: {sorted(unknown)}")
    out = {}
    for k, v in data.items():
        if v in ("inf", "-inf", "nan"):
            v = float(v)
        elif isinstance(v, list):
            v = tuple(v)
        out[k] = v
    return PGCA3CConfig(**out)


# --- the ClientApp the bundle names ----------------------------------------------------------
client_app = refusing_client_app("privrl.systems.pgc_a3c.flower")


# --- the run: a local deployment -------------------------------------------------------------
@dataclass
class FlowerRunOutput:
    config: PGCA3CConfig
    scores: np.ndarray  # (1, submissions) float32: each accepted submission's score; NaN: none
    theta: np.ndarray
    status: dict[str, Any]
    ledger: PrivacyLedger
    refused: list[dict[str, Any]]
    nodes: int
    wall_seconds: float
    dead: list[int] = dataclasses.field(default_factory=list)  # SuperNodes that left
    presumed: dict[int, int] = dataclasses.field(default_factory=dict)  # agent -> reports
    error: str | None = None  # why the run ended early (its results are what was released)

    def record(self) -> dict[str, Any]:
        """flower.json: the deployment, the aggregator's status, what was refused or lost."""
        return {"supernodes": self.nodes, "aggregator": self.status, "refused": self.refused,
                "dead_supernodes": self.dead,
                # reports an agent may have released that did not arrive, charged in
                # privacy.json's ledger (`spent_ledger`)
                "presumed_released": {str(a): n for a, n in self.presumed.items()},
                **({"error": self.error} if self.error else {})}


def run_pgc_a3c_flower(config: PGCA3CConfig, directory: Path, nodes: int,
                       reply_timeout_s: float = 300.0,
                       timeout_s: float | None = None,
                       deployment: Callable[[int, Path], Any] | None = None,
                       state_root: Path | None = None) -> FlowerRunOutput:
    """One PGC-A3C trial as a local Flower deployment (privrl.runtime.flower): the aggregator's
    ServerApp and `nodes` SuperNodes, each with its agent executor, as separate processes;
    the aggregator's files (its log, checkpoints, setup) and every process's log in
    `directory`. The ServerApp waits `reply_timeout_s` for a round's replies (a submission
    without one is refused); the whole run, `timeout_s` (None: as long as it runs).
    `deployment(nodes, logs)`: the deployment to run in (default: a `LocalDeployment` on
    localhost; benchmarks/flower_netns.py passes one across network namespaces). Each
    SuperNode's agents keep their state in the node's own directory, never under `directory`:
    `state_root`/node<i> (mode 0700, kept), or with None a fresh temporary one removed after
    the run (privrl.runtime.node.node_dirs). A SuperNode that dies costs its agents (their
    budgets count as spent); an abort keeps what was released (`FlowerRunOutput.error` says
    why it ended; docs/flower.md)."""
    from privrl.federation.flower import PROGRESS, RESULTS
    from privrl.runtime.flower import LocalDeployment, fab_hash, write_app

    check_runtime(config, "flower")  # the library's rules, as the CLI's (ConfigError)
    start = time.perf_counter()
    cfg = dataclasses.replace(config, noise=config.noise or "secret").resolved()
    algo, _ = lone_agent(cfg)
    theta0 = np.asarray(algo.init(setting_trial_keys(cfg.seed, 1, 1, 1, 1)[0]).agg.theta)
    num_agents = math.ceil(cfg.submissions / cfg.submissions_per_agent)
    agg = directory / "aggregator"
    # The aggregator's setup, as a run file the ServerApp restores (θ₀, the ledger, the
    # mechanism's guarantee): nothing else tells it what to accept.
    AggregatorService(AggregatorSpec(algo.dim, cfg.buffer_size, cfg.server_optimizer,
                                     cfg.learning_rate), theta0, num_agents, budget_ledger(cfg),
                      algo.mechanism.guarantee, agg).close()
    app = write_app(directory / "app", "privrl-pgc-a3c", "privrl.federation.flower:server_app",
                    "privrl.systems.pgc_a3c.flower:client_app", {
                        "aggregator-dir": str(agg.resolve()), "submissions": cfg.submissions,
                        "per-agent": cfg.submissions_per_agent,
                        "parallel": cfg.parallel_agents, "nodes": nodes,
                        "reply-timeout": float(reply_timeout_s)})
    trusted = fab_hash(app)
    agent_config = directory / "agent-config.json"
    agent_config.write_text(json.dumps(cfg.to_dict()))
    error = None
    try:
        with (node_dirs(nodes, directory, state_root) as own,
              (deployment or LocalDeployment)(nodes, directory / "logs") as running):
            for i in range(nodes):
                running.spawn(f"agent{i}", [
                    sys.executable, "-m", "privrl.systems.pgc_a3c.flower", "--config",
                    str(agent_config), "--node", str(i), "--nodes", str(nodes),
                    "--runtime-api", running.runtime_apis[i], "--trusted-fab", trusted,
                    "--state-dir", str(own[i]),
                    "--superexec-secret-file", str(running.superexec_secret)])
            log = running.run(app, agg / RESULTS, timeout_s)
            (directory / "logs" / "run.log").write_text(log)
    except (RuntimeError, OSError, KeyboardInterrupt) as e:  # what was released is kept
        error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    results = _read_json(agg / RESULTS)
    if "error" in results:
        error = f"the ServerApp failed: {results['error']}; logs in {directory / 'logs'}"
    if error is not None:
        results = _read_json(agg / PROGRESS)
    svc = AggregatorService.restore(agg)
    scores = np.full(cfg.submissions, np.nan, np.float32)
    for n, score in enumerate(results.get("scores", [])[:cfg.submissions]):
        if isinstance(score, float | int):
            scores[n] = score
    ledger, presumed = spent_ledger(svc.ledger, svc.guarantee, svc.accepted, results, nodes,
                                    num_agents, cfg.submissions_per_agent,
                                    aborted=error is not None)
    return FlowerRunOutput(cfg, scores[None, :], svc.theta(), svc.status(), ledger,
                           results.get("refused", []), nodes, time.perf_counter() - start,
                           sorted(results.get("dead", [])), presumed, error)


def spent_ledger(received: PrivacyLedger, guarantee: Any, accepted: set[tuple[int, int]],
                 results: dict[str, Any], nodes: int, num_agents: int, per_agent: int,
                 aborted: bool) -> tuple[PrivacyLedger, dict[int, int]]:
    """The run's ledger: the reports the aggregator received (`received`, `accepted`), and
    those an agent may have released that did not arrive, charged as released under the run's
    mechanism's `guarantee`: every agent of a SuperNode that left the run has spent its whole
    budget (`per_agent` reports: who knows what it released); an ask that got no answer (a
    timeout) and, after an abort, each ask of the round in flight not accepted, one report.
    Returns it and the presumed reports per agent."""
    dead = set(results.get("dead", []))
    extra = {a: per_agent - received.reports_of(a) for a in range(num_agents)
             if a % nodes in dead}
    maybe = [tuple(x) for x in results.get("unanswered", [])]
    if aborted:
        maybe += [tuple(x) for x in results.get("asked", [])]
    for a, _ in set(maybe) - accepted:
        if a % nodes not in dead and 0 <= a < num_agents:
            extra[a] = min(extra.get(a, 0) + 1, per_agent - received.reports_of(a))
    ledger = PrivacyLedger.from_state(received.to_state())
    presumed = {a: n for a, n in sorted(extra.items()) if n > 0}
    for a, n in presumed.items():
        ledger.charge(a, guarantee, n)
    return ledger, presumed


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def as_run_output(out: FlowerRunOutput) -> Any:
    """The local runner's RunOutput for the same results: the accepted submissions' scores in
    order (a refused one leaves no row; flower.json names it)."""
    from privrl.systems.pgc_a3c.local import one_trial_output

    accepted = out.scores[np.isfinite(out.scores)]
    scores = np.full_like(out.scores, np.nan)
    scores[0, :accepted.size] = accepted
    return one_trial_output(out.config, scores, out.ledger, out.wall_seconds, out.nodes,
                            out.theta)


def main(argv: list[str] | None = None) -> None:
    """The agent executor: `python -m privrl.systems.pgc_a3c.flower --config FILE --node i
    --nodes N --runtime-api HOST:PORT --trusted-fab SHA256 [--state-dir DIR]
    [--superexec-secret-file FILE]` beside SuperNode i."""
    from privrl.runtime.flower import executor_parser, serve_tasks, superexec_secret

    parser = executor_parser("privrl.systems.pgc_a3c.flower")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="the node's own directory (mode 0700, made if missing; never "
                             "under the server operator's run directory): the agents' ledger "
                             "and the reports they released")
    args = parser.parse_args(argv)
    secret = superexec_secret(args.superexec_secret_file)
    agent = FlowerAgent(config_from_dict(json.loads(args.config.read_text())), args.node,
                        args.nodes, args.state_dir)
    serve_tasks(args.runtime_api, agent.handle, args.trusted_fab, secret)


if __name__ == "__main__":
    main()
