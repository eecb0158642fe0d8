"""FedPG-Cen on Flower: agents on SuperNodes, a real secure sum, the server's learner apart.

Three parts, each in its own trust domain or process:

- **the agents** (`CenNode`, in privrl's agent executor beside each SuperNode,
  privrl.runtime.flower.serve_tasks): SuperNode i hosts agents a ≡ i (mod N). Each holds its
  private environment (keyed, under the default secret noise, by a root from os.urandom in
  this process), plays B_t episodes with the broadcast θ₀ᵗ (B_t: the seed's; it refuses
  another), computes its policy-gradient estimate μ_tᵏ with the local runner's round code
  (`round_plan`, `CenRound.estimates`), and releases it only as a message of the distributed
  discrete Gaussian (privrl.privacy.discrete_sum: clipped, rounded, its noise share added,
  modulo 2^b; the local runner's release function with the agent's mechanism key, its noise
  share from os.urandom under secret noise). The node adds its agents' messages modulo 2^b
  and hands the sum to Flower's SecAgg+ client mod, which masks it. Each agent charges its
  own round budget before its message leaves, refuses past it whatever the server asks, and
  re-sends the same message if asked for a round again.
- **the aggregator** (privrl.federation.flower_sum.cen_server_app, a ServerApp running only
  privrl.federation code): one SecAgg+ round per FedPG round; it sees the sum of the
  surviving nodes' messages and which nodes survived, and passes μ_t = sum / (agents in it)
  on.
- **the server's learner** (`ServerLearner`, in the process that started the run: the server
  operator's own trust domain, as the aggregator): draws B_t and N_t, asks the aggregator for
  μ_t, and runs the N_t SCSG steps on its own environment (FedPG-BR's server is a learner).

Under a local mechanism (none, gaussian, laplace, privunit, privunitg) the agents are
`ReportNode`s instead: each agent releases its μ_tᵏ as a Report through the mechanism,
charged to its own ledger, the ServerApp checks every Report as the aggregator service does
and hands the learner their mean (privrl.federation.flower_sum.collect_reports). The round is
the local runner's own code (`round_plan`, `CenRound.reports`, `average_reports`, the SCSG
loop): with `noise="seeded"` a Flower run is the local run (tests/systems/fedpg/test_flower.py
states the tolerance).

The aggregator and the learner exchange files in the aggregator's directory
(privrl.federation.flower_sum's module comment). The agents' episode returns never leave
them: the learning curve is the mean length of the server's own SCSG episodes (CartPole's
return; on another task, its length).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp

from privrl.config import ConfigError
from privrl.federation.flower import WireError, read_request, submission_content
from privrl.federation.flower_sum import (
    REFUSED,
    SETUP,
    STOP,
    SUM_RESULTS,
    fewest_at_threshold,
    node_payload,
    payload_bits,
    read_fit,
    secagg_node,
    sum_reply,
    wait_for,
    write_atomic,
)
from privrl.federation.pushsum import PushSumState
from privrl.federation.service import Submission
from privrl.privacy.discrete_sum import DiscreteGaussianSum
from privrl.privacy.ledger import BudgetExceededError
from privrl.privacy.noise import secret_keys
from privrl.runfile import checked, read, write
from privrl.systems.fedpg.algorithm import (
    FedPG,
    FedPGConfig,
    discrete_sum_mechanism,
    settings_algorithm,
)
from privrl.systems.fedpg.cen import CenPlan, own_lanes
from privrl.systems.fedpg.state import FedPGState

NODE_STATE = "node.npz"  # a node's round count and released messages (never its noise root)
_STATE_KIND = "flower-cen-node"
REPORT_STATE = "agents.npz"  # a ReportNode's ledger and released reports (never its noise root)
_REPORT_KIND = "flower-cen-reports"
# The mechanisms whose Reports travel one per agent (the secure sum is distributed-gaussian's)
LOCAL_MECHANISMS = ("none", "gaussian", "laplace", "privunit", "privunitg")

__all__ = ["LOCAL_MECHANISMS", "CenNode", "FlowerCenRun", "FlowerPlan", "ReportNode",
           "ServerLearner", "client_app", "flower_mechanism", "learn", "main", "plan_run",
           "prepare_run", "record", "round_plan", "run_fedpg_cen_flower"]

def _trial_key(seed: int) -> jax.Array:
    """The local runner's first trial key, so that θ₀ and the server's draws are the same."""
    return jax.random.split(jax.random.key(seed), 1)[0]


def round_plan(algo: FedPG, state: FedPGState, theta: jax.Array, t: jax.Array,
               noise: jax.Array | None = None, setting: Any = None
               ) -> tuple[CenPlan, FedPGState]:
    """The local runner's plan of round t (`CenRound.plan` from the trial's round key, as
    `FedPG.round` draws it) with θ₀ᵗ = θ, and the trial's state it was drawn from: B_t, N_t,
    the server's inner-loop key, the agents' lanes and mechanism keys."""
    state = state._replace(gossip=PushSumState(theta[None], state.gossip.w), rounds=t,
                           noise=noise, setting=setting)
    return algo.variant.plan(state, jax.random.fold_in(state.key, t), jnp.bool_(True)), state


def agents_of(node: int, nodes: int, agents: int) -> list[int]:
    return list(range(node, agents, nodes))


def flower_mechanism(cfg: FedPGConfig, dim: int, nodes: int, threshold: int
                     ) -> DiscreteGaussianSum:
    """The distributed discrete Gaussian a Flower run uses (`discrete_sum_mechanism`, the local
    runner's): calibrated to the config's ε at δ over its calibration rounds, counting the
    fewest agents `threshold` surviving nodes hold as the honest shares (or the config's
    min_honest, if smaller), modulo the 2^b SecAgg+ can carry for `nodes` nodes. ConfigError
    if the secure sum could reveal fewer."""
    per_node = [len(agents_of(i, nodes, cfg.agents)) for i in range(nodes)]
    fewest = fewest_at_threshold(per_node, threshold)
    m = fewest if cfg.min_honest is None else cfg.min_honest
    if m > fewest:
        raise ConfigError("min_honest", f"{threshold} surviving SuperNodes may hold only "
                          f"{fewest} agents, fewer than the {m} honest shares asked for")
    if cfg.epsilon is None:
        raise ConfigError("epsilon", "distributed-gaussian on Flower is calibrated from ε")
    mech = discrete_sum_mechanism(cfg, dim, m, payload_bits(nodes))
    try:
        mech.check_threshold(fewest)
    except ValueError as e:
        raise ConfigError("threshold", str(e)) from None
    return mech


# --- the agents' side ---------------------------------------------------------------------------
class CenNode:
    """The agents SuperNode `node` of `nodes` hosts (module doc)."""

    def __init__(self, config: FedPGConfig, node: int, nodes: int, mech: DiscreteGaussianSum,
                 allowed_rounds: int, directory: Path | None = None) -> None:
        cfg = dataclasses.replace(config, trials=1, noise=config.noise or "secret").resolved()
        self.config, self.mech, self.allowed = cfg, mech, allowed_rounds
        self.algo = FedPG(cfg)
        if self.algo.task.host:
            raise ConfigError("env", "FedPG-Cen on Flower runs gymnax tasks (jitted rollouts)")
        self.ids = agents_of(node, nodes, cfg.agents)
        self.state = self.algo.init(_trial_key(cfg.seed))
        # Secret noise: this process's own root, in memory only, passed as an argument (it
        # keys the agents' private environments and episodes too); the node plays its own
        # agents' lanes. Seeded: the whole round, as the local runner (`ReportNode`).
        self._noise = secret_keys() if cfg.noise == "secret" else None
        self.lanes = None if self._noise is None else jnp.asarray(self.ids)
        self._grads = jax.jit(self._gradients)
        self._batch = jax.jit(lambda t: round_plan(self.algo, self.state,
                                                   self.state.gossip.x[0], t)[0].batch)
        self.rounds_charged = 0  # every agent of the node releases in every round
        self.released: dict[int, np.ndarray] = {}  # round -> the node's sum of messages
        # `directory`: the node's state file (its round count and the messages it released,
        # never its noise root), written atomically before a message leaves, so that a
        # restarted executor re-sends a released round and never charges it again.
        self.path = None if directory is None else Path(directory) / NODE_STATE
        if self.path is not None and self.path.exists():
            self._restore(self.path)

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rounds = sorted(self.released)
        write(self.path, _STATE_KIND, {
            "rounds_charged": self.rounds_charged,
            "rounds": np.array(rounds, np.int64),
            "messages": (np.stack([self.released[t] for t in rounds]) if rounds
                         else np.zeros((0, self.algo.dim), np.int64))})

    def _restore(self, path: Path) -> None:
        state = read(path, _STATE_KIND)
        with checked(path):
            charged, rounds = state["rounds_charged"], np.asarray(state["rounds"])
            messages = np.asarray(state["messages"])
            n = rounds.shape[0]
            if not (isinstance(charged, int) and 0 <= charged == n
                    and messages.shape == (n, self.algo.dim) and messages.dtype == np.int64
                    and np.all(np.diff(rounds) > 0) and (n == 0 or rounds[0] >= 0)
                    and (n == 0 or (messages.min() >= 0
                                    and messages.max() < self.mech.modulus))):
                raise ValueError("the released messages do not match this node's run")
            self.rounds_charged = charged
            self.released = {int(t): m for t, m in zip(rounds, messages, strict=True)}

    def _gradients(self, theta: jax.Array, t: jax.Array, noise: jax.Array | None
                   ) -> tuple[jax.Array, jax.Array]:
        """μ_tᵏ of each of this node's agents and their mechanism keys: the local runner's
        round t (its plan: B_t episodes with θ₀ᵗ on each agent's private environment;
        `CenRound.estimates`)."""
        variant = self.algo.variant
        plan, state = round_plan(self.algo, self.state, theta, t, noise)
        if self.lanes is not None:
            plan = own_lanes(plan, self.lanes)
        mu = variant.estimates(state, plan, variant.episodes(self.algo.source, plan))
        if self.lanes is not None:
            return mu, plan.mech_keys
        ids = jnp.asarray(self.ids)
        return mu[ids], plan.mech_keys[ids]

    def warm_up(self) -> None:
        """Compile before serving: a SecAgg+ stage has a timeout."""
        jax.block_until_ready(self._grads(jnp.zeros(self.algo.dim, jnp.float32), jnp.int32(0),
                                          self._noise))
        self._batch(jnp.int32(0))

    def batch(self, t: int) -> int:
        """B_t of round t: the seed's, as the local runner and the server's learner draw it."""
        return int(self._batch(jnp.int32(t)))

    def release(self, theta: np.ndarray, batch: int, t: int) -> np.ndarray:
        """The node's sum of its agents' messages for round t, modulo 2^b; ValueError or
        BudgetExceededError (nothing released) when it must refuse."""
        if t in self.released:  # already sent once: the same again, nothing new spent
            return self.released[t]
        last = max(self.released, default=-1)
        if not (isinstance(t, int) and t > last):
            # a round it was not asked for in time stays unreleased: one message per round
            raise ValueError(f"round {t} is before this node's last round {last}")
        cfg = self.config
        if batch != self.batch(t):  # the server cannot choose how many episodes an agent plays
            raise ValueError(f"B_t = {batch} is not round {t}'s ({self.batch(t)}, the seed's)")
        theta = np.asarray(theta, np.float32)
        if theta.shape != (self.algo.dim,) or not np.all(np.isfinite(theta)):
            raise ValueError(f"θ must be {self.algo.dim} finite floats")
        if self.rounds_charged >= self.allowed:
            raise BudgetExceededError(f"round {t + 1} would exceed each agent's budget ε = "
                                      f"{cfg.epsilon:g} at δ = {cfg.delta:g}")
        mu, keys = self._grads(jnp.asarray(theta), jnp.int32(t), self._noise)
        # the local runner's release with each agent's key; under secret noise its noise
        # share from os.urandom (seeded: from the key, the local run's message exactly)
        secure = self._noise is not None
        total = self.mech.modular_sum(np.stack([self.mech.message(k, m, secure)
                                                for k, m in zip(keys, mu, strict=True)]))
        self.rounds_charged += 1  # charged, and saved, before anything leaves this process
        self.released[t] = total
        self._save()
        return total

    def _on_fit(self, msg: Message, ctx: Context) -> Message:
        arrays, config = read_fit(msg.content)
        total = self.release(arrays[0], int(config["batch"]), int(config["round"]))
        return Message(sum_reply(node_payload(total, self.mech.bits)), reply_to=msg)

    def handler(self) -> Any:
        """A task in, SecAgg+'s reply (or a refusal) out."""
        return secagg_node(self._on_fit)


class ReportNode:
    """The agents SuperNode `node` of `nodes` hosts under a local mechanism (a ≡ node mod N).

    Asked for agent a's report of round t from θ₀ᵗ, the node plays round t through the local
    runner's code (`round_plan`, `CenRound.episodes`, `CenRound.reports`) and releases each of
    its agents' μ_tᵏ through the mechanism as a Report (submission index t), after charging
    each agent's own ledger (`budget_ledger`: it refuses past `epsilon_budget` whatever the
    server asks). It also refuses an agent not its own, a round before the last it released,
    and a round past the episode budget (B_t and N_t follow the seed, so the node counts the
    episodes an agent has played as the local runner does). Asked again for a released
    (agent, t), it re-sends that report and spends nothing; its state file (`directory`) keeps
    the ledger and the released reports across a restart, never the noise root.

    Noise: secret by default (a root from os.urandom in this process, also keying the agents'
    private environments and episodes), and the node plays only its own agents' lanes. With
    `noise="seeded"` (a simulation: anyone with the seed can recompute everything) the node
    plays the whole round as the local runner does, whose rollout draws every lane's steps
    from one key, and releases its own agents' reports from it: the local run's reports."""

    def __init__(self, config: FedPGConfig, node: int, nodes: int,
                 directory: Path | None = None) -> None:
        from privrl.runtime.flower import load_released
        from privrl.systems.fedpg.local import budget_ledger

        if not 0 <= node < nodes:
            raise ValueError(f"node must be in 0..{nodes - 1}, got {node}")
        cfg = dataclasses.replace(config, trials=1, noise=config.noise or "secret").resolved()
        self.config, self.node, self.nodes = cfg, node, nodes
        # The local runner's algorithm: a mechanism that could run in a program of settings
        # releases through the program's path (its parameters as data), as a local run does.
        self.algo = settings_algorithm([cfg])
        if self.algo.task.host:
            raise ConfigError("env", "FedPG-Cen on Flower runs gymnax tasks (jitted rollouts)")
        self.setting = (None if self.algo.settings[0] is self.algo else jax.tree_util.tree_map(
            lambda a: a[0], self.algo.setting_data([0])))
        self.guarantee = self.algo.settings[0].mechanism.guarantee
        self.ids = agents_of(node, nodes, cfg.agents)
        self.dim = self.algo.dim
        self.state = self.algo.init(_trial_key(cfg.seed))
        # Secret noise: this process's own root, in memory only, passed as an argument.
        self._noise = secret_keys() if cfg.noise == "secret" else None
        self.lanes = None if self._noise is None else jnp.asarray(self.ids)
        self.ledger = budget_ledger(cfg)
        self.released: dict[tuple[int, int], tuple[Submission, float]] = {}
        self.path = None if directory is None else Path(directory) / REPORT_STATE
        if self.path is not None and self.path.exists():
            self.ledger, self.released = load_released(self.path, _REPORT_KIND, self.guarantee,
                                                       self.dim)
        self._round = jax.jit(self._reports)
        self._cost = jax.jit(self._costs)
        self.costs: list[int] = []  # episodes per agent of rounds 0, 1, ... (from the seed)

    def _reports(self, theta: jax.Array, t: jax.Array, noise: jax.Array | None,
                 setting: Any) -> Any:
        """Round t's Reports of the lanes this node plays (all K when seeded)."""
        variant = self.algo.variant
        plan, state = round_plan(self.algo, self.state, theta, t, noise, setting)
        if self.lanes is not None:
            plan = own_lanes(plan, self.lanes)
        return variant.reports(state, plan, variant.episodes(self.algo.source, plan))

    def _costs(self, t: jax.Array) -> jax.Array:
        plan, _ = round_plan(self.algo, self.state, self.state.gossip.x[0], t)
        return plan.batch + self.config.minibatch * plan.steps[0]

    def used_before(self, t: int) -> int:
        """Episodes each agent has played before round t (the local runner's `used`)."""
        while len(self.costs) < t:
            self.costs.append(int(self._cost(jnp.int32(len(self.costs)))))
        return sum(self.costs[:t])

    def warm_up(self) -> None:
        """Compile before serving (the server waits only so long for a reply)."""
        jax.block_until_ready(self._round(jnp.zeros(self.dim, jnp.float32), jnp.int32(0),
                                          self._noise, self.setting))
        self.used_before(1)

    def release(self, theta: np.ndarray, agent: int, t: int) -> tuple[Submission, float]:
        """Agent `agent`'s Submission of round t from θ (its score: NaN, an agent's returns
        stay with it); ValueError or BudgetExceededError (nothing released) to refuse."""
        cfg = self.config
        if not 0 <= agent < cfg.agents or agent % self.nodes != self.node:
            raise ValueError(f"agent {agent} is not one of this SuperNode's")
        done = self.released.get((agent, t))
        if done is not None:  # already public: the same report again, nothing new spent
            return done
        # its agents release a round together: a round not after the last one stays unreleased
        last = max((i for _, i in self.released), default=-1)
        if not last < t <= cfg.max_rounds():
            raise ValueError(f"round {t} is outside {last + 1}..{cfg.max_rounds()}")
        if self.used_before(t) >= cfg.budget:
            raise ValueError(f"round {t} is past the episode budget ({cfg.budget} per agent)")
        theta = np.asarray(theta, np.float32)
        if theta.shape != (self.dim,) or not np.all(np.isfinite(theta)):
            raise ValueError(f"θ must be {self.dim} finite floats")
        ids = np.asarray(self.ids)
        self.ledger.charge(ids, self.guarantee)  # before anything is computed or leaves
        reports = self._round(jnp.asarray(theta), jnp.int32(t), self._noise, self.setting)
        rows = range(len(ids)) if self.lanes is not None else ids
        for a, row in zip(ids, rows, strict=True):
            report = jax.tree_util.tree_map(lambda v, row=row: v[row], reports)
            self.released[(int(a), t)] = (Submission(int(a), t, report), math.nan)
        self._save()  # before anything leaves this process: a restart re-sends these
        return self.released[(agent, t)]

    def _save(self) -> None:
        from privrl.runtime.flower import save_released

        if self.path is not None:
            save_released(self.path, _REPORT_KIND, self.ledger, self.released, self.dim)

    def handle(self, message: Message, context: Context | None = None) -> Message:
        """A request in (privrl.federation.flower.request_content), the agent's Submission or
        a refusal (a Flower Error) out."""
        del context
        try:
            theta, agent, index = read_request(message.content, self.dim)
            sub, score = self.release(theta, agent, index)
        except (WireError, ValueError, BudgetExceededError) as e:
            return Message(Error(code=REFUSED, reason=str(e)), reply_to=message)
        return Message(submission_content(sub, score), reply_to=message)


client_app = ClientApp()


@client_app.train()
def _refuse(message: Message, context: Context) -> Message:
    """What Flower's default executor would run: nothing is released outside privrl's own."""
    del context
    return Message(Error(code=REFUSED, reason="privrl agents run only in privrl's agent "
                                              "executor (python -m privrl.systems.fedpg.flower)"),
                   reply_to=message)


# --- the server's learner ---------------------------------------------------------------------
class ServerLearner:
    """FedPG-Cen's server as a learner (module doc): the local runner's θ₀, B_t, N_t and
    server environment from the seed; μ_t from the aggregator."""

    def __init__(self, config: FedPGConfig) -> None:
        cfg = dataclasses.replace(config, trials=1).resolved()
        self.config, self.algo = cfg, FedPG(cfg)
        self.state = self.algo.init(_trial_key(cfg.seed))
        self.theta, self.opt_state = self.state.gossip.x, self.state.opt_state
        self.server_env = self.algo.env_params_of(self.state.key, jnp.array([cfg.agents]))
        self._draw = jax.jit(self._draws)
        self._step = jax.jit(self._scsg)
        self.used = 0

    def _draws(self, t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """B_t, N_t and the inner loop's key: the local runner's plan of round t."""
        plan, _ = round_plan(self.algo, self.state, self.theta[0], t)
        return plan.batch, plan.steps, plan.k_inner

    def _scsg(self, theta: jax.Array, opt_state: Any, mu: jax.Array, steps: jax.Array,
              key: jax.Array) -> tuple[jax.Array, Any, jax.Array]:
        return self.algo.scsg(self.algo.source, theta, mu[None], opt_state, steps,
                              self.server_env, key, lengths=True)

    def round(self, t: int, exchange: Path, wait_s: float) -> dict[str, Any]:
        """Round t: ask the aggregator for μ_t with θ₀ᵗ and B_t, then N_t SCSG steps."""
        batch, steps, k_inner = self._draw(jnp.int32(t))
        theta = np.asarray(self.theta[0], np.float32)
        write_atomic(exchange / f"ask-{t}.npz",
                     lambda p: np.savez(p, theta=theta, batch=np.int64(batch)))
        got = wait_for([exchange / f"sum-{t}.npz", exchange / SUM_RESULTS], wait_s)
        if got.name == SUM_RESULTS:
            raise RuntimeError(f"the ServerApp stopped: {got.read_text()[:400]}")
        with np.load(got, allow_pickle=False) as s:
            mu, info = np.asarray(s["mu"]), json.loads(str(s["info"]))
        length = float("nan")
        if mu.size:  # a halted round revealed nothing: θ stays
            theta_new, self.opt_state, length_arr = self._step(
                self.theta, self.opt_state, jnp.asarray(mu), steps, k_inner)
            self.theta, length = theta_new, float(length_arr[0])
        self.used += int(batch) + self.config.minibatch * int(steps[0])
        return {**info, "batch": int(batch), "inner_steps": int(steps[0]),
                "server_mean_length": length, "used": self.used}


# --- the run: a local deployment -----------------------------------------------------------------
@dataclass
class FlowerCenRun:
    config: FedPGConfig
    mechanism: DiscreteGaussianSum | None  # None: a local mechanism, one Report per agent
    rounds: list[dict[str, Any]]
    theta: np.ndarray
    nodes: int
    threshold: int | None
    wall_seconds: float

    def privacy(self) -> dict[str, Any]:
        """privacy.json's statement: the user-level (ε, δ) of the rounds run, and the
        assumptions it rests on; under a local mechanism, the local runner's statement of the
        Reports the server accepted (`report_privacy`)."""
        m = self.mechanism
        if m is None:
            return report_privacy(self)
        fewest = min((r["agents_in_sum"] for r in self.rounds if "halted" not in r),
                     default=None)
        return {
            "parties": "each SuperNode (its agents) in a trust domain of its own; the "
                       "aggregator's ServerApp and the server's learner in the server "
                       "operator's",
            "guarantee": {"epsilon": m.epsilon(len(self.rounds)), "delta": m.delta,
                          "notion": "(ε, δ)-DP, central, user level (an agent's whole data), "
                                    "zero-out neighbours",
                          "rounds": len(self.rounds),
                          "min_honest_surviving_agents": m.min_honest},
            "assumptions": (
                f"SecAgg+ reveals a round's sum only when >= {self.threshold} of the "
                f"{self.nodes} SuperNodes survive, which hold >= {m.min_honest} agents; at "
                f"least {m.min_honest} of the agents in every revealed sum are honest (do not "
                "collude with the server); the server follows the protocol (honest but "
                "curious)."),
            "fewest_agents_in_a_revealed_sum": fewest,
            "mechanism": m.record(len(self.rounds)),
        }


def report_privacy(run: FlowerCenRun) -> dict[str, Any]:
    """privacy.json of a run under a local mechanism: the local runner's record
    (privrl.systems.fedpg.local.privacy_record: the per-agent LDP guarantee composed over the
    Reports each agent released, by its ledger or accountant) of the Reports the server
    accepted, each charged to a ledger as the agents charged theirs."""
    from privrl.privacy.record import mechanism_record
    from privrl.systems.fedpg.local import FedPGRun, account, budget_ledger, privacy_record

    cfg = run.config
    algo = settings_algorithm([cfg]).settings[0]
    ledger = budget_ledger(cfg)
    for r in run.rounds:
        if r["accepted_agents"]:
            ledger.charge(np.asarray(r["accepted_agents"]), algo.mechanism.guarantee)
    most = max((ledger.reports_of(a) for a in range(cfg.agents)), default=0)
    col = lambda k: np.array([[float(r[k]) for r in run.rounds]])  # noqa: E731
    used = run.rounds[-1]["used"] if run.rounds else 0
    return privacy_record(FedPGRun(
        config=cfg, mean_return=np.full((1, len(run.rounds)), np.nan),
        used_before=col("used") - col("batch") - cfg.minibatch * col("inner_steps"),
        batch=col("batch"), inner_steps=col("inner_steps"),
        used=np.full((1, cfg.agents), used, np.int64), episodes_played=0, ledger=ledger,
        mechanism=mechanism_record(algo.mechanism, algo.dim), topology=None,
        wall_seconds=run.wall_seconds, compile_seconds=0.0, rounds_run=len(run.rounds),
        releases=np.array([most]), accounting=account(algo, most),
        z=np.asarray(run.theta)[None, None]))


def record(run: FlowerCenRun) -> Any:
    """The run directory's contents (privrl.runtime.output.save): config.json, metrics.csv
    (one row per round), privacy.json (the statement, trust domain "flower"), summary.json,
    policy.npz (the server's final θ, as the local runner's) and flower.json (who took part
    in each round)."""
    from privrl.runtime.output import RunRecord, csv_writer
    from privrl.systems.fedpg.local import policy_of

    cfg, rounds = run.config, run.rounds
    privacy = run.privacy()
    summed = run.mechanism is not None
    guarantee = privacy["guarantee"] or {"epsilon": None, "delta": None}  # none: no guarantee
    summary = {
        "label": f"FedPG-Cen on Flower ({'secure sum' if summed else cfg.mechanism})",
        "agents": cfg.agents, "supernodes": run.nodes, "threshold": run.threshold,
        "rounds": len(rounds), "episodes_per_agent": rounds[-1]["used"] if rounds else 0,
        "final_server_mean_length": rounds[-1]["server_mean_length"] if rounds else None,
        "epsilon": guarantee["epsilon"], "delta": guarantee["delta"],
        **({"min_honest_surviving_agents": run.mechanism.min_honest} if summed else {}),
        "wall_seconds": run.wall_seconds}
    counted = "agents_in_sum" if summed else "agents_in_mean"

    def rows() -> Any:
        for r in rounds:
            yield (f"{r['round']},{r['used']},{r['batch']},{r['inner_steps']},"
                   f"{r[counted]},{r['server_mean_length']:.4f}")

    return RunRecord(
        "fedpg-cen", cfg.to_dict(), cfg.seed, summary, privacy,
        metrics=csv_writer(f"round,episodes_used,batch,inner_steps,{counted},"
                           "server_mean_length", rows),
        files={"flower.json": {"supernodes": run.nodes, "threshold": run.threshold,
                               "rounds": rounds}},
        run_info={"runtime": "flower", "supernodes": run.nodes}, runtime="flower",
        policy=policy_of(FedPG(cfg), np.asarray(run.theta, np.float32)[None, None]))


@dataclass(frozen=True)
class FlowerPlan:
    """A checked Flower run: the resolved config, the SuperNodes, the SecAgg+ threshold and
    the mechanism calibrated for them (`plan_run`)."""

    config: FedPGConfig
    nodes: int
    threshold: int | None  # SecAgg+'s; None under a local mechanism
    mechanism: DiscreteGaussianSum | None  # None: a local mechanism (`ReportNode`)


def plan_run(config: FedPGConfig, nodes: int, threshold: int | None = None) -> FlowerPlan:
    """Everything a Flower run needs checked before anything starts or is written (ConfigError
    naming the option otherwise). distributed-gaussian: >= 3 SuperNodes, each hosting an
    agent; a threshold (default N − 1) that is a strict majority; the mechanism calibrated for
    it. A local mechanism (LOCAL_MECHANISMS): 1 to K SuperNodes, no threshold. Either: plain
    FedPG-Cen (no adaptive clip, Byzantine agents, robust rule or shuffler) on a gymnax task."""
    cfg = dataclasses.replace(config, trials=1, noise=config.noise or "secret").resolved()
    if cfg.algorithm != "cen":
        raise ConfigError("algorithm", "FedPG-Dec cannot run on Flower (its nodes gossip peer "
                          "to peer; Flower carries messages between the ServerApp and each "
                          "SuperNode only)")
    if cfg.adaptive_clip or cfg.byzantine or cfg.robust != "none" or cfg.shuffle:
        raise ConfigError("robust", "the Flower runtime runs plain FedPG-Cen (no adaptive "
                          "clip, Byzantine agents, robust rule or shuffler)")
    if cfg.mechanism in LOCAL_MECHANISMS:
        if not 1 <= nodes <= cfg.agents:
            raise ConfigError("supernodes", f"must be in 1..{cfg.agents} (each hosts at least "
                              f"one agent), got {nodes}")
        if threshold is not None:
            raise ConfigError("threshold", "a SecAgg+ threshold belongs to distributed-gaussian;"
                              f" {cfg.mechanism} sends each agent's Report")
        if FedPG(cfg).task.host:
            raise ConfigError("env", "FedPG-Cen on Flower runs gymnax tasks (jitted rollouts)")
        return FlowerPlan(cfg, nodes, None, None)
    if cfg.mechanism != "distributed-gaussian":
        raise ConfigError("mechanism", f"the Flower runtime runs {', '.join(LOCAL_MECHANISMS)} "
                          f"(each agent's Report) or distributed-gaussian (a secure sum), not "
                          f"{cfg.mechanism}")
    if not 3 <= nodes <= cfg.agents:
        raise ConfigError("supernodes", f"SecAgg+ here needs 3 to {cfg.agents} SuperNodes "
                          f"(each hosts at least one agent), got {nodes}")
    threshold = nodes - 1 if threshold is None else threshold
    if not nodes // 2 < threshold <= nodes:
        raise ConfigError("threshold", f"must be in ({nodes // 2}, {nodes}]: a strict "
                          f"majority of the SuperNodes, got {threshold}")
    algo = FedPG(cfg)
    if algo.task.host:
        raise ConfigError("env", "FedPG-Cen on Flower runs gymnax tasks (jitted rollouts)")
    return FlowerPlan(cfg, nodes, threshold, flower_mechanism(cfg, algo.dim, nodes, threshold))


def prepare_run(plan: FlowerPlan, directory: Path, stage_timeout_s: float = 120.0
                ) -> tuple[ServerLearner, Path, str, Path]:
    """The server operator's side of a run before any process starts, in `directory`: the
    ServerApp's SETUP (in `aggregator/`), the app bundle (`app/`, naming privrl's installed
    apps only) and the agents' config (`agent-config.json`: the run's FedPG config and
    mechanism, which each agent reviews). Returns the server's learner, the app directory,
    the bundle's SHA-256 (what each agent's executor pins) and the agents' config file.
    `stage_timeout_s`: how long each SecAgg+ stage, or a round's requests for Reports, waits
    for replies (a node silent past it counts as dropped from that round)."""
    from privrl.runtime.flower import fab_hash, write_app

    cfg = plan.config
    learner = ServerLearner(cfg)
    agg = directory / "aggregator"
    agg.mkdir(parents=True, exist_ok=True)
    setup = _setup(plan, learner, stage_timeout_s)
    (agg / SETUP).write_text(json.dumps(setup))
    app = write_app(directory / "app", "privrl-fedpg-cen",
                    "privrl.federation.flower_sum:cen_server_app",
                    "privrl.systems.fedpg.flower:client_app",
                    {"aggregator-dir": str(agg.resolve())})
    agent_config = directory / "agent-config.json"
    agent_config.write_text(json.dumps({"config": dataclasses.asdict(cfg),
                                        "mechanism": setup.get("mechanism"),
                                        "allowed_rounds": cfg.calibration_rounds()}))
    return learner, app, fab_hash(app), agent_config


def learn(plan: FlowerPlan, learner: ServerLearner, directory: Path,
          timeout_s: float | None = None, on_round: Any = None) -> FlowerCenRun:
    """The server's learner against the ServerApp `flwr run` started with the bundle of
    `prepare_run(plan, directory)`: round after round until the episode budget is spent
    (or, under a local mechanism, until a round in which no agent answered with a Report:
    their budgets are spent), then it tells the ServerApp to stop. `timeout_s`: how long to
    wait for one round's μ_t (None: as long as it takes); `on_round(t)` as each round
    begins."""
    start = time.perf_counter()
    cfg, mech, agg = plan.config, plan.mechanism, directory / "aggregator"
    wait = math.inf if timeout_s is None else timeout_s
    rounds: list[dict[str, Any]] = []
    most = cfg.max_rounds() if mech is None else cfg.calibration_rounds()
    t = 0
    while learner.used < cfg.budget and t < most:
        if on_round is not None:
            on_round(t)
        rounds.append(learner.round(t, agg, wait))
        t += 1
        if mech is None and "halted" in rounds[-1]:
            break
    write_atomic(agg / STOP, lambda p: p.write_text("done"))
    wait_for([agg / SUM_RESULTS], 60.0)
    return FlowerCenRun(cfg, mech, rounds, np.asarray(learner.theta[0]), plan.nodes,
                        plan.threshold, time.perf_counter() - start)


def run_fedpg_cen_flower(plan: FlowerPlan, directory: Path, stage_timeout_s: float = 120.0,
                         timeout_s: float | None = None, on_round: Any = None,
                         startup_s: float = 900.0) -> FlowerCenRun:
    """One FedPG-Cen trial on a local Flower deployment of `plan.nodes` SuperNodes
    (privrl.runtime.flower.LocalDeployment): a real secure sum (distributed-gaussian) or each
    agent's Report (a local mechanism); `prepare_run`, every agent executor, `flwr run`,
    `learn`. `on_round(t, deployment)` is called as each round begins (tests inject faults
    there); `startup_s`: how long the agents may take to start and compile."""
    from privrl.runtime.flower import LocalDeployment

    start = time.perf_counter()
    nodes = plan.nodes
    learner, app, trusted, agent_config = prepare_run(plan, directory, stage_timeout_s)
    with LocalDeployment(nodes, directory / "logs") as deployment:
        ready = [directory / "agents" / f"node{i}.ready" for i in range(nodes)]
        ready[0].parent.mkdir(parents=True, exist_ok=True)
        for i in range(nodes):
            # Agent 0 compiles first; the others wait for it, so that with JAX's persistent
            # cache on (the CLI's) they load its program instead of all compiling at once.
            deployment.spawn(f"agent{i}", [
                sys.executable, "-m", "privrl.systems.fedpg.flower", "--config",
                str(agent_config), "--node", str(i), "--nodes", str(nodes), "--runtime-api",
                deployment.runtime_apis[i], "--trusted-fab", trusted,
                "--superexec-secret-file", str(deployment.superexec_secret),
                "--state-dir", str(directory / "agents" / f"node{i}"),
                "--ready-file", str(ready[i]), *(["--after", str(ready[0])] if i else [])])
        # No round before every agent serves: a SecAgg+ stage waits only its timeout.
        for r in ready:
            wait_for([r], startup_s)
        # No `deployment.run`: a SuperNode may die mid-run (the secure sum drops it).
        (directory / "logs" / "run.log").write_text(deployment.submit(app))
        run = learn(plan, learner, directory, timeout_s, None if on_round is None else
                    lambda t: on_round(t, deployment))
    return dataclasses.replace(run, wall_seconds=time.perf_counter() - start)


def _setup(plan: FlowerPlan, learner: ServerLearner, timeout_s: float) -> dict[str, Any]:
    """The ServerApp's SETUP: the secure sum's mechanism, nodes and threshold; or, under a
    local mechanism, what a Report must be (its guarantee and length) and who sends it."""
    cfg, mech = plan.config, plan.mechanism
    if mech is None:
        guarantee = settings_algorithm([cfg]).settings[0].mechanism.guarantee
        return {"reports": {"guarantee": guarantee.to_state(), "agents": cfg.agents,
                            "dim": learner.algo.dim, "nodes": plan.nodes,
                            "reply_timeout": timeout_s}}
    return {"mechanism": {f.name: getattr(mech, f.name) for f in dataclasses.fields(mech)},
            "agents_per_node": [len(agents_of(i, plan.nodes, cfg.agents))
                                for i in range(plan.nodes)],
            "threshold": plan.threshold, "stage_timeout": timeout_s}


def main(argv: list[str] | None = None) -> None:
    """The agent executor beside SuperNode i: `python -m privrl.systems.fedpg.flower --config
    FILE --node i --nodes N --runtime-api HOST:PORT --trusted-fab SHA256
    [--superexec-secret-file FILE]`."""
    from privrl.runtime.flower import executor_parser, serve_tasks, superexec_secret
    from privrl.systems.fedpg.config import FedPGConfig as Config

    parser = executor_parser("privrl.systems.fedpg.flower")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where the node keeps its round count and released messages")
    parser.add_argument("--ready-file", type=Path, default=None,
                        help="written once the agents are compiled and serve")
    parser.add_argument("--after", type=Path, default=None,
                        help="compile only once this file exists (another agent's ready file)")
    args = parser.parse_args(argv)
    data = json.loads(args.config.read_text())
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()}
    node: CenNode | ReportNode
    if data["mechanism"] is None:  # a local mechanism: each agent's Report
        node = ReportNode(Config(**fields), args.node, args.nodes, args.state_dir)
    else:
        node = CenNode(Config(**fields), args.node, args.nodes,
                       DiscreteGaussianSum(**data["mechanism"]), int(data["allowed_rounds"]),
                       args.state_dir)
    if args.after is not None:
        wait_for([args.after], 3600.0, poll_s=0.2)
    node.warm_up()
    secret = superexec_secret(args.superexec_secret_file)
    if args.ready_file is not None:
        args.ready_file.write_text("ready")
    handler = node.handle if isinstance(node, ReportNode) else node.handler()
    serve_tasks(args.runtime_api, handler, args.trusted_fab, secret)


if __name__ == "__main__":
    main()
