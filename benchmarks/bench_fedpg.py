"""Throughput of FedPG-Cen / FedPG-Dec: rounds/s and episodes/s of whole runs.

Each setting runs `privrl.systems.fedpg.local.run_fedpg` (paper preset, K = 10, CartPole-v1 with
500-step episodes) for `--budget` episodes per agent and `--trials` seeds vmapped together;
the first round (which compiles) is excluded from the rates; the median over `--repeats`
runs is reported. Early rounds are cheap (short episodes), late ones dear (500 steps), so
rates depend on how fast a run learns: compare settings at the same budget.

    python benchmarks/bench_fedpg.py [--budget 5000] [--trials 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

from privrl.compute.devices import use_compilation_cache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", nargs="+",
                    default=["cen", "dec-ring", "dec-exponential", "dec-random", "single"])
    args = ap.parse_args()
    use_compilation_cache()

    from privrl.output import versions
    from privrl.systems.fedpg.algorithm import FedPGConfig
    from privrl.systems.fedpg.local import run_fedpg

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"budget {args.budget} episodes/agent, {args.trials} seed(s), "
          f"median of {args.repeats}; {versions()}")
    print("| setting | rounds | rounds/s | episodes/s | wall s (incl. compile) |")
    print("|---|---:|---:|---:|---:|")
    for name in args.settings:
        algo, _, topo = name.partition("-")
        kw = dict(trials=args.trials, budget=args.budget)
        if name == "single":
            cfg = FedPGConfig(algorithm="cen", agents=1, **kw)
        else:
            cfg = FedPGConfig(algorithm=algo, topology=topo or "ring", **kw)
        rates, eps, walls, rounds = [], [], [], []
        for r in range(args.repeats):
            run = run_fedpg(FedPGConfig(**{**cfg.to_dict(), "seed": r}))
            steady = run.wall_seconds - run.compile_seconds
            rates.append((run.rounds_run - 1) / steady)
            eps.append(run.episodes_played / steady)
            walls.append(run.wall_seconds)
            rounds.append(run.rounds_run)
        print(f"| {name} | {statistics.median(rounds):.0f} | {statistics.median(rates):.1f} | "
              f"{statistics.median(eps):,.0f} | {statistics.median(walls):.1f} |", flush=True)


if __name__ == "__main__":
    main()
