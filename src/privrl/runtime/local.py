"""The local runner: all trials of a run in one jitted program, sharded over host devices.

Rounds are run in chunks (a jitted `lax.scan` of rounds per chunk) so that the host can show
progress, charge the privacy ledger before each chunk releases anything, and collect scores.
Trials are independent, so they are split over the host's XLA devices with `shard_map`
(one device per core; see privrl.runtime.devices).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from privrl.algorithms.pgc_a3c import PGCA3C, PGCA3CConfig
from privrl.metrics import first_success_time, median_fst, success_ratio_curve
from privrl.privacy.ledger import PrivacyLedger
from privrl.results import plot_scores, versions, write_json, write_metrics_csv

ProgressFn = Callable[[int, int], None]  # (submissions done per trial, total)


@dataclass
class RunOutput:
    config: PGCA3CConfig
    scores: np.ndarray  # (trials, submissions) int32: the score of every submission
    ledger: PrivacyLedger
    mechanism: dict[str, Any]
    wall_seconds: float
    compile_seconds: float
    devices: int
    agents_per_trial: int


def _chunk_rounds(total_rounds: int, parallel_agents: int, trials: int) -> int:
    """Rounds per jitted chunk: about 20k episodes, so progress updates every second or so."""
    per_round = max(1, parallel_agents * trials)
    return int(min(total_rounds, max(10, 20_000 // per_round)))


class ShardedTrials:
    """`trials` independent trials of `algo`, vmapped and split over host devices.

    `run_chunk(state)` advances every trial by `chunk` rounds in one jitted call and returns
    (state, scores) with scores of shape (padded trials, chunk * P). Trials are padded to a
    multiple of the device count; callers drop the padding rows.
    """

    def __init__(self, algo: PGCA3C, trials: int, chunk: int, devices: int | None = None):
        n_dev = min(devices or jax.local_device_count(), jax.local_device_count(), trials)
        self.devices = n_dev
        self.padded = math.ceil(trials / n_dev) * n_dev
        mesh = Mesh(np.array(jax.local_devices()[:n_dev]), ("trials",))
        spec = PartitionSpec("trials")
        shard = lambda f: jax.shard_map(  # noqa: E731 - trials are independent: no collectives
            f, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False
        )
        self.run_chunk = jax.jit(shard(jax.vmap(lambda s: algo.run_rounds(s, chunk))))
        self._init = jax.jit(shard(jax.vmap(algo.init)))

    def init(self, key: jax.Array) -> Any:
        return self._init(jax.random.split(key, self.padded))


def run_pgc_a3c(
    config: PGCA3CConfig, progress: ProgressFn | None = None, devices: int | None = None
) -> RunOutput:
    """Run `config.trials` independent PGC-A3C trials; returns every score and the ledger."""
    algo = PGCA3C(config)
    cfg = algo.config
    p, n_sub, t_per_agent = cfg.parallel_agents, cfg.submissions, cfg.submissions_per_agent
    agents_per_trial = math.ceil(n_sub / t_per_agent)
    total_rounds = math.ceil(n_sub / p)

    chunk = _chunk_rounds(total_rounds, p, cfg.trials)
    runner = ShardedTrials(algo, cfg.trials, chunk, devices)
    state = runner.init(jax.random.key(cfg.seed))
    n_dev = runner.devices

    ledger = PrivacyLedger(epsilon_budget=cfg.epsilon)
    guarantee = algo.mechanism.guarantee
    trial_offset = np.arange(cfg.trials, dtype=np.int64)[:, None] * agents_per_trial

    scores = np.full((cfg.trials, total_rounds * p), -1, np.int32)
    start = time.perf_counter()
    compile_s = 0.0
    done_rounds = 0
    while done_rounds < total_rounds:
        lo, hi = done_rounds * p, min((done_rounds + chunk) * p, n_sub)
        if hi > lo:
            # Charge before release: every agent that submits in this chunk, all trials at once.
            sub = np.arange(lo, hi)
            agents, counts = np.unique(sub // t_per_agent, return_counts=True)
            ids = (trial_offset + agents[None, :]).reshape(-1)
            ledger.charge(ids, guarantee, np.tile(counts, cfg.trials))
        t0 = time.perf_counter()
        state, chunk_scores = runner.run_chunk(state)
        chunk_scores = np.asarray(chunk_scores)[: cfg.trials]
        if done_rounds == 0:
            compile_s = time.perf_counter() - t0
        width = min(chunk, total_rounds - done_rounds) * p
        scores[:, done_rounds * p : done_rounds * p + width] = chunk_scores[:, :width]
        done_rounds += chunk
        if progress is not None:
            progress(min(done_rounds * p, n_sub), n_sub)
    submitted = np.asarray(state.submitted)[: cfg.trials]
    if not np.all(submitted == n_sub):
        raise RuntimeError(f"internal error: trials submitted {submitted}, expected {n_sub}")
    return RunOutput(
        config=cfg,
        scores=scores[:, :n_sub],
        ledger=ledger,
        mechanism=algo.mechanism.describe(),
        wall_seconds=time.perf_counter() - start,
        compile_seconds=compile_s,
        devices=n_dev,
        agents_per_trial=agents_per_trial,
    )


# --- what a run reports ----------------------------------------------------------------------
def summarize(out: RunOutput) -> dict[str, Any]:
    """summary.json: the paper's metrics for this run (FST per trial, median, success ratio)."""
    cfg = out.config
    fst = first_success_time(out.scores, cfg.target_score, cfg.score_window)
    curve = success_ratio_curve(fst, cfg.submissions)
    tail = max(1, cfg.submissions // 10)
    private = out.ledger.summary()["formal_guarantee"]
    return {
        "algorithm": "pgc-a3c",
        "preset": cfg.preset,
        "mechanism": cfg.mechanism,
        "epsilon": cfg.epsilon,
        "privacy": (f"ε-LDP per agent, ε = {cfg.epsilon:g}" if private
                    else "NONE: non-private baseline (ε = ∞), no privacy guarantee"),
        "trials": cfg.trials,
        "submissions": cfg.submissions,
        "median_fst": median_fst(fst),
        "success_ratio": float(np.mean(np.isfinite(fst))),
        "fst": [int(f) if np.isfinite(f) else None for f in fst],
        "success_ratio_auc": float(curve.mean()),
        "mean_score": float(out.scores.mean()),
        "final_mean_score": float(out.scores[:, -tail:].mean()),
        "final_window": tail,
        "wall_seconds": round(out.wall_seconds, 2),
        "compile_seconds": round(out.compile_seconds, 2),
        "episodes_per_second": round(out.scores.size / max(out.wall_seconds, 1e-9), 1),
        "devices": out.devices,
    }


def privacy_record(out: RunOutput) -> dict[str, Any]:
    """privacy.json: the mechanism, its parameters, and the ledger's per-agent composition."""
    cfg = out.config
    ledger = out.ledger.summary()
    if ledger["formal_guarantee"]:
        statement = (
            f"Every agent's reports together satisfy {cfg.epsilon:g}-LDP "
            f"({cfg.submissions_per_agent} report(s) of ε = "
            f"{cfg.epsilon / cfg.submissions_per_agent:g} each, basic composition); "
            "the aggregator's updates are post-processing of the reports."
        )
    else:
        statement = "NO PRIVACY GUARANTEE: non-private baseline (ε = ∞); raw gradients released."
    return {
        "statement": statement,
        "mechanism": out.mechanism,
        "submissions_per_agent": cfg.submissions_per_agent,
        "epsilon_per_agent": cfg.epsilon,
        "epsilon_per_report": cfg.epsilon / cfg.submissions_per_agent,
        "agents_per_trial": out.agents_per_trial,
        "agent_ids": "trial * agents_per_trial + index of the agent within its trial",
        "ledger": ledger,
    }


def save(out: RunOutput, path: Path, command: list[str] | None = None) -> dict[str, Any]:
    """Write config.json, metrics.csv, privacy.json, summary.json and plots/scores.png."""
    cfg = out.config
    summary = summarize(out)
    write_json(path / "config.json", {
        "algorithm": "pgc-a3c",
        "config": cfg.to_dict(),
        "seed": cfg.seed,
        "devices": out.devices,
        "command": command,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
    })
    write_metrics_csv(path / "metrics.csv", out.scores, cfg.score_window)
    write_json(path / "privacy.json", privacy_record(out))
    write_json(path / "summary.json", summary)
    eps = "∞ (non-private)" if math.isinf(cfg.epsilon) else f"{cfg.epsilon:g}"
    plot_scores(path / "plots" / "scores.png", out.scores, cfg.score_window,
                f"PGC-A3C ({cfg.preset} preset), {cfg.mechanism}, ε = {eps}, "
                f"|B| = {cfg.buffer_size}",
                cfg.target_score)
    return summary
