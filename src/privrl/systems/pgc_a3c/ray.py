"""PGC-A3C on Ray: agents and the aggregator as Ray actors, really asynchronous, fault-tolerant.

Each agent actor receives the current θ, plays one episode in its own private environment,
computes and randomizes its gradient inside its own process (the raw gradient never leaves it),
and returns only a `Submission` (agent id, submission index, Report). The aggregator actor wraps
`privrl.federation.AggregatorService`: it validates, deduplicates, charges the ledger, logs and
applies reports as they arrive, and checkpoints. The functions are the local runner's:
`PGCA3C.agent_reports` on the agent side (with one agent), `BufferedAggregator.submit` on the
aggregator side; only the transport differs. An agent releases through a local run's path
(`lone_agent`: the mechanism's family with the setting's parameters as data). On a Gymnasium
task an agent plays its episode on the host (`PGCA3C.host_rollout`) and passes it to the same
`agent_reports`.

Noise keys: by default (`noise="secret"`) every agent actor draws its noise root from the OS
CSPRNG in its own process, in memory only; it never returns it, writes it or sends it, so
neither the driver nor the aggregator can recompute a report's noise. `noise="seeded"` derives
the noise from the run's seed instead (reproducible; a simulation's guarantee), by the local
runner's rule (privrl.systems.pgc_a3c.agent: submission n = a·T + index is its round n).

Fault tolerance: actors are created with unlimited restarts and task retries. With seeded
noise a retried agent task replays the same episode (its keys derive from the seed, agent id
and index) and recomputes the same report; with secret noise (which also keys the agent's
dynamics and episodes) a restarted actor has a new root and plays and reports anew (Ray
retries a task whose actor died before returning, so the first report never left that
process). Either way the aggregator accepts at most one report
per (agent, index): retries and duplicates become logged rejections, nothing is applied or
charged twice, and the log never holds two reports of one (agent, index). A restarted
aggregator restores its last checkpoint and re-applies the report log after it. An agent that
dies before submitting has spent nothing.

Shuffle model (`shuffle=True`): a shuffler actor (`privrl.federation.shuffler.Shuffler`) sits
between the agents and the aggregator. It takes the submissions with identities, deduplicates
them, charges each agent's ledger (the aggregator, which never learns who sent what, cannot)
and logs them; every `parallel_agents` accepted submissions (the local runner's round, the unit
of its central account) it draws a uniformly random order from the OS CSPRNG and forwards the
batch as `Shuffled(batch, slot, report)` items, which the aggregator deduplicates by (batch,
slot). The shuffler is trusted with identities and reports (and its directory holds both);
if it colludes with the aggregator, only the local ε holds. It survives its own restart like
the aggregator does (the Shuffler docstring). privacy.json states the central (ε, δ) by the
local runner's `shuffle_account`.

The driver never reads a submission: an agent's task returns its Submission and its episode
score as two objects, and the driver hands the first, by reference, to the aggregator (or the
shuffler) and reads only the score.

Ray is an optional extra (`pip install 'privrl[ray]'`); this module imports it lazily.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.compute.sharding import setting_trial_keys
from privrl.federation.service import (
    SETUP,
    AggregatorService,
    AggregatorSpec,
    Shuffled,
    Submission,
    Verdict,
)
from privrl.federation.shuffler import SHUFFLER_SETUP, Shuffler
from privrl.output import work_on_failure
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.noise import secret_keys
from privrl.runtime.ray import require_ray, start_ray
from privrl.systems.pgc_a3c.agent import AgentStep
from privrl.systems.pgc_a3c.algorithm import (
    PGCA3C,
    PGCA3CConfig,
    budget_ledger,
)
from privrl.systems.pgc_a3c.runtimes import check_runtime


# --- the two actors (plain classes; wrapped with ray.remote when a run starts) ----------------
class AggregatorActor:
    """The aggregator side: an AggregatorService, restored from its directory after a crash."""

    def __init__(self, spec: AggregatorSpec, theta0: np.ndarray, num_agents: int,
                 ledger: PrivacyLedger | None, guarantee: Any, directory: str,
                 checkpoint_every: int, shuffled_batch: int = 0) -> None:
        if (Path(directory) / SETUP).exists():
            self.svc = AggregatorService.restore(directory)
        else:
            self.svc = AggregatorService(spec, theta0, num_agents, ledger, guarantee, directory,
                                         checkpoint_every, shuffled_batch)

    def submit(self, sub: Submission) -> Verdict:
        return self.svc.submit(sub)

    def submit_many(self, subs: list[Submission] | list[Shuffled]) -> list[Verdict]:
        return self.svc.submit_many(subs)

    def theta(self) -> np.ndarray:
        return self.svc.theta()

    def status(self) -> dict[str, Any]:
        return self.svc.status()

    def ledger(self) -> PrivacyLedger:
        return self.svc.ledger

    def close(self) -> dict[str, Any]:
        self.svc.close()
        return self.svc.status()

    def pid(self) -> int:
        return os.getpid()


class ShufflerActor:
    """The shuffler between the agent actors and the aggregator (privrl.federation.shuffler),
    restored from its directory after a crash. `aggregator`: the aggregator actor's handle, or
    (tests, in-process) any object with `submit_many`."""

    def __init__(self, batch_size: int, num_agents: int, dim: int, ledger: PrivacyLedger,
                 guarantee: Any, aggregator: Any, directory: str) -> None:
        def forward(items: list[Shuffled]) -> list[Verdict]:
            call = aggregator.submit_many
            if hasattr(call, "remote"):  # a Ray actor: wait for its answer
                return require_ray().get(call.remote(items))
            return call(items)

        if (Path(directory) / SHUFFLER_SETUP).exists():
            self.svc = Shuffler.restore(directory, forward)
        else:
            self.svc = Shuffler(batch_size, num_agents, dim, ledger, guarantee, forward,
                                directory)

    def submit(self, sub: Submission) -> Verdict:
        return self.svc.submit(sub)

    def status(self) -> dict[str, Any]:
        return self.svc.status()

    def ledger(self) -> PrivacyLedger:
        return self.svc.ledger

    def close(self) -> dict[str, Any]:
        return self.svc.close()

    def pid(self) -> int:
        return os.getpid()


class AgentActor:
    """The agent side: one private environment per episode, randomized inside this process
    through PGC-A3C's agent step (privrl.systems.pgc_a3c.agent, the Flower agents' too: the
    local runner's release path and keys)."""

    def __init__(self, config: PGCA3CConfig) -> None:
        # Secret noise: this process's own root from os.urandom, kept in memory only and
        # passed to the jitted program as an argument (never a constant a cache could store).
        self._noise = secret_keys() if config.noise == "secret" else None
        self.step = AgentStep(config, self._noise)

    def run(self, theta: np.ndarray, agent_id: int, index: int) -> tuple[Submission, float]:
        """Submission `index` of agent `agent_id` from θ, and its episode's score."""
        return self.step(theta, agent_id, index)[(agent_id, index)]

    def pid(self) -> int:
        return os.getpid()


@dataclass
class RayRunOutput:
    config: PGCA3CConfig
    scores: np.ndarray  # (1, submissions) float32: each submission's episode return; NaN: none
    theta: np.ndarray
    status: dict[str, Any]
    ledger: PrivacyLedger
    directory: Path
    wall_seconds: float
    agents_in_flight: int
    cluster: dict[str, Any]
    shuffler: dict[str, Any] | None = None  # the shuffler's status (shuffle=True)

    def record(self) -> dict[str, Any]:
        """ray.json: the cluster, the aggregator's (and shuffler's) status."""
        return {"cluster": self.cluster, "aggregator": self.status,
                **({} if self.shuffler is None else {"shuffler": self.shuffler}),
                "agents_in_flight": self.agents_in_flight}


EventHook = Callable[[str, dict[str, Any]], None]
# Seconds a failed run waits for each actor's answer when it reads what was done so far.
SNAPSHOT_TIMEOUT = 60.0


def run_pgc_a3c_ray(
    config: PGCA3CConfig,
    directory: Path,
    address: str | None = None,
    agents_in_flight: int | None = None,
    checkpoint_every: int = 100,
    progress: Callable[[int, int], None] | None = None,
    on_event: EventHook | None = None,
    shuffler_directory: Path | None = None,
) -> RayRunOutput:
    """One PGC-A3C trial with agents and the aggregator as Ray actors (and, with
    `config.shuffle`, a shuffler actor between them, its files in `shuffler_directory`,
    default: "shuffler" beside `directory`).

    Without `address` a local Ray cluster sized to this machine is started; with one (e.g.
    "auto" or "HOST:PORT") the run joins that cluster. `on_event("accepted", info)` is called
    after each accepted submission with the actor handles (tests use it to inject faults).
    """
    check_runtime(config, "ray")  # the library's rules, as the CLI's (ConfigError)
    ray = require_ray()
    cfg = PGCA3CConfig(**{**config.__dict__, "noise": config.noise or "secret"}).resolved()
    algo = PGCA3C(cfg)
    p = agents_in_flight or cfg.parallel_agents
    total, per_agent = cfg.submissions, cfg.submissions_per_agent
    num_agents = math.ceil(total / per_agent)
    theta0 = np.asarray(algo.init(setting_trial_keys(cfg.seed, 1, 1, 1, 1)[0]).agg.theta)
    spec = AggregatorSpec(algo.dim, cfg.buffer_size, cfg.server_optimizer, cfg.learning_rate)
    guarantee = algo.mechanism.guarantee
    if shuffler_directory is None:
        shuffler_directory = Path(directory).parent / "shuffler"

    started_here, cluster = start_ray(ray, address)
    start = time.perf_counter()
    try:
        def actor(cls: type) -> Any:
            return ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(cls)

        if cfg.shuffle:  # agents -> shuffler (identities, ledger) -> aggregator (no ids)
            agg = actor(AggregatorActor).remote(spec, theta0, num_agents, None, guarantee,
                                                str(directory), checkpoint_every,
                                                cfg.parallel_agents)
            shuffler = actor(ShufflerActor).remote(cfg.parallel_agents, num_agents, algo.dim,
                                                   budget_ledger(cfg), guarantee, agg,
                                                   str(shuffler_directory))
            sink = shuffler
        else:
            agg = actor(AggregatorActor).remote(spec, theta0, num_agents, budget_ledger(cfg),
                                                guarantee, str(directory), checkpoint_every)
            shuffler, sink = None, agg
        agents = [actor(AgentActor).remote(cfg) for _ in range(min(p, total))]
        scores = np.full(total, np.nan, np.float32)
        pending: dict[Any, tuple[int, int, Any]] = {}  # score ref -> (slot, n, submission ref)
        next_n = 0

        def launch(slot: int) -> None:
            nonlocal next_n
            n = next_n
            next_n += 1
            sub_ref, score_ref = agents[slot].run.options(num_returns=2).remote(
                agg.theta.remote(), n // per_agent, n % per_agent)
            pending[score_ref] = (slot, n, sub_ref)

        def so_far() -> RayRunOutput:  # should the loop fail: what the actors hold now
            wait = {"timeout": SNAPSHOT_TIMEOUT}
            ledger = ray.get((agg if shuffler is None else shuffler).ledger.remote(), **wait)
            # The scores made, in submission order, first (agents finish out of order: a
            # run's rows are its first `submitted`, as a finished run's are all of them).
            made = np.full_like(scores, np.nan)
            made[:int(np.isfinite(scores).sum())] = scores[np.isfinite(scores)]
            return RayRunOutput(cfg, made[None, :],
                                np.asarray(ray.get(agg.theta.remote(), **wait)),
                                ray.get(agg.status.remote(), **wait), ledger, Path(directory),
                                time.perf_counter() - start, len(agents), cluster,
                                None if shuffler is None else
                                ray.get(shuffler.status.remote(), **wait))

        for slot in range(len(agents)):
            launch(slot)
        done_count = 0
        with work_on_failure(so_far):  # the files keep what was released (keeping_work)
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                slot, n, sub_ref = pending.pop(ref)
                scores[n] = ray.get(ref)
                # By reference: Ray hands the Submission to the sink; the driver never reads it.
                verdict = ray.get(sink.submit.remote(sub_ref))
                done_count += 1
                if on_event is not None and verdict.accepted:
                    on_event("accepted", {"n": n, "done": done_count, "agents": agents,
                                          "aggregator": agg, "shuffler": shuffler, "slot": slot})
                if next_n < total:
                    launch(slot)
                if progress is not None:
                    progress(done_count, total)
        shuffled = None if shuffler is None else ray.get(shuffler.close.remote())
        status = ray.get(agg.close.remote())
        theta = ray.get(agg.theta.remote())
        ledger = ray.get((agg if shuffler is None else shuffler).ledger.remote())
    finally:
        if started_here:
            ray.shutdown()
    return RayRunOutput(cfg, scores[None, :], np.asarray(theta), status, ledger,
                        Path(directory), time.perf_counter() - start, len(agents), cluster,
                        shuffled)


def as_run_output(out: RayRunOutput) -> Any:
    """The local runner's RunOutput for the same results, so both write the same files."""
    from privrl.systems.pgc_a3c.local import one_trial_output

    return one_trial_output(out.config, out.scores, out.ledger, out.wall_seconds,
                            out.agents_in_flight, out.theta)
