"""Steady-state cost of the reproduction's program: one chunk (111 rounds) of one setting's
trials against one chunk of all 9 settings' trials as one program (`privrl reproduce pgc-a3c`),
and against one chunk of the one setting run with as many trials as the sweep (9 × 20): the
floor, on these cores, of what 9 settings' trials cost when nothing but their number differs.

All three are the local runner's sharded program (paper preset, 20 trials per setting, the host's
devices); each chunk's process CPU time and wall time are measured after the first two chunks
(compilation, and the exploration phase, whose chunks cost more), and the median of the rest
is reported. What issue 21 compares: the whole sweep's cost against one setting's.

    python benchmarks/bench_sweep_chunk.py [--chunks 5] [--preset paper] [--ablate loss]

`--ablate` profiles by removal: "loss" makes the loss a constant (no gradient work), "reports"
makes the aggregator ignore reports (so XLA drops the gradients and the mechanisms too: what
is left is the rollout). Ablated runs learn nothing, so their episodes are not a real run's.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("PRIVRL_CACHE_DIR", "off")
from privrl.compute.devices import use_host_devices


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--chunks", type=int, default=5, help="timed chunks (after 2 untimed)")
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--ablate", choices=["none", "loss", "reports"], default="none")
    args = ap.parse_args()
    use_host_devices()

    import jax
    import numpy as np

    from privrl.compute.sharding import setting_trial_keys, trial_devices
    from privrl.systems.pgc_a3c.algorithm import PGCA3C, settings_algorithm, trial_group
    from privrl.systems.pgc_a3c.local import ShardedTrials, _seeded_by_default
    from privrl.systems.pgc_a3c.reproduce import SweepConfig

    if args.ablate == "loss":
        PGCA3C.episode_loss = lambda self, theta, traj: jax.numpy.sum(theta) * 0.0
    elif args.ablate == "reports":
        PGCA3C.receive = lambda self, agg, report, setting: agg
    sweep = SweepConfig(preset=args.preset, trials=args.trials)
    every = [_seeded_by_default(sweep.run_config(s)) for s in sweep.settings()]
    one = [c for c in every if c.mechanism == "laplace" and c.epsilon == 5.0]
    k = args.trials
    print(f"# {platform.machine()}, {os.cpu_count()} cores, {jax.local_device_count()} devices, "
          f"python {sys.version.split()[0]}, jax {jax.__version__}; preset {args.preset}, "
          f"{k} trials per setting, ablate {args.ablate}")
    print("| program | trials | CPU-s per chunk | wall s per chunk |")
    print("|---|---:|---:|---:|")
    programs = (("one setting (Laplace ε = 5)", one, k),
                ("9 settings as one program", every, k),
                (f"one setting with {len(every) * k} trials", one, len(every) * k))
    for name, configs, own in programs:
        algo = settings_algorithm(configs)  # as run_pgc_a3c(_settings) builds it
        trials = len(configs) * own
        runner = ShardedTrials(algo, trials, 111, None, trial_group(own, trial_devices(own)))
        keys = setting_trial_keys(0, own, len(configs), runner.padded, None)
        state = runner.init_keys(keys, "seeded")
        index = np.repeat(np.arange(len(configs)), own)
        index = np.concatenate([index, np.zeros(runner.padded - index.size, int)])
        state = state._replace(setting=algo.setting_data(index))
        cpu, wall = [], []
        for i in range(2 + args.chunks):
            t0, c0 = time.perf_counter(), time.process_time()
            state, _ = runner.run_chunk(state)
            if i >= 2:
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        print(f"| {name} | {trials} | {statistics.median(cpu):.2f} | "
              f"{statistics.median(wall):.2f} |", flush=True)


if __name__ == "__main__":
    main()
