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
  adds its message of a round to one secure sum only: asked for a round again, it refuses
  (privrl.federation.flower_sum.SecAggGuard checks every SecAgg+ stage it answers).
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flwr.app import Context, Message

from privrl.compute.programs import per_process
from privrl.config import ConfigError
from privrl.federation.flower_roster import NodeIdentity, Roster, RosterError, write_roster
from privrl.federation.flower_sum import (
    SETUP,
    STOP,
    SUM_RESULTS,
    SecAggPins,
    fewest_at_threshold,
    fewest_revealed,
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
from privrl.runfile import checked
from privrl.runtime.flower import answer_request, refusing_client_app
from privrl.runtime.node import (
    AgentNode,
    ReleasedFile,
    check_theta,
    node_dirs,
    private_dir,
    private_read,
    private_write,
)
from privrl.systems.fedpg.algorithm import (
    FedPG,
    FedPGConfig,
    discrete_sum_mechanism,
    settings_algorithm,
)
from privrl.systems.fedpg.cen import CenPlan, own_lanes
from privrl.systems.fedpg.runtimes import LOCAL_MECHANISMS, check_runtime
from privrl.systems.fedpg.state import FedPGState

NODE_STATE = "node.npz"  # a node's round count and released messages (never its noise root)
_STATE_KIND = "flower-cen-node"
REPORT_STATE = "agents.npz"  # a ReportNode's ledger and released reports (never its noise root)
_REPORT_KIND = "flower-cen-reports"

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
    runner's): calibrated to the config's ε at δ over its calibration rounds, counting as the
    honest shares the fewest agents a revealed sum can hold, the server deviating or not
    (`fewest_revealed` SuperNodes: the threshold's at the default N − 1; or the config's
    min_honest, if smaller), modulo the 2^b SecAgg+ can carry for `nodes` nodes. ConfigError
    if the secure sum could reveal fewer."""
    per_node = [len(agents_of(i, nodes, cfg.agents)) for i in range(nodes)]
    fewest = fewest_at_threshold(per_node, fewest_revealed(nodes, threshold))
    m = fewest if cfg.min_honest is None else cfg.min_honest
    if m > fewest:
        raise ConfigError("min_honest", f"a sum revealed with threshold {threshold} may hold "
                          f"only {fewest} agents, fewer than the {m} honest shares asked for")
    if cfg.epsilon is None:
        raise ConfigError("epsilon", "distributed-gaussian on Flower is calibrated from ε")
    mech = discrete_sum_mechanism(cfg, dim, m, payload_bits(nodes))
    try:
        mech.check_threshold(fewest)
    except ValueError as e:
        raise ConfigError("threshold", str(e)) from None
    return mech


# --- the agents' side ---------------------------------------------------------------------------
class _NodePrograms:
    """What a SuperNode of `config` computes, made once per config and lanes in a process
    (`_cen_programs`, `_report_programs`: `per_process`) and shared by its nodes there: the
    local runner's algorithm, its first trial's initial state, the lanes the node plays (None:
    every lane) and the node's jitted functions, which close over them."""

    def __init__(self, algo: FedPG, config: FedPGConfig, lanes: tuple[int, ...] | None
                 ) -> None:
        self.algo, self.config = algo, config
        self.state = algo.init(_trial_key(config.seed))
        self.lanes = None if lanes is None else jnp.asarray(lanes)

    def plan(self, theta: jax.Array, t: jax.Array, noise: jax.Array | None = None,
             setting: Any = None) -> tuple[CenPlan, FedPGState]:
        """Round t's plan (`round_plan`) with θ₀ᵗ = θ, for the lanes the node plays."""
        plan, state = round_plan(self.algo, self.state, theta, t, noise, setting)
        return (plan if self.lanes is None else own_lanes(plan, self.lanes)), state


class _CenPrograms(_NodePrograms):
    """A CenNode's (its agents `ids`; lanes: its own under secret noise)."""

    def __init__(self, config: FedPGConfig, ids: tuple[int, ...]) -> None:
        super().__init__(FedPG(config), config, ids if config.noise == "secret" else None)
        self.ids = jnp.asarray(ids)
        self.gradients = jax.jit(self._gradients)
        self.batch = jax.jit(lambda t: round_plan(self.algo, self.state,
                                                  self.state.gossip.x[0], t)[0].batch)

    def _gradients(self, theta: jax.Array, t: jax.Array, noise: jax.Array | None
                   ) -> tuple[jax.Array, jax.Array]:
        """μ_tᵏ of each of the node's agents and their mechanism keys: the local runner's
        round t (its plan: B_t episodes with θ₀ᵗ on each agent's private environment;
        `CenRound.estimates`)."""
        variant = self.algo.variant
        plan, state = self.plan(theta, t, noise)
        mu = variant.estimates(state, plan, variant.episodes(self.algo.source, plan))
        if self.lanes is not None:
            return mu, plan.mech_keys
        return mu[self.ids], plan.mech_keys[self.ids]


class _ReportPrograms(_NodePrograms):
    """A ReportNode's (lanes: its agents' under secret noise, else None)."""

    def __init__(self, config: FedPGConfig, lanes: tuple[int, ...] | None) -> None:
        super().__init__(settings_algorithm([config]), config, lanes)
        self.reports = jax.jit(self._reports)
        self.costs = jax.jit(self._costs)

    def _reports(self, theta: jax.Array, t: jax.Array, noise: jax.Array | None,
                 setting: Any) -> Any:
        """Round t's Reports of the lanes the node plays (all K when seeded)."""
        variant = self.algo.variant
        plan, state = self.plan(theta, t, noise, setting)
        return variant.reports(state, plan, variant.episodes(self.algo.source, plan))

    def _costs(self, t: jax.Array) -> jax.Array:
        plan, _ = round_plan(self.algo, self.state, self.state.gossip.x[0], t)
        return plan.batch + self.config.minibatch * plan.steps[0]


_cen_programs = per_process(_CenPrograms)
_report_programs = per_process(_ReportPrograms)


class RoundAllowance:
    """The secure sum's budget at a node (privrl.runtime.node.Budget): the rounds its discrete
    mechanism was calibrated for, within which each agent's total is (ε, δ); every agent of
    the node releases in every round, so a round is counted once for all of them."""

    def __init__(self, allowed: int, epsilon: float | None, delta: float) -> None:
        self.allowed, self.epsilon, self.delta, self.charged = allowed, epsilon, delta, 0

    def can_charge(self, agents: Any = None, guarantee: Any = None) -> bool:
        return self.charged < self.allowed

    def charge(self, agents: Any = None, guarantee: Any = None) -> None:
        if not self.can_charge():
            raise BudgetExceededError(
                f"round {self.charged + 1} would exceed each agent's budget ε = "
                f"{self.epsilon:g} at δ = {self.delta:g} (the {self.allowed} rounds the "
                "mechanism was calibrated for)")
        self.charged += 1


class CenNode:
    """The agents SuperNode `node` of `nodes` hosts (module doc)."""

    def __init__(self, config: FedPGConfig, node: int, nodes: int, mech: DiscreteGaussianSum,
                 allowed_rounds: int, directory: Path | None = None,
                 roster: Roster | None = None) -> None:
        cfg = dataclasses.replace(config, trials=1, noise=config.noise or "secret").resolved()
        self.config, self.mech = cfg, mech
        # The fleet roster (SecAggGuard): the identities whoever deploys the agents handed
        # this node, and its own identity key, in its own directory.
        if roster is not None and directory is None:
            raise ValueError("a roster check needs the node's own directory (its identity key)")
        self.roster = roster
        self.identity = None if roster is None else NodeIdentity.load_or_create(Path(directory))
        self.ids = agents_of(node, nodes, cfg.agents)
        programs = _cen_programs(cfg, tuple(self.ids))
        self.algo, self.state, self.lanes = programs.algo, programs.state, programs.lanes
        if self.algo.task.host:
            raise ConfigError("env", "FedPG-Cen on Flower runs gymnax tasks (jitted rollouts)")
        # what every SecAgg+ run must keep to, from this config alone (SecAggGuard)
        self.pins = SecAggPins.of([len(agents_of(i, nodes, cfg.agents)) for i in range(nodes)],
                                  mech.min_honest, mech.bits)
        # Secret noise: this process's own root, in memory only, passed as an argument (it
        # keys the agents' private environments and episodes too); the node plays its own
        # agents' lanes (`programs.lanes`). Seeded: the whole round, as the local runner
        # (`ReportNode`).
        self._noise = secret_keys() if cfg.noise == "secret" else None
        self._grads, self._batch = programs.gradients, programs.batch
        # The one agent-node protocol (privrl.runtime.node): a round's message is released
        # once, in order, after the round is counted against the rounds the mechanism was
        # calibrated for (`RoundAllowance`: each agent's ε at δ). The rounds released and
        # that count go to the node's state file (`directory`, the agent's own: never its
        # noise root nor a message), written before the message leaves: a restarted executor
        # refuses a released round and never counts it again.
        self.path = None if directory is None else Path(directory) / NODE_STATE
        allowance = RoundAllowance(allowed_rounds, cfg.epsilon, cfg.delta)
        released: dict[int, np.ndarray | None] = {}
        if self.path is not None and self.path.exists():
            allowance.charged, released = self._restore(self.path)
        self._asked: int | None = None  # B_t of the request in hand (`check`)
        # a message computed ahead (`prepare`): (round, θ, its future), used once at most
        self._ahead: tuple[int, np.ndarray, Future[np.ndarray]] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="privrl-ahead")
        self.agents = AgentNode(self, self.ids, allowance, self.algo.dim, store=self,
                                released={(self.ids[0], t): m for t, m in released.items()},
                                ordered=True)

    @property
    def rounds_charged(self) -> int:
        return self.agents.ledger.charged

    @property
    def released(self) -> dict[int, np.ndarray | None]:
        """round -> the node's sum of messages it released (None: released before a restart;
        a message is kept in memory only)."""
        return {t: m for (_, t), m in self.agents.released.items()}

    def save(self, allowance: RoundAllowance, released: Any) -> None:
        """The node's `NodeStore`: its round count and the rounds it released (privrl.runtime
        .node.private_write: its own directory, mode 0600)."""
        if self.path is None:
            return
        private_write(self.path, _STATE_KIND, {
            "rounds_charged": allowance.charged,
            "rounds": np.array(sorted(self.released), np.int64)})

    def _restore(self, path: Path) -> tuple[int, dict[int, None]]:
        state = private_read(path, _STATE_KIND)
        with checked(path):
            charged, rounds = state["rounds_charged"], np.asarray(state["rounds"])
            n = rounds.shape[0]
            if not (isinstance(charged, int) and 0 <= charged == n and rounds.shape == (n,)
                    and rounds.dtype == np.int64 and np.all(np.diff(rounds) > 0)
                    and (n == 0 or rounds[0] >= 0)):
                raise ValueError("the released rounds do not match this node's run")
            return charged, {int(t): None for t in rounds}

    def warm_up(self) -> None:
        """Compile before serving: a SecAgg+ stage has a timeout."""
        jax.block_until_ready(self._grads(jnp.zeros(self.algo.dim, jnp.float32), jnp.int32(0),
                                          self._noise))
        self._batch(jnp.int32(0))

    def batch(self, t: int) -> int:
        """B_t of round t: the seed's, as the local runner and the server's learner draw it."""
        return int(self._batch(jnp.int32(t)))

    # --- the node's agent step (privrl.runtime.node.AgentStep): all its agents together ---
    guarantee = None  # the secure sum's account is `RoundAllowance`, not a per-release ε

    def check(self, agent: int, t: int) -> None:
        """Round t as asked: B_t the seed's (the server cannot choose how many episodes an
        agent plays)."""
        if not isinstance(t, int):
            raise ValueError(f"round {t!r} is not an integer")
        if self._asked != self.batch(t):
            raise ValueError(f"B_t = {self._asked} is not round {t}'s ({self.batch(t)}, the "
                             "seed's)")

    def together(self, agent: int) -> list[int]:
        return self.ids

    def __call__(self, theta: np.ndarray | None, agent: int, t: int
                 ) -> dict[tuple[int, int], np.ndarray]:
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == t and np.array_equal(ahead[1], theta):
            return {(agent, t): ahead[2].result()}  # computed from this θ as the keys travelled
        if ahead is not None:
            ahead[2].cancel()  # if it has not started, it never runs
        return {(agent, t): self._message(np.asarray(theta, np.float32), t)}

    def _message(self, theta: np.ndarray, t: int) -> np.ndarray:
        """The node's sum modulo 2^b of its agents' messages of round t from θ: the local
        runner's release with each agent's key; under secret noise each noise share from
        os.urandom (seeded: from the key, the local run's message exactly)."""
        mu, keys = self._grads(jnp.asarray(theta), jnp.int32(t), self._noise)
        return self.mech.modular_sum(self.mech.messages(keys, mu,
                                                        secure=self._noise is not None))

    def prepare(self, arrays: list[np.ndarray], config: dict[str, Any]) -> None:
        """Start computing round t's message from the θ and B_t that rode the key exchange
        (`SecAggGuard`), in a thread, so that it is ready when the collect stage asks: used
        only if that request carries the same round and θ (`__call__`), and released only
        through `release` (its checks, the budget charged, the state written) like any other.
        Nothing is computed for a request this node would refuse anyway, and a computation
        replaced before it started never runs (a server's repeated key exchanges queue none)."""
        if self._ahead is not None:
            self._ahead[2].cancel()
        self._ahead = None
        try:
            t, batch = config["round"], config["batch"]
            theta = check_theta(arrays[0], self.algo.dim) if len(arrays) == 1 else None
        except (KeyError, ValueError):
            return
        if theta is None or type(t) is not int or type(batch) is not int or t < 0 \
                or t <= self.agents.last() or not self.agents.affords(self.ids[0]) \
                or batch != self.batch(t):
            return
        self._ahead = (t, theta, self._pool.submit(self._message, theta, t))

    def release(self, theta: np.ndarray, batch: int, t: int) -> np.ndarray:
        """The node's sum of its agents' messages for round t, modulo 2^b; ValueError or
        BudgetExceededError (nothing released) when it must refuse. A round released once is
        never released again, not even the same message: it went into one secure sum, and
        the difference of two sums over sets that differ by this node is its message."""
        if t in self.released:
            raise ValueError(f"round {t}'s message already went into a secure sum (a node "
                             "adds to one per round)")
        self._asked = batch
        try:
            return self.agents.release(self.ids[0], t, theta)
        finally:
            self._asked = None

    def _on_fit(self, msg: Message, ctx: Context) -> Message:
        arrays, config = read_fit(msg.content)
        total = self.release(arrays[0], int(config["batch"]), int(config["round"]))
        return Message(sum_reply(node_payload(total, self.mech.bits)), reply_to=msg)

    def handler(self) -> Any:
        """A task in, SecAgg+'s reply (or a refusal) out."""
        return secagg_node(self._on_fit, self.pins, self.identity, self.roster, self.prepare)


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
        from privrl.systems.fedpg.local import budget_ledger

        if not 0 <= node < nodes:
            raise ValueError(f"node must be in 0..{nodes - 1}, got {node}")
        cfg = dataclasses.replace(config, trials=1, noise=config.noise or "secret").resolved()
        self.config, self.node, self.nodes = cfg, node, nodes
        self.ids = agents_of(node, nodes, cfg.agents)
        # Secret noise: this process's own root, in memory only, passed as an argument; the
        # node plays its own agents' lanes. Seeded: every lane, as the local runner.
        self._noise = secret_keys() if cfg.noise == "secret" else None
        programs = _report_programs(cfg, None if self._noise is None else tuple(self.ids))
        # The local runner's algorithm: a mechanism that could run in a program of settings
        # releases through the program's path (its parameters as data), as a local run does.
        self.algo, self.state, self.lanes = programs.algo, programs.state, programs.lanes
        if self.algo.task.host:
            raise ConfigError("env", "FedPG-Cen on Flower runs gymnax tasks (jitted rollouts)")
        self.setting = (None if self.algo.settings[0] is self.algo else jax.tree_util.tree_map(
            lambda a: a[0], self.algo.setting_data([0])))
        self.guarantee = self.algo.settings[0].mechanism.guarantee
        self.dim = self.algo.dim
        self._round, self._cost = programs.reports, programs.costs
        self.costs: list[int] = []  # episodes per agent of rounds 0, 1, ... (from the seed)
        store = (None if directory is None else
                 ReleasedFile(Path(directory) / REPORT_STATE, _REPORT_KIND, self.guarantee,
                              self.dim))
        ledger, released = (store and store.load()) or (budget_ledger(cfg), {})
        # its agents release a round together, rounds in order (privrl.runtime.node)
        self.agents = AgentNode(self, self.ids, ledger, self.dim, store, released,
                                ordered=True, where="SuperNode")

    @property
    def ledger(self) -> Any:
        return self.agents.ledger

    @property
    def released(self) -> dict[tuple[int, int], tuple[Submission, float]]:
        return self.agents.released

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

    # --- the node's agent step (privrl.runtime.node.AgentStep) ---
    def check(self, agent: int, t: int) -> None:
        """A round inside the run whose episodes the agents can still play."""
        cfg = self.config
        if not 0 <= t <= cfg.max_rounds():
            raise ValueError(f"round {t} is outside 0..{cfg.max_rounds()}")
        if self.used_before(t) >= cfg.budget:
            raise ValueError(f"round {t} is past the episode budget ({cfg.budget} per agent)")

    def together(self, agent: int) -> list[int]:
        return self.ids

    def __call__(self, theta: np.ndarray | None, agent: int, t: int
                 ) -> dict[tuple[int, int], tuple[Submission, float]]:
        """Round t's Submissions of every agent of the node (scores NaN: an agent's returns
        stay with it)."""
        reports = self._round(jnp.asarray(theta), jnp.int32(t), self._noise, self.setting)
        rows = range(len(self.ids)) if self.lanes is not None else self.ids
        return {(a, t): (Submission(a, t, jax.tree_util.tree_map(lambda v, r=r: v[r], reports)),
                         math.nan) for a, r in zip(self.ids, rows, strict=True)}

    def release(self, theta: np.ndarray, agent: int, t: int) -> tuple[Submission, float]:
        """Agent `agent`'s Submission of round t from θ (its score: NaN, an agent's returns
        stay with it); ValueError or BudgetExceededError (nothing released) to refuse."""
        return self.agents.release(agent, t, theta)

    def handle(self, message: Message, context: Context | None = None) -> Message:
        """A server request in, the Submission or a refusal (a Flower Error) out."""
        return answer_request(message, self.dim, self.release)


client_app = refusing_client_app("privrl.systems.fedpg.flower")


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
        """privacy.json, by the local runner's record code (privrl.systems.fedpg.local
        .privacy_record) of what the agents released: under the secure sum, every agent in
        each of the rounds run, through this deployment's mechanism, plus the SuperNodes'
        threshold; under a local mechanism, the Reports the server accepted
        (`report_privacy`)."""
        m = self.mechanism
        if m is None:
            return report_privacy(self)
        from privrl.systems.fedpg.local import Released, privacy_record

        fewest = min((r["agents_in_sum"] for r in self.rounds if "halted" not in r),
                     default=None)
        return {**privacy_record(Released.summed(self.config, m, len(self.rounds))),
                "secure_sum": {
                    "supernodes": self.nodes, "threshold": self.threshold,
                    "min_honest_surviving_agents": m.min_honest,
                    "roster": self.config.roster,
                    "reveals": f"SecAgg+ reveals a round's sum only when >= {self.threshold} "
                               f"of the {self.nodes} SuperNodes survive; a sum even a server "
                               "deviating from the protocol can reveal holds >= "
                               f"{fewest_revealed(self.nodes, self.threshold)} SuperNodes, "
                               f">= {m.min_honest} agents",
                    "guarantee_against": self.against()},
                "fewest_agents_in_a_revealed_sum": fewest}

    def against(self) -> dict[str, Any]:
        """Each agent's (ε, δ) over the rounds run against each kind of server
        (docs/threat-model.md): the same mechanism's accountant (`DiscreteGaussianSum
        .epsilon`) with the honest noise shares a revealed sum holds against it."""
        m, cfg, rounds = self.mechanism, self.config, len(self.rounds)
        assert m is not None and self.threshold is not None
        per_node = [len(agents_of(i, self.nodes, cfg.agents)) for i in range(self.nodes)]
        cap = m.min_honest if cfg.min_honest is not None else math.inf

        def bound(honest: int, what: str) -> dict[str, Any]:
            honest = int(min(honest, cap))
            return {"epsilon": m.epsilon(rounds, honest), "delta": m.delta,
                    "honest_shares": honest, "what": what}

        return {
            "honest_but_curious_server": bound(
                fewest_at_threshold(per_node, self.threshold),
                "a server that follows SecAgg+ and reads all it receives: each revealed sum "
                f"holds the >= {self.threshold} SuperNodes that survive the round"),
            "deviating_server": bound(
                m.min_honest,
                "a server that deviates from SecAgg+ (drops, repeats or crafts any request) "
                "but relays only the genuine SuperNodes: each node answers only requests "
                "consistent with the threshold and nodes it pinned, adds its message of a "
                "round to one sum, and a sum it can reveal holds >= "
                f"{fewest_revealed(self.nodes, self.threshold)} SuperNodes (the stated ε)"),
            "server_forging_supernodes": bound(
                m.min_honest,
                "a server that also runs SuperNodes of its own in the secure sum, or "
                "substitutes a node's keys (it runs the SuperLink): refused, since each node "
                "shares only with peers whose SecAgg+ keys an identity on the fleet's roster "
                "signed for the run, round and node id (the roster comes from whoever deploys "
                "the agents, not from the server), so the deviating server's bound holds")
            if cfg.roster else bound(
                min(per_node),
                "a server that also runs SuperNodes of its own in the secure sum (it runs the "
                "SuperLink; this run has no fleet roster, and Flower 1.42's SecAgg+ lets no "
                "node authenticate its peers): a revealed sum may hold one genuine SuperNode's "
                "message, protected only by its own agents' noise shares")}


def report_privacy(run: FlowerCenRun) -> dict[str, Any]:
    """privacy.json of a run under a local mechanism: the local runner's record
    (privrl.systems.fedpg.local.privacy_record) of the Reports the server accepted, each
    charged to the plan's ledger as the agents charged theirs."""
    from privrl.systems.fedpg.local import Released, privacy_record

    algo = settings_algorithm([run.config]).settings[0]
    return privacy_record(Released.charged(algo, [r["accepted_agents"] for r in run.rounds]))


def record(run: FlowerCenRun) -> Any:
    """The run directory's contents (privrl.output.save): config.json, metrics.csv
    (one row per round), privacy.json (the statement, trust domain "flower"), summary.json,
    policy.npz (the server's final θ, as the local runner's) and flower.json (who took part
    in each round)."""
    from privrl.output import RunRecord, csv_writer
    from privrl.systems.fedpg.local import policy_of

    cfg, rounds = run.config, run.rounds
    algo = FedPG(cfg)
    saved = policy_of(algo, np.asarray(run.theta, np.float32)[None, None])
    judged = final_verdict(algo, saved)
    privacy = run.privacy()
    summed = run.mechanism is not None
    guarantee = privacy["guarantee"] or {"epsilon": None, "delta": None}  # none: no guarantee
    summary = {
        "label": f"FedPG-Cen on Flower ({'secure sum' if summed else cfg.mechanism})",
        "privacy": privacy["headline"],
        "agents": cfg.agents, "supernodes": run.nodes, "threshold": run.threshold,
        "rounds": len(rounds), "episodes_per_agent": rounds[-1]["used"] if rounds else 0,
        "final_server_mean_length": rounds[-1]["server_mean_length"] if rounds else None,
        "epsilon": guarantee["epsilon"], "delta": guarantee["delta"],
        **({"min_honest_surviving_agents": run.mechanism.min_honest} if summed else {}),
        "wall_seconds": run.wall_seconds,
        "final_returns_of": FINAL_RETURNS_OF, **judged.fields()}
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
        policy=saved)


# The server sees no agent's return (only the secure sum or the checked Reports), so a Flower
# run's final returns are its final policy's, played on the task's simulator.
FINAL_RETURNS_OF = ("the server's final policy, sampled actions as in training, played on the "
                    "task's simulator (agents' dynamics drawn from the private ranges), as many "
                    "episodes as the random baseline")


def final_verdict(algo: FedPG, saved: Any) -> Any:
    """Did it learn? The final policy's returns (FINAL_RETURNS_OF) against a uniform-random
    policy's on the same task and episode cap (privrl.evaluation: random_baseline, play,
    verdict, as every run's)."""
    from privrl.evaluation import play, random_baseline, verdict
    from privrl.policy import Policy
    from privrl.systems.fedpg.local import FINAL_ROUNDS

    cfg, task = algo.config, algo.task
    baseline = random_baseline(task, FINAL_ROUNDS * cfg.agents * cfg.batch_max, cfg.seed)
    policy = Policy(saved.description, saved.theta[0, 0], algo.model)
    final = play([policy], task, baseline.size, cfg.seed, task.episode_steps, sample=True)
    return verdict(final[0], baseline)


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
    check_runtime(config, "flower")  # the library's rules, as the CLI's (ConfigError)
    cfg = dataclasses.replace(config, trials=1, noise=config.noise or "secret").resolved()
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
                         startup_s: float = 900.0, state_root: Path | None = None
                         ) -> FlowerCenRun:
    """One FedPG-Cen trial on a local Flower deployment of `plan.nodes` SuperNodes
    (privrl.runtime.flower.LocalDeployment): a real secure sum (distributed-gaussian) or each
    agent's Report (a local mechanism); `prepare_run`, every agent executor, `flwr run`,
    `learn`. `on_round(t, deployment)` is called as each round begins (tests inject faults
    there); `startup_s`: how long the agents may take to start and compile; `state_root`:
    where the nodes' own directories go (`node<i>`, mode 0700; never the run directory;
    None: temporary ones, removed after the run)."""
    from privrl.runtime.flower import LocalDeployment

    start = time.perf_counter()
    nodes = plan.nodes
    learner, app, trusted, agent_config = prepare_run(plan, directory, stage_timeout_s)
    # Each node's state in a directory of its own (mode 0700), never under the operator's
    # run directory: `state_root`, or fresh temporary ones removed after the run.
    with (node_dirs(nodes, directory, state_root) as own,
          LocalDeployment(nodes, directory / "logs") as deployment):
        run = _deploy(plan, directory, deployment, learner, app, trusted, agent_config,
                      own, timeout_s, on_round, startup_s)
    return dataclasses.replace(run, wall_seconds=time.perf_counter() - start)


def _deploy(plan: FlowerPlan, directory: Path, deployment: Any, learner: ServerLearner,
            app: Path, trusted: str, agent_config: Path, own: list[Path],
            timeout_s: float | None, on_round: Any, startup_s: float) -> FlowerCenRun:
    """The agents' executors beside the deployment's SuperNodes, `flwr run`, `learn`."""
    nodes = plan.nodes
    ready = [directory / "logs" / f"node{i}.ready" for i in range(nodes)]
    rosters = _hand_out_roster(own) if plan.mechanism is not None and plan.config.roster \
        else [None] * nodes
    for i in range(nodes):
        # Agent 0 compiles first; the others wait for it, so that with JAX's persistent
        # cache on (the CLI's) they load its program instead of all compiling at once.
        deployment.spawn(f"agent{i}", [
            sys.executable, "-m", "privrl.systems.fedpg.flower", "--config",
            str(agent_config), "--node", str(i), "--nodes", str(nodes), "--runtime-api",
            deployment.runtime_apis[i], "--trusted-fab", trusted,
            "--superexec-secret-file", str(deployment.superexec_secret),
            "--state-dir", str(own[i]),
            *(["--roster", str(rosters[i])] if rosters[i] else ["--no-roster"]),
            "--ready-file", str(ready[i]), *(["--after", str(ready[0])] if i else [])])
    # No round before every agent serves: a SecAgg+ stage waits only its timeout.
    for r in ready:
        wait_for([r], startup_s)
    # No `deployment.run`: a SuperNode may die mid-run (the secure sum drops it).
    (directory / "logs" / "run.log").write_text(deployment.submit(app))
    return learn(plan, learner, directory, timeout_s, None if on_round is None else
                 lambda t: on_round(t, deployment))


ROSTER = "roster.json"


def _hand_out_roster(own: list[Path]) -> list[Path]:
    """The local deployment as the agents' deployer: each node's identity key in its own
    directory (made once, mode 0600) and the roster of all of them beside it, in every node's
    directory, never through the server operator's run directory."""
    publics = [NodeIdentity.load_or_create(d).public for d in own]
    for d in own:
        write_roster(d / ROSTER, publics)
    return [d / ROSTER for d in own]


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
                        help="the node's own directory (mode 0700, made if missing; never "
                             "under the server operator's run directory): its round count and "
                             "the rounds it released")
    parser.add_argument("--roster", type=Path, default=None,
                        help="the fleet's roster (JSON {\"supernodes\": [hex Ed25519 public "
                             "key, ...]}), from whoever deploys the agents, never from the "
                             "server: SecAgg+ peers must sign their keys with one of them; this "
                             "node's identity key is identity.key in --state-dir (made on first "
                             "start; python -m privrl.federation.flower_roster identity DIR "
                             "prints its public key)")
    parser.add_argument("--no-roster", action="store_true",
                        help="take part in a secure sum without a roster (Flower's SecAgg+ as "
                             "is: a server running SuperNodes of its own can isolate this "
                             "node's message)")
    parser.add_argument("--ready-file", type=Path, default=None,
                        help="written once the agents are compiled and serve")
    parser.add_argument("--after", type=Path, default=None,
                        help="compile only once this file exists (another agent's ready file)")
    args = parser.parse_args(argv)
    if args.state_dir is not None:
        private_dir(args.state_dir)  # refused before anything is computed if not its own
    if args.roster is not None and args.state_dir is None:
        parser.error("--roster needs --state-dir (where the node's identity key lives)")
    data = json.loads(args.config.read_text())
    # the agent's own choice, never the server's config: a secure sum checks a roster
    if data["mechanism"] is not None and args.roster is None and not args.no_roster:
        parser.error("a secure sum checks its peers against the fleet's roster: pass --roster "
                     "FILE (or, knowingly, --no-roster)")
    try:
        roster = None if args.roster is None else Roster.read(args.roster)
    except RosterError as e:
        parser.error(f"--roster: {e}")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()}
    node: CenNode | ReportNode
    if data["mechanism"] is None:  # a local mechanism: each agent's Report
        node = ReportNode(Config(**fields), args.node, args.nodes, args.state_dir)
    else:
        node = CenNode(Config(**fields), args.node, args.nodes,
                       DiscreteGaussianSum(**data["mechanism"]), int(data["allowed_rounds"]),
                       args.state_dir, roster)
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
