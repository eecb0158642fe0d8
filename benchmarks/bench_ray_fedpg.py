"""FedPG-Dec on Ray (nodes as actors gossiping push-sum shares peer to peer) vs the local runner
(all nodes vectorized in one XLA program), on the same work: one trial, K nodes, the same seed,
--budget episodes per node. Both produce the same run (tests/test_ray_runtime.py checks it);
this measures what the transport costs.

Reported per runtime: wall time (the Ray row includes starting the cluster and every actor's
JIT compile, which is what a user waits for), the compile time (local: the first round; Ray:
starting the actors and their staggered warm-up with a fresh persistent compilation cache, as the
CLI uses one; both plus the first round), steady rounds/s after it, and for Ray the push-sum
messages per second in the steady part. Median of --repeats.

    python benchmarks/bench_ray_fedpg.py [--agents 10] [--budget 400] [--topology exponential]
                                         [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

from privrl.systems.fedpg.algorithm import FedPGConfig, build_topology
from privrl.systems.fedpg.local import run_fedpg
from privrl.systems.fedpg.ray import run_fedpg_dec_ray


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--budget", type=int, default=400)
    ap.add_argument("--topology", default="exponential")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = FedPGConfig.from_preset("paper", algorithm="dec", topology=args.topology,
                                  agents=args.agents, budget=args.budget)
    topology = build_topology(cfg.resolved())

    rows: dict[str, list[dict[str, float]]] = {"local": [], "ray": []}
    for _ in range(args.repeats):
        start = time.perf_counter()
        run = run_fedpg(cfg)
        rows["local"].append(_row(run, time.perf_counter() - start, 0))
        with tempfile.TemporaryDirectory() as d:
            start = time.perf_counter()
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"XLA_FLAGS": "",
                                               "JAX_COMPILATION_CACHE_DIR": f"{d}/cache"}})
            try:
                run_r, _ = run_fedpg_dec_ray(cfg, Path(d) / "nodes")
            finally:
                ray.shutdown()
            wall = time.perf_counter() - start
        messages = sum(int(np.count_nonzero(topology.matrix(t)) - args.agents)
                       for t in range(run_r.rounds_run))
        rows["ray"].append(_row(run_r, wall, messages))
        assert run_r.rounds_run == run.rounds_run and np.allclose(run_r.z, run.z, atol=1e-4)

    print(f"FedPG-Dec ({args.topology}, K = {args.agents}, {args.budget} episodes per node, "
          f"{rows['local'][0]['rounds']:.0f} rounds), median of {args.repeats}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"ray {ray.__version__}")
    print("| runtime | wall (s) | compile (s) | steady rounds/s | messages/s |")
    print("|---|---|---|---|---|")
    for name, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        msg = f"{med['messages_per_s']:,.0f}" if name == "ray" else "–"
        print(f"| {name} | {med['wall']:.1f} | {med['first']:.1f} | {med['rounds_per_s']:.2f} | "
              f"{msg} |")


def _row(run: object, wall: float, messages: int) -> dict[str, float]:
    steady = max(run.wall_seconds - run.compile_seconds, 1e-9)
    return {"wall": wall, "first": run.compile_seconds, "rounds": run.rounds_run,
            "rounds_per_s": (run.rounds_run - 1) / steady,
            "messages_per_s": messages / steady}


if __name__ == "__main__":
    main()
