"""The local runner for paper 003's episodic learners (REINFORCE, DQN): seeds vmapped and split
over host devices, episodes chained by `lax.scan` in jitted chunks, then the results directory.

An algorithm here is any object with `config` (an EpisodicConfig), `init(key) -> state` and
`episode(state) -> (state, EpisodeMetrics)`, whose state has a `stopped` flag, `updates` and
`progress.solved_at`. The host stops as soon as every seed has stopped (solved, episode cap, or
the max_epsilon update cap). An algorithm whose `task` rolls out on the host (a Gymnasium
task) plays its `episode(state)` there (its episode source, privrl.systems.dpsgd_rl.source),
for each seed in turn (`host_scan`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privrl.compute.sharding import (
    host_scan,
    in_blocks,
    own_padded,
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
    csv_writer,
    hold_last,
    plot_curves,
    plot_title,
    save_if_asked,
    work_so_far,
)
from privrl.output import save as save_run
from privrl.policy import SavedPolicy
from privrl.privacy.noise import noise_fields, record_mode, secret_keys, summary_note
from privrl.privacy.record import COMPOSED, SPREAD_ACCOUNTING, Claim, Facts, Releases, Trust
from privrl.privacy.record import privacy_record as build_privacy_record
from privrl.progress import as_progress, emit

ProgressFn = Callable[[int, int], None]  # (episodes done, total)


@dataclass
class EpisodicOutput(SavesRunDir):
    algorithm: str
    config: Any
    train_returns: np.ndarray  # (seeds, episodes) float; NaN after a seed stopped
    eval_returns: np.ndarray  # (seeds, episodes)
    updates: np.ndarray  # (seeds,) model updates made
    solved_at: np.ndarray  # (seeds,) training episodes until solved; -1 if never
    update_cap: int  # updates max_epsilon allows
    privacy: dict[str, Any]
    wall_seconds: float
    devices: int
    # Run as one program with other settings (`run_episodic_settings`): how many settings and
    # seeds that program ran (wall_seconds is the program's); None: on its own.
    program: dict[str, int] | None = None
    policy: SavedPolicy | None = None  # policy.npz: each seed's final θ, the model described
    # a uniform-random policy's returns on the run's task (privrl.evaluation.random_baseline)
    baseline: np.ndarray | None = None
    # --public-eval-every: what the best-candidate lever set and did (summary.json and
    # privacy.json), and the final policy's (each seed's best candidate's) FINAL_EVALS greedy
    # returns on the public simulator, with keys the choice never saw (seeds, FINAL_EVALS)
    levers: dict[str, Any] | None = None
    final_returns: np.ndarray | None = None

    def record(self) -> RunRecord:
        return record(self)

    def verdict(self) -> Verdict | None:
        """Each seed's last FINAL_EVALS evaluation returns against the random baseline (with
        --public-eval-every: the final policy's, the best candidate's, fresh returns)."""
        if self.baseline is None:
            return None
        finals = (final_evals(self.eval_returns) if self.final_returns is None
                  else self.final_returns.reshape(-1).astype(np.float64))
        return verdict(finals, self.baseline)


def run_episodic(algo: Any, name: str, progress: ProgressFn | bool | None = None,
                 devices: int | None = None, chunk: int = 50, compact: bool = True,
                 out: str | os.PathLike | None = None) -> EpisodicOutput:
    """Run `algo.config.seeds` seeds of one algorithm; returns their curves and privacy record.
    `out`: write the run directory there, as the CLI's --out (`EpisodicOutput.save`);
    `progress`: a callback `(done, total)`, or True for the CLI's display on stderr."""
    check_out_dir(out)
    with as_progress(progress, unit="episodes") as shown:
        return save_if_asked(run_episodic_settings(algo, [name], shown, devices, chunk,
                                                   compact)[0], out)


def run_episodic_settings(algo: Any, names: Sequence[str], progress: ProgressFn | None = None,
                          devices: int | None = None, chunk: int = 50, compact: bool = True
                          ) -> list[EpisodicOutput]:
    """`run_episodic` for each of `algo.settings` (one, or several from `for_settings`), every
    seed of every setting in one sharded program (named `names`). Each setting's output
    equals its own run's (same keys, same floats, its curves up to where its own run stops,
    its own privacy record), except that wall time is the program's.

    `compact`: once at most half of the batch still runs (and that frees at least
    COMPACT_MIN_ROWS rows), the running seeds continue in a smaller batch (`_compact`): a
    stopped seed costs a full share of every step in the batch it is in.
    """
    cfg = algo.config
    settings = getattr(algo, "settings", [algo])
    if len(names) != len(settings):
        raise ValueError(f"{len(names)} names for {len(settings)} settings")
    n_set, k = len(settings), cfg.seeds
    task = getattr(algo, "task", None)
    host_rollout = task is not None and task.host
    if host_rollout:  # a Gymnasium task: episodes played on the host
        if n_set > 1:
            raise ValueError("settings run as one program need a gymnax task")
        n_dev, padded, chunk = 1, k, max(1, min(chunk, cfg.episodes, 10))
        init = jax.jit(jax.vmap(algo.init))
    if getattr(cfg, "public_eval_every", None) is not None:  # candidates between chunks
        chunk, compact = cfg.public_eval_every, False  # rows stay the trials (BestCandidates)
    if host_rollout:
        step = host_scan(algo.episode, chunk)
    else:
        chunk = max(1, min(chunk, cfg.episodes))
        n_dev = trial_devices(n_set * k, devices)
        padded = -(-n_set * k // n_dev) * n_dev
        # float-safe noise drawn inside a while_loop (DQN's steps, any LDP observation) cannot
        # be vmapped over seeds: run them one after another (the results do not depend on it)
        host_in_loop = cfg.obs.secure or (cfg.secure_noise
                                          and getattr(algo, "noise_in_loop", False))
        if getattr(algo, "setting_params", None) and not host_in_loop:
            # Every trial's episode in blocks of its own run's seeds per device, behind
            # optimization barriers (`in_blocks`): XLA CPU compiles the updates differently by
            # batch size, so a seed gets its own run's floats only in a block of that run's
            # size. Each block's loop also stops at its own longest episode, not the batch's.
            block = own_padded(k, devices) // trial_devices(k, devices)
            episodes = in_blocks(jax.vmap(algo.episode), block)

            def run_chunk(state: Any) -> tuple[Any, Any]:
                state, m = jax.lax.scan(lambda s, _: episodes(s), state, None, length=chunk)
                return state, jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), m)

            step = jax.jit(shard_vmap(run_chunk, n_dev, batched=True))
        else:
            def run_chunk(state: Any) -> tuple[Any, Any]:
                return jax.lax.scan(lambda s, _: algo.episode(s), state, None, length=chunk)

            step = jax.jit(shard_vmap(run_chunk, n_dev, sequential=host_in_loop))
        init = jax.jit(shard_vmap(algo.init, n_dev))
    start = time.perf_counter()
    state = init(jax.random.split(jax.random.key(cfg.seed), padded) if n_set == 1
                 else setting_trial_keys(cfg.seed, k, n_set, padded, devices))
    if cfg.noise == "secret":  # one root per seed and mechanism, in memory only
        private = any(a.config.private for a in settings)
        observed = any(a.config.obs.mechanism() is not None for a in settings)
        state = state._replace(noise=secret_keys(padded) if private else None,
                               obs_noise=secret_keys(padded) if observed else None)
    if getattr(algo, "setting_params", None):  # trials carry their setting as data
        index = np.repeat(np.arange(n_set), k)
        index = np.concatenate([index, np.zeros(padded - index.size, int)])
        state = jax.device_put(state._replace(setting=algo.setting_data(index)),
                               trial_sharding(n_dev))
    n = n_set * k
    candidates = (PublicCandidates(algo.public_returns, cfg.seed, cfg.backoff)
                  if getattr(cfg, "public_eval_every", None) is not None else None)
    placing = None if host_rollout else trial_sharding(n_dev)
    if candidates is not None:  # the start: the best is never below it
        state = offer_candidates(candidates, state, placing)
    width = -(-cfg.episodes // chunk) * chunk
    train = np.full((n, width), np.nan, np.float32)  # NaN: the seed had stopped
    evals = np.full((n, width), np.nan, np.float32)
    updates_all, solved_all = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    thetas = np.zeros((n, settings[0].model.dim), np.float32)  # each trial's latest θ
    clips: np.ndarray | None = np.zeros(n, np.float32)
    stopped = np.zeros(n, bool)
    trial = np.arange(padded)  # the trial each row of the batch holds (>= n: padding)
    done = 0
    ends = np.zeros(n_set, int)  # episodes each setting's own run plays (whole chunks)
    @lru_cache(maxsize=1)
    def spent(updates: int) -> float | None:
        """For progress: the model's ε spent after `updates` (the privacy record's account;
        one setting's: a program of several states none)."""
        private = n_set == 1 and cfg.private
        return cfg.accountant_for(updates).epsilon(cfg.delta) if private else None

    while done < cfg.episodes:
        state, m = step(state)
        real = trial < n
        ours = trial[real]
        train[ours, done:done + chunk] = np.asarray(m.train_return)[real]
        evals[ours, done:done + chunk] = np.asarray(m.eval_return)[real]
        updates_all[ours] = np.asarray(state.updates)[real]
        solved_all[ours] = np.asarray(state.progress.solved_at)[real]
        stopped[ours] = np.asarray(state.stopped)[real]
        thetas[ours] = np.asarray(state.theta)[real]  # before compaction drops stopped rows
        if getattr(state, "clip", None) is not None:  # --adaptive-clip's current clips
            clips[ours] = np.asarray(state.clip)[real]
        done += chunk
        by_setting = stopped.reshape(n_set, k)
        ends[(ends == 0) & by_setting.all(1)] = done
        if progress is not None:
            seen = train[:n, :done]
            emit(progress, cfg.episodes if stopped.all() else min(done, cfg.episodes),
                 cfg.episodes, mean_return=(float(np.nanmean(seen)) if np.isfinite(seen).any()
                                            else None),
                 epsilon=spent(int(updates_all.max())))
        work_so_far(partial(_outputs, settings, names, k, train, evals, updates_all,
                            solved_all, thetas, ends.copy(), done, start, n_dev))
        if stopped.all():
            break
        if candidates is not None:
            state = offer_candidates(candidates, state, placing)
        if compact and not host_rollout:
            state, trial = _compact(state, trial, stopped, n_dev)
    if candidates is not None:
        offer_candidates(candidates, state, placing)  # the last θs are candidates too
        thetas = np.asarray(candidates.best.best[0][:n], np.float32)  # each trial's best
    outs = _outputs(settings, names, k, train, evals, updates_all, solved_all, thetas, ends,
                    done, start, n_dev, with_baseline=True)
    levers = lever_record(algo, candidates, clips, n)
    if levers is not None:  # a run with a lever on runs alone: one output
        outs[0].levers = levers
        outs[0].privacy["levers"] = {**levers, "note": LEVERS_NOTE}
    if candidates is not None:
        outs[0].final_returns = final_policy_returns(algo, thetas)
    return outs


# Folded into the run's seed for the final policy's own evaluation: keys neither training nor
# the best-candidate choice (privrl.federation.adapt.PUBLIC_EVAL_SALT) uses.
FINAL_EVAL_SALT = 0xF1A1


def offer_candidates(candidates: PublicCandidates, state: Any, sharding: Any) -> Any:
    """Offer every trial's θ as a best candidate (`--public-eval-every`: the task's public
    simulator, privrl.federation.adapt.PublicCandidates); a collapsed trial reverts to its
    best θ and optimizer state (and target network) with its step lowered."""
    # DQN's target network is restored with its θ (a collapsed target would pull it back)
    target = getattr(state, "target", None)
    reverted = candidates.offer_with(np.asarray(state.theta),
                                     jax.tree_util.tree_map(np.asarray, state.opt_state),
                                     None if target is None else np.asarray(target))
    if reverted is None:
        return state
    theta, opt, target, _ = reverted
    state = state._replace(theta=jnp.asarray(theta),
                           opt_state=jax.tree_util.tree_map(jnp.asarray, opt))
    if target is not None:
        state = state._replace(target=jnp.asarray(target))
    return state if sharding is None else jax.device_put(state, sharding)


def final_policy_returns(algo: Any, thetas: np.ndarray) -> np.ndarray:
    """The policies `thetas` (trials, d): FINAL_EVALS greedy returns each on the public
    simulator, with keys the best-candidate choice never used (so its selection does not
    inflate them), the same for every run of the seed."""
    key = jax.random.fold_in(jax.random.key(algo.config.seed), FINAL_EVAL_SALT)
    return algo.public_returns(jnp.asarray(thetas), key, FINAL_EVALS)


def lever_record(algo: Any, candidates: PublicCandidates | None, clips: np.ndarray | None,
                 n: int) -> dict[str, Any] | None:
    """What the adaptive levers set and did for the first `n` trials (summary.json and
    privacy.json), or None when none is on."""
    cfg = algo.config
    out: dict[str, Any] = {}
    if getattr(cfg, "adaptive_clip", False) and clips is not None:
        out["adaptive_clip"] = {"initial_clip": cfg.clip,
                                "final_clip": [float(c) for c in clips[:n]]}
    if getattr(cfg, "step_from_noise", False):
        out["step_from_noise"] = {"learning_rate": cfg.learning_rate,
                                  "step_size": algo.step_size}
    if candidates is not None:
        out["public_candidates"] = public_candidates_record(
            candidates.best, algo.task.name, "greedy actions (the evaluation policy's)",
            cfg.public_eval_episodes, cfg.public_eval_every, n)
    return out or None


def _outputs(settings: Sequence[Any], names: Sequence[str], k: int, train: np.ndarray,
             evals: np.ndarray, updates_all: np.ndarray, solved_all: np.ndarray,
             thetas: np.ndarray, ends: np.ndarray, done: int, start: float, n_dev: int,
             with_baseline: bool = False) -> list[EpisodicOutput]:
    """Each setting's output from the seeds' curves and parameters after `done` episodes (all
    of them, or those done before a failure: `output.keeping_work`); `with_baseline`: with
    the random baseline (a finished run's; work kept after a failure plays no more)."""
    n_set = len(settings)
    ends = ends.copy()
    ends[ends == 0] = done
    wall = time.perf_counter() - start
    # the settings share their task and seed: one random baseline for all of them
    task = getattr(settings[0], "task", None)
    baseline = (random_baseline(task, k * FINAL_EVALS, settings[0].config.seed)
                if with_baseline and task is not None else None)
    outputs = []
    for i, (own, name) in enumerate(zip(settings, names, strict=True)):
        rows, width = slice(i * k, (i + 1) * k), min(ends[i], own.config.episodes)
        updates = updates_all[rows]
        outputs.append(EpisodicOutput(
            algorithm=name, config=own.config, train_returns=train[rows, :width],
            eval_returns=evals[rows, :width], updates=updates, solved_at=solved_all[rows],
            update_cap=int(own.update_cap),
            privacy=privacy_record(own, int(updates.max(initial=0))), wall_seconds=wall,
            devices=n_dev,
            program=None if n_set == 1 else {"settings": n_set, "seeds": n_set * k},
            policy=own.saved_policy(name, thetas[rows]), baseline=baseline))
    return outputs


# A smaller batch costs a compilation: worth it only when it frees this many rows or more.
COMPACT_MIN_ROWS = 8


def _compact(state: Any, trial: np.ndarray, stopped: np.ndarray, devices: int
             ) -> tuple[Any, np.ndarray]:
    """The batch without most of its stopped seeds, once at most half of it runs: the
    running rows, then stopped ones (inert: they do nothing but ride along) up to a multiple of
    `devices`. Each row's computation does not depend on the others (the rollouts are batched
    row by row, the updates computed in fixed blocks), so no seed's floats change."""
    real = trial < stopped.size  # the others are padding rows
    running = np.flatnonzero(real)[~stopped[trial[real]]]
    size = max(devices, -(-running.size // devices) * devices)
    if running.size > trial.size // 2 or trial.size - size < COMPACT_MIN_ROWS:
        return state, trial
    inert = np.setdiff1d(np.arange(trial.size), running)[: size - running.size]
    rows = np.concatenate([running, inert])
    state = _take_rows(state, jnp.asarray(rows))
    return jax.device_put(state, trial_sharding(devices)), trial[rows]


@jax.jit
def _take_rows(state: Any, rows: jax.Array) -> Any:
    """Every leaf's `rows`, in one program (leaf by leaf, each shape compiled a gather)."""
    return jax.tree_util.tree_map(lambda x: x[rows], state)


def privacy_record(algo: Any, updates: int) -> dict[str, Any]:
    """privacy.json: DP-SGD's account of the model and LDP's account of observations."""
    cfg = algo.config
    rec: dict[str, Any] = {"algorithm_unit": getattr(algo, "unit", None)}
    if cfg.private:
        stopped_by_budget = cfg.max_epsilon is not None and updates >= algo.update_cap
        first = {
            "notion": "(ε, δ)-DP of the trained model (central: the learner is trusted)",
            "unit": algo.unit,
            "neighbouring": "zero-out: one unit's data replaced by a null unit contributing a "
                            "zero gradient (Kairouz et al. 2021); the add/remove accounting of "
                            "dp-accounting applies. Replace-one: double ε (group privacy).",
            "noise_multiplier": cfg.noise_multiplier,
            "clip": cfg.clip,
            **({"adaptive_clip": adaptive_clip_record(cfg)} if getattr(
                cfg, "adaptive_clip", False) else {}),
            "target_epsilon": cfg.target_epsilon,
            "max_epsilon": cfg.max_epsilon,
            "updates": updates,
            "stopped_by_max_epsilon": bool(stopped_by_budget),
        }
        if cfg.secure_noise:
            from privrl.privacy.mechanisms import SECURE_NOTE
            first["noise_sampler"] = SECURE_NOTE + "; ε by RDP (zCDP of the discrete Gaussian)"
        last = {
            "how_counted": algo.count_explanation,
            **({"delta_batch_truncation": cfg.truncation_delta(updates),
                "total_delta": cfg.delta + cfg.truncation_delta(updates),
                "max_batch": cfg.max_batch}
               if hasattr(cfg, "truncation_delta") else {"total_delta": cfg.delta}),
        }
        # The guarantee's δ is the total: the accountant's δ plus, for DQN, the probability
        # that a Poisson batch was truncated.
        account = cfg.accountant_for(updates).record(cfg.delta)
        trunc = last.get("delta_batch_truncation")
        facts = Facts(
            Claim(account["epsilon"], last["total_delta"], "DP",
                  "central: the learner is trusted", algo.unit,
                  f"the {cfg.accountant} accountant over {updates} updates",
                  f"δ = {cfg.delta:g} from the accountant"
                  + ("" if trunc is None else f" + {trunc:.3g} for batch truncation")),
            releases=(Releases("the learner", "noised sums of per-unit gradients clipped to L2 "
                               f"norm {cfg.clip:g}", "DP-SGD's Gaussian noise of std "
                               f"{cfg.noise_multiplier:g}·clip", updates)
                      if not getattr(cfg, "adaptive_clip", False) else Releases(
                          "the learner", "noised sums of per-unit gradients clipped to the "
                          f"adaptive clip C_t (C_0 = {cfg.clip:g}), and noised counts of the "
                          "units within it", "Gaussian noise of std "
                          f"{cfg.gradient_noise_multiplier:.4g}·C_t on the gradients and "
                          f"{cfg.clip_count_stddev:.4g} on the count: together one Gaussian "
                          f"of multiplier {cfg.noise_multiplier:.4g}", updates)),
            trust=Trust("the learner, which sees the raw episodes (central DP)",
                        "the trained model and what is computed from it"),
            noise=record_mode(cfg.noise, cfg.secure_noise))
        rec["dpsgd"] = build_privacy_record(
            facts, accountant=account, formal_key="formal_guarantee", fields=first | last,
            order=["formal_guarantee", *first, SPREAD_ACCOUNTING, *last, *COMPOSED])
    else:
        rec["dpsgd"] = build_privacy_record(
            Facts(None, "DP-SGD with noise multiplier 0 (clipping only); no ε can be stated"
                  if cfg.dp else "non-private training, nothing protects the model"),
            formal_key="formal_guarantee",
            order=["formal_guarantee", *COMPOSED])
    obs_mode = record_mode(cfg.noise, cfg.obs.secure)
    rec["observations"] = cfg.obs.record(cfg.max_episode_steps, cfg.accountant, obs_mode)
    if cfg.private:
        rec.update(noise_fields(record_mode(cfg.noise, cfg.secure_noise)))
    elif cfg.obs.mechanism() is not None:
        rec.update(noise_fields(obs_mode))
    return rec


def adaptive_clip_record(cfg: Any) -> dict[str, Any]:
    """privacy.json's account of --adaptive-clip (Andrew et al. 2021): what each update
    releases besides the gradient sum, and why the episode's ε counts both."""
    return {
        "noise_multiplier_z": cfg.noise_multiplier,
        "gradient_noise_multiplier_z_delta": cfg.gradient_noise_multiplier,
        "count_stddev_sigma_b": cfg.clip_count_stddev,
        "target_quantile_gamma": cfg.clip_quantile,
        "clip_learning_rate_eta": cfg.clip_lr,
        "initial_clip": cfg.clip,
        "releases": "each update: Σ clip_{C_t}(g_i) + N(0, (z_Δ·C_t)²) and "
                    "Σ (1[‖g_i‖ <= C_t] − ½) + N(0, σ_b²); C_{t+1} = C_t·exp(−η(b̄_t − γ)) "
                    "from the released count only",
        "how_counted": cfg.clip_count_accounting(),
    }


FINAL_EVALS = 25  # the evaluation returns per seed that count as its final ones


def final_evals(eval_returns: np.ndarray) -> np.ndarray:
    """Each seed's last FINAL_EVALS evaluation returns (those it played), in one array."""
    return np.concatenate([r[np.isfinite(r)][-FINAL_EVALS:].astype(np.float64)
                           for r in eval_returns])


def final_eval_mean(eval_returns: np.ndarray, window: int = FINAL_EVALS) -> float | None:
    """Mean of each seed's last `window` evaluation returns (a stopped seed holds its last)."""
    held = hold_last(eval_returns)[:, -window:]
    return float(np.nanmean(held)) if np.isfinite(held).any() else None


def summarize(out: EpisodicOutput) -> dict[str, Any]:
    solved = out.solved_at[out.solved_at >= 0]
    dp = out.privacy["dpsgd"]
    obs = out.privacy["observations"]
    target = out.config.solve_threshold  # None: the task has no target, nothing is "solved"
    return {
        "algorithm": out.algorithm,
        "seeds": int(out.solved_at.size),
        "solve_threshold": target,
        "solved_seeds": None if target is None else int(solved.size),
        "episodes_to_solve": (None if target is None
                              else [int(x) if x >= 0 else None for x in out.solved_at]),
        "median_episodes_to_solve": float(np.median(solved)) if solved.size else None,
        "final_eval_mean": final_eval_mean(out.eval_returns),
        **({} if out.final_returns is None else {
            "final_policy_return": float(np.mean(out.final_returns)),
            "final_policy": "each trial's best candidate on the public simulator; its return: "
                            f"{out.final_returns.shape[1]} fresh greedy episodes there each "
                            "(the verdict's)"}),
        **({} if out.levers is None else {"levers": out.levers}),
        **({} if (v := out.verdict()) is None else v.fields()),
        "updates": out.updates.tolist(),
        "dpsgd_epsilon": dp.get("epsilon") if dp["formal_guarantee"] else None,
        "observation_epsilon_per_step": obs.get("per_step", {}).get("epsilon"),
        "observation_epsilon_per_episode": obs.get("per_episode", {}).get("epsilon"),
        "stopped_by_max_epsilon": bool(dp.get("stopped_by_max_epsilon", False)),
        "privacy_model": dp["headline"],
        "privacy_observations": obs["headline"],
        "wall_seconds": out.wall_seconds,
        "devices": out.devices,
        **({} if out.program is None else {"one_program": {
            **out.program, "note": "this setting ran in one program with the others; wall "
                                   "time is that program's"}}),
        **({"noise": summary_note(out.privacy["noise_keys"]["mode"])}
           if "noise_keys" in out.privacy else {}),
    }


def metrics_rows(out: EpisodicOutput) -> Iterator[str]:
    """metrics.csv rows: seed, episode, train and evaluation return (a stopped seed ends)."""
    for s in range(out.train_returns.shape[0]):
        for e in range(out.train_returns.shape[1]):
            tr, ev = out.train_returns[s, e], out.eval_returns[s, e]
            if np.isfinite(tr):
                yield f"{s},{e + 1},{tr:g},{ev:g}"


def record(out: EpisodicOutput) -> RunRecord:
    """What a run leaves behind: summary, privacy record, per-episode table, evaluation plot."""
    cfg = out.config
    v = out.verdict()
    return RunRecord(
        out.algorithm, asdict(cfg), cfg.seed, summarize(out), out.privacy,
        metrics=csv_writer("seed,episode,train_return,eval_return", lambda: metrics_rows(out)),
        plots={"eval_returns.png": lambda p: plot_curves(
            p, {out.algorithm: out.eval_returns},
            plot_title(out.algorithm, cfg.env, privacy_label(out), out.policy),
            "training episode", "greedy evaluation return", cfg.solve_threshold,
            random=None if v is None else v.random)},
        run_info={"devices": out.devices}, policy=out.policy)


def privacy_label(out: EpisodicOutput) -> str:
    """What protects the run, in a few words for its plot: DP-SGD's σ (and the ε it gives),
    the LDP observations' mode."""
    cfg = out.config
    dp = out.privacy["dpsgd"]
    if cfg.private:
        eps = dp.get("epsilon")
        parts = [f"DP-SGD σ = {cfg.noise_multiplier:.3g}"
                 + ("" if eps is None else f", ε = {eps:.3g} (δ = {cfg.delta:g})")]
    else:
        parts = ["DP-SGD with σ = 0 (no ε)" if cfg.dp else "non-private model"]
    if cfg.obs.mechanism() is not None:
        per = out.privacy["observations"].get("per_step", {}).get("epsilon")
        parts.append(f"LDP observations ({cfg.obs.mode} mode"
                     + ("" if per is None else f", ε = {per:.3g} per step") + ")")
    return "; ".join(parts)


def save(out: EpisodicOutput, path: Path, command: list[str] | None = None) -> dict[str, Any]:
    """config.json, metrics.csv (per seed and episode), privacy.json, summary.json,
    policy.npz, plots/."""
    return save_run(record(out), path, command)


def summary_rows(summary: dict[str, Any], cfg: Any) -> list[tuple[str, str]]:
    """The results table a run's summary (of config `cfg`) reads as: (metric, value) rows."""
    med = summary["median_episodes_to_solve"]
    target = summary["solve_threshold"]
    rows = [
        *(() if target is None else (
            (f"solved trials (mean of {cfg.solve_window} evaluations ≥ {target:g})",
             f"{summary['solved_seeds']}/{summary['seeds']}"),
            ("median episodes to solve", "not solved" if med is None else f"{med:g}"))),
        ("final evaluation return (mean of the last 25)",
         "none" if summary["final_eval_mean"] is None else f"{summary['final_eval_mean']:.4g}"),
        *((("kept policy's return (best public candidate; 25 fresh public episodes)",
            f"{summary['final_policy_return']:.4g}"),) if "final_policy_return" in summary
          else ()),
        *(verdict_rows(summary) if "learned" in summary else ()),
        ("updates", ", ".join(map(str, summary["updates"]))),
        ("wall time", f"{summary['wall_seconds']:.1f} s on {summary['devices']} device(s)"),
    ]
    return rows
