"""Gymnasium at speed: privrl's host stepping against a plain random-policy vector-env loop.

Issue 39's goal: on CartPole-v1 with the same number of environments N, privrl's Gymnasium
path steps at least half as many environment steps per second as a random-policy loop over
`gymnasium.make_vec(..., vectorization_mode="sync")`. Three readings per N (median of repeats):

- `vector`: the random loop (`action_space.sample()`, `step`; the vector env resets finished
  episodes itself), env steps per second (also per CPU-second of the process: on a shared
  machine the load varies between readings, so the readings are interleaved, and the rollout's
  ratio is given per CPU-second too);
- `rollout`: `envs.rollout.rollout_host` (what every system's Gymnasium episodes go through)
  with a PGC-A3C policy network called once per step on all N observations (jitted), episodes
  of up to 500 steps, env steps per second of live episodes;
- `pgc-a3c`: the whole training run, `privrl run pgc-a3c --env gymnasium:CartPole-v1 --preset
  tuned --mechanism none` with N = `--parallel-agents` (rollouts, gradients, aggregator): env
  steps (the sum of the episodes' lengths) per second of training after the first chunk's
  compile (wall − the summary's compile seconds, which include the first chunk's steps: a
  lower bound on the time, so this reading errs high by at most that chunk's share). With
  `--trials T`, N = T trials × N/T agents, every trial's agents acting in one policy call.

This process runs JAX's CPU computations in the calling thread (`run_cpu_inline`), as the
`privrl` process does; `--queued` keeps JAX's default in both (each call queued onto a worker
thread, as before; PRIVRL_CPU_DISPATCH=queued for the training runs), for an A/B.

    python benchmarks/bench_gymnasium.py [--envs 9 64] [--repeats 5] [--seconds 2] [--trials 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np


def vector_loop(n: int, seconds: float) -> tuple[float, float]:
    """Env steps per second (wall, and per CPU-second of this process) of a random policy
    over a synchronous vector env of n."""
    import gymnasium

    venv = gymnasium.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")
    venv.reset(seed=0)
    venv.action_space.seed(0)
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            venv.step(venv.action_space.sample())
        steps += 100 * n
    return steps / (time.perf_counter() - start), steps / (time.process_time() - cpu)


def rollout_loop(n: int, seconds: float) -> tuple[float, float]:
    """Env steps per second (wall, per CPU-second) of `rollout_host` with PGC-A3C's jitted
    policy on n envs."""
    from functools import partial

    from privrl.envs.rollout import rollout_host
    from privrl.envs.task import gymnasium_task
    from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig

    task = gymnasium_task("CartPole-v1")
    algo = PGCA3C(PGCA3CConfig.from_preset("tuned", mechanism="none").resolved(), task)
    theta = algo.init(jax.random.key(0)).agg.theta
    policy = partial(algo._act, theta, np.float32(0.0))
    envs = task.envs(n)
    rollout_host(envs, policy, jax.random.key(0), 500)  # compile the policy
    steps, start, cpu, i = 0, time.perf_counter(), time.process_time(), 1
    while time.perf_counter() - start < seconds:
        traj = rollout_host(envs, policy, jax.random.key(i), 500)
        steps, i = steps + int(traj.mask.sum()), i + 1
    return steps / (time.perf_counter() - start), steps / (time.process_time() - cpu)


def training(n: int, submissions: int, trials: int = 1) -> float:
    """Env steps per second of a non-private PGC-A3C training run with n environments:
    `trials` trials of n / trials parallel agents."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "privrl", "run", "pgc-a3c", "--env",
                        "gymnasium:CartPole-v1", "--preset", "tuned", "--mechanism", "none",
                        "--parallel-agents", str(n // trials), "--trials", str(trials),
                        "--submissions",
                        str(submissions), "--seed", "0", "--no-progress", "--out", str(out)],
                       check=True, capture_output=True)
        summary = json.loads((out / "summary.json").read_text())
        steps = float(np.loadtxt(out / "metrics.csv", delimiter=",", skiprows=1,
                                 usecols=2).sum())  # CartPole's return is its length
        return steps / (summary["wall_seconds"] - summary["compile_seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--envs", type=int, nargs="+", default=[9, 64])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="per loop reading")
    ap.add_argument("--submissions", type=int, default=3000, help="per training reading")
    ap.add_argument("--trials", type=int, default=1, help="training: N = trials × agents")
    ap.add_argument("--queued", action="store_true",
                    help="JAX's default queued CPU dispatch (not `run_cpu_inline`)")
    args = ap.parse_args()
    from privrl.compute.devices import run_cpu_inline

    if args.queued:
        os.environ["PRIVRL_CPU_DISPATCH"] = "queued"  # this process and the training runs
    elif not run_cpu_inline():
        raise SystemExit("JAX's backend started before run_cpu_inline")
    import gymnasium

    print(f"# {platform.node()} {platform.machine()} python {platform.python_version()} "
          f"jax {jax.__version__} gymnasium {gymnasium.__version__}; median of {args.repeats}; "
          f"training: {args.trials} trial(s); "
          f"{'queued' if args.queued else 'inline'} CPU dispatch; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| N envs | vector (random) steps/s | rollout_host steps/s | ratio | ratio per CPU-s | "
          "pgc-a3c training steps/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for n in args.envs:  # the readings interleaved, so that a shared machine's load hits all
        vec, roll, train = [], [], []
        for _ in range(args.repeats):
            vec.append(vector_loop(n, args.seconds))
            roll.append(rollout_loop(n, args.seconds))
            train.append(training(n, args.submissions, args.trials))
        med = statistics.median
        v, r, t = med(x[0] for x in vec), med(x[0] for x in roll), med(train)
        cpu = med(x[1] for x in roll) / med(x[1] for x in vec)
        print(f"| {n} | {v:,.0f} | {r:,.0f} | {r / v:.2f} | {cpu:.2f} | {t:,.0f} | {t / v:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
