"""The local runner for FedPG-Cen / FedPG-Dec: all trials (of one setting, or of several run as
one program, `run_fedpg_settings`) in one jitted round, split over the host's devices, each
device computing its trials one at a time; on a Gymnasium task, the trials in turn, each
round's episodes played on the host.

The host drives rounds one at a time, because each round's length is random (B_t, N_t) and a
trial stops once its agents have spent their episode budget: before every round it charges
each setting's privacy ledger for the agents that are about to release (charge, then
release), passes each trial its setting's mixing matrix and collects the round's mean return.
Finished trials ride along as no-ops (their agents play no episodes).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from privrl.compute.sharding import (
    host_scan,
    in_blocks,
    own_padded,
    pad_rows,
    shard_vmap,
    trial_devices,
    trial_sharding,
)
from privrl.evaluation import Verdict, random_baseline, verdict, verdict_rows
from privrl.federation.adapt import (
    LEVERS_NOTE,
    BestCandidates,
    PublicCandidates,
    public_candidates_record,
)
from privrl.federation.pushsum import PushSumState, push_sum_z
from privrl.output import (
    RunRecord,
    SavesRunDir,
    check_out_dir,
    plot_title,
    save_if_asked,
    work_so_far,
)
from privrl.output import save as save_run
from privrl.policy import SavedPolicy, saved_policy
from privrl.privacy.accounting import Accountant, pure_composition_record
from privrl.privacy.distributed import USER_NEIGHBOURS, RoundBudget
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.noise import noise_fields, noise_mode, noise_summary, secret_keys
from privrl.privacy.plan import gaussian_spent
from privrl.privacy.record import (
    Budget,
    CentralShuffle,
    Claim,
    Composition,
    Facts,
    Releases,
    Trust,
    headline,
    mechanism_record,
    pure_ldp,
)
from privrl.privacy.record import privacy_record as build_privacy_record
from privrl.privacy.user import declared_by, declared_condition, declared_summary
from privrl.progress import as_progress, emit, spent_max
from privrl.systems.fedpg.algorithm import (
    FedPG,
    FedPGConfig,
    discrete_sum_mechanism,
    settings_algorithm,
)
from privrl.systems.fedpg.config import DISTRIBUTED_MECHANISMS

if TYPE_CHECKING:
    from flax import linen as nn

    from privrl.envs.task import Task
    from privrl.privacy.discrete_sum import DiscreteGaussianSum

ProgressFn = Callable[[float, int], None]  # (mean episodes per agent so far, budget)


@dataclass
class FedPGRun(SavesRunDir):
    config: FedPGConfig
    mean_return: np.ndarray  # (trials, rounds): mean return of the round's B_t-batches; NaN: none
    used_before: np.ndarray  # (trials, rounds): mean episodes per agent before the round
    batch: np.ndarray  # (trials, rounds) B_t
    inner_steps: np.ndarray  # (trials, rounds) N_t
    used: np.ndarray  # (trials, K) episodes per agent at the end
    episodes_played: int  # all episodes of all trials (agents, server)
    ledger: PrivacyLedger
    mechanism: dict[str, Any]
    topology: dict[str, Any] | None
    wall_seconds: float
    compile_seconds: float
    rounds_run: int
    releases: np.ndarray  # (trials,) reports each agent of the trial released
    accounting: dict[str, Any] | None  # gaussian: the account of one agent (most releases)
    z: np.ndarray  # (trials, learners, d): the final de-biased parameters (Cen: θ)
    # (trials,) the trial ended because its agents could not afford another round
    privacy_budget_spent: np.ndarray | None = None
    # adaptive clipping: (trials, rounds) the clip C_t each round's shares used (NaN: no
    # round); (trials,) the clip after the last round; None without adaptive clipping
    clip: np.ndarray | None = None
    final_clip: np.ndarray | None = None
    # Run as one program with other settings (`run_fedpg_settings`): how many settings and
    # trials it ran (wall_seconds is the program's); None: on its own.
    program: dict[str, int] | None = None
    # A robust rule: (trials, K) how many rounds each agent's report was kept; None: no rule.
    kept: np.ndarray | None = None
    # policy.npz: every trial's (and Dec: every node's) final θ with the model's description
    policy: SavedPolicy | None = None
    # a uniform-random policy's returns on the run's task (privrl.evaluation.random_baseline)
    baseline: np.ndarray | None = None
    # The post-processing levers' record (`lever_record`): what they set and did; None: off.
    levers: dict[str, Any] | None = None

    def record(self) -> RunRecord:
        return record(self)

    def verdict(self) -> Verdict | None:
        """Each trial's last FINAL_ROUNDS batch mean returns against the random baseline."""
        if self.baseline is None:
            return None
        return verdict(final_returns(self), self.baseline)

    def released(self) -> Released:
        """What its agents released (privacy.json's facts)."""
        return Released(self.config, self.mechanism, self.ledger, self.releases,
                        self.accounting, self.final_clip, levers=self.levers)


def budget_ledger(cfg: FedPGConfig) -> PrivacyLedger:
    """Each agent's ledger, on every runtime: the privacy plan's (`FedPGConfig.privacy_plan`);
    it records every release (charged before it is made) and refuses one beyond the cap."""
    return cfg.privacy_plan().ledger()


@dataclass(frozen=True)
class Released:
    """What the agents of a FedPG run released, on whichever runtime ran it: all privacy.json
    is written from (`privacy_record`). `releases`: (trials,) the reports each agent of a trial
    released; `accounting`: the Gaussian mechanisms' account of the most releases."""

    config: FedPGConfig
    mechanism: dict[str, Any]
    ledger: PrivacyLedger
    releases: np.ndarray
    accounting: dict[str, Any] | None
    final_clip: np.ndarray | None = None
    # distributed-gaussian: the secure sum's mechanism when it is not the config's own (a
    # Flower deployment's, calibrated for its SuperNodes' threshold and modulus)
    secure_sum: DiscreteGaussianSum | None = None
    levers: dict[str, Any] | None = None  # the post-processing levers' record, if any

    @classmethod
    def summed(cls, config: FedPGConfig, mech: DiscreteGaussianSum, rounds: int) -> Released:
        """Released by K agents, each in every one of `rounds` secure sums of `mech`, charged
        to the plan's ledger as each agent charges its own round budget (a Flower
        deployment's distributed-gaussian run)."""
        ledger = budget_ledger(config)
        if rounds:
            ledger.charge(np.arange(config.agents), mech.guarantee, rounds)
        return cls(config, mechanism_record(mech, mech.dim), ledger, np.array([rounds]),
                   mech.account(rounds), secure_sum=mech)

    @classmethod
    def charged(cls, algo: FedPG, accepted: list[list[int]]) -> Released:
        """Released by one trial's agents whose reports were accepted as `accepted` lists
        (agent ids, one list per round), charged to the plan's ledger as the agents charged
        theirs."""
        ledger = budget_ledger(algo.config)
        for ids in accepted:
            if ids:
                ledger.charge(np.asarray(ids), algo.mechanism.guarantee)
        most = max((ledger.reports_of(a) for a in range(algo.config.agents)), default=0)
        return cls(algo.config, mechanism_record(algo.mechanism, algo.dim), ledger,
                   np.array([most]), account(algo, most))


def run_fedpg(config: FedPGConfig, progress: ProgressFn | bool | None = None,
              task: Task | None = None, model: nn.Module | None = None,
              devices: int | None = None, out: str | os.PathLike | None = None
              ) -> FedPGRun:
    """All trials of `config`; `task` and `model`: your environment and policy (`FedPG`),
    default: the config's; `devices`: host devices the trials are split over (default: all);
    `out`: write the run directory there, as the CLI's --out (`FedPGRun.save`).

    A config that could run in a program with other settings (`one_program_field`) computes
    through the same per-trial mechanism such a program uses, so that it gets the same floats
    alone and in any program. `progress`: a callback `(done, total)`, or True for the CLI's
    display on stderr."""
    check_out_dir(out)
    algo = settings_algorithm([local_config(config)], task, model)
    with as_progress(progress, unit="episodes/agent") as shown:
        return save_if_asked(run_fedpg_settings(algo, shown, devices)[0], out)


def local_config(config: FedPGConfig) -> FedPGConfig:
    """The config as this runner runs it: noise keys seeded unless the config says secret."""
    return replace(config, noise=config.noise or "seeded")


@dataclass
class _Setting:
    """One setting of a run: its rows of the program's batch and its host-side bookkeeping
    (the ledger charged before every round, the rounds it played, what it reports)."""

    algo: FedPG  # the setting's own algorithm: its config, mechanism and graph
    rows: np.ndarray  # its trials' rows of the program's batch
    ledger: PrivacyLedger
    rounds_budget: list[RoundBudget] | None
    releases: np.ndarray
    spent: np.ndarray
    out: list[tuple[np.ndarray, ...]]
    played: int = 0
    kept: np.ndarray | None = None  # a robust rule: (trials, K) rounds each report was kept

    @classmethod
    def of(cls, algo: FedPG, rows: np.ndarray) -> _Setting:
        cfg = algo.config
        # distributed-gaussian(-continuous) with ε: each trial's rounds are refused beyond the
        # (ε, δ) budget (charged before the round, like the ledger): by the accountant that
        # states the run's ε, or the discrete mechanism's calibration rounds (as a Flower
        # deployment's agents refuse past them)
        discrete = cfg.mechanism == "distributed-gaussian"
        rounds_budget = ([RoundBudget(None if discrete else algo.mechanism.event, cfg.epsilon,
                                      cfg.delta, cfg.max_rounds(), cfg.accountant,
                                      cfg.calibration_rounds() if discrete else None)
                          for _ in range(cfg.trials)]
                         if cfg.mechanism in DISTRIBUTED_MECHANISMS and cfg.epsilon is not None
                         else None)
        return cls(algo, rows, budget_ledger(cfg), rounds_budget,
                   np.zeros(cfg.trials, np.int64), np.zeros(cfg.trials, bool), [])

    def live(self, used: np.ndarray) -> np.ndarray:
        """Its trials that play the next round (their agents' `used` episodes so far): within
        the episode budget, and, asked before they release, within the privacy budget."""
        cfg, k = self.algo.config, self.algo.config.agents
        guarantee = self.algo.mechanism.guarantee
        live = (used.mean(axis=1) < cfg.budget) & ~self.spent
        if math.isfinite(self.ledger.epsilon_budget):
            for trial in np.flatnonzero(live):
                self.spent[trial] = not self.ledger.can_charge(trial * k + np.arange(k),
                                                               guarantee)
            live &= ~self.spent
        if self.rounds_budget is not None:
            self.spent |= live & ~np.array([b.can_charge() for b in self.rounds_budget])
            live &= ~self.spent
        return live

    def charge(self, live: np.ndarray) -> None:
        """Charge before release: every agent of a live trial releases one report."""
        k = self.algo.config.agents
        ids = (np.flatnonzero(live)[:, None] * k + np.arange(k)[None, :]).reshape(-1)
        self.ledger.charge(ids, self.algo.mechanism.guarantee)
        if self.rounds_budget is not None:
            for trial in np.flatnonzero(live):
                self.rounds_budget[trial].charge()
        self.releases += live

    def record(self, live: np.ndarray, before: np.ndarray, after: np.ndarray, info: Any
               ) -> None:
        """The round's rows (NaN for finished trials) and the episodes it played."""
        cfg, k = self.algo.config, self.algo.config.agents
        self.played += int(after.sum() - before.sum())
        if cfg.algorithm == "cen":  # the server's N_t·b were counted once per agent above
            self.played -= int(((k - 1) * cfg.minibatch * info.inner_steps[live]).sum())
            # unsampled agents (distributed-gaussian-continuous) played no episode
            self.played -= int(((k - info.participants[live]) * info.batch[live]).sum())
        if info.kept is not None:
            kept = np.asarray(info.kept) & live[:, None]
            self.kept = kept.astype(np.int64) + (0 if self.kept is None else self.kept)
        nan = np.where(live, 1.0, np.nan)
        self.out.append((info.mean_return * nan, info.used_before * nan, info.batch * nan,
                         info.inner_steps * nan)
                        + (() if info.clip is None else (info.clip * nan,)))

    def result(self, state: Any, wall: float, compile_s: float,
               program: dict[str, int] | None, baseline: np.ndarray | None = None,
               candidates: PublicCandidates | None = None) -> FedPGRun:
        cfg, algo = self.algo.config, self.algo
        mine = lambda a: np.asarray(a)[self.rows]  # noqa: E731
        cols = [np.stack(c, axis=1) for c in zip(*self.out, strict=True)]
        return FedPGRun(
            config=cfg, mean_return=cols[0], used_before=cols[1], batch=cols[2],
            inner_steps=cols[3], used=mine(state.used), episodes_played=self.played,
            ledger=self.ledger, mechanism=mechanism_record(algo.mechanism, algo.dim),
            topology=algo.topology.describe() if algo.topology is not None else None,
            wall_seconds=wall, compile_seconds=compile_s, rounds_run=len(self.out),
            releases=self.releases, privacy_budget_spent=self.spent,
            accounting=account(algo, int(self.releases.max())),
            z=(z := mine(_final_z(state.gossip))),
            clip=cols[4] if cfg.adaptive_clip else None,
            final_clip=mine(state.clip) if cfg.adaptive_clip else None,
            program=program, policy=policy_of(algo, z), kept=self.kept, baseline=baseline,
            levers=lever_record(algo, candidates, self.rows),
        )


# Every trial's z = x / w, in one program (op by op, JAX compiled a broadcast and a division
# as programs of their own at every run's shape). The same division, the same floats.
_final_z = jax.jit(jax.vmap(push_sum_z))


def policy_of(algo: FedPG, z: np.ndarray) -> SavedPolicy:
    """policy.npz of a run: z (trials, learners, d), the final parameters of FedPG-Cen's
    server or of each FedPG-Dec node."""
    return saved_policy(f"fedpg-{algo.config.algorithm}", algo.model, algo.task, "logits", z,
                        algo.config.max_episode_steps)


def run_fedpg_settings(algo: FedPG, progress: ProgressFn | None = None,
                       devices: int | None = None) -> list[FedPGRun]:
    """`run_fedpg` for each of `algo.settings` (one, or several from `FedPG.for_settings`):
    every trial of every setting in one jitted round, split over `devices` host devices. Each
    setting's run equals its own (same keys, same floats, its rounds until its own trials
    end, its own ledger and privacy record), except that wall time is the program's (and
    that a sampled secure sum with adaptive clipping, whose numbers a run alone compiles in,
    matches its own floats to float32 rounding: config.ONE_PROGRAM_SUMS).

    The trials sit trial-major in the batch (trial j of every setting, then trial j + 1), so
    that each device gets a share of every setting: a setting that learns plays long episodes
    while a noised one stays short."""
    settings = algo.settings
    cfg = algo.config
    trials, n_set = cfg.trials, len(settings)
    n = trials * n_set
    if algo.task.host:
        n_dev, padded, step = 1, n, host_rounds(algo)
    else:
        n_dev = trial_devices(n, devices)
        padded = own_padded(n, devices)
        step = round_program(algo, n_dev)
    books = [_Setting.of(a, np.arange(trials) * n_set + i) for i, a in enumerate(settings)]
    own_keys = jax.random.split(jax.random.key(cfg.seed), trials)
    state = jax.jit(jax.vmap(algo.init))(pad_rows(jnp.repeat(own_keys, n_set, axis=0), padded))
    if cfg.noise == "secret":  # one root per trial from os.urandom, in memory only
        state = state._replace(noise=secret_keys(padded))
    if algo.setting_mechanisms is not None:
        which = np.arange(padded) % n_set
        state = state._replace(setting=algo.setting_data(which))
    if not algo.task.host:
        state = jax.device_put(state, trial_sharding(n_dev))
    candidates, placing = None, None if algo.task.host else trial_sharding(n_dev)
    if cfg.public_eval_every is not None:
        candidates = public_candidates(algo)
        state = offer_candidates(candidates, state, placing)
    start = time.perf_counter()
    compile_s = 0.0
    t = 0
    while True:
        used = np.asarray(state.used)
        live = np.zeros(padded, bool)
        for book in books:
            live[book.rows] = book.live(used[book.rows])
        if not live.any():
            break
        if t >= 10 * cfg.max_rounds():
            raise RuntimeError("internal error: the episode budget was never reached")
        going = [b for b in books if live[b.rows].any()]
        for book in going:
            book.charge(live[book.rows])
        mixing = np.broadcast_to(np.eye(1, dtype=np.float32), (padded, 1, 1))
        if algo.topology is not None:
            mixing = np.broadcast_to(np.eye(cfg.agents, dtype=np.float32),
                                     (padded, cfg.agents, cfg.agents)).copy()
            for book in books:
                mixing[book.rows] = np.asarray(book.algo.topology.matrix(t), np.float32)
        t0 = time.perf_counter()
        if algo.task.host:
            # device_put: `jnp.asarray` of a numpy array compiles a program at each shape
            state, info = step(state, jax.device_put(mixing[0]), jax.device_put(live))
        else:
            state, info = step(state, mixing, live)
        info = jax.tree_util.tree_map(np.asarray, info)
        if t == 0:
            compile_s = time.perf_counter() - t0
        after = np.asarray(state.used)
        for book in going:
            r = book.rows
            book.record(live[r], used[r], after[r],
                        jax.tree_util.tree_map(lambda a, r=r: a[r], info))
        t += 1
        if candidates is not None and t % cfg.public_eval_every == 0:
            state = offer_candidates(candidates, state, placing)
        if progress is not None:  # the count ends at the budget (a round may overshoot it)
            recent = [r for b in going for r in b.out[-1][0][np.isfinite(b.out[-1][0])]]
            emit(progress, min(float(min(after[b.rows].mean(axis=1).min() for b in going)),
                               cfg.budget), cfg.budget,
                 mean_return=float(np.mean(recent)) if recent else None,
                 epsilon=max((e for b in going if (e := spent_max(b.ledger)) is not None),
                             default=None))
        work_so_far(lambda state=state, compile_s=compile_s: [  # if a later round fails
            book.result(state, time.perf_counter() - start, compile_s, None) for book in books])
    if candidates is not None:  # the last policy is a candidate too; each trial keeps its best
        offer_candidates(candidates, state, placing)
        state = placed(state._replace(gossip=PushSumState(candidates.best.best[0],
                                                          state.gossip.w)), placing)
    wall = time.perf_counter() - start
    program = None if n_set == 1 else {"settings": n_set, "trials": n}
    baseline = run_baseline(algo)  # the settings share their task and seed
    return [book.result(state, wall, compile_s, program, baseline, candidates)
            for book in books]


def run_baseline(algo: FedPG) -> np.ndarray:
    """A uniform-random policy's returns on the run's task, about as many episodes as the
    final rounds' batches hold (privrl.evaluation.random_baseline)."""
    cfg = algo.config
    return random_baseline(algo.task, cfg.trials * FINAL_ROUNDS * cfg.agents * cfg.batch_max,
                           cfg.seed)


def public_candidates(algo: FedPG) -> PublicCandidates:
    """`--public-eval-every`'s candidates: the server's θ (trials, 1, d) played on the task's
    public simulator (privrl.federation.adapt.PublicCandidates)."""
    return PublicCandidates(lambda theta, key: algo.public_returns(theta[:, 0], key),
                            algo.config.seed, algo.config.backoff)


def offer_candidates(candidates: PublicCandidates, state: Any, sharding: Any) -> Any:
    """Offer the server's θs as best candidates (`--public-eval-every`: the task's public
    simulator, privrl.federation.adapt.PublicCandidates); a collapsed trial reverts to its
    best θ and optimizer state with its step lowered."""
    theta = np.asarray(state.gossip.x)  # (trials, 1, d): Cen's server
    reverted = candidates.offer(theta, jax.tree_util.tree_map(np.asarray, state.opt_state))
    if reverted is None:
        return state
    theta, opt, _ = reverted
    return placed(state._replace(gossip=PushSumState(theta, state.gossip.w), opt_state=opt),
                  sharding)


def placed(state: Any, sharding: Any) -> Any:
    """`state` as device arrays, on the trials' sharding where the run has one."""
    state = jax.tree_util.tree_map(jnp.asarray, state)
    return state if sharding is None else jax.device_put(state, sharding)


def lever_record(algo: FedPG, candidates: PublicCandidates | None, rows: np.ndarray
                 ) -> dict[str, Any] | None:
    """What the post-processing levers set and did for the trials in `rows` (summary.json and
    privacy.json), or None."""
    cfg = algo.config
    if not cfg.step_from_noise and candidates is None:
        return None
    out: dict[str, Any] = {}
    if cfg.step_from_noise:
        out["step_from_noise"] = {"learning_rate": cfg.learning_rate,
                                  "step_size": algo.step_size}
    if candidates is not None:
        b = candidates.best
        mine = BestCandidates(b.backoff, b.collapse, b.sigmas)  # its trials' rows only
        mine.start, mine.best_return = b.start[rows], b.best_return[rows]
        mine.history, mine.backoffs = [h[rows] for h in b.history], b.backoffs[rows]
        out["public_candidates"] = public_candidates_record(
            mine, algo.task.name, "actions sampled from the policy as the agents play",
            cfg.public_eval_episodes, cfg.public_eval_every, len(rows))
    return out


def round_program(algo: FedPG, devices: int) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """One round of every trial, jitted: the trials split over `devices` host devices, each
    device computing its trials one at a time (`in_blocks` of one). Arguments: the stacked
    state, each trial's mixing matrix and whether it is live.

    Why one at a time: a round's loops (the rollouts' early exit, the N_t SCSG steps) run
    until their longest member is done, so vmapped trials each pay for the longest trial's
    N_t and episodes, which on CPU costs more than computing them one after another."""
    return jax.jit(shard_vmap(in_blocks(jax.vmap(algo.round), 1), devices, batched=True))


def host_rounds(algo: FedPG) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """The vmapped round's stand-in for a Gymnasium task: each trial's `FedPG.round` (its
    episodes played on the host) in turn (`host_scan` of one round), the same stacked state
    and round info."""

    def step(state: Any, mixing: Any, live: Any) -> tuple[Any, Any]:
        def one(c: tuple[Any, Any]) -> tuple[tuple[Any, Any], Any]:
            new, info = algo.round(c[0], mixing, c[1])
            return (new, c[1]), info

        (state, _), info = host_scan(one, 1)((state, jax.device_put(live)))
        return state, jax.tree_util.tree_map(lambda a: a[:, 0], info)

    return step


def account(algo: FedPG, releases: int) -> dict[str, Any] | None:
    """Gaussian: the account (by the config's accountant) of an agent that released
    `releases` reports (one per round); other mechanisms are composed by the ledger."""
    if algo.config.mechanism == "distributed-gaussian":  # its own zCDP bound, Flower's too
        return algo.mechanism.account(releases)
    if algo.config.mechanism == "distributed-gaussian-continuous":  # add/remove one agent
        acc = Accountant(algo.config.accountant)
        acc.compose(algo.mechanism.event, releases)
        rec = acc.record(algo.config.delta)
        rec["neighbouring_relation"] = (
            f"{USER_NEIGHBOURS}: the sum with and without the agent's update is a "
            "(Poisson-sampled) Gaussian mechanism of sensitivity C, dp_accounting's "
            "ADD_OR_REMOVE_ONE events")
        return rec
    if algo.central is not None:  # one Gaussian event per round, at the rule's sensitivity
        from privrl.privacy.central import CENTRAL_NEIGHBOURS

        acc = Accountant(algo.config.accountant, neighbouring=CENTRAL_NEIGHBOURS)
        acc.compose(algo.central.event, releases)
        rec = acc.record(algo.config.delta)
        rec["neighbouring_relation"] = CENTRAL_NEIGHBOURS
        rec["sensitivity"] = {"l2": algo.central.sensitivity, "rule": algo.config.robust,
                              "values_kept_per_coordinate": algo.central.kept}
        return rec
    if algo.config.mechanism != "gaussian":
        return None
    acc = Accountant(algo.config.accountant, neighbouring=algo.mechanism.guarantee.neighbouring)
    acc.compose(algo.mechanism.event, releases)
    return acc.record(algo.config.delta)


# --- what a run reports ----------------------------------------------------------------------
def episodes_to_target(run: FedPGRun) -> np.ndarray:
    """Per trial: episodes per agent spent before the first round whose batch mean return
    reached the target (inf: never, or the task has no target)."""
    if run.config.target_return is None:
        return np.full(run.mean_return.shape[0], np.inf)
    hit = run.mean_return >= run.config.target_return
    out = np.full(hit.shape[0], np.inf)
    for i, row in enumerate(hit):
        if row.any():
            out[i] = run.used_before[i, int(np.argmax(row))]
    return out


FINAL_ROUNDS = 10  # the rounds per trial whose batch mean returns are its final ones


def final_returns(run: FedPGRun) -> np.ndarray:
    """Every trial's last FINAL_ROUNDS batch mean returns (of the rounds it ran), in one
    array."""
    return np.concatenate([r[np.isfinite(r)][-FINAL_ROUNDS:].astype(np.float64)
                           for r in run.mean_return])


def final_return(run: FedPGRun, tail: int = FINAL_ROUNDS) -> np.ndarray:
    """Per trial: mean of the batch mean returns of its last `tail` rounds."""
    out = []
    for r in run.mean_return:
        r = r[np.isfinite(r)]
        out.append(float(r[-tail:].mean()) if r.size else math.nan)
    return np.asarray(out)


def algorithm_label(cfg: FedPGConfig) -> str:
    if cfg.algorithm == "dec":
        return f"FedPG-Dec ({cfg.topology})"
    return "single agent (SVRPG)" if cfg.agents == 1 else "FedPG-Cen"


def summarize(run: FedPGRun, runtime: str = "local") -> dict[str, Any]:
    cfg = run.config
    reach = episodes_to_target(run)
    per_agent = run.ledger.summary()["per_agent_epsilon"]["max"]
    steady = max(run.wall_seconds - run.compile_seconds, 1e-9)
    cap = cfg.privacy_plan().cap
    budget = {} if cap is None else {
        "epsilon_budget_per_agent": cap,
        "budget_composition": cfg.budget_composition,
        "trials_ended_by_privacy_budget": (None if run.privacy_budget_spent is None
                                           else int(np.sum(run.privacy_budget_spent)))}
    adaptive = {} if run.final_clip is None else {
        "initial_clip": cfg.clip, "final_clip": [round(float(c), 4) for c in run.final_clip]}
    if cfg.mechanism in DISTRIBUTED_MECHANISMS and cfg.epsilon is not None:
        how = (f"{cfg.accountant} accountant" if cfg.mechanism != "distributed-gaussian" else
               f"the mechanism's zCDP bound over {cfg.calibration_rounds()} rounds")
        budget = {"epsilon_budget_per_agent": cfg.epsilon,
                  "budget_composition": f"{how} at δ = {cfg.delta:g}",
                  "trials_ended_by_privacy_budget": int(np.sum(run.privacy_budget_spent))}
    return {
        "algorithm": f"fedpg-{cfg.algorithm}",
        "label": algorithm_label(cfg),
        "preset": cfg.preset,
        "topology": cfg.topology if cfg.algorithm == "dec" else "star",
        "agents": cfg.agents,
        "mechanism": cfg.mechanism,
        "upload_bytes_per_report": run.mechanism["upload_bytes_per_report"],
        "privacy": headline(privacy_facts(run, runtime)),
        **noise_summary(noise_mode(cfg.mechanism, cfg.noise, cfg.secure_noise)),
        "epsilon_per_agent": (run.accounting["epsilon"] if run.accounting is not None
                              else per_agent),
        **declared_summary(cfg.mechanism),
        "trials": cfg.trials,
        "budget_episodes_per_agent": cfg.budget,
        "target_return": cfg.target_return,
        "episodes_to_target": [None if math.isinf(x) else int(x) for x in reach],
        "median_episodes_to_target": (None if np.isinf(np.median(reach))
                                      else float(np.median(reach))),
        "reached_target": None if cfg.target_return is None else int(np.isfinite(reach).sum()),
        "final_mean_return": [float(f"{x:.4g}") for x in final_return(run)],
        **({} if (v := run.verdict()) is None else v.fields()),
        "rounds": run.rounds_run,
        "rounds_max": int(run.releases.max()),  # rounds of the longest trial
        "wall_seconds": round(run.wall_seconds, 2),
        "compile_seconds": round(run.compile_seconds, 2),
        # Rates after the first round (which includes compilation).
        "rounds_per_second": round((run.rounds_run - 1) / steady, 2),
        "episodes_per_second": round(run.episodes_played / max(run.wall_seconds, 1e-9), 1),
        "episodes_played": run.episodes_played,
        **budget,
        **adaptive,
        **byzantine_summary(run),
        **({} if run.levers is None else {"levers": run.levers}),
        # run as one program with other settings: the wall time and rates are the program's
        **({} if run.program is None else {"program": run.program}),
    }


def byzantine_summary(run: FedPGRun) -> dict[str, Any]:
    """Byzantine agents and the robust rule (nothing when there are neither): who attacked
    (fixed per run, from the seed), how, and how often the rule kept honest and Byzantine
    reports (per round, mean over trials)."""
    cfg = run.config
    if not cfg.byzantine and cfg.robust == "none":
        return {}
    from privrl.systems.fedpg.byzantine import byzantine_agents, byzantine_mask

    out: dict[str, Any] = {"byzantine_agents": list(byzantine_agents(cfg)),
                           "attack": cfg.attack, "robust": cfg.robust}
    if cfg.bypass_mechanism or cfg.attack_norm is not None:
        out["bypass_mechanism"] = cfg.bypass_mechanism  # forged reports: no mechanism ran
        out["attack_norm"] = cfg.attack_norm
    if run.kept is not None:
        rounds = np.maximum(run.releases, 1)[:, None]
        share = run.kept / rounds  # (trials, K): fraction of its rounds each report was kept
        byz = byzantine_mask(cfg)
        out["honest_reports_kept"] = round(float(share[:, ~byz].mean()), 4)
        out["byzantine_reports_kept"] = (round(float(share[:, byz].mean()), 4)
                                         if byz.any() else None)
    return out


def privacy_facts(run: Released | FedPGRun, runtime: str = "local") -> Facts:
    """What privacy.json states, as facts (privrl.privacy.record composes the prose): the
    whole run's guarantee per agent, one release's ε labelled per release, the other
    composition beside it, the budget, the shuffle and who must be trusted; where the parties
    ran (`runtime`), and whether the ε is a user mechanism's declaration."""
    run = run.released() if isinstance(run, FedPGRun) else run
    return replace(_facts(run), runtime=runtime, declared_by=declared_by(run.config.mechanism),
                   audit=run.mechanism.get("params", {}).get("quick_audit"))


def _facts(run: Released) -> Facts:
    cfg = run.config
    sent = ("its policy-gradient estimate μ_tᵏ (to the server)" if cfg.algorithm == "cen"
            else "its local update Δ_k = θ_N − z_k, which it adds to x_k before gossiping "
                 "(x_k, w_k) to its out-neighbours")
    server = "the server's own SCSG episodes (its own data)" if cfg.algorithm == "cen" else ""
    computes = ("everything the server computes" if cfg.algorithm == "cen"
                else "everything the peers compute")
    ledger = run.ledger.summary()
    most = int(run.releases.max())
    noise = noise_mode(cfg.mechanism, cfg.noise, cfg.secure_noise)
    if cfg.mechanism == "central-gaussian" and run.accounting is not None:
        sens = run.accounting["sensitivity"]
        return Facts(
            Claim(run.accounting["epsilon"], cfg.delta, "DP",
                  "central: the server is TRUSTED with every agent's clipped update",
                  "one agent's whole data (every update it sends over the run)",
                  f"the {cfg.accountant} accountant over {most} rounds",
                  f"{run.accounting['accountant']}; each round one Gaussian event, noise std "
                  f"σ·S, S = C/{sens['values_kept_per_coordinate']} = {sens['l2']:.4g} (the "
                  f"{cfg.robust} rule's L2 sensitivity, docs/byzantine.md)"),
            releases=Releases("the server", f"its {cfg.robust} aggregate of the K agents' "
                              "updates, each L1-clipped to C/2", "the central Gaussian "
                              "mechanism on the aggregate", most, None, cfg.delta, "DP"),
            trust=Trust("the server: it sees every agent's clipped update in the clear and is "
                        "trusted to apply the rule and add the noise; nobody else",
                        "the server's optimizer steps"),
            not_protected=server, noise=noise)
    if not ledger["formal_guarantee"]:
        return Facts(None, f"no mechanism (as in paper 004); each agent sends {sent} as it is",
                     noise=noise)
    one = Releases("each agent", sent, f"the {cfg.mechanism} mechanism", most,
                   run.mechanism["epsilon"], run.mechanism["delta"])
    basic = Composition(ledger["per_agent_epsilon"]["max"], ledger["per_agent_delta_max"] or 0.0,
                        "the ledger's basic composition of the per-release (ε, δ) (looser)")
    if cfg.mechanism == "distributed-gaussian" and run.accounting is not None:
        p, k = run.mechanism["params"], cfg.agents
        m = p["min_honest_surviving"]
        return Facts(
            Claim(run.accounting["epsilon"], cfg.delta, "DP",
                  "central, user level: the server sees only the secure sum",
                  "one agent's whole data (every update it sends over the run)",
                  f"the mechanism's zCDP bound over {most} rounds",
                  run.accounting["accountant"]),
            releases=replace(one, who=f"each of the K = {k} agents", notion="DP",
                             what=discrete_release(p), mechanism=(
                                 "the distributed discrete Gaussian: one agent (all its data) "
                                 "added or removed (zero-out) moves the integer sum by at most "
                                 f"R = {p['l2_bound_grid_steps']} grid steps")),
            also=[replace(basic, notion="DP")],
            budget=None if cfg.epsilon is None else Budget(
                cfg.epsilon, cfg.delta, f"the mechanism's calibration over "
                f"{cfg.calibration_rounds()} rounds", "a round beyond them is refused, ending "
                "the trial"),
            trust=Trust(f"agents follow the protocol and the server is honest-but-curious; "
                        f"the guarantee counts on the noise shares of {m} honest agents in "
                        f"every sum: with t agents dropped out or colluding with the server it "
                        f"holds for t <= K − {m} = {k - m}, beyond that only with fewer shares "
                        "(see trust_model)", "the server's optimizer steps"),
            not_protected=server, noise=noise)
    if cfg.mechanism == "distributed-gaussian-continuous" and run.accounting is not None:
        m = run.mechanism["params"]["min_honest"]
        event = ("PoissonSampledDpEvent(q, GaussianDpEvent(σ))" if cfg.sampling_rate < 1
                 else "GaussianDpEvent(σ)")
        k = cfg.agents
        return Facts(
            Claim(run.accounting["epsilon"], cfg.delta, "DP",
                  "central, user level: the server sees only the secure sum",
                  "one agent's whole data (every update it sends over the run)",
                  f"the {cfg.accountant} accountant over {most} rounds",
                  f"{run.accounting['accountant']}; each round dp_accounting's {event}, "
                  f"q = {cfg.sampling_rate:g}"),
            releases=replace(one, who=f"each of the K = {k} agents", notion="DP",
                             what=distributed_release(run, m), mechanism=(
                                 "the distributed Gaussian mechanism: one agent (all its data) "
                                 "added or removed (zero-out) moves the sum by at most the "
                                 "clip")),
            also=[replace(basic, notion="DP")],
            budget=None if cfg.epsilon is None else Budget(
                cfg.epsilon, cfg.delta, f"the {cfg.accountant} accountant",
                "a round beyond it is refused, ending the trial"),
            trust=Trust(f"agents follow the protocol and the server is honest-but-curious; "
                        f"with t agents dropped out or colluding with the server the guarantee "
                        f"holds for t <= K − {m} = {k - m}, beyond that only with "
                        f"σ·sqrt((K − t)/{m}) (see trust_model)",
                        "the server's optimizer steps"
                        + (" and clip updates C_(t+1) = C_t·exp(−η_C(b̄_t − γ))"
                           if cfg.adaptive_clip else "")),
            not_protected=server, noise=noise)
    local = "local: the server and peers are untrusted"
    unit = "all of one agent's reports"
    trust = Trust("nobody but the agent itself (local DP)", computes)
    if cfg.mechanism == "gaussian" and run.accounting is not None:
        return Facts(
            Claim(run.accounting["epsilon"], cfg.delta, "LDP", local, unit,
                  f"the {cfg.accountant} accountant over {most} releases",
                  run.accounting["accountant"]),
            releases=replace(one, mechanism=f"the Gaussian mechanism (L2 clip {cfg.clip:g}, "
                                            f"noise std {cfg.noise_multiplier:g}·clip)"),
            also=[basic], trust=trust, not_protected=server, noise=noise)
    plan = cfg.privacy_plan()
    composed = pure_composition_record(plan.epsilon_per_report, most, cfg.delta,
                                       cfg.budget_composition, plan.delta_per_report)
    claim, also, budget = pure_ldp(composed, local, unit, "a trial whose agents could not "
                                   "afford another round ended there", plan.cap)
    shuffled = shuffle_account(run)
    return Facts(claim, releases=one, also=also, budget=budget, trust=trust,
                 unspent=unspent(cfg, claim.epsilon, plan.cap, most),
                 shuffle=None if shuffled is None else CentralShuffle.of(shuffled, "server"),
                 not_protected=server, condition=declared_condition(cfg.mechanism),
                 noise=noise)


def unspent(cfg: FedPGConfig, spent: float, cap: float | None, rounds: int) -> str:
    """Why an agent's ε is below its budget, or "" where it is not: the plan splits the
    budget over the most rounds the episode budget could pay for (`max_rounds`), and rounds
    that cost more episodes end the run sooner."""
    if cap is None or not spent < cap * (1 - 1e-3):
        return ""
    n_min = 1 if cfg.inner_steps is None else cfg.inner_steps
    return (f"each agent spent at most ε = {spent:.4g} of its {cap:g}, because the budget is "
            f"split evenly over the {cfg.max_rounds()} rounds its {cfg.budget} episodes could "
            f"pay for at most (a round costs at least B_min + b·N_min = "
            f"{cfg.batch_min + cfg.minibatch * n_min} episodes), and this run's rounds cost "
            f"more, so its agents released in at most {rounds} (to spend more in each round, "
            "give the ε of one report, epsilon_per_report, instead)")


def privacy_record(run: Released | FedPGRun, runtime: str = "local") -> dict[str, Any]:
    """privacy.json, for a run on any runtime (what its agents released): the composed
    statement, the mechanism, each agent's releases, the ledger's composition and, for the
    Gaussian mechanisms, the accountant's account."""
    run = run.released() if isinstance(run, FedPGRun) else run
    cfg = run.config
    most = int(run.releases.max())
    composed = (pure_composition_record(cfg.epsilon_per_report, most, cfg.delta,
                                        cfg.budget_composition,
                                        cfg.privacy_plan().delta_per_report)
                if cfg.pure_mechanism and most > 0 else None)
    shuffled = shuffle_account(run)
    ledger = run.ledger
    # central-gaussian: each agent's own release (to the trusted server) has no guarantee;
    # the guarantee is the server's noised aggregate's, so the ledger is not its verdict.
    central = cfg.mechanism == "central-gaussian"
    return build_privacy_record(
        privacy_facts(run, runtime), mechanism=run.mechanism, ledger=None if central else ledger,
        accountant=run.accounting, with_accounting=True, fields={
            **({"agents_releases_to_the_trusted_server": ledger.summary()} if central else {}),
            **per_release(run),
            **trust_model(run),
            **adaptive_clip_record(run),
            **robust_record(run),
            **({} if run.levers is None else {"adaptive_levers": {
                **run.levers, "note": LEVERS_NOTE}}),
            "per_agent_composition": composed,
            "releases_per_agent": ledger.summary()["reports_per_agent"],
            "agent_ids": "trial * K + index of the agent within its trial",
            **({} if shuffled is None else {"shuffle": shuffled}),
            **noise_fields(noise_mode(cfg.mechanism, cfg.noise, cfg.secure_noise))})


def robust_record(run: Released) -> dict[str, Any]:
    """A robust rule's place in the guarantee: post-processing of the released reports (under
    central-gaussian the rule runs before the noise, and its sensitivity sets the noise)."""
    cfg = run.config
    if cfg.robust == "none" or cfg.mechanism == "central-gaussian":
        return {}
    return {"robust_aggregation": {
        "rule": cfg.robust,
        "guarantee": "unchanged: the rule reads only the released reports and public numbers "
                     "(its thresholds, α), so it is post-processing of each agent's release",
        **({"threshold": "min(2σ√(V/B_t), D) + 2r, V = 2 log(2K/δ), r the mechanism's noise "
                         "radius at δ/(2K) (docs/byzantine.md)",
            "filter_sigma": cfg.filter_sigma, "filter_delta": cfg.filter_delta}
           if cfg.robust == "fedpg-br" else {}),
        "byzantine_alpha": cfg.byzantine_alpha}}


def discrete_release(p: dict[str, Any]) -> str:
    """distributed-gaussian: what one agent sends in a round (`p`: the mechanism's params)."""
    return (f"its μ_tᵏ clipped to L2 norm C = {p['clip']:g}, scaled by 1/γ (γ = "
            f"{p['gamma']:.6g}), rounded to integers by conditional randomized rounding (L2 "
            f"norm <= R = {p['l2_bound_grid_steps']}), plus a discrete Gaussian noise share "
            f"N_ℤ(0, {p['share_variance_grid_steps2']}), modulo 2^{p['bits']}; a secure sum "
            "(simulated exactly in a local run, SecAgg+ on Flower) gives the server only the "
            "sum modulo 2^b")


def distributed_release(run: Released, m: int) -> str:
    """distributed-gaussian-continuous: what one agent sends in a round (with adaptive
    clipping, its clip bit too), and the noise the secure sum carries."""
    cfg = run.config
    if not cfg.adaptive_clip:
        return (f"its μ_tᵏ clipped to L2 norm C = {cfg.clip:g} plus a noise share "
                f"N(0, σ²C²/{m}) when sampled (probability q = {cfg.sampling_rate:g}), the "
                f"share alone otherwise; a simulated secure aggregation gives the server only "
                f"the sum, whose noise N(0, σ²C²), σ = {cfg.noise_multiplier:.6g}, is carried "
                f"by any {m} honest shares")
    z_delta = run.mechanism["params"]["adaptive_clip"]["update_noise_multiplier_z_delta"]
    return (f"its μ_tᵏ clipped to L2 norm C_t (adaptive clipping, Andrew et al. 2021; C_0 = "
            f"{cfg.clip:g}) and its clip bit b = 1[‖μ_tᵏ‖ <= C_t] as one more coordinate "
            f"(b − ½)·z_Δ·C_t/σ_b, plus a noise share N(0, z_Δ²C_t²/{m}) on every coordinate "
            f"when sampled (probability q = {cfg.sampling_rate:g}), the share alone otherwise; "
            f"a simulated secure aggregation gives the server only the sum, whose noise "
            f"N(0, z_Δ²C_t²), z_Δ = {z_delta:.6g}, is carried by any {m} honest shares (on "
            f"the bit sum: noise of std σ_b = {cfg.clip_count_stddev:.6g}); the sensitivity is "
            f"C_t·sqrt(1 + (z_Δ/2σ_b)²), so a round is the Gaussian mechanism with σ = "
            f"(z_Δ⁻² + (2σ_b)⁻²)^(−1/2) = {cfg.noise_multiplier:.6g} whatever C_t is")


def adaptive_clip_record(run: Released) -> dict[str, Any]:
    """privacy.json's `adaptive_clip`: the split of σ and the clip rule (or nothing)."""
    cfg = run.config
    if not cfg.adaptive_clip:
        return {}
    a = run.mechanism["params"]["adaptive_clip"]
    return {"adaptive_clip": {
        "reference": "Andrew, Thakkar, McMahan & Ramaswamy 2021, Differentially private "
                     "learning with adaptive clipping (NeurIPS), Theorem 1",
        "noise_multiplier_z": a["noise_multiplier_z"],
        "update_noise_multiplier_z_delta": a["update_noise_multiplier_z_delta"],
        "count_stddev_sigma_b": a["count_stddev_sigma_b"],
        "target_quantile_gamma": a["target_quantile_gamma"],
        "clip_learning_rate_eta": a["clip_learning_rate_eta"],
        "initial_clip": cfg.clip,
        "final_clip": None if run.final_clip is None else [float(c) for c in run.final_clip],
        "relation": "z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2): the joint message [clip_C_t(μ), "
                    "(b − ½)·z_Δ·C_t/σ_b] has L2 sensitivity C_t·z_Δ/z under zero-out and "
                    "isotropic noise of std z_Δ·C_t",
        "clip_rule": "C_(t+1) = C_t·exp(−η_C (b̄_t − γ)), b̄_t = ½ + (noised Σ(b − ½))/(q·K)",
        "post_processing": "the clip trajectory (metrics.csv's clip column) is computed by the "
                           "server from the released sums only: post-processing, no extra "
                           "privacy cost"}}


def trust_model(run: Released) -> dict[str, Any]:
    """distributed-gaussian(-continuous): how the guarantee degrades as agents drop out or
    collude (the noise that the honest agents' shares alone carry, and its ε over the run)."""
    cfg = run.config
    if cfg.mechanism == "distributed-gaussian" and run.accounting is not None:
        return discrete_trust_model(run)
    if cfg.mechanism != "distributed-gaussian-continuous" or run.accounting is None:
        return {}
    k, m = cfg.agents, run.mechanism["params"]["min_honest"]
    rounds = int(run.releases.max())
    rows = []
    for t in sorted({0, k - m, k - m + max(1, m // 10), k - m + max(1, m // 2)}):
        if t >= k:
            continue
        sigma = cfg.noise_multiplier * math.sqrt(min(k - t, m) / m)
        rows.append({"dropped_or_colluding": t, "noise_multiplier": sigma,
                     "epsilon": gaussian_spent(sigma, rounds, cfg.delta, cfg.accountant,
                                               cfg.sampling_rate)})
    return {"trust_model": {
        "secure_aggregation": "simulated: one function sums the K messages and returns the sum "
                              "only (privrl.privacy.distributed.secure_aggregate)",
        "server": "honest-but-curious; sees the sum only",
        "agents": "follow the protocol; unsampled agents send a noise share too",
        "min_honest": m,
        "degradation": "t agents dropped out or colluding with the server: noise multiplier "
                       "σ·sqrt(min(K − t, m)/m), ε recomputed with it",
        "by_dropouts": rows}}


def discrete_trust_model(run: Released) -> dict[str, Any]:
    """distributed-gaussian's `trust_model`: ε over the run with fewer honest shares."""
    cfg = run.config
    mech = (run.secure_sum if run.secure_sum is not None
            else discrete_sum_mechanism(run.config, run.mechanism["params"]["dim"]))
    k, m, rounds = cfg.agents, mech.min_honest, int(run.releases.max())
    rows = [{"dropped_or_colluding": t, "honest_shares": min(k - t, m),
             "epsilon": mech.epsilon(rounds, min(k - t, m))}
            for t in sorted({0, k - m, k - m + max(1, m // 10), k - m + max(1, m // 2)})
            if t < k]
    return {"trust_model": {
        "secure_aggregation": "simulated exactly: the K messages summed modulo 2^b, as SecAgg+ "
                              "reveals them (privrl.privacy.discrete_sum.modular_sum)",
        "server": "honest-but-curious; sees the sum modulo 2^b only",
        "agents": "follow the protocol; every agent sends a message in every round",
        "min_honest": m,
        "degradation": "t agents dropped out or colluding with the server: min(K − t, m) "
                       "honest noise shares, ε recomputed with them",
        "by_dropouts": rows}}


def shuffle_account(run: Released) -> dict[str, Any] | None:
    """The shuffle model's central account (`shuffle`, fedpg-cen with a pure mechanism): every
    round's batch is the K agents' reports (all K release in every round a trial runs), each
    agent one report per round; an agent's rounds compose basically (privrl.privacy.shuffle).
    The simulated shuffler's order derives from the seed, like seeded noise."""
    cfg = run.config
    most = int(run.releases.max())
    if not cfg.shuffle or most == 0:
        return None
    from privrl.privacy.shuffle import shuffle_record

    return shuffle_record(float(run.mechanism["epsilon"]), cfg.agents, cfg.shuffle_delta,
                          batches=most)


def per_release(run: Released) -> dict[str, Any]:
    """The (ε, δ) of ONE release, read off the mechanism (for the Gaussian mechanism the
    configured ε is the whole run's target, not a release's)."""
    if not run.mechanism.get("private", False):
        return {"epsilon_per_release": None, "delta_per_release": None}
    return {"epsilon_per_release": run.mechanism["epsilon"],
            "delta_per_release": run.mechanism["delta"]}


def write_metrics(path: Path, run: FedPGRun) -> None:
    """One row per trial and round; adaptive clipping adds the round's clip C_t."""
    clip = run.clip
    with path.open("w") as f:
        f.write("trial,round,episodes_per_agent_before,batch,inner_steps,mean_return"
                + ("\n" if clip is None else ",clip\n"))
        for i in range(run.mean_return.shape[0]):
            for t in range(run.mean_return.shape[1]):
                if np.isfinite(run.mean_return[i, t]):
                    f.write(f"{i},{t},{run.used_before[i, t]:.1f},{run.batch[i, t]:.1f},"
                            f"{run.inner_steps[i, t]:.1f},{run.mean_return[i, t]:.2f}"
                            + ("\n" if clip is None else f",{clip[i, t]:.6g}\n"))


Curves = dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (used_before, mean_return)


def return_curves(runs: Curves, budget: int, points: int = 200
                  ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each trial's mean return on a common grid of episodes per agent (last round at or
    before each grid point), for plotting means and bands."""
    grid = np.linspace(0, budget, points)
    out = {}
    for name, (used_before, mean_return) in runs.items():
        curves = []
        for x, y in zip(used_before, mean_return, strict=True):
            ok = np.isfinite(y)
            idx = np.searchsorted(x[ok], grid, side="right") - 1
            curves.append(np.where(idx >= 0, y[ok][np.maximum(idx, 0)], np.nan))
        out[name] = np.asarray(curves)
    return grid, out


def plot_returns(path: Path, runs: Curves, budget: int, title: str,
                 target: float | None = 475.0, ylim: tuple[float, float] | None = (0, 510),
                 random: float | None = None) -> None:
    """Mean return vs episodes per agent: mean over trials, shaded min-max over trials;
    `ylim` (default: CartPole-v1's returns) None: fitted to the curves; `random` a random
    policy's return, drawn as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privrl.output import draw_random, plural

    grid, curves = return_curves(runs, budget)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, c in curves.items():
        mean = np.nanmean(c, axis=0)
        (line,) = ax.plot(grid, mean, lw=1.4,
                          label=f"{name} (mean of {plural(c.shape[0], 'seed')})")
        if c.shape[0] > 1:
            lo, hi = np.nanmin(c, axis=0), np.nanmax(c, axis=0)
            ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.15)
    if target is not None:  # a task without a target has no line
        ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:g}")
    draw_random(ax, random)
    ax.set_xlabel("episodes played per agent")
    ax.set_ylabel("mean return of the round's episodes")
    ax.set_title(title, fontsize=10)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def record(run: FedPGRun, files: dict[str, Any] | None = None,
           runtime: str = "local") -> RunRecord:
    """What a run leaves behind: summary, privacy record, per-round table, return curves;
    `runtime` where its parties ran (privacy.json's trust domain)."""
    cfg = run.config
    summary = summarize(run, runtime)
    label = summary["label"]
    cartpole = cfg.env in (None, "gymnax:CartPole-v1")
    v = run.verdict()
    return RunRecord(
        f"fedpg-{cfg.algorithm}", cfg.to_dict(), cfg.seed, summary,
        privacy_record(run, runtime),
        metrics=lambda p: write_metrics(p, run),
        plots={"returns.png": lambda p: plot_returns(
            p, {label: (run.used_before, run.mean_return)}, cfg.budget,
            plot_title(label, cfg.env, f"K = {cfg.agents} agents, {privacy_label(summary)}",
                       run.policy), cfg.target_return,
            (0, 510) if cartpole else None, None if v is None else v.random)},
        run_info={"topology": run.topology}, files=files or {}, policy=run.policy,
        runtime=runtime)


def privacy_label(summary: dict[str, Any]) -> str:
    """The mechanism and each agent's ε, in a few words for the run's plot."""
    eps = summary["epsilon_per_agent"]
    if summary["mechanism"] == "none" or eps is None or not math.isfinite(eps):
        return "no privacy (mechanism none)" if summary["mechanism"] == "none" else (
            f"{summary['mechanism']}, no ε")
    return f"{summary['mechanism']}, ε = {eps:.3g} per agent"


def save(run: FedPGRun, path: Path, command: list[str] | None = None,
         files: dict[str, Any] | None = None, runtime: str = "local") -> dict[str, Any]:
    """config.json, metrics.csv, privacy.json, summary.json, policy.npz, plots/returns.png
    and any extra JSON `files` (a Ray run's ray.json)."""
    return save_run(record(run, files, runtime), path, command)


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The results table a run's summary reads as: (metric, value) rows."""
    med = summary["median_episodes_to_target"]
    rows = [
        ("privacy", summary["privacy"]),
        *([("noise keys", summary["noise"])] if "noise" in summary else []),
        ("agents K, topology", f"{summary['agents']}, {summary['topology']}"),
        ("trials × episodes/agent",
         f"{summary['trials']} × {summary['budget_episodes_per_agent']}"),
        *(() if summary["target_return"] is None else (
            (f"median episodes/agent to mean return ≥ {summary['target_return']:g}",
             "not reached" if med is None else f"{med:g}"),
            ("trials that reached it", f"{summary['reached_target']}/{summary['trials']}"))),
        ("final mean return (last 10 rounds)",
         ", ".join(f"{x:.4g}" for x in summary["final_mean_return"])),
        *(verdict_rows(summary) if "learned" in summary else ()),
        ("wall time", f"{summary['wall_seconds']:.1f} s (first round incl. compile "
                      f"{summary['compile_seconds']:.1f} s)"),
        ("rounds / s, episodes / s",
         f"{summary['rounds_per_second']:.1f}, {summary['episodes_per_second']:,.0f}"),
    ]
    return rows
