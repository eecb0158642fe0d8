"""FedPG-Dec on Ray: every node is a Ray actor; nodes exchange push-sum messages peer to peer.

A node actor owns its private environment (CartPole by default), its policy's optimizer state
and a `privrl.federation.gossip.PushSumNode` (x_k, w_k). Round t:

1. **step** — the node runs `FedPG.dec_node_update` (the function the local runner computes for
   each node in turn, with the same mechanism path) from its z_k: B_t episodes, its own μ_tᵏ,
   N_t SCSG steps, and its update released through the mechanism as a `Report`, after charging
   its own ledger (the one agent-node protocol, privrl.runtime.node). The ledger is the run's
   (`budget_ledger`): past `epsilon_budget` a node refuses the round before computing it, and
   the driver, which asks every node whether it affords the next round, ends the run there as
   the local runner ends a trial. On a Gymnasium task (`task.host`) the same function plays
   its episodes on the host in the node's own process (the task's episode source,
   privrl.systems.fedpg.source), the rest jitted piece by piece, as the local runner does
   for each node. It applies the Report to x_k and calls `receive` on each out-neighbour's actor
   directly with that neighbour's share. Only push-sum shares (post-processing of Reports)
   ever leave a node.
2. **mix** — once a node holds the round-t share of each in-neighbour it sums them.

The driver (the `privrl` process) only keeps rounds in step (push-sum over a time-varying
graph is synchronous) and decides when the episode budget is spent; it never sees parameters.

Faults: actors restart without limit and retry their calls. A node checkpoints (atomic write)
after every mix. A node that dies mid-round restarts from its last checkpoint and redoes the
round: its keys derive from the seed, its id and the round, so it recomputes the *same* Report
(no new privacy spent; its ledger counts the round once) and the same shares, which peers that
already hold them reject as duplicates. Shares it had received and lost are resent by their
senders, which keep their last round's outgoing shares. The result equals the local runner's.

Keys: as in every privrl runner, each node's randomness (including its mechanism noise) derives
from the run's seed, so runs are reproducible. The guarantee assumes a peer cannot predict a
node's noise: in a deployment with untrusted peers, give each node a seed they do not know.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privrl.compute.programs import per_process
from privrl.federation.gossip import GossipMessage, GossipVerdict, PushSumNode
from privrl.output import work_on_failure
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.noise import secret_fold, secret_keys
from privrl.privacy.record import mechanism_record
from privrl.privacy.report import restore_report
from privrl.runfile import checked, read, tree_from_leaves, write
from privrl.runtime.node import AgentNode
from privrl.runtime.ray import require_ray, start_ray
from privrl.systems.fedpg.algorithm import (
    FedPG,
    FedPGConfig,
    FedPGState,
    node_noise_key,
    settings_algorithm,
)
from privrl.systems.fedpg.dec import round_info
from privrl.systems.fedpg.local import (
    FedPGRun,
    account,
    budget_ledger,
    policy_of,
    run_baseline,
)
from privrl.systems.fedpg.runtimes import check_runtime

# Seconds a failed run waits for the nodes' answers when it reads what was done so far.
SNAPSHOT_TIMEOUT = 60.0

EventHook = Callable[[str, dict[str, Any]], None]
CHECKPOINT_KIND = "fedpg-node-checkpoint"


def _trial_key(seed: int) -> jax.Array:
    """The key of the local runner's first trial, so both runtimes draw the same numbers."""
    return jax.random.split(jax.random.key(seed), 1)[0]


@per_process
def _node_program(config: FedPGConfig) -> tuple[FedPG, FedPGState, Callable[..., Any]]:
    """A node's algorithm, its trial's initial state and its round (`dec_node_update`: on a
    Gymnasium task on the host, episodes here and the rest jitted piece by piece by the task's
    episode source; else one jitted function), made once per config in a process and shared
    by its nodes there (`per_process`); every node-specific input is an argument."""
    algo = settings_algorithm([config])
    state = algo.init(_trial_key(algo.config.seed))
    return algo, state, (algo.dec_node_update if algo.task.host
                         else jax.jit(algo.dec_node_update))


class NodeActor:
    """One FedPG-Dec node (a plain class; wrapped with ray.remote when a run starts)."""

    def __init__(self, config: FedPGConfig, node: int, directory: str, names: list[str]
                 ) -> None:
        # The local runner's algorithm (a mechanism that could run in a program of settings
        # releases through the program's path, with its parameters as `self._setting`), so
        # that a node releases the very reports a local run does.
        self.algo, state, self._update = _node_program(config)
        self.guarantee = self.algo.settings[0].mechanism.guarantee
        # (the trial's mechanism as data,) for `dec_node_update`, or () for the algorithm's own
        self._setting: tuple[Any, ...] = (() if self.algo.settings[0] is self.algo else (
            jax.tree_util.tree_map(lambda a: a[0], self.algo.setting_data([0])),))
        self.node = node
        self.names = names  # every node's actor name: peers are looked up, so a restarted
        self.peers: dict[int, Any] = {}  # node finds them again
        self.path = Path(directory) / f"node{node}.npz"
        self.key = state.key
        # Secret noise: this process's own root from os.urandom, in memory only, passed to the
        # jitted program as an argument (never a constant a compilation cache could store).
        # It also keys the node's private environment and its rounds (`DecRound.inputs`); a
        # restarted node draws a new root, so its simulated environment is drawn anew.
        self._noise = secret_keys() if config.noise == "secret" else None
        env = self.algo.env_params_of(secret_fold(self._noise, state.key), jnp.array([node]))
        self.env = jax.tree_util.tree_map(lambda a: a[0], env)
        # (optimizer state, info) of the round stepped but not mixed: set iff gossip.applied
        self.pending: tuple[Any, dict[str, float]] | None = None
        self.gossip = PushSumNode(node, self.algo.topology,
                                  np.asarray(state.gossip.x[node], np.float32))
        self.opt_state = jax.tree_util.tree_map(lambda a: np.asarray(a[node]), state.opt_state)
        released: Released | None = None
        if self.path.exists():
            (self.gossip, self.opt_state, self.used, ledger, self.history,
             released) = load_node(self.path, node, self.algo.topology, self.opt_state)
        else:
            # the run's ledger: it refuses a round past `epsilon_budget`, as the local run's
            self.used, ledger, self.history = 0, budget_ledger(config), []
        # The one agent-node protocol (privrl.runtime.node) around this node's round: it
        # charges the ledger before the round is computed and checkpoints the report it
        # released in the round it is in (report, optimizer state, info) before anything is
        # sent: a restart re-sends that same report instead of drawing new noise (one
        # release per round, whatever the keys). The node keeps only the round in flight.
        self.agent = AgentNode(self, [node], ledger, self.algo.dim, store=self, released=(
            {} if released is None else
            {(node, released[0]): (restore_report(released[1], self.guarantee), *released[2:])}))

    def warmup(self) -> None:
        """Compile the node's round (with JAX's persistent cache on, as the CLI sets it, the
        first node compiles and the others load its program: the driver staggers them). A
        host (Gymnasium) round's pieces compile on their first call, in round 0."""
        if not self.algo.task.host and not isinstance(self._update, jax.stages.Compiled):
            args = (jnp.asarray(self.gossip.z), self.opt_state, self.env, self.key,
                    jnp.bool_(True), self._noise_key(0), *self._setting)
            self._update = self._update.lower(*args).compile()

    def _noise_key(self, t: int) -> jax.Array | None:
        return None if self._noise is None else node_noise_key(self._noise, self.node, t)

    def step(self, t: int) -> tuple[dict[str, float], list[Any]]:
        """Round t's local update; returns its statistics and the refs of the sends."""
        g = self.gossip
        if t < g.round:  # a retried call after the round was mixed
            return self.history[t], []
        if t > g.round:
            raise RuntimeError(f"node {self.node} is in round {g.round}, asked for round {t}")
        if g.applied:  # asked again: resend (peers dedupe)
            return self.pending[1], self._send(list(g.last_outgoing.values()))
        # Released before (restarted after releasing round t): the same report, nothing spent
        report, opt_state, info = self.agent.release(self.node, t)
        sends = g.apply(report)
        self.pending = (opt_state, info)
        return info, self._send(sends)

    def affords(self) -> bool:
        """Whether this node's budget admits the next round's release (nothing charged)."""
        return self.agent.affords(self.node)

    @property
    def ledger(self) -> PrivacyLedger:
        return self.agent.ledger

    # --- the node's agent step (privrl.runtime.node.AgentStep) ---
    def check(self, agent: int, t: int) -> None:
        """Rounds are kept in step by the gossip state (`step`): nothing more to check."""

    def together(self, agent: int) -> list[int]:
        return [agent]

    def __call__(self, theta: Any, agent: int, t: int
                 ) -> dict[tuple[int, int], tuple[Any, Any, dict[str, float]]]:
        """Round t's update from z_k: its Report, optimizer state and statistics."""
        key = secret_fold(self._noise,
                          jax.random.fold_in(jax.random.fold_in(self.key, t), self.node))
        upd = self._update(jnp.asarray(self.gossip.z), self.opt_state, self.env, key,
                           jnp.bool_(True), self._noise_key(t), *self._setting)
        batch, steps = int(upd.batch), int(upd.steps)
        info = {"mean_return": float(upd.mean_return), "batch": batch, "steps": steps,
                "used_before": self.used,
                "used": self.used + batch + self.algo.config.minibatch * steps}
        return {(agent, t): (upd.report, jax.tree_util.tree_map(np.asarray, upd.opt_state),
                             info)}

    def save(self, ledger: PrivacyLedger, released: dict[tuple[int, int], Any]) -> None:
        """The node's `NodeStore`: its whole checkpoint, with the round in flight's report."""
        self._checkpoint()

    def receive(self, msg: GossipMessage) -> GossipVerdict:
        return self.gossip.receive(msg)

    def resend(self, t: int, receiver: int) -> list[Any]:
        msg = self.gossip.outgoing(t, receiver)
        return self._send([msg]) if msg is not None else []

    def mix(self, t: int) -> list[int]:
        """Finish round t; returns the in-neighbours still missing ([this node] if it must
        redo its step, e.g. after a restart), [] when done."""
        g = self.gossip
        if t < g.round:
            return []
        if not g.applied:
            return [self.node]
        if not g.mix():
            return g.missing()
        self.opt_state, info = self.pending
        self.pending = None
        self.agent.forget()
        self.used = info["used"]
        self.history.append(info)
        self._checkpoint()
        return []

    def _checkpoint(self) -> None:
        released = None
        for (_, t), (report, opt_state, info) in self.agent.released.items():
            released = (t, np.asarray(report.value), opt_state, info)
        save_node(self.path, self.gossip, self.opt_state, self.used, self.agent.ledger,
                  self.history, released)

    def result(self) -> dict[str, Any]:
        return {"z": self.gossip.z, "ledger": self.ledger, "history": self.history,
                "mixed_from": self.gossip.mixed_from, "rejections": self.gossip.rejections}

    def pid(self) -> int:
        return os.getpid()

    def _send(self, msgs: list[GossipMessage]) -> list[Any]:
        return [self._peer(m.receiver).receive.remote(m) for m in msgs]

    def _peer(self, i: int) -> Any:
        if i not in self.peers:
            self.peers[i] = require_ray().get_actor(self.names[i])
        return self.peers[i]


Released = tuple[int, np.ndarray, Any, dict[str, float]]


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def save_node(path: Path, gossip: PushSumNode, opt_state: Any, used: int,
              ledger: PrivacyLedger, history: list[dict[str, float]],
              released: Released | None = None) -> None:
    """A node's state (after a mix, or after a step with the report it `released` in the
    round it is in), written atomically as a privrl run file (no pickle). The released report
    is already public; the noise key that made it is never written."""
    rel = None if released is None else {
        "round": released[0], "report": np.asarray(released[1], np.float32),
        "opt_state": _leaves(released[2]), "info": released[3]}
    write(path, CHECKPOINT_KIND, {
        "gossip": gossip.snapshot(), "used": used, "ledger": ledger.to_state(),
        "history": history, "opt_state": _leaves(opt_state), "released": rel})


def load_node(path: Path, node: int, topology: Any, opt_template: Any
              ) -> tuple[PushSumNode, Any, int, PrivacyLedger, list[dict[str, float]],
                         Released | None]:
    """What `save_node` wrote for `node` on `topology`: (gossip node, optimizer state of
    `opt_template`'s structure, episodes used, ledger, history, the report released in the
    current round or None). Nothing in the file can run code; a tampered, foreign or other
    node's file raises RunFileError naming it."""
    ck = read(path, CHECKPOINT_KIND)
    with checked(path):
        gossip = PushSumNode.from_snapshot(ck["gossip"], topology)
        if gossip.node != node:
            raise ValueError(f"the checkpoint is node {gossip.node}'s, not node {node}'s")
        opt_state = tree_from_leaves(opt_template, ck["opt_state"])
        used, history = ck["used"], ck["history"]
        if not (isinstance(used, int) and used >= 0 and isinstance(history, list)
                and len(history) == gossip.round and all(isinstance(h, dict) for h in history)):
            raise ValueError("inconsistent episode count or history")
        released, rel = None, ck["released"]
        if rel is not None:
            value = np.asarray(rel["report"])
            if not (rel["round"] == gossip.round and value.shape == gossip.x.shape
                    and value.dtype == np.float32 and isinstance(rel["info"], dict)):
                raise ValueError("the released report does not fit this node's round")
            released = (gossip.round, value, tree_from_leaves(opt_template, rel["opt_state"]),
                        rel["info"])
        return (gossip, opt_state, used, PrivacyLedger.from_state(ck["ledger"]), history,
                released)


def run_fedpg_dec_ray(
    config: FedPGConfig,
    directory: Path,
    address: str | None = None,
    progress: Callable[[float, int], None] | None = None,
    on_event: EventHook | None = None,
) -> tuple[FedPGRun, dict[str, Any]]:
    """One FedPG-Dec trial with every node a Ray actor (`check_runtime`: ConfigError before
    anything starts for a run the Ray runtime does not carry). Without `address` a local Ray cluster
    is started; with one ("auto" or "HOST:PORT") the run joins it. `on_event(kind, info)` is
    called after each round's step ("stepped") and mix ("mixed") with the node handles (tests
    inject faults there). Returns the run (as the local runner's) and a description of the
    cluster and of every node's gossip log."""
    check_runtime(config, "ray")  # the library's rules, as the CLI's (ConfigError)
    ray = require_ray()
    cfg = replace(config, noise=config.noise or "secret").resolved()
    algo = FedPG(cfg)
    k = cfg.agents
    directory.mkdir(parents=True, exist_ok=True)
    started_here, cluster = start_ray(ray, address)
    start = time.perf_counter()
    try:
        node_cls = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(NodeActor)
        names = [f"privrl-fedpg-{uuid.uuid4().hex[:12]}-node{i}" for i in range(k)]
        nodes = [node_cls.options(name=names[i]).remote(cfg, i, str(directory), names)
                 for i in range(k)]
        ray.get(nodes[0].warmup.remote())
        ray.get([n.warmup.remote() for n in nodes[1:]])
        warm_s = time.perf_counter() - start
        rows: list[list[dict[str, float]]] = []
        used = np.zeros(k)
        t = 0
        compile_s = warm_s  # as the local runner: until the end of the first round
        spent = False  # ended by the privacy budget: a node could not afford the next round

        def so_far() -> tuple[FedPGRun, dict[str, Any]]:  # should a round fail: what was done
            answers = ray.get([n.result.remote() for n in nodes], timeout=SNAPSHOT_TIMEOUT)
            return _dec_output(cfg, algo, answers, rows, used, t, spent, cluster,
                               time.perf_counter() - start, compile_s)

        with work_on_failure(so_far):  # the files keep every release made (keeping_work)
            while used.mean() < cfg.budget:
                if cfg.epsilon_budget is not None and not all(
                        ray.get([n.affords.remote() for n in nodes])):
                    spent = True  # as the local run: the trial ends where it cannot release
                    break
                if t >= 10 * cfg.max_rounds():
                    raise RuntimeError("internal error: the episode budget was never reached")
                t0 = time.perf_counter()
                infos = _step_all(ray, nodes, t)
                if on_event is not None:
                    on_event("stepped", {"round": t, "nodes": nodes})
                _mix_all(ray, nodes, t)
                if t == 0:
                    compile_s += time.perf_counter() - t0
                if on_event is not None:
                    on_event("mixed", {"round": t, "nodes": nodes})
                rows.append(infos)
                used = np.array([i["used"] for i in infos], float)
                t += 1
                if progress is not None:
                    progress(float(used.mean()), cfg.budget)
        results = ray.get([n.result.remote() for n in nodes])
    finally:
        if started_here:
            ray.shutdown()
    return _dec_output(cfg, algo, results, rows, used, t, spent, cluster,
                       time.perf_counter() - start, compile_s)


def _dec_output(cfg: FedPGConfig, algo: FedPG, results: list[dict[str, Any]],
                rows: list[list[dict[str, float]]], used: np.ndarray, t: int, spent: bool,
                cluster: dict[str, Any], wall: float, compile_s: float
                ) -> tuple[FedPGRun, dict[str, Any]]:
    """The run (as the local runner's) from every node's answer and the driver's rows of the
    `t` rounds completed, and ray.json's description. A run that failed mid-round: its nodes'
    ledgers hold that round's releases, and the releases stated are the most any node made."""
    k = cfg.agents
    ledger = budget_ledger(cfg)  # each node's, as the nodes enforced it
    for i, r in enumerate(results):
        ledger.charge(i, algo.mechanism.guarantee, r["ledger"].reports_of(i))
    released = max([t, *(r["ledger"].reports_of(i) for i, r in enumerate(results))])

    def of(field: str, dtype: Any) -> list[Any]:  # a field of every node's answer, per round
        return [jnp.asarray([i[field] for i in row], dtype) for row in rows]

    infos = [round_info(*args) for args in zip(
        of("mean_return", jnp.float32), of("batch", jnp.int32), of("steps", jnp.int32),
        of("used_before", jnp.int32), strict=True)]

    def col(field: str) -> np.ndarray:  # one trial's row, as the local run records it
        return np.array([[float(getattr(i, field)) for i in infos]])

    run = FedPGRun(
        config=cfg, mean_return=col("mean_return"), used_before=col("used_before"),
        batch=col("batch"), inner_steps=col("inner_steps"),
        used=used[None].astype(np.int64), episodes_played=int(used.sum()), ledger=ledger,
        mechanism=mechanism_record(algo.mechanism, algo.dim), topology=algo.topology.describe(),
        wall_seconds=wall, compile_seconds=compile_s, rounds_run=t, releases=np.array([released]),
        accounting=account(algo, released), z=(z := np.stack([r["z"] for r in results])[None]),
        policy=policy_of(algo, z), privacy_budget_spent=np.array([spent]),
        baseline=run_baseline(algo))
    gossip = {"nodes": k, "rounds": t,
              "rejected": {i: r["rejections"] for i, r in enumerate(results) if r["rejections"]},
              "senders_per_round": [r["mixed_from"] for r in results]}
    return run, {"cluster": cluster, "gossip": gossip}


def _step_all(ray: Any, nodes: list[Any], t: int) -> list[dict[str, float]]:
    """Every node's step of round t, and every share it sent delivered."""
    out = ray.get([n.step.remote(t) for n in nodes])
    ray.get([ref for _, refs in out for ref in refs])
    return [info for info, _ in out]


def _mix_all(ray: Any, nodes: list[Any], t: int, max_attempts: int = 20) -> None:
    """Mix round t at every node, re-running the step of a node that lost it and resending the
    shares a node lost (after a restart) until every node has mixed."""
    waiting = list(range(len(nodes)))
    for _ in range(max_attempts):
        missing = ray.get([nodes[i].mix.remote(t) for i in waiting])
        lost = [(i, m) for i, m in zip(waiting, missing, strict=True) if m]
        if not lost:
            return
        waiting = [i for i, _ in lost]
        for i, m in lost:
            if i in m:  # the node itself lost its step: redo it (same keys, same Report)
                _, refs = ray.get(nodes[i].step.remote(t))
                ray.get(refs)
            ray.get([r for s in m if s != i for r in ray.get(nodes[s].resend.remote(t, i))])
    raise RuntimeError(f"round {t}: nodes {waiting} could not complete push-sum after "
                       f"{max_attempts} attempts")
