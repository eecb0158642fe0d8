"""The PGC-A3C round against the environment's own pace: env steps/s of the round and of a
gymnax random-policy loop over the same number of CartPole environments, in one process, on
one XLA CPU device (one core), timed alternately; the ratio is taken pair by pair.

    .venv/bin/python benchmarks/bench_env_pace.py [--agents 72 1800] [--repeats 5]

* random policy: `N` gymnax CartPole-v0 environments (the round's, with the paper's
  gravities), `vmap`ped `env.step` with uniform random actions (gymnax resets a finished
  episode inside `step`), `--steps` steps in one jitted `lax.scan`; every step counts.
* PGC round: `make run`'s job (tuned preset, Laplace ε = 5, P = 9 agents per trial) with
  `N / 9` trials on one device, one jitted chunk of rounds (`ShardedTrials.run_chunk`: plan,
  rollouts, gradients, the mechanism, the aggregator), about `--episodes` episodes per call;
  env steps are the steps the episodes lasted (CartPole's return is its length).
* "round, mechanism none", "rollouts only": the same round without noise, and its rollouts
  alone (`rollout_trials` as the round runs it), to say where the round loses.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from privrl.compute.devices import use_host_devices

use_host_devices(1)
os.environ.setdefault("PRIVRL_CACHE_DIR", "off")


def random_policy(env: Any, params: Any, n: int, steps: int) -> Callable[[], float]:
    """A call that steps `n` envs `steps` times with uniform random actions (one jitted scan;
    gymnax's `step` resets finished episodes) and returns the env steps it took."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def loop(key: jax.Array) -> jax.Array:
        _, states = jax.vmap(env.reset, (0, None))(jax.random.split(key, n), params)

        def body(carry: Any, k: jax.Array) -> tuple[Any, None]:
            st, acc = carry
            ka, ks = jax.random.split(k)
            actions = jax.random.randint(ka, (n,), 0, 2)
            obs, st, *_ = jax.vmap(env.step, (0, 0, 0, None))(
                jax.random.split(ks, n), st, actions, params)
            return (st, acc + jnp.sum(obs)), None  # used: XLA cannot drop the steps

        (_, acc), _ = jax.lax.scan(body, (states, jnp.float32(0)),
                                   jax.random.split(key, steps))
        return acc

    keys = iter(jax.random.split(jax.random.key(1), 10_000))

    def call() -> float:
        jax.block_until_ready(loop(next(keys)))
        return float(n * steps)

    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[72, 1800])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20_000, help="episodes per PGC call")
    ap.add_argument("--steps", type=int, default=1_000_000,
                    help="env steps per random-policy call (in total over the N envs)")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from privrl.systems.pgc_a3c.algorithm import (
        JITTED_EPISODES,
        PGCA3C,
        PGCA3CConfig,
        trial_env_key,
        trial_group,
    )
    from privrl.systems.pgc_a3c.local import ShardedTrials

    print(f"# jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, python {sys.version.split()[0]}, one XLA device; "
          f"load average {os.getloadavg()[0]:.1f} at start")
    print("| N envs | program | env steps/s (median) | vs random policy (median of pairs) |")
    print("|---:|---|---:|---:|")
    for n in args.agents:
        trials = max(1, n // 9)
        rounds = max(1, args.episodes // n)
        timed: dict[str, tuple] = {}
        for mech in ("laplace", "none"):
            cfg = PGCA3CConfig.from_preset("tuned", mechanism=mech, trials=trials,
                                           submissions=10**9, noise="seeded",
                                           **({"epsilon": 5.0} if mech == "laplace" else {}))
            algo = PGCA3C(cfg)
            runner = ShardedTrials(algo, trials, rounds, 1)
            box = {"s": runner.init(jax.random.key(0))}

            def pgc(runner=runner, box=box) -> float:
                box["s"], scores = runner.run_chunk(box["s"])
                return float(np.nansum(scores))

            timed[f"round, mechanism {mech}"] = (pgc,)
            if mech == "laplace":
                group = trial_group(trials, 1, cfg.trial_block)

                def rollouts(states, algo=algo, group=group):
                    env_keys = jax.vmap(trial_env_key)(states)
                    plans = jax.vmap(algo.plan)(states, env_keys)
                    traj = JITTED_EPISODES(algo, states.agg.theta, plans, group)
                    return jnp.sum(traj.mask)

                roll = jax.jit(rollouts)
                state0 = box["s"]
                timed["rollouts only (one round)"] = (
                    lambda roll=roll, s=state0: float(roll(s)),)

        timed["random policy"] = (random_policy(algo.env, algo.env_params, n,
                                                max(1, args.steps // n)),)
        for (fn,) in timed.values():  # compile + warm-up
            fn()
        rates: dict[str, list[float]] = {k: [] for k in timed}
        for _ in range(args.repeats):
            for name, (fn,) in timed.items():
                t0 = time.perf_counter()
                count = fn()
                rates[name].append(count / (time.perf_counter() - t0))
        base = rates["random policy"]
        for name, r in rates.items():
            ratio = statistics.median(a / b for a, b in zip(r, base, strict=True))
            print(f"| {n:,} | {name} | {statistics.median(r):,.0f} | {ratio:.2f}× |",
                  flush=True)
    print(f"# load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
