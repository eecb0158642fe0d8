"""Throughput of the PGC-A3C round: episodes/s and env steps/s at P × K parallel agents.

P = 9 agents per trial (the paper's threads) and K trials, so P × K = 9, 180, 1800 agents act
at once. Each measurement is one jitted chunk of rounds (rollouts with early exit, per-agent
gradients, the mechanism, and the aggregator's sequential application), timed after a warm-up
call that compiles it; the median of the repeats is reported.

    python benchmarks/bench_round.py [--devices 1 2] [--repeats 5] [--mechanism laplace]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from privrl.compute.devices import use_host_devices


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[9, 180, 1800],
                    help="P × K totals to measure (multiples of 9)")
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20_000,
                    help="approximate episodes per timed call")
    ap.add_argument("--mechanism", default="laplace", choices=["laplace", "prs", "none"])
    ap.add_argument("--group", type=int, nargs="+", default=None,
                    help="trials computed together (PGCA3C.round's block), one per --agents "
                    "total; default: the run's own (at most the config's trial_block, 10, sized "
                    "for a CPU cache; an accelerator wants thousands)")
    ap.add_argument("--waves", type=int, nargs="+", default=None,
                    help="per --agents total: its trials as this many equal batches computed one "
                    "after another within each timed call (a total whose episodes do not fit in "
                    "the device's memory at once); default 1")
    args = ap.parse_args()
    if args.waves is not None and len(args.waves) != len(args.agents):
        ap.error("--waves takes one count per --agents total")
    if args.group is not None and len(args.group) != len(args.agents):
        ap.error("--group takes one block size per --agents total")
    use_host_devices(max(args.devices))

    import jax
    import numpy as np

    from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig, trial_group
    from privrl.systems.pgc_a3c.local import ShardedTrials

    print(f"# jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"mechanism {args.mechanism}")
    print(f"# devices: {jax.devices()}")
    print("| agents (P×K) | devices | block | waves | rounds/call | compile + first call "
          "| episodes/s | env steps/s | mean score |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, total in enumerate(args.agents):
        waves = 1 if args.waves is None else args.waves[n]
        trials = max(1, total // 9 // waves)
        rounds = max(1, args.episodes // total)
        cfg = PGCA3CConfig(mechanism=args.mechanism, epsilon=5.0, trials=trials,
                           submissions=10**9)
        algo = PGCA3C(cfg)
        for dev in args.devices:
            if dev > trials:
                continue
            group = (trial_group(trials, dev, cfg.trial_block) if args.group is None
                     else min(args.group[n], trials))
            runner = ShardedTrials(algo, trials, rounds, dev, group)
            states = [runner.init(jax.random.key(w)) for w in range(waves)]
            t0 = time.perf_counter()
            states[0], scores = runner.run_chunk(states[0])  # compile + warm-up
            jax.block_until_ready(scores)
            first = time.perf_counter() - t0
            times, steps, episodes = [], [], []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                total_steps = total_episodes = 0
                for w in range(waves):
                    states[w], scores = runner.run_chunk(states[w])  # (trials, ...) on host
                    total_steps += int(scores.sum())
                    total_episodes += scores.size
                times.append(time.perf_counter() - t0)
                steps.append(total_steps)
                episodes.append(total_episodes)
            i = int(np.argsort(times)[len(times) // 2])
            med = statistics.median(times)
            print(f"| {trials * 9 * waves:,} | {dev} | {group:,} | {waves} | {rounds} | "
                  f"{first:.1f} s | {episodes[i] / med:,.0f} | "
                  f"{steps[i] / med:,.0f} | {steps[i] / episodes[i]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
