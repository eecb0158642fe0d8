"""The local runner for paper 002's Grid-World learners (FedRL and its baselines).

Seeds are vmapped in one jitted program. Training runs in epochs (a jitted `lax.scan` of
`updates_per_epoch` steps); after each epoch every seed's greedy policy plays all validation
maps at once (vmap over maps), the best epoch's parameters are kept per seed, and training
stops once no seed improved for `patience` epochs. The kept parameters then play the test maps
(each of the learner's test variants) and a random policy plays them too, for reference.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from privrl.envs import gridworld as gw
from privrl.federation.vertical import with_secret_roots
from privrl.output import (
    RunRecord,
    SavesRunDir,
    check_out_dir,
    csv_writer,
    plot_curves,
    plot_title,
    save_if_asked,
    work_so_far,
)
from privrl.output import save as save_run
from privrl.policy import NETWORKS_NOTE, SavedPolicy, networks_policy
from privrl.privacy.noise import secret_keys, summary_note
from privrl.progress import as_progress, emit, record_epsilon
from privrl.selection import Selection
from privrl.systems.fedrl.algorithm import Splits, load_splits

ProgressFn = Callable[[int, int], None]


@dataclass
class GridOutput(SavesRunDir):
    name: str
    config: Any
    splits: dict[str, Any]
    train_success: np.ndarray  # (seeds, epochs): training episodes' success rate (with ε)
    train_return: np.ndarray  # (seeds, epochs)
    valid_success: np.ndarray  # (seeds, epochs)
    best_epoch: np.ndarray  # (seeds,)
    test: dict[str, dict[str, list[float]]]  # variant -> {"success": per seed, "avg_reward"}
    random_test: dict[str, float]
    privacy: dict[str, Any]
    wall_seconds: float
    compile_seconds: float
    throughput: dict[str, float] = field(default_factory=dict)
    policy: SavedPolicy | None = None  # each seed's kept networks (policy.npz)

    def record(self) -> RunRecord:
        return record(self)


def run_grid(algo: Any, progress: ProgressFn | bool | None = None,
             splits: Splits | None = None, out: str | os.PathLike | None = None
             ) -> GridOutput:
    """Every seed of `algo` on the Grid-World maps; `out`: write the run directory there, as
    the CLI's --out (`GridOutput.save`); `progress`: a callback `(done, total)`, or True for
    the CLI's display on stderr (epochs, mean training return, ε spent)."""
    check_out_dir(out)
    with as_progress(progress, unit="epochs") as shown:
        return save_if_asked(_grid(algo, shown, splits), out)


def _grid(algo: Any, progress: ProgressFn | None, splits: Splits | None) -> GridOutput:
    cfg = algo.config
    start = time.perf_counter()
    splits = splits or load_splits(cfg)
    data = algo.prepare(splits.train)
    seeds = cfg.seeds
    init = jax.jit(jax.vmap(algo.init, in_axes=(0, None)))
    chunk = jax.jit(jax.vmap(algo.train_chunk, in_axes=(0, None)))
    evals = {v: jax.jit(jax.vmap(lambda p, k, m, v=v: algo.evaluate(p, m, k, v),
                                 in_axes=(0, 0, None))) for v in algo.variants}
    select = evals[algo.variants[0]]
    key = jax.random.key(cfg.seed)
    k_init, k_eval, k_test, k_rand = jax.random.split(key, 4)
    state = init(jax.random.split(k_init, seeds), data)
    secret = getattr(cfg, "noise", None) == "secret" and hasattr(state, "beta")
    if secret:  # each party's root: OS CSPRNG, in memory only, an argument of the programs
        state = with_secret_roots(state, seeds)

    def eval_keys(k: jax.Array) -> jax.Array:
        """Evaluation keys drive only the released noise (greedy play): secret ones come
        from the OS CSPRNG (one process holds both parties here: a simulation)."""
        return secret_keys(seeds) if secret else jax.random.split(k, seeds)

    sel = Selection(algo.params(state), seeds, cfg.patience)
    tr_s: list[np.ndarray] = []
    tr_r: list[np.ndarray] = []
    va: list[np.ndarray] = []

    def output(best: Any, best_epoch: np.ndarray, test: dict[str, Any],
               random_test: dict[str, float], charged: int, test_maps: int) -> GridOutput:
        """The run's output from its first len(va) epochs; privacy counts `charged` epochs'
        releases and `test_maps` noisy-test maps."""
        epochs_run = len(va)
        privacy = algo.privacy_record(charged * cfg.updates_per_epoch, charged,
                                      splits.valid.count, test_maps)
        privacy["algorithm"] = algo.name
        throughput = {}
        if sel.times and hasattr(state, "env"):
            t = float(np.median(sel.times))
            throughput = {"median_epoch_seconds": t,
                          "env_steps_per_s": cfg.updates_per_epoch * cfg.num_envs * seeds / t,
                          "updates_per_s": cfg.updates_per_epoch * seeds / t}
        elif sel.times:
            t = float(np.median(sel.times))
            throughput = {"median_epoch_seconds": t,
                          "updates_per_s": cfg.updates_per_epoch * seeds / t}
        return GridOutput(
            algo.name, cfg, splits.info, np.stack(tr_s[:epochs_run], 1),
            np.stack(tr_r[:epochs_run], 1), np.stack(va, 1), best_epoch, test, random_test,
            privacy, time.perf_counter() - start, sel.compile_seconds, throughput,
            grid_policy(algo, best))

    for epoch in range(1, cfg.epochs + 1):
        state = sel.train(epoch, chunk, state, data)
        st = state.stats
        eps = np.maximum(np.asarray(st.episodes), 1)
        tr_s.append(np.asarray(st.successes) / eps)
        tr_r.append(np.asarray(st.return_sum) / eps)
        res = select(algo.params(state), eval_keys(jax.random.fold_in(k_eval, epoch)),
                     splits.valid)
        val = np.asarray(res.success).mean(-1)
        va.append(val)
        stop = sel.record(epoch, val, algo.params(state))
        if progress is not None:  # ε spent: the privacy record of the epochs' releases
            emit(progress, epoch, cfg.epochs, mean_return=float(np.mean(tr_r[-1])),
                 epsilon=record_epsilon(algo.privacy_record(
                     epoch * cfg.updates_per_epoch, epoch, splits.valid.count, 0)))
        last = stop or epoch == cfg.epochs
        # Should what follows fail: the epochs done, their best networks, no test scores, and
        # the releases of the step in progress counted as made (the next epoch's, or the test
        # maps' after the last).
        work_so_far(lambda best=sel.best, at=sel.best_epoch, charged=epoch + (not last),
                    maps=splits.test.count if last else 0: [output(best, at, {}, {}, charged,
                                                                   maps)])
        if stop:
            break
    test = {}
    for v, fn in evals.items():
        r = fn(sel.best, eval_keys(k_test), splits.test)
        test[v] = {"success": np.asarray(r.success).mean(-1).tolist(),
                   "avg_reward": np.asarray(r.total_reward).mean(-1).tolist()}
    rnd = jax.jit(lambda k: gw.evaluate(algo.spec, splits.test, gw.random_policy, k))(k_rand)
    random_test = {"success": float(np.mean(rnd.success)),
                   "avg_reward": float(np.mean(rnd.total_reward))}
    return output(sel.best, sel.best_epoch, test, random_test, len(va), splits.test.count)


def grid_policy(algo: Any, best: Any) -> SavedPolicy:
    """policy.npz of a Grid-World run: each seed's kept networks (`algo.policy_networks`)."""
    cfg = algo.config
    spec = algo.spec
    return networks_policy(
        algo.name, f"gridworld-{cfg.size}",
        f"Grid-World window histories (the last {spec.history} of α's {spec.alpha_view}×"
        f"{spec.alpha_view} and β's {spec.beta_view}×{spec.beta_view} windows)",
        [(*net, theta) for net, theta in zip(algo.policy_networks(),
                                              jax.tree_util.tree_leaves(best), strict=True)],
        note=NETWORKS_NOTE)


def summarize(out: GridOutput) -> dict[str, Any]:
    cfg = out.config
    return {
        "algorithm": out.name,
        "size": cfg.size,
        "seeds": cfg.seeds,
        "maps": out.splits,
        "epochs_run": int(out.valid_success.shape[1]),
        "updates_per_seed": int(out.valid_success.shape[1] * cfg.updates_per_epoch),
        "best_epoch": out.best_epoch.tolist(),
        "best_valid_success": out.valid_success.max(1).tolist(),
        "test": {v: {"success_rate": float(np.mean(r["success"])),
                     "avg_reward": float(np.mean(r["avg_reward"])), "per_seed": r}
                 for v, r in out.test.items()},
        "random_policy_test": out.random_test,
        "privacy": out.privacy["headline"],
        **({"noise": summary_note(out.privacy["noise_keys"]["mode"])}
           if "noise_keys" in out.privacy else {}),
        "wall_seconds": out.wall_seconds,
        "compile_seconds": out.compile_seconds,
        "throughput": out.throughput,
    }


def metrics_rows(out: GridOutput) -> Iterator[str]:
    """metrics.csv rows: seed, epoch, training success and return, validation success."""
    for s in range(out.valid_success.shape[0]):
        for e in range(out.valid_success.shape[1]):
            yield (f"{s},{e + 1},{out.train_success[s, e]:.4f},{out.train_return[s, e]:.3f},"
                   f"{out.valid_success[s, e]:.4f}")


def record(out: GridOutput) -> RunRecord:
    """What a run leaves behind: summary, privacy record, per-epoch table, validation plot."""
    cfg = out.config
    return RunRecord(
        out.name, asdict(cfg), cfg.seed, summarize(out), out.privacy,
        metrics=csv_writer("seed,epoch,train_success,train_avg_return,valid_success",
                           lambda: metrics_rows(out)),
        plots={"valid_success.png": lambda p: plot_curves(
            p, {out.name: out.valid_success},
            plot_title(out.name, f"Grid-World {cfg.size}×{cfg.size}", privacy_label(out)),
            "epoch", "validation SuccRate", window=1)},
        run_info={"maps": out.splits}, policy=out.policy)


def privacy_label(out: GridOutput) -> str:
    """The Q-output noise and its σ, with the ε the record states where it states one, in a
    few words for the plot (issue 53 item 7); a baseline's: none."""
    sigma = getattr(out.config, "noise_sigma", None)
    if sigma is None:
        return "non-private baseline (no noise)"
    if sigma == 0:
        return "no Q-output noise (σ = 0)"
    g = out.privacy.get("guarantee") or {}
    if g.get("epsilon") is None:
        return f"Gaussian Q-output noise σ = {sigma:g}, unbounded outputs: no ε"
    return (f"Gaussian Q-output noise σ = {sigma:g}, outputs clipped to {out.config.bounded:g}: "
            f"ε = {g['epsilon']:.3g} (δ = {g['delta']:g})")


def save(out: GridOutput, path: Path, command: list[str] | None = None) -> dict[str, Any]:
    """config.json, metrics.csv (per seed and epoch), privacy.json, summary.json,
    policy.npz, plots/."""
    return save_run(record(out), path, command)
