"""Wall time to solve CartPole, non-private: privrl's PGC-A3C against Stable-Baselines3's A2C.

Criterion (both sides): the first time the mean score of 100 consecutive training episodes is
≥ 195, episodes counted in the order they finish (privrl: submission order). A score is the
episode's length, which is its return (+1 per step); episodes are capped at 200 steps.

privrl (run in this process): `PGCA3CConfig.from_preset("tuned", mechanism="none", trials=1,
seed=s)`, one trial on one XLA device, in two variants:

* "tuned non-private": the preset's defaults for the none mechanism (L1 clip C = 0.01, |B| = 10);
* "tuned, unclipped non-private": the same with clip = 1e9 and buffer_size = 1.

Rounds run through `privrl.systems.pgc_a3c.local.ShardedTrials` in jitted chunks of `--chunk` rounds
(9 episodes each); after each chunk the host checks the criterion over the scores so far and
stops. Wall time runs from constructing the algorithm (`PGCA3C(config)`) to that check, so it
includes tracing and XLA compilation (JAX's caches are cleared before every seed) and the
overshoot of at most one chunk. "warm" repeats each seed with a runner compiled beforehand
(compile excluded), for information. `--cache` times each seed once more, in the same process,
with JAX's persistent compilation cache on (a fresh directory, filled by one untimed compile of
each variant; privrl's threshold for what it keeps): what a `privrl` command gets from its
second run on, or after the Makefile's warm-up; tracing and lowering are still paid. Env steps
and episodes are counted up to the episode that completes the first solving window, not the
overshoot. privrl's agents each play CartPole with gravity 9.7, 9.8 or 9.9 (paper 000's private
environments); the 200-step cap is the same.

Stable-Baselines3 (run in a subprocess with `--sb3-python`, importing SB3 lazily):
`A2C("MlpPolicy", env, seed=s)` with every hyperparameter at its default, on ONE environment
(no make_vec_env; SB3 wraps it in Monitor and DummyVecEnv itself), where
`env = gymnasium.make("CartPole-v1", max_episode_steps=200)`. A callback reads each finished
episode's Monitor return, stops training at the step that completes the first solving window,
and otherwise training stops unsolved at `--sb3-max-steps`. Wall time runs from creating the env
to `learn()` returning. SB3 is timed with torch's default thread count and with 1 thread
(`--sb3-threads`; 0 = torch's default): extra torch threads spin, which costs a lot when other
jobs share the cores. Speedups are over the faster SB3 setting.

Imports (jax, torch) and process start-up are excluded on both sides. "other load" is the CPU
time other processes used during a timed run, in cores (from /proc/stat): contention.
Unsolved runs count as infinitely slow in the medians.

Setting up SB3 (never a dependency of privrl): the bench extra holds it, within
constraints.txt (`pip install -e '.[bench]'` with torch's CPU build; then `--sb3-python
.venv/bin/python`), or its own venv:

    python3 -m venv /tmp/sb3/venv
    /tmp/sb3/venv/bin/pip install torch==2.13.0   # first: the CPU build; no nvidia-* packages
    /tmp/sb3/venv/bin/pip install stable-baselines3 "gymnasium<1.4"   # must keep that torch

Running:

    .venv/bin/python benchmarks/bench_solve_time.py --sb3-python /tmp/sb3/venv/bin/python \\
        [--seeds 0 1 2 3 4] [--chunk 20] [--cache] [--json results.json]

This file imports only the standard library at the top, so the SB3 interpreter can run its
worker (`--sb3-worker SEED`) without privrl installed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from importlib import metadata
from typing import Any

TARGET = 195.0  # mean score to reach ...
WINDOW = 100  # ... over this many consecutive training episodes
MAX_EPISODE_STEPS = 200
PRIVRL_VARIANTS: dict[str, dict[str, Any]] = {
    "privrl PGC-A3C tuned non-private (C = 0.01, buffer 10)": {},
    "privrl PGC-A3C tuned, unclipped non-private (C = 1e9, buffer 1)": {
        "clip": 1e9, "buffer_size": 1},
}


# --- shared by both sides (standard library only) ---------------------------------------------
def system_busy_seconds() -> float:
    """CPU seconds all processes have used since boot (Linux /proc/stat), else nan."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return math.nan
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Clock:
    """Wall time of a run, and the CPU (in cores) that other processes used meanwhile."""

    def __init__(self) -> None:
        self.busy, self.cpu = system_busy_seconds(), time.process_time()
        self.t0 = time.perf_counter()

    def stop(self) -> tuple[float, float]:
        wall = time.perf_counter() - self.t0
        own = time.process_time() - self.cpu
        return wall, max(0.0, system_busy_seconds() - self.busy - own) / max(wall, 1e-9)


# --- SB3 side (runs under --sb3-python) -------------------------------------------------------
def sb3_worker(seed: int, max_steps: int, threads: int) -> dict[str, Any]:
    """A2C with default hyperparameters until solved or `max_steps`; one JSON-able record."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback

    default_threads = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)

    class StopWhenSolved(BaseCallback):
        """Counts finished episodes (Monitor's info) and stops when the window mean ≥ target."""

        def __init__(self) -> None:
            super().__init__()
            self.returns: deque[float] = deque(maxlen=WINDOW)
            self.episodes = 0
            self.solved = False

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.episodes += 1
                    self.returns.append(float(info["episode"]["r"]))
                    if len(self.returns) == WINDOW and sum(self.returns) >= TARGET * WINDOW:
                        self.solved = True
                        return False
            return True

    clock = Clock()
    env = gym.make("CartPole-v1", max_episode_steps=MAX_EPISODE_STEPS)
    model = A2C("MlpPolicy", env, seed=seed)
    callback = StopWhenSolved()
    model.learn(total_timesteps=max_steps, callback=callback)
    wall, other = clock.stop()
    return {
        "seed": seed, "solved": callback.solved, "wall_s": wall, "steps": int(model.num_timesteps),
        "episodes": callback.episodes, "other_load": other, "n_envs": model.n_envs,
        "torch_threads": torch.get_num_threads(),
        "versions": {"python": sys.version.split()[0], "stable-baselines3":
                     stable_baselines3.__version__, "torch": torch.__version__,
                     "gymnasium": gym.__version__, "numpy": np.__version__,
                     "torch default threads": default_threads},
    }


def run_sb3(python: str, seed: int, max_steps: int, threads: int) -> dict[str, Any]:
    cmd = [python, os.path.abspath(__file__), "--sb3-worker", str(seed),
           "--sb3-max-steps", str(max_steps), "--sb3-threads", str(threads)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- privrl side (this process) ---------------------------------------------------------------
def first_solved(tail: Any, new: Any) -> int | None:
    """Index in `new` of the episode completing the first window with mean ≥ TARGET, if any.

    `tail` holds the (up to WINDOW - 1) scores before `new`, so windows may straddle chunks.
    """
    import numpy as np

    scores = np.concatenate([tail, new]).astype(np.int64)
    if scores.size < WINDOW:
        return None
    sums = np.cumsum(np.concatenate([[0], scores]))
    hit = np.flatnonzero(sums[WINDOW:] - sums[:-WINDOW] >= TARGET * WINDOW)
    return None if hit.size == 0 else int(hit[0]) + WINDOW - 1 - len(tail)


def solve_privrl(make_runner: Callable[[], Any], seed: int, max_episodes: int) -> dict[str, Any]:
    """Run chunks from a fresh trial until solved; the clock includes `make_runner()`."""
    import jax
    import numpy as np

    clock = Clock()
    runner = make_runner()
    state = runner.init(jax.random.key(seed))
    tail = np.zeros(0, np.int64)
    episodes = steps = 0
    first_chunk_s = None
    while episodes < max_episodes:
        state, chunk = runner.run_chunk(state)
        chunk = np.asarray(chunk)[0]
        chunk = chunk[np.isfinite(chunk)][: max_episodes - episodes]  # NaN: past the cap
        if first_chunk_s is None:
            first_chunk_s = time.perf_counter() - clock.t0
        hit = first_solved(tail, chunk)
        if hit is not None:
            wall, other = clock.stop()
            return {"seed": seed, "solved": True, "wall_s": wall, "first_chunk_s": first_chunk_s,
                    "steps": steps + int(chunk[: hit + 1].sum()), "episodes": episodes + hit + 1,
                    "other_load": other}
        episodes += chunk.size
        steps += int(chunk.sum())
        tail = np.concatenate([tail, chunk])[-(WINDOW - 1):]
    wall, other = clock.stop()
    return {"seed": seed, "solved": False, "wall_s": wall, "first_chunk_s": first_chunk_s,
            "steps": steps, "episodes": episodes, "other_load": other}


def privrl_config(overrides: dict[str, Any], seed: int, max_episodes: int) -> Any:
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

    return PGCA3CConfig.from_preset("tuned", mechanism="none", trials=1,
                                    submissions=max_episodes, seed=seed, **overrides)


def privrl_cold(overrides: dict[str, Any], seed: int, chunk: int, max_episodes: int) -> dict:
    """Everything from constructing the algorithm, compilation included."""
    import jax

    from privrl.systems.pgc_a3c.algorithm import PGCA3C
    from privrl.systems.pgc_a3c.local import ShardedTrials

    jax.clear_caches()  # every seed compiles from scratch
    cfg = privrl_config(overrides, seed, max_episodes)
    return solve_privrl(lambda: ShardedTrials(PGCA3C(cfg), 1, chunk, devices=1), seed,
                        max_episodes)


def use_cache(path: str) -> None:
    """Turn JAX's persistent compilation cache on at `path`, keeping what privrl keeps."""
    import jax

    from privrl.compute.devices import CACHE_MIN_COMPILE_SECONDS

    jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_dir", path)


def privrl_fill(overrides: dict[str, Any], chunk: int, max_episodes: int) -> None:
    """Compile a variant's programs once, untimed (into the persistent cache, if on)."""
    import jax

    from privrl.systems.pgc_a3c.algorithm import PGCA3C
    from privrl.systems.pgc_a3c.local import ShardedTrials

    jax.clear_caches()
    runner = ShardedTrials(PGCA3C(privrl_config(overrides, 0, max_episodes)), 1, chunk, devices=1)
    jax.block_until_ready(runner.run_chunk(runner.init(jax.random.key(0))))


def privrl_warm(overrides: dict[str, Any], seeds: list[int], chunk: int,
                max_episodes: int) -> dict[int, dict]:
    """The same runs with one runner compiled beforehand (the seed only picks the init key)."""
    import jax

    from privrl.systems.pgc_a3c.algorithm import PGCA3C
    from privrl.systems.pgc_a3c.local import ShardedTrials

    runner = ShardedTrials(PGCA3C(privrl_config(overrides, 0, max_episodes)), 1, chunk, devices=1)
    jax.block_until_ready(runner.run_chunk(runner.init(jax.random.key(0))))  # compile
    return {s: solve_privrl(lambda: runner, s, max_episodes) for s in seeds}


# --- report -----------------------------------------------------------------------------------
def machine_info() -> list[str]:
    model = platform.processor() or platform.machine()
    mem = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
        with open("/proc/meminfo") as f:
            mem = f", {int(f.readline().split()[1]) / 2**20:.1f} GiB memory"
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [f"machine: {model}, {os.cpu_count()} cores{mem}, no GPU used; {platform.platform()}",
            f"load average at start (1, 5, 15 min): {load}"]


def privrl_versions() -> str:
    names = ("privrl", "jax", "jaxlib", "flax", "optax", "gymnax", "numpy")
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return f"python {sys.version.split()[0]}, " + ", ".join(found)


def fmt_s(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.2f}" if math.isfinite(x) else "unsolved"


def median_wall(rows: list[dict]) -> float:
    return statistics.median(r["wall_s"] if r["solved"] else math.inf for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sb3-python", help="the SB3 venv's python (without it: privrl side only)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--chunk", type=int, default=20, help="privrl rounds per jitted call (×9 ep.)")
    ap.add_argument("--privrl-max-episodes", type=int, default=500_000,
                    help="privrl cap (its submissions): unsolved past this")
    ap.add_argument("--sb3-max-steps", type=int, default=300_000,
                    help="SB3 cap in env steps: unsolved past this")
    ap.add_argument("--sb3-threads", type=int, nargs="+", default=[0, 1],
                    help="torch thread counts to time SB3 with (0 = torch's default)")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm privrl runs")
    ap.add_argument("--cache", action="store_true",
                    help="also time privrl with JAX's persistent cache filled beforehand")
    ap.add_argument("--json", help="also write every run's record to this file")
    ap.add_argument("--sb3-worker", type=int, metavar="SEED", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.sb3_worker is not None:
        print(json.dumps(sb3_worker(args.sb3_worker, args.sb3_max_steps, args.sb3_threads[0])))
        return

    import jax  # the backend starts here, before any clock (like torch's import on SB3's side)

    jax.devices()
    command = shlex.join([os.path.relpath(sys.executable), *sys.argv])
    print(f"# Time to solve CartPole (mean of {WINDOW} consecutive training episodes ≥ "
          f"{TARGET:g}, {MAX_EPISODE_STEPS}-step cap), non-private\n")
    print(f"command: `{command}`  ")
    for line in machine_info():
        print(f"{line}  ")
    print(f"privrl side: {privrl_versions()}  ")
    print(f"privrl: chunk = {args.chunk} rounds = {args.chunk * 9} episodes per jitted call; "
          f"cap {args.privrl_max_episodes:,} episodes  ")
    print(f"SB3: A2C defaults, n_envs = 1, cap {args.sb3_max_steps:,} steps\n", flush=True)

    sb3_labels = {t: f"SB3 A2C defaults, torch threads = {'default' if t == 0 else t}"
                  for t in args.sb3_threads}
    cold: dict[str, list[dict]] = {name: [] for name in PRIVRL_VARIANTS}
    if args.sb3_python:
        cold.update({label: [] for label in sb3_labels.values()})
    for seed in args.seeds:  # interleaved, so that contention from other jobs spreads evenly
        for name, overrides in PRIVRL_VARIANTS.items():
            cold[name].append(privrl_cold(overrides, seed, args.chunk, args.privrl_max_episodes))
        if args.sb3_python:
            for t, label in sb3_labels.items():
                cold[label].append(run_sb3(args.sb3_python, seed, args.sb3_max_steps, t))
        print(f"seed {seed} done: " + ", ".join(f"{fmt_s(rows[-1]['wall_s'])} s"
                                                 for rows in cold.values()),
              file=sys.stderr, flush=True)
    cached: dict[str, list[dict]] = {}
    if args.cache:
        import tempfile

        use_cache(tempfile.mkdtemp(prefix="bench-solve-cache-"))
        for name, overrides in PRIVRL_VARIANTS.items():
            privrl_fill(overrides, args.chunk, args.privrl_max_episodes)
            cached[name] = [privrl_cold(overrides, seed, args.chunk, args.privrl_max_episodes)
                            for seed in args.seeds]
    warm = {} if args.no_warm else {
        name: privrl_warm(overrides, args.seeds, args.chunk, args.privrl_max_episodes)
        for name, overrides in PRIVRL_VARIANTS.items()
    }

    if args.sb3_python:
        first = cold[sb3_labels[args.sb3_threads[0]]][0]["versions"]
        print("SB3 side: " + ", ".join(f"{k} {v}" for k, v in first.items()) + "\n")
    print("| implementation | seed | solved | wall to solve (s) | env steps | episodes "
          "| first chunk incl. compile (s) | with the cache (s) | warm wall (s) "
          "| other load (cores) |")
    print("|---|---:|:---:|---:|---:|---:|---:|---:|---:|---:|")
    notes: list[str] = []
    for name, rows in cold.items():
        for r in rows:
            w = warm.get(name, {}).get(r["seed"])
            c = next((x for x in cached.get(name, []) if x["seed"] == r["seed"]), None)
            print(f"| {name} | {r['seed']} | {'y' if r['solved'] else 'n'} | {fmt_s(r['wall_s'])} "
                  f"| {r['steps']:,} | {r['episodes']:,} | {fmt_s(r.get('first_chunk_s'))} "
                  f"| {fmt_s(c and c['wall_s'])} | {fmt_s(w and w['wall_s'])} "
                  f"| {r['other_load']:.2f} |")
            if c and (c["episodes"], c["solved"]) != (r["episodes"], r["solved"]):
                notes.append(f"- note: {name}, seed {r['seed']}: the run with the cache "
                             f"differed ({c['episodes']:,} episodes)")
            if w and (w["episodes"], w["solved"]) != (r["episodes"], r["solved"]):
                notes.append(f"- note: {name}, seed {r['seed']}: the warm run differed "
                             f"({w['episodes']:,} episodes)")

    print()
    for note in notes:
        print(note)
    medians = {name: median_wall(rows) for name, rows in cold.items()}
    for name, med in medians.items():
        extra = ""
        if name in cached:
            extra += f", with the cache {fmt_s(median_wall(cached[name]))} s"
        if name in warm:
            extra += f", warm {fmt_s(median_wall(list(warm[name].values())))} s"
        print(f"- median wall to solve, {name}: {fmt_s(med)} s{extra}")
    sb3_best = min((medians[label] for label in sb3_labels.values() if label in medians),
                   default=None)
    if sb3_best is not None:
        for name in PRIVRL_VARIANTS:
            speedup = sb3_best / medians[name] if math.isfinite(medians[name]) else 0.0
            print(f"- speedup of {name} over the faster SB3 median ({fmt_s(sb3_best)} s): "
                  f"{speedup:.1f}× cold (goal ≥ 20×)")
            if name in cached:
                med = median_wall(cached[name])
                print(f"- the same with the cache: "
                      f"{sb3_best / med if math.isfinite(med) else 0.0:.1f}×")
    print(f"\nload average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, "cold": cold, "cached": cached,
                       "warm": {k: list(v.values()) for k, v in warm.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
