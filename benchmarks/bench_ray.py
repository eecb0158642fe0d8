"""Reports per second through the Ray aggregator actor, and the Ray runner vs the local runner.

1. Throughput of the aggregator side: pre-made PGC-A3C Submissions (d = 112, Laplace ε = 5,
   |B| = 1, paper preset) go through (a) `AggregatorService.submit` in this process (no
   transport), (b) the aggregator actor one `submit.remote` at a time (each awaited), and
   (c) the actor with `submit_many.remote` batches of --batch submissions. Every accepted report
   is validated, deduplicated, charged to the ledger, applied and appended (flushed) to the log.
2. The same work end to end: one PGC-A3C trial of --submissions submissions with the local
   runner (`privrl.systems.pgc_a3c.local`, vectorized, 2 host devices) and with the Ray runner
   (agent actors + the aggregator actor, --agents-in-flight agents).

Each throughput row is the median of --repeats; the end-to-end rows are single runs (they
include Ray's start-up and each actor's JIT compilation, which is what a user waits for).

    python benchmarks/bench_ray.py [--reports 5000] [--batch 500] [--repeats 5]
                                   [--submissions 900] [--agents-in-flight 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from privrl.compute.devices import use_host_devices

use_host_devices()

import jax  # noqa: E402
import ray  # noqa: E402

from privrl.federation.service import AggregatorService, AggregatorSpec, Submission  # noqa: E402
from privrl.privacy.ledger import PrivacyLedger  # noqa: E402
from privrl.systems.pgc_a3c import local  # noqa: E402
from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig  # noqa: E402
from privrl.systems.pgc_a3c.ray import AggregatorActor, run_pgc_a3c_ray  # noqa: E402


def submissions(algo: PGCA3C, n: int, offset: int) -> list[Submission]:
    keys = jax.random.split(jax.random.key(offset), n)
    grads = jax.random.normal(jax.random.key(1), (n, algo.dim)) * 0.01
    reports = jax.vmap(algo.mechanism.privatize)(keys, grads)
    values = np.asarray(reports.value)
    from privrl.privacy.report import restore_report

    return [Submission(offset + i, 0, restore_report(values[i], algo.mechanism.guarantee))
            for i in range(n)]


def service_args(algo: PGCA3C, cfg: PGCA3CConfig, n_agents: int, directory: str) -> tuple:
    spec = AggregatorSpec(algo.dim, cfg.buffer_size, cfg.server_optimizer, cfg.learning_rate)
    theta0 = np.zeros(algo.dim, np.float32)
    return (spec, theta0, n_agents, PrivacyLedger(cfg.epsilon), algo.mechanism.guarantee,
            directory, 10**9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--submissions", type=int, default=900)
    ap.add_argument("--agents-in-flight", type=int, default=2)
    args = ap.parse_args()
    cfg = PGCA3CConfig(epsilon=5.0).resolved()
    algo = PGCA3C(cfg)
    n, reps = args.reports, args.repeats
    total = n * (reps + 1)
    subs = submissions(algo, total, 0)
    rows = []

    tmp = Path(tempfile.mkdtemp())
    svc = AggregatorService(*service_args(algo, cfg, total, str(tmp / "inproc")))
    times = []
    for r in range(reps + 1):
        t = time.perf_counter()
        for s in subs[r * n:(r + 1) * n]:
            svc.submit(s)
        times.append(time.perf_counter() - t)
    rows.append(("AggregatorService.submit, in process", n / np.median(times[1:])))

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    actor = ray.remote(num_cpus=0)(AggregatorActor)
    for name, batched in (("actor, one awaited submit.remote per report", False),
                          (f"actor, submit_many.remote batches of {args.batch}", True)):
        agg = actor.remote(*service_args(algo, cfg, total, str(tmp / name.split(",")[1][:8])))
        ray.get(agg.theta.remote())
        times = []
        for r in range(reps + 1):
            chunk = subs[r * n:(r + 1) * n]
            t = time.perf_counter()
            if batched:
                refs = [agg.submit_many.remote(chunk[i:i + args.batch])
                        for i in range(0, n, args.batch)]
                verdicts = [v for ref in refs for v in ray.get(ref)]
            else:
                verdicts = [ray.get(agg.submit.remote(s)) for s in chunk]
            times.append(time.perf_counter() - t)
            assert all(v.accepted for v in verdicts)
        rows.append((name, n / np.median(times[1:])))
    ray.shutdown()

    e2e = PGCA3CConfig(submissions=args.submissions, epsilon=5.0)
    t = time.perf_counter()
    local.run_pgc_a3c(e2e)
    local_s = time.perf_counter() - t
    t = time.perf_counter()
    run_pgc_a3c_ray(e2e, tmp / "e2e", agents_in_flight=args.agents_in_flight)
    ray_s = time.perf_counter() - t

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"ray {ray.__version__}; d = {algo.dim}, |B| = {cfg.buffer_size}; "
          f"median of {reps} × {n} reports")
    print("| path | reports / s |")
    print("|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")
    print()
    print(f"| one trial, {args.submissions} submissions | wall time |")
    print("|---|---|")
    print(f"| local runner (vectorized, jit, incl. compile) | {local_s:.1f} s |")
    print(f"| Ray runner ({args.agents_in_flight} agent actors, incl. Ray start and "
          f"per-actor compile) | {ray_s:.1f} s |")


if __name__ == "__main__":
    main()
