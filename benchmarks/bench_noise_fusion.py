"""Why the DP-SGD step of `bench_opacus.py` was slower with Threefry unrolled (privrl.prng),
and that privrl's release (`gaussian_sum_dense_release`, the sum added into the noise) fixes
it: the parts of one ghost-clipping step, the step as it was before (noise added after the
ravel, which XLA fuses into the concatenation's unvectorized loop), and the Gaussian draw
alone against the same draw added to a concatenation, each jitted. Rows are timed in
interleaved blocks of --calls calls with a fixed key (the median of --repeats), so load moves
all of them alike. Run it twice to compare the hash's lowerings:

    python benchmarks/bench_noise_fusion.py                          # unrolled (privrl's)
    PRIVRL_THREEFRY=rolled python benchmarks/bench_noise_fusion.py   # JAX's own CPU lowering
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PRIVRL_CACHE_DIR", "off")
sys.path.insert(0, os.path.dirname(__file__))
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import bench_opacus  # sets one host device (before JAX starts its backend)
from privrl import prng
from privrl.losses import huber
from privrl.nets.flat import mlp
from privrl.privacy.dpsgd import add_raveled, clipped_grad_sum
from privrl.privacy.mechanisms import GaussianSumMechanism, add_gaussian_noise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seeds", type=int, default=8, help="the vmapped rows' seeds per call")
    args = ap.parse_args()
    prng.unroll_threefry()  # as every system's import does (a no-op under PRIVRL_THREEFRY=rolled)
    model = mlp(bench_opacus.HIDDEN, 2, 4)
    params = model.unravel(model.init(jax.random.key(0)))
    obs, actions, targets = (jnp.asarray(a) for a in bench_opacus.make_batch(128))

    def losses(q: jax.Array) -> jax.Array:
        return huber(jnp.take_along_axis(q, actions[:, None], 1)[:, 0] - targets)

    mech = GaussianSumMechanism(bench_opacus.SIGMA, bench_opacus.CLIP)
    d = model.init(jax.random.key(0)).size
    pieces = [jnp.ones(leaf.size) for leaf in jax.tree_util.tree_leaves(params)]
    key = jax.random.key(3)
    std = mech.release_params(0).std
    thetas = jax.vmap(model.init)(jax.random.split(jax.random.key(0), args.seeds))
    keys = jax.random.split(key, args.seeds)

    def seeds_step(release: Callable) -> Callable:
        return jax.jit(jax.vmap(lambda th, k: release(model.unravel(th), k)))

    def before(p: Any, k: jax.Array) -> jax.Array:
        return add_gaussian_noise(clipped_grad_sum(p, obs, losses, bench_opacus.CLIP)[0], std, k)

    rows = {
        "ghost-clipping step (privrl: the sum added into the noise)": (
            jax.jit(lambda p, k: mech.privatize_dense(k, p, obs, losses).value), (params, key)),
        "ghost-clipping step, noise added after the ravel (before, log 26)": (
            jax.jit(before), (params, key)),
        f"{args.seeds} seeds vmapped in one call (privrl)": (seeds_step(
            lambda p, k: mech.privatize_dense(k, p, obs, losses).value), (thetas, keys)),
        f"{args.seeds} seeds vmapped in one call (before)": (seeds_step(before), (thetas, keys)),
        "clipped sum alone": (
            jax.jit(lambda p: clipped_grad_sum(p, obs, losses, bench_opacus.CLIP)[0]),
            (params,)),
        f"normal({d:,}) alone": (jax.jit(lambda k: jax.random.normal(k, (d,))), (key,)),
        f"x + normal({d:,})": (
            jax.jit(lambda k, x: x + jax.random.normal(k, (d,))), (key, jnp.ones(d))),
        f"concatenate({len(pieces)} pieces) + normal({d:,})": (
            jax.jit(lambda k, ps: jnp.concatenate(ps) + jax.random.normal(k, (d,))),
            (key, pieces)),
        f"{len(pieces)} pieces added into normal({d:,}) (add_raveled)": (
            jax.jit(lambda k, ps: add_raveled(jax.random.normal(k, (d,)), ps)), (key, pieces)),
    }
    print(f"# Threefry {'unrolled' if prng.threefry_unrolled() else 'rolled'} on CPU, "
          f"jax {jax.__version__}; median of {args.repeats} interleaved blocks of "
          f"{args.calls} calls")
    for fn, call_args in rows.values():  # compile and warm up
        jax.block_until_ready(fn(*call_args))
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.repeats):
        for name, (fn, call_args) in rows.items():
            calls = max(10, args.calls // args.seeds) if "seeds" in name else args.calls
            t = time.perf_counter()
            for _ in range(calls):
                out = fn(*call_args)
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - t) / calls)
    print("| program | µs per call |")
    print("|---|---:|")
    for name, ts in times.items():
        print(f"| {name} | {1e6 * float(np.median(ts)):.0f} |")

if __name__ == "__main__":
    main()
