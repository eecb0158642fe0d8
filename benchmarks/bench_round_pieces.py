"""One device's PGC-A3C round, piece by piece, at the one-program sweep's 90 trials per device:
the rollout and the gradients as the runner computed them before issue 21 (vmapped over all
trials) against how it computes them now (`rollout_trials` in blocks, with stages; gradients
in blocks of 10, `in_blocks`).

Paper preset, 90 trials × 9 agents from randomly perturbed initial θ (so episode lengths vary
as in a run), exploration α = 0.3; each row is the median of `--repeats` jitted calls after a
warm-up call that compiles it.

    python benchmarks/bench_round_pieces.py [--repeats 5] [--trials 90]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("PRIVRL_CACHE_DIR", "off")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trials", type=int, default=90, help="a multiple of 10")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from privrl.compute.sharding import in_blocks
    from privrl.envs.rollout import rollout_episodes, rollout_trials
    from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig, trial_stages

    algo = PGCA3C(PGCA3CConfig(trials=1))
    n, p, steps, block = args.trials, algo.config.parallel_agents, algo.config.max_episode_steps, 10
    keys = jax.random.split(jax.random.key(3), n)
    theta = jax.vmap(algo.init)(keys).agg.theta
    theta = theta + 0.3 * jax.random.normal(jax.random.key(5), theta.shape)
    params = jax.vmap(lambda k: algo.task.agents_params(jax.random.fold_in(k, 1),
                                                       jnp.arange(p)))(keys)
    alpha = jnp.full((n,), 0.3)
    active = jnp.ones((n, p), bool)

    def vmapped(th, a, k, prm):
        return jax.vmap(lambda th, a, k, prm: rollout_episodes(
            algo.env, prm, lambda kk, o: algo.act(th, a, kk, o), k, p, steps,
            jnp.ones(p, bool)))(th, a, k, prm)

    def blocked(stages):
        return lambda th, a, k, prm: rollout_trials(
            algo.env, prm, lambda ar, kk, o: algo.act(ar[0], ar[1], kk, o), (th, a), k, p,
            steps, active, block, stages)

    def thirds(blocks):
        sizes = []
        while blocks > 1:
            blocks = -(-blocks // 3)
            sizes.append(blocks * block)
        return sizes

    def timed(fn, *a):
        f = jax.jit(fn)
        out = jax.block_until_ready(f(*a))
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(f(*a))
            times.append(time.perf_counter() - t0)
        return out, 1e3 * statistics.median(times)

    print(f"# {platform.machine()}, {os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"jax {jax.__version__}; {n} trials × {p} agents on one device")
    print("| piece | how | ms per round |")
    print("|---|---|---:|")
    traj, ms = timed(vmapped, theta, alpha, keys, params)
    lengths = np.asarray(traj.length)
    print(f"| rollout | vmapped `rollout_episodes` (before) | {ms:.1f} |")
    for name, stages in (("no stages", []), ("stages by halves (now)", trial_stages(n // block,
                                                                                   block)),
                         ("stages by thirds", thirds(n // block))):
        _, ms = timed(blocked(stages), theta, alpha, keys, params)
        print(f"| rollout | `rollout_trials`, blocks of {block}, {name} {stages} | {ms:.1f} |")
    grads = jax.vmap(algo.episode_grads)
    _, ms = timed(grads, theta, traj)
    print(f"| gradients | vmapped over all {n} trials (before) | {ms:.1f} |")
    _, ms = timed(in_blocks(grads, block), theta, traj)
    print(f"| gradients | `in_blocks`, {block} trials at a time (now) | {ms:.1f} |")
    print(f"# episode length: mean {lengths.mean():.1f}, longest per trial: mean "
          f"{lengths.max(axis=1).mean():.1f}, longest {lengths.max()}")


if __name__ == "__main__":
    main()
