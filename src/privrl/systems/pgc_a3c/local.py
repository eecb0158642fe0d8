"""The local runner: all trials of a run in one jitted program, sharded over host devices.

`run_pgc_a3c_settings` runs several settings that differ only in numbers (mechanism family,
ε, clip, |B|, d̂) as one program too: each trial carries its setting as data
(`PGCA3C.for_settings`), its keys are the ones its setting's own run gives it, and each setting
keeps its own ledger, so each setting's results are its own run's (tests/systems/pgc_a3c/
test_settings.py), at a fraction of the cost of running the settings one after another.

Rounds are run in chunks (a jitted `lax.scan` of rounds per chunk) so that the host can show
progress, charge the privacy ledger before each chunk releases anything, and collect scores.
Trials are independent, so they are split over the host's XLA devices with `shard_map`
(one device per core; see privrl.compute.devices).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from privrl.compute.sharding import (
    setting_trial_keys,
    shard_vmap,
    trial_devices,
    trial_sharding,
)
from privrl.evaluation import Verdict, random_baseline, verdict, verdict_rows
from privrl.federation.adapt import (
    LEVERS_NOTE,
    PublicCandidates,
    public_candidates_record,
)
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
from privrl.privacy.accounting import pure_composition_record
from privrl.privacy.ldp_compact import generator_condition
from privrl.privacy.ledger import PrivacyLedger
from privrl.privacy.noise import noise_fields, noise_mode, noise_summary, secret_keys
from privrl.privacy.record import (
    CentralShuffle,
    Facts,
    Releases,
    Trust,
    headline,
    mechanism_record,
    pure_ldp,
)
from privrl.privacy.record import privacy_record as build_privacy_record
from privrl.privacy.shuffle import shuffle_record
from privrl.privacy.user import declared_by, declared_condition, declared_summary
from privrl.progress import as_progress, emit, spent_max
from privrl.systems.pgc_a3c.algorithm import (
    PGCA3C,
    PGCA3CConfig,
    budget_ledger,
    settings_algorithm,
    trial_group,
)
from privrl.systems.pgc_a3c.metrics import (
    first_success_time,
    median_fst,
    plot_scores,
    success_ratio_curve,
    write_metrics_csv,
)

if TYPE_CHECKING:
    from flax import linen as nn

    from privrl.envs.task import Task

ProgressFn = Callable[[int, int], None]  # (submissions done per trial, total)


@dataclass
class RunOutput(SavesRunDir):
    config: PGCA3CConfig
    # (trials, submissions) float32: every submission's score (its episode's true return;
    # CartPole: its length); NaN: none made
    scores: np.ndarray
    submitted: np.ndarray  # (trials,) submissions each trial made (< cap if retired)
    ledger: PrivacyLedger
    mechanism: dict[str, Any]
    wall_seconds: float
    compile_seconds: float
    devices: int
    agents_per_trial: int
    theta: np.ndarray | None = None  # (trials, d): each trial's final parameters (the policy)
    # policy.npz: θ with the model's description (None: a run rebuilt without its model)
    policy: SavedPolicy | None = None
    # Run as one program with other settings (`run_pgc_a3c_settings`): how many settings and
    # episodes that program ran (wall_seconds and compile_seconds are the program's); None:
    # this setting ran alone.
    program: dict[str, int] | None = None
    # The adaptive levers' record (`lever_record`): what they set and did; None: none on.
    levers: dict[str, Any] | None = None
    # a uniform-random policy's returns on the run's task (privrl.evaluation.random_baseline)
    baseline: np.ndarray | None = None

    def record(self) -> RunRecord:
        return record(self)

    def verdict(self) -> Verdict | None:
        """The final window's returns (each trial's last `final_window` submissions) against
        the random baseline."""
        if self.baseline is None:
            return None
        return verdict(final_scores(self), self.baseline)


def _chunk_rounds(total_rounds: int, parallel_agents: int, trials: int) -> int:
    """Rounds per jitted chunk: about 20k episodes, so progress updates every second or so."""
    per_round = max(1, parallel_agents * trials)
    return int(min(total_rounds, max(10, 20_000 // per_round)))


class ShardedTrials:
    """`trials` independent trials of `algo`, vmapped and split over host devices.

    `run_chunk(state, retired)` advances every trial by `chunk` rounds (`PGCA3C.run_rounds`,
    every piece of a round `group` trials at a time: default, the run's own, at most the
    config's `trial_block`) and returns (state, scores) with scores of shape
    (trials, chunk * P), NaN where no agent submitted. `retired` (bool per trial, default
    none) marks trials whose agents no longer run: they cost no environment steps. Trials are
    padded to a multiple of the device count with retired dummies, which are dropped from the
    outputs. On a task that plays its episodes on the host (a Gymnasium task) the rounds run
    from Python on one device, their pieces jitted (`PGCA3C.round`).
    """

    def __init__(self, algo: PGCA3C, trials: int, chunk: int, devices: int | None = None,
                 group: int | None = None):
        host = algo.episodes.host
        self.devices = n_dev = 1 if host else trial_devices(trials, devices)
        self.trials, self.cap = trials, algo.config.submissions
        self.padded = math.ceil(trials / n_dev) * n_dev
        group = group or trial_group(trials, n_dev, algo.config.trial_block)

        def advance(state: Any, retired: jax.Array) -> Any:
            return algo.run_rounds(state._replace(retired=retired), chunk, group)

        self._run = advance if host else jax.jit(shard_vmap(advance, n_dev, batched=True))
        self._init = jax.jit(shard_vmap(algo.init, n_dev))
        self._sharding = trial_sharding(n_dev)

    def init(self, key: jax.Array, noise: str = "seeded") -> Any:
        """Every trial's state; with secret noise, each trial gets a root from the OS CSPRNG
        (held in memory only: an argument of the jitted program, never written)."""
        return self.init_keys(jax.random.split(key, self.padded), noise)

    def init_keys(self, keys: jax.Array, noise: str = "seeded") -> Any:
        """`init` from each (padded) trial's own root key. The submissions cap is the state's
        data, not a constant of the chunk's program: runs of any budget whose chunk is as long
        share one program (and its entry in the persistent compilation cache)."""
        state = self._init(keys)._replace(cap=np.full(self.padded, self.cap, np.int32))
        return state if noise == "seeded" else state._replace(noise=secret_keys(self.padded))

    def run_chunk(self, state: Any, retired: np.ndarray | None = None) -> tuple[Any, np.ndarray]:
        mask = np.ones(self.padded, bool)
        mask[: self.trials] = False if retired is None else retired
        # Host arrays (a setting's data) placed as the program returns its state: one compile.
        state = jax.device_put(state, self._sharding)
        # the mask split on the host (a device array would be sliced by a program of its own)
        state, scores = self._run(state, jax.device_put(mask, self._sharding))
        return state, np.asarray(scores)[: self.trials]


def _mean(scores: np.ndarray) -> float | None:
    """The mean return so far (progress): NaN-free mean of the filled scores, None if none."""
    finite = scores[np.isfinite(scores)]
    return float(finite.mean()) if finite.size else None


def run_pgc_a3c(
    config: PGCA3CConfig,
    progress: ProgressFn | bool | None = None,
    devices: int | None = None,
    retire_on_success: bool = False,
    chunk_rounds: int | None = None,
    task: Task | None = None,
    model: nn.Module | None = None,
    out: str | os.PathLike | None = None,
) -> RunOutput:
    """Run `config.trials` independent PGC-A3C trials; returns every score and the ledger.

    With `retire_on_success`, a trial stops once its FST is known (checked between chunks):
    its later agents never run, submit or spend privacy, and their scores are NaN.
    `chunk_rounds` rounds run per jitted call (default: about 20,000 episodes' worth).
    `task` and `model`: your environment and network (`PGCA3C`); default: the config's.
    `out`: write the run directory there, as the CLI's --out (`RunOutput.save`).
    `progress`: a callback `(done, total)`, or True for the CLI's display on stderr.
    """
    check_out_dir(out)
    algo = settings_algorithm([_seeded_by_default(config)], task, model)
    with as_progress(progress, unit="submissions/trial") as shown:
        return save_if_asked(_run_trials(algo, shown, devices, retire_on_success,
                                         chunk_rounds)[0], out)


def run_pgc_a3c_settings(
    configs: Sequence[PGCA3CConfig],
    progress: ProgressFn | None = None,
    devices: int | None = None,
    retire_on_success: bool = False,
    chunk_rounds: int | None = None,
    task: Task | None = None,
    model: nn.Module | None = None,
) -> list[RunOutput]:
    """`run_pgc_a3c` for each of `configs`, all trials of all of them in one jitted program.

    The configs may differ only in `algorithm.SETTING_FIELDS` (ConfigError names another field
    that differs). Each setting's RunOutput equals its own `run_pgc_a3c` (same keys, same
    floats, same retirement checks, its own ledger), except that wall and compile time are the
    program's and `program` says so."""
    algo = PGCA3C.for_settings([_seeded_by_default(c) for c in configs], task, model)
    return _run_trials(algo, progress, devices, retire_on_success, chunk_rounds)


def _seeded_by_default(config: PGCA3CConfig) -> PGCA3CConfig:
    return replace(config, noise=config.noise or "seeded")


def _run_trials(algo: PGCA3C, progress: ProgressFn | None, devices: int | None,
                retire_on_success: bool, chunk_rounds: int | None) -> list[RunOutput]:
    """Every trial of every setting of `algo` (one, or several from `for_settings`), as one
    sharded program advanced chunk by chunk; each setting's ledger is charged for its live
    trials before each chunk releases anything."""
    cfg = algo.config
    settings = algo.settings
    n_set, k = len(settings), cfg.trials
    p, n_sub, t_per_agent = cfg.parallel_agents, cfg.submissions, cfg.submissions_per_agent
    agents_per_trial = math.ceil(n_sub / t_per_agent)
    total_rounds = math.ceil(n_sub / p)

    if cfg.public_eval_every is not None:  # a candidate at the end of every chunk
        chunk_rounds = min(total_rounds, cfg.public_eval_every)
    if algo.episodes.host:  # about 100 episodes per trial between progress updates
        chunk = chunk_rounds or min(total_rounds, max(1, 100 // p))
        runner = ShardedTrials(algo, k, chunk)
        state = runner.init(jax.random.key(cfg.seed), cfg.noise or "seeded")
    else:
        # The chunk of a setting's own run, so retirement is checked where that run checks it.
        chunk = chunk_rounds or _chunk_rounds(total_rounds, p, k)
        # Every trial in blocks of its own run's size, so its floats are that run's.
        own = trial_devices(k, devices)
        runner = ShardedTrials(algo, n_set * k, chunk, devices,
                               trial_group(k, own, cfg.trial_block))
        noise = next((a.config.noise for a in settings if a.config.mechanism != "none"),
                     cfg.noise)
        keys = setting_trial_keys(cfg.seed, k, n_set, runner.padded, devices)
        state = runner.init_keys(keys, noise or "seeded")
        if algo.setting_mechanisms is not None:  # each trial's setting as data
            index = np.repeat(np.arange(n_set), k)
            index = np.concatenate([index, np.zeros(runner.padded - index.size, int)])
            state = state._replace(setting=algo.setting_data(index))

    ledgers = [budget_ledger(a.config) for a in settings]
    candidates = (PublicCandidates(algo.public_returns, cfg.seed, cfg.backoff)
                  if cfg.public_eval_every else None)
    if candidates is not None:
        state = offer_candidates(candidates, state)
    retired = np.zeros(n_set * k, bool)
    scores = np.full((n_set * k, total_rounds * p), np.nan, np.float32)
    start = time.perf_counter()
    compile_s = 0.0
    done_rounds = 0
    while done_rounds < total_rounds and not retired.all():
        lo, hi = done_rounds * p, min((done_rounds + chunk) * p, n_sub)
        # Charge before release: every agent of a running trial that submits in this chunk.
        agents, counts = np.unique(np.arange(lo, hi) // t_per_agent, return_counts=True)
        for s, (setting, ledger) in enumerate(zip(settings, ledgers, strict=True)):
            live = np.flatnonzero(~retired[s * k:(s + 1) * k]).astype(np.int64)
            if live.size:
                ids = (live[:, None] * agents_per_trial + agents[None, :]).reshape(-1)
                ledger.charge(ids, setting.report_guarantee, np.tile(counts, live.size))
        t0 = time.perf_counter()
        state, chunk_scores = runner.run_chunk(state, retired)
        if done_rounds == 0:
            compile_s = time.perf_counter() - t0
        width = min(chunk, total_rounds - done_rounds) * p
        scores[:, lo : lo + width] = chunk_scores[:, :width]
        done_rounds += chunk
        if candidates is not None:
            state = offer_candidates(candidates, state)
        if retire_on_success and cfg.target_score is not None:  # only windows that end in
            # this chunk can be new successes
            filled = min(done_rounds * p, n_sub)
            since = max(0, lo - cfg.score_window + 1)
            fst = first_success_time(scores[:, since:filled], cfg.target_score,
                                     cfg.score_window)
            retired |= np.isfinite(fst)
        if progress is not None:
            filled = min(done_rounds * p, n_sub)
            emit(progress, n_sub if retired.all() else filled, n_sub,
                 mean_return=_mean(scores[:, :filled]),
                 epsilon=max(spent_max(ledger) for ledger in ledgers))
        work_so_far(partial(_outputs, algo, state, scores, ledgers, retired, start, compile_s,
                            runner.devices, agents_per_trial, finished=False,
                            candidates=candidates))
    return _outputs(algo, state, scores, ledgers, retired, start, compile_s, runner.devices,
                    agents_per_trial, finished=True, candidates=candidates)


def _outputs(algo: PGCA3C, state: Any, scores: np.ndarray, ledgers: list[PrivacyLedger],
             retired: np.ndarray, start: float, compile_s: float, devices: Any,
             agents_per_trial: int, finished: bool, candidates: PublicCandidates | None = None
             ) -> list[RunOutput]:
    """Each setting's RunOutput from the trials' state and scores; not `finished` (a run that
    failed: `output.keeping_work`), the work so far, its ledger counting every release made.
    `candidates` (--public-eval-every): the final policy is each trial's best candidate."""
    cfg, settings = algo.config, algo.settings
    n_set, k, n_sub = len(settings), cfg.trials, cfg.submissions
    wall = time.perf_counter() - start
    submitted = np.asarray(state.submitted)[: n_set * k]
    theta = np.asarray(state.agg.theta if candidates is None else candidates.best.best[0]
                       )[: n_set * k]
    levers = lever_record(algo, state, candidates, n_set * k)
    if finished and not np.all(submitted[~retired] == n_sub):
        raise RuntimeError(f"internal error: trials submitted {submitted}, expected {n_sub}")
    program = None if n_set == 1 else {"settings": n_set, "trials": n_set * k,
                                       "episodes": int(submitted.sum())}
    # the settings share their task and seed: one random baseline for all of them (a
    # finished run's; work kept after a failure plays no more)
    baseline = random_baseline(algo.task, k * final_window(cfg), cfg.seed) if finished else None
    outputs = []
    for s, (setting, ledger) in enumerate(zip(settings, ledgers, strict=True)):
        own = slice(s * k, (s + 1) * k)
        if finished and ledger.num_reports != int(submitted[own].sum()):
            raise RuntimeError("internal error: the ledger and the submissions disagree")
        outputs.append(RunOutput(
            config=setting.config, scores=scores[own, :n_sub], submitted=submitted[own],
            ledger=ledger, mechanism=mechanism_record(setting.mechanism, setting.dim),
            wall_seconds=wall,
            compile_seconds=compile_s, devices=devices,
            agents_per_trial=agents_per_trial, theta=theta[own], program=program,
            levers=levers,
            baseline=baseline,
            policy=saved_policy("pgc-a3c", setting.model, setting.task, "logits,value",
                                theta[own], setting.config.max_episode_steps)))
    return outputs


def offer_candidates(candidates: PublicCandidates, state: Any) -> Any:
    """Offer the aggregator's θs as best candidates (`--public-eval-every`: the task's public
    simulator, privrl.federation.adapt.PublicCandidates); a collapsed trial reverts to its
    best θ and optimizer state, its step lowered and its buffer emptied."""
    agg = state.agg
    reverted = candidates.offer(agg.theta, agg.opt_state)
    if reverted is None:
        return state
    theta, opt, collapsed = reverted
    buffer = np.where(collapsed[:, None], 0.0, np.asarray(agg.buffer_sum))
    count = np.where(collapsed, 0, np.asarray(agg.count))
    agg = agg._replace(theta=theta, opt_state=opt, buffer_sum=buffer.astype(np.float32),
                       count=count.astype(np.int32))
    return state._replace(agg=jax.tree_util.tree_map(jax.numpy.asarray, agg))


def lever_record(algo: PGCA3C, state: Any, candidates: PublicCandidates | None, n: int
                 ) -> dict[str, Any] | None:
    """What the adaptive levers set and did (summary.json and privacy.json), or None."""
    cfg = algo.config
    if not (cfg.adaptive_clip or cfg.step_from_noise or candidates is not None
            or cfg.episodes_per_report > 1):
        return None
    out: dict[str, Any] = {}
    if cfg.episodes_per_report > 1:
        out["episodes_per_report"] = {
            "episodes": cfg.episodes_per_report,
            "note": "each report is the mean gradient of the agent's own episodes: one release"}
    if cfg.step_from_noise:
        out["step_from_noise"] = {"learning_rate": cfg.learning_rate,
                                  "step_size": algo.step_size}
    if cfg.adaptive_clip:
        eps_update, eps_bit = cfg.release_epsilons()
        out["adaptive_clip"] = {
            "initial_clip": cfg.clip, "quantile": cfg.clip_quantile, "lr": cfg.clip_lr,
            "epsilon_update_per_report": eps_update, "epsilon_clip_bit_per_report": eps_bit,
            "final_clip": [float(cfg.clip * c) for c in np.asarray(state.clip_scale)[:n]]}
    if candidates is not None:
        out["public_candidates"] = public_candidates_record(
            candidates.best, algo.task.name, "no exploration", cfg.public_eval_episodes,
            cfg.public_eval_every, n)
    return out


def one_trial_output(config: PGCA3CConfig, scores: np.ndarray, ledger: PrivacyLedger,
                     wall_seconds: float, devices: Any, theta: np.ndarray) -> RunOutput:
    """A Ray or Flower run's one trial as the local runner's RunOutput (`scores` (1, n), NaN
    where no submission was accepted; θ the final policy), so every runtime writes the same
    files."""
    algo = PGCA3C(config)
    theta = np.asarray(theta)[None]
    return RunOutput(config=config, scores=scores,
                     submitted=np.array([int(np.isfinite(scores).sum())]), ledger=ledger,
                     mechanism=mechanism_record(algo.mechanism, algo.dim),
                     wall_seconds=wall_seconds, compile_seconds=0.0, devices=devices,
                     agents_per_trial=math.ceil(config.submissions
                                                / config.submissions_per_agent),
                     theta=theta,
                     policy=saved_policy("pgc-a3c", algo.model, algo.task, "logits,value",
                                         theta, config.max_episode_steps),
                     baseline=random_baseline(algo.task, final_window(config), config.seed))


# --- what a run reports ----------------------------------------------------------------------
def final_window(config: PGCA3CConfig) -> int:
    """The submissions per trial whose scores are the run's final ones: the last tenth."""
    return max(1, config.submissions // 10)


def final_scores(out: RunOutput) -> np.ndarray:
    """Every trial's last `final_window` scores (of those it made), in one array."""
    tail = final_window(out.config)
    return np.concatenate([out.scores[k, max(0, n - tail):n].astype(np.float64)
                           for k, n in enumerate(out.submitted)])


def summarize(out: RunOutput, runtime: str = "local") -> dict[str, Any]:
    """summary.json: the paper's metrics for this run (FST per trial, median, success ratio;
    None on a task without a target, which reports its scores only)."""
    cfg = out.config
    scores = out.scores.astype(np.float64)  # means in float64 (CartPole: as of integers)
    success: dict[str, Any] = {"median_fst": None, "success_ratio": None, "fst": None,
                               "success_ratio_auc": None}
    if cfg.target_score is not None:
        fst = first_success_time(scores, cfg.target_score, cfg.score_window)
        success = {"median_fst": median_fst(fst),
                   "success_ratio": float(np.mean(np.isfinite(fst))),
                   "fst": [int(f) if np.isfinite(f) else None for f in fst],
                   "success_ratio_auc": float(success_ratio_curve(fst, cfg.submissions).mean())}
    tail = final_window(cfg)
    episodes = int(out.submitted.sum()) if out.program is None else out.program["episodes"]
    return {
        "algorithm": "pgc-a3c",
        "preset": cfg.preset,
        "mechanism": cfg.mechanism,
        "epsilon": cfg.epsilon,
        **declared_summary(cfg.mechanism),
        "upload_bytes_per_report": out.mechanism["upload_bytes_per_report"],
        "privacy": headline(privacy_facts(out, runtime)),
        **noise_summary(noise_mode(cfg.mechanism, cfg.noise, cfg.secure_noise)),
        "trials": cfg.trials,
        "submissions": cfg.submissions,
        "target_score": cfg.target_score,
        "score_window": cfg.score_window,
        **success,
        "mean_score": float(scores[np.isfinite(scores)].mean()),
        "final_mean_score": float(np.mean([scores[k, max(0, n - tail):n].mean()
                                           for k, n in enumerate(out.submitted)])),
        "final_window": tail,
        **({} if (v := out.verdict()) is None else v.fields()),
        "wall_seconds": round(out.wall_seconds, 2),
        "compile_seconds": round(out.compile_seconds, 2),
        "episodes_per_second": round(episodes / max(out.wall_seconds, 1e-9), 1),
        "submitted_per_trial": [int(n) for n in out.submitted],
        "devices": out.devices,
        **({} if out.levers is None else {"levers": out.levers}),
        **({} if out.program is None else {"one_program": {
            **out.program, "note": "this setting ran in one program with the others; wall, "
                                   "compile time and episodes per second are that program's"}}),
    }


# What a report is the gradient of, by the config's `critic` (privacy.json's releases).
REPORTED = {"shared": "its clipped A3C gradient",
            "none": "its clipped policy gradient (critic none: the network is the policy "
                    "alone)"}


def privacy_facts(out: RunOutput, runtime: str = "local") -> Facts:
    """What privacy.json states, as facts (privrl.privacy.record composes the prose): each
    agent's reports over the run in the composition the ledger enforces, the other beside it,
    one report's ε labelled per release, and the shuffle's central account."""
    cfg = out.config
    reports = out.ledger.summary()["reports_per_agent"]["max"]
    noise = noise_mode(cfg.mechanism, cfg.noise, cfg.secure_noise)
    if not (math.isfinite(cfg.epsilon) and reports > 0):
        return Facts(None, "non-private baseline (ε = ∞); raw gradients released", noise=noise,
                     runtime=runtime)
    plan = cfg.privacy_plan()
    eps0, delta0 = plan.epsilon_per_report, plan.delta_per_report
    composed = pure_composition_record(eps0, reports, cfg.delta, cfg.budget_composition, delta0)
    claim, also, budget = pure_ldp(composed, "local, untrusted aggregator",
                                   "all of one agent's reports",
                                   "the ledger refuses a report beyond it", cfg.epsilon)
    shuffled = shuffle_account(out) if cfg.shuffle else None
    return Facts(
        claim, releases=Releases("each agent", REPORTED[cfg.critic], f"the "
                                 f"{cfg.mechanism} mechanism", reports, eps0, delta0),
        also=also, budget=budget,
        shuffle=None if shuffled is None else CentralShuffle.of(shuffled, "aggregator"),
        trust=Trust("nobody but the agent itself (local DP)", "the aggregator's updates"),
        condition=declared_condition(cfg.mechanism) or generator_condition(cfg.mechanism),
        noise=noise, declared_by=declared_by(cfg.mechanism), runtime=runtime,
        audit=out.mechanism.get("params", {}).get("quick_audit"))


def privacy_record(out: RunOutput, runtime: str = "local") -> dict[str, Any]:
    """privacy.json: the composed statement, the mechanism, its parameters, the ledger's
    per-agent composition, and both compositions of an agent's reports (basic: pure ε;
    optimal: (ε, δ) at the config's δ), saying which one the ledger enforces."""
    cfg = out.config
    reports = out.ledger.summary()["reports_per_agent"]["max"]
    private = math.isfinite(cfg.epsilon) and reports > 0
    plan = cfg.privacy_plan()
    eps0 = plan.epsilon_per_report
    composed = (pure_composition_record(eps0, reports, cfg.delta, cfg.budget_composition,
                                        plan.delta_per_report) if private else None)
    shuffled = shuffle_account(out) if private and cfg.shuffle else None
    return build_privacy_record(privacy_facts(out, runtime), mechanism=out.mechanism,
                                ledger=out.ledger,
                                fields={
        "submissions_per_agent": cfg.submissions_per_agent,
        "epsilon_per_agent": cfg.epsilon,
        "epsilon_per_report": eps0,
        "agents_per_trial": out.agents_per_trial,
        "agent_ids": "trial * agents_per_trial + index of the agent within its trial",
        "per_agent_composition": composed,
        **({} if out.levers is None else {"adaptive_levers": {
            **out.levers, "note": "adaptive_clip's bit is part of each report's release (its ε "
            "and the gradient's sum to epsilon_per_report, what the ledger charges); "
            + LEVERS_NOTE}}),
        **({} if shuffled is None else {"shuffle": shuffled}),
        **noise_fields(noise_mode(cfg.mechanism, cfg.noise, cfg.secure_noise))})


def shuffle_account(out: RunOutput) -> dict[str, Any]:
    """The shuffle model's central account: each report is shuffled among its round's reports
    (P, or fewer in a last partial round: the smallest batch any report was in counts); an
    agent's T reports are in T different batches."""
    cfg = out.config
    p = cfg.parallel_agents
    smallest = p
    for done in np.asarray(out.submitted).reshape(-1):
        if int(done) % p:
            smallest = min(smallest, int(done) % p)
    return shuffle_record(float(out.mechanism["epsilon"]), smallest, cfg.shuffle_delta,
                          batches=cfg.submissions_per_agent)


def record(out: RunOutput, files: dict[str, Any] | None = None,
           runtime: str = "local") -> RunRecord:
    """What a run leaves behind: its summary, privacy record, scores table and score plot;
    `runtime` where its parties ran (privacy.json's trust domain)."""
    cfg = out.config
    privacy = ("no privacy (mechanism none)" if math.isinf(cfg.epsilon)
               or cfg.mechanism == "none" else f"{cfg.mechanism}, ε = {cfg.epsilon:g} per agent")
    title = plot_title("PGC-A3C", cfg.env, f"{privacy}; {cfg.preset} preset, "
                       f"|B| = {cfg.buffer_size}", out.policy)
    v = out.verdict()
    return RunRecord(
        "pgc-a3c", cfg.to_dict(), cfg.seed, summarize(out, runtime),
        privacy_record(out, runtime),
        metrics=lambda p: write_metrics_csv(p, out.scores, out.submitted, cfg.score_window),
        plots={"scores.png": lambda p: plot_scores(p, out.scores, out.submitted,
                                                   cfg.score_window, title, cfg.target_score,
                                                   None if v is None else v.random)},
        run_info={"devices": out.devices}, files=files or {}, policy=out.policy,
        runtime=runtime)


def save(out: RunOutput, path: Path, command: list[str] | None = None,
         files: dict[str, Any] | None = None, runtime: str = "local") -> dict[str, Any]:
    """Write config.json, metrics.csv, privacy.json, summary.json, policy.npz,
    plots/scores.png and any extra JSON `files` (a Ray run's ray.json)."""
    return save_run(record(out, files, runtime), path, command)


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The results table a run's summary reads as: (metric, value) rows."""
    fst = summary["median_fst"]
    rows = [
        ("privacy", summary["privacy"]),
        *([("noise keys", summary["noise"])] if "noise" in summary else []),
        ("preset", summary["preset"]),
        ("mechanism", summary["mechanism"]),
        ("trials × submissions", f"{summary['trials']} × {summary['submissions']}"),
        *(() if summary["target_score"] is None else (
            (f"median FST (μ ≥ {summary['target_score']:g})",
             "not reached" if fst is None else f"{fst:g}"),
            ("success ratio", f"{summary['success_ratio']:.2f}"),
            ("success-ratio AUC (normalized)", f"{summary['success_ratio_auc']:.3f}"))),
        ("mean score, all submissions", f"{summary['mean_score']:.1f}"),
        (f"mean score, last {summary['final_window']}", f"{summary['final_mean_score']:.1f}"),
        *(verdict_rows(summary) if "learned" in summary else ()),
        ("wall time", f"{summary['wall_seconds']:.1f} s" + (
            f" (first chunk incl. compile {summary['compile_seconds']:.1f} s)"
            if summary["compile_seconds"] else "")),
        ("episodes / s",
         f"{summary['episodes_per_second']:,.0f} on {summary['devices']} device(s)"),
    ]
    return rows


def target_note(config: PGCA3CConfig) -> str | None:
    """The line that says what the FST counts on a task other than CartPole (None on it), or
    that the task has no target (no FST or success ratio). `config`: the run's (resolved)."""
    if config.target_score is None:
        return (f"{config.env} states no target return: the scores are its returns, with no "
                "FST or success ratio; set --target-return for them (docs/environments.md)")
    if config.env is None or config.env.endswith(":CartPole-v1"):
        return None
    return (f"the score is the episode's return on {config.env}; the FST and success ratio "
            f"count the mean of {config.score_window} consecutive returns reaching "
            f"{config.target_score:g} (docs/environments.md)")


def replay_run(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """A Ray run's θ rebuilt from its aggregator's accepted-report log, and its saved final θ
    (same dtype and shape, else a RunFileError). A pickled (older) run or a directory that is
    no Ray run is refused naming RUN_DIR; nothing in it is executed."""
    from privrl.config import ConfigError
    from privrl.federation.service import SETUP, replay
    from privrl.runfile import read_npy

    log_dir = run_dir / "aggregator"
    if (log_dir / "service.pkl").is_file() and not (log_dir / SETUP).is_file():
        raise ConfigError("RUN_DIR", f"{run_dir} was written by an older privrl as pickles, "
                                     "which are refused (loading one can run code)")
    if not (log_dir / SETUP).is_file() or not (run_dir / "theta_final.npy").is_file():
        raise ConfigError("RUN_DIR", f"{run_dir} is not a Ray run directory (no "
                                     f"aggregator/{SETUP} or theta_final.npy)")
    theta = replay(log_dir)  # a bad run file raises RunFileError: one line, exit 2
    # read only if it declares the run's θ's dtype and shape; no link followed
    return theta, read_npy(run_dir / "theta_final.npy", theta.dtype, theta.shape)
