"""Running DP Q-learning (paper 001) locally and saving what a run leaves behind.

All seeds of a run are one jitted, vmapped program (privrl.systems.dp_qlearning.algorithm), called
a chunk of episodes at a time so that progress shows between calls. A run
writes config.json, metrics.csv (one row per seed and episode), privacy.json, summary.json and
plots/returns.png into a new directory.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from privrl.evaluation import Verdict, random_baseline, verdict
from privrl.output import (
    RunRecord,
    SavesRunDir,
    check_out_dir,
    plot_title,
    plural,
    save_if_asked,
    work_so_far,
)
from privrl.output import save as save_run
from privrl.policy import SavedPolicy, saved_policy
from privrl.privacy.noise import noise_summary, secret_keys
from privrl.progress import as_progress, emit
from privrl.systems.dp_qlearning.algorithm import (
    DPQLearning,
    DPQLearningConfig,
    describe_privacy,
    noise_keys,
    privacy_record,
    run_keys,
)

FINAL_EPISODES = 10  # "final return": mean over each seed's last 10 episodes


@dataclass
class DPQLOutput(SavesRunDir):
    config: DPQLearningConfig
    returns: np.ndarray  # (seeds, episodes)
    wall_seconds: float
    policy: SavedPolicy | None = None  # policy.npz: each seed's final Q-network θ
    # a uniform-random policy's returns on the task (privrl.evaluation.random_baseline)
    baseline: np.ndarray | None = None
    # False: the run failed during training, before its one release (the trained Q-function);
    # what is kept is the returns so far (diagnostics), and privacy.json says no release
    released: bool = True

    def record(self) -> RunRecord:
        return record(self)

    def verdict(self) -> Verdict | None:
        """Each seed's last FINAL_EPISODES returns against the random baseline."""
        if self.baseline is None:
            return None
        return verdict(self.returns[:, -FINAL_EPISODES:], self.baseline)


# The environment the paper trains on, as a `module:callable` spec `privrl evaluate` accepts.
LINE1D = "privrl.envs.line1d:make_line1d"


CHUNK_EPISODES = 10  # episodes per compiled call of a run (progress between two calls)


def chunk_size(episodes: int, target: int | None = None) -> int:
    """Episodes per compiled call: the largest divisor of `episodes` up to `target` (default
    CHUNK_EPISODES) when it is at least target / 2 (one program for every call), else `target`
    (a second program compiles for the remainder)."""
    target = CHUNK_EPISODES if target is None else target
    divisor = max(d for d in range(1, min(target, episodes) + 1) if episodes % d == 0)
    return divisor if 2 * divisor >= min(target, episodes) else target


def sharded(fn: Callable[..., Any], devices: int) -> Any:
    """jit of `fn` vmapped over R runs (every argument's leading axis), the runs split over
    `devices` host devices (R must be a multiple of it)."""
    mesh = Mesh(np.array(jax.local_devices()[:devices]), ("runs",))
    spec = PartitionSpec("runs")
    return jax.jit(jax.shard_map(jax.vmap(fn), mesh=mesh, in_specs=spec, out_specs=spec,
                                 check_vma=False))


def sharded_train(algo: DPQLearning, devices: int) -> Any:
    """jit(keys (R,), sigmas (R,)) -> (returns (R, E), θ (R, d), overflow (R,)): whole runs
    as one compiled call."""
    return sharded(algo.train, devices)


def train_grid(config: DPQLearningConfig, sigmas: list[float], devices: int | None = None,
               progress: Callable[[int, np.ndarray], None] | None = None,
               chunk_episodes: int | None = None) -> tuple[np.ndarray, float, np.ndarray]:
    """Returns (len(sigmas), seeds, episodes) for every σ with the config's seeds; wall time;
    each run's final θ (len(sigmas), seeds, d).

    The (σ, seed) runs are independent, so they are flattened, vmapped and split over the host's
    XLA devices (one per core; privrl.compute.devices), padded to a multiple of the device count
    with copies whose results are dropped. The episodes run `chunk_episodes` per compiled call
    (the same floats as one call: tests), and after each call `progress(episodes done,
    returns so far (len(sigmas), seeds, done))`. Raises if a noise store overflowed (cannot
    happen with the capacities the algorithm sizes, but a run that lost noise points would be
    silently wrong).
    """
    if chunk_episodes is None:
        chunk_episodes = chunk_size(config.episodes)
    if not (isinstance(chunk_episodes, int) and chunk_episodes >= 1):
        raise ValueError(f"chunk_episodes must be an integer >= 1, got {chunk_episodes!r}")
    algo = DPQLearning(config)
    n_sigma, n_seed = len(sigmas), config.seeds
    runs = n_sigma * n_seed
    n_dev = max(1, min(devices or jax.local_device_count(), jax.local_device_count(), runs))
    padded = math.ceil(runs / n_dev) * n_dev
    which = np.arange(padded) % runs  # run r = (σ index r // seeds, seed r % seeds)
    # indexed on the host and put: indexing a JAX array, or jnp.asarray of a host array,
    # compiles eager programs of its own (eight here)
    seed_keys = run_keys(config.seed, n_seed)
    keys = jax.random.wrap_key_data(jax.device_put(
        np.asarray(jax.random.key_data(seed_keys))[which % n_seed]),
        impl=jax.random.key_impl(seed_keys))
    sig = jax.device_put(np.asarray(sigmas, np.float32)[which // n_seed])
    # secret keys: one root per run from os.urandom, in memory only, passed as an argument
    secret = () if (config.noise or "seeded") == "seeded" else (secret_keys(padded),)
    start = time.perf_counter()
    ts, episode_keys = sharded(algo.start, n_dev)(keys)
    chunk = sharded(algo.run_episodes, n_dev)
    pieces: list[np.ndarray] = []
    for first in range(0, config.episodes, chunk_episodes):
        last = min(first + chunk_episodes, config.episodes)
        indices = jax.device_put(np.broadcast_to(np.arange(first, last, dtype=np.int32),
                                                 (padded, last - first)))
        ts, returns = chunk(ts, indices, episode_keys[:, first:last], sig, *secret)
        pieces.append(np.asarray(returns)[:runs].reshape(n_sigma, n_seed, -1))
        if progress is not None:
            progress(last, np.concatenate(pieces, axis=-1))
    returns = np.concatenate(pieces, axis=-1)
    if np.asarray(sharded(algo.overflow, n_dev)(ts)).any():
        raise RuntimeError("internal error: a noise store overflowed its capacity")
    theta = np.asarray(ts.theta)[:runs].reshape(n_sigma, n_seed, -1)
    return returns, time.perf_counter() - start, theta


def run_dp_qlearning(config: DPQLearningConfig, out: str | os.PathLike | None = None,
                     progress: Callable[..., Any] | bool | None = None) -> DPQLOutput:
    """Every seed of `config`; `out`: write the run directory there, as the CLI's --out;
    `progress`: a callback `(done, total)`, or True for the CLI's display on stderr. Training
    runs CHUNK_EPISODES episodes per compiled call: after each, progress gets the episodes
    done and the mean return so far; the ε (Theorem 5's, where it is claimed) is spent by the
    one release, the trained Q-function, so it is reported at the end."""
    check_out_dir(out)
    cfg = config.resolved()
    start = time.perf_counter()
    with as_progress(progress, unit="episodes") as shown:
        def report(done: int, so_far: np.ndarray) -> None:
            # Should training fail from here on, its returns so far are kept; no release made.
            work_so_far(lambda: [DPQLOutput(cfg, so_far[0], time.perf_counter() - start,
                                            released=False)])
            emit(shown, done, cfg.episodes, mean_return=float(np.mean(so_far)))

        returns, wall, theta = train_grid(cfg, [cfg.sigma], progress=report)
        emit(shown, cfg.episodes, cfg.episodes, mean_return=float(np.mean(returns[0])),
             epsilon=cfg.epsilon if cfg.claims_epsilon else None)
    # Should what follows fail, the returns and Q-functions are kept (no random baseline).
    work_so_far(lambda: [DPQLOutput(cfg, returns[0], wall, policy_of(cfg, theta[0]))])
    baseline = random_baseline(line1d_task(cfg), cfg.seeds * FINAL_EPISODES, cfg.seed)
    return save_if_asked(DPQLOutput(cfg, returns[0], wall, policy_of(cfg, theta[0]),
                                    baseline), out)


def line1d_task(cfg: DPQLearningConfig) -> Any:
    """The paper's 1-D task as a Task, its episodes `cfg.episode_steps` long."""
    from privrl.envs.line1d import make_line1d
    from privrl.envs.task import Task

    return Task(*make_line1d(cfg.episode_steps), LINE1D)


def policy_of(cfg: DPQLearningConfig, theta: np.ndarray) -> SavedPolicy:
    """The released Q-function Q_θ of each seed (its acting adds the GP noise ĝ only while
    training; the saved policy is Q_θ's argmax, ε-greedy at the final exploration rate)."""
    algo = DPQLearning(cfg)
    return saved_policy("dp-qlearning", algo.model, line1d_task(cfg), "q", theta,
                        cfg.episode_steps,
                        epsilon=cfg.eps_end)


def final_returns(returns: np.ndarray) -> np.ndarray:
    """Each run's mean return over its last FINAL_EPISODES episodes (last axis: episodes)."""
    return returns[..., -FINAL_EPISODES:].mean(-1)


def summarize(out: DPQLOutput) -> dict[str, Any]:
    cfg = out.config
    final = final_returns(out.returns)
    return {
        "algorithm": "dp-qlearning",
        "preset": cfg.preset,
        "sigma": cfg.sigma,
        "privacy": describe_privacy(cfg) if out.released else NO_RELEASE,
        **noise_summary(noise_keys(cfg)),
        "seeds": cfg.seeds,
        "episodes": cfg.episodes,
        "final_episodes": min(FINAL_EPISODES, cfg.episodes),
        "final_mean_return": float(final.mean()),
        "final_return_std_over_seeds": float(final.std(ddof=1)) if final.size > 1 else 0.0,
        "final_return_per_seed": final.tolist(),
        "mean_return_all_episodes": float(out.returns.mean()),
        **({} if (v := out.verdict()) is None else v.fields()),
        "wall_seconds": round(out.wall_seconds, 2),
    }


def write_returns_csv(path: Path, returns: np.ndarray) -> None:
    with path.open("w") as f:
        f.write("seed,episode,return\n")
        for s, row in enumerate(returns):
            for e, r in enumerate(row):
                f.write(f"{s},{e},{r:.4f}\n")


def plot_returns(path: Path, curves: dict[str, np.ndarray], title: str,
                 lines: dict[str, float] | None = None) -> None:
    """Return per episode: mean over seeds, with the seeds' interquartile range as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, r in curves.items():
        x = np.arange(1, r.shape[1] + 1)
        mean = r.mean(0)
        (line,) = ax.plot(x, mean, lw=1.2, label=label)
        if r.shape[0] > 1:
            lo, hi = np.percentile(r, [25, 75], axis=0)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
    for label, y in (lines or {}).items():
        ax.axhline(y, color="k", ls="--" if "optimal" in label else ":", lw=0.9, label=label)
    ax.set(xlabel="episode", ylabel="return of the episode", ylim=(0, 25))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


NO_RELEASE = ("no release: the run failed during training, before its one release (the "
              "trained Q-function); ε spent 0")


def unreleased_record(cfg: DPQLearningConfig) -> dict[str, Any]:
    """privacy.json of a run that failed during training: its one release (the trained
    Q-function) was not made, so nothing was released and no ε was spent; the returns kept are
    diagnostics computed from the raw rewards, as in a finished run."""
    planned = privacy_record(cfg)
    return {**{k: planned[k] for k in ("unit", "neighbouring", "not_protected", "mechanism")},
            "released": "nothing: the run failed during training, before its one release (the "
                        "trained Q-function Q_θ)",
            "epsilon_spent": 0, "delta_spent": 0,
            "planned": {k: planned[k] for k in ("released", "epsilon", "delta") if k in planned}}


def record(out: DPQLOutput) -> RunRecord:
    """What a run leaves behind: summary, privacy record, per-episode returns and their plot."""
    cfg = out.config
    v = out.verdict()
    return RunRecord(
        "dp-qlearning", cfg.to_dict(), cfg.seed, summarize(out),
        privacy_record(cfg) if out.released else unreleased_record(cfg),
        metrics=lambda p: write_returns_csv(p, out.returns),
        plots={"returns.png": lambda p: plot_returns(
            p, {f"σ = {cfg.sigma:.4g}, mean of {plural(cfg.seeds, 'seed')}": out.returns},
            plot_title("DP Q-learning", LINE1D, f"functional noise σ = {cfg.sigma:.4g} "
                       f"({cfg.preset} preset)"),
            {} if v is None else {f"random policy: {v.random:.4g}": v.random})},
        policy=out.policy)


def save(out: DPQLOutput, path: Path, command: list[str] | None = None) -> dict[str, Any]:
    """config.json, metrics.csv, privacy.json, summary.json, policy.npz, plots/returns.png."""
    return save_run(record(out), path, command)
