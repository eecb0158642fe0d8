"""DP Q-learning (paper 001): the cost of the functional noise and of a training run.

1. One episode's noise workload for the online network — 50 acting queries and 50 batches of
   128 replay states, 6,450 queries — answered (a) by the host reference `GPNoiseFunction`
   (numpy + bisect, one query at a time, as the authors' code) and (b) by the JAX store in one
   jitted `scan` of 50 batched queries. Median of the repeats, after a warm-up (compile) call.
2. Training: 100 episodes (5,000 steps) for R runs vmapped in one jitted program and split over
   1 or 2 host devices (cores), compiled first; median wall time of the repeats, σ = 0.5 and 0.

    python benchmarks/bench_dpql.py [--repeats 5] [--runs 1 10 60] [--devices 1 2]
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
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 10, 60])
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    use_host_devices(max(args.devices))

    import jax
    import jax.numpy as jnp
    import numpy as np

    from privrl.privacy.functional import GPNoiseFunction, gp_noise_init, gp_noise_query
    from privrl.systems.dp_qlearning.algorithm import DPQLearning, DPQLearningConfig
    from privrl.systems.dp_qlearning.local import sharded_train

    print(f"# jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, python {sys.version.split()[0]}")
    rng = np.random.default_rng(0)
    steps, batch = 50, 128
    acting = rng.uniform(0, 1, steps).astype(np.float32)
    batches = rng.uniform(0, 1, (steps, batch)).astype(np.float32)

    def host() -> None:
        g = GPNoiseFunction(0.5, 2, seed=0)
        for t in range(steps):
            g(acting[t])
            for x in batches[t]:
                g(x)

    @jax.jit
    def device(key: jax.Array) -> jax.Array:
        def step(state, inp):
            k, a, b = inp
            k1, k2 = jax.random.split(k)
            state, _ = gp_noise_query(state, k1, a[None], 0.5)
            state, v = gp_noise_query(state, k2, b, 0.5)
            return state, v.sum()
        state = gp_noise_init(steps * (1 + batch), 2)
        _, out = jax.lax.scan(step, state, (jax.random.split(key, steps), jnp.asarray(acting),
                                            jnp.asarray(batches)))
        return out

    def timed(fn, repeats: int) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    n_queries = steps * (1 + batch)
    jax.block_until_ready(device(jax.random.key(0)))
    t_host = timed(host, args.repeats)
    t_dev = timed(lambda: jax.block_until_ready(device(jax.random.key(1))), args.repeats)
    print("\n| noise workload (one episode, online network) | queries | median time | µs/query |")
    print("|---|---:|---:|---:|")
    print(f"| host GPNoiseFunction (numpy + bisect) | {n_queries} | {t_host * 1e3:.1f} ms | "
          f"{t_host / n_queries * 1e6:.2f} |")
    print(f"| JAX store, 50 batched queries in one jitted scan | {n_queries} | "
          f"{t_dev * 1e3:.1f} ms | {t_dev / n_queries * 1e6:.2f} |")

    print("\n| runs | devices | σ | compile + first call | median run time | run-steps/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    algo = DPQLearning(DPQLearningConfig(sigma=0.0).resolved())
    for runs in args.runs:
        for dev in args.devices:
            if runs % dev or dev > jax.local_device_count():
                continue
            fn = sharded_train(algo, dev)
            keys = jax.random.split(jax.random.key(0), runs)
            for sigma in (0.5, 0.0):
                sig = jnp.full((runs,), sigma, jnp.float32)
                t0 = time.perf_counter()
                jax.block_until_ready(fn(keys, sig))
                first = time.perf_counter() - t0
                t = timed(lambda f=fn, k=keys, s=sig: jax.block_until_ready(f(k, s)),
                          args.repeats)
                print(f"| {runs} | {dev} | {sigma:g} | {first:.1f} s | {t:.2f} s | "
                      f"{runs * algo.config.total_steps / t:,.0f} |")


if __name__ == "__main__":
    main()
