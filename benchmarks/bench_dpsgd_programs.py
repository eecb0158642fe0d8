"""Each program of `privrl reproduce dpsgd-rl`, timed in-process chunk by chunk.

For every group of `reproduce.programs` (REINFORCE's settings; DP-SGD DQN's; LDP DQN's), runs
`run_episodic_settings` and prints the program's wall time and, per chunk of 50 episodes,
`seconds/rows in the batch/seeds still running` (a chunk's rows fall when the batch is
compacted). What the steps table of benchmarks/log/04-*.md's "The sweep as three programs" reports.

    PRIVRL_CACHE_DIR=off python benchmarks/bench_dpsgd_programs.py --algorithms reinforce
    PRIVRL_CACHE_DIR=off python benchmarks/bench_dpsgd_programs.py --algorithms dqn \\
        --seeds-dqn 3 --episodes 300
"""

from __future__ import annotations

import argparse
import time

from privrl.compute.devices import use_host_devices

use_host_devices()

from privrl.systems.dpsgd_rl import local  # noqa: E402
from privrl.systems.dpsgd_rl.reproduce import SweepConfig, programs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", default="reinforce,dqn")
    ap.add_argument("--seeds-reinforce", type=int, default=5)
    ap.add_argument("--seeds-dqn", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=1000)
    args = ap.parse_args()
    cfg = SweepConfig(algorithms=tuple(args.algorithms.split(",")),
                      seeds_reinforce=args.seeds_reinforce, seeds_dqn=args.seeds_dqn,
                      episodes=args.episodes)
    compact, chunks = local._compact, []
    last = [0.0]

    def timed(state, trial, stopped, devices):  # called after every chunk but the last
        now = time.perf_counter()
        chunks.append(f"{now - last[0]:.1f}/{trial.size}/{int((~stopped).sum())}")
        last[0] = now
        return compact(state, trial, stopped, devices)

    local._compact = timed
    for group in programs(cfg.settings()):
        algos = [cfg.make(s) for s in group]
        algo = type(algos[0]).for_settings([a.config for a in algos])
        start = last[0] = time.perf_counter()
        local.run_episodic_settings(algo, [s.name for s in group])
        print(f"{group[0].kind}-{group[0].algorithm} ({len(group)} settings): "
              f"{time.perf_counter() - start:.1f} s")
        print("  per chunk (s/rows/running):", " ".join(chunks))
        chunks.clear()


if __name__ == "__main__":
    main()
