"""Why the DP-SGD step of `bench_opacus.py` is slower with Threefry unrolled (privrl.prng):
the parts of one ghost-clipping step, and the Gaussian draw alone against the same draw added
to a concatenation (the gradient's ravel), each jitted, median of --repeats blocks of --calls
calls with a fixed key. Run it twice to compare the hash's lowerings:

    python benchmarks/bench_noise_fusion.py                          # unrolled (privrl's)
    PRIVRL_THREEFRY=rolled python benchmarks/bench_noise_fusion.py   # JAX's own CPU lowering
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PRIVRL_CACHE_DIR", "off")
sys.path.insert(0, os.path.dirname(__file__))
import jax
import jax.numpy as jnp

import bench_opacus  # sets one host device (before JAX starts its backend)
from privrl import prng
from privrl.losses import huber
from privrl.nets.flat import mlp
from privrl.privacy.dpsgd import clipped_grad_sum
from privrl.privacy.mechanisms import GaussianSumMechanism


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
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
    rows = {
        "ghost-clipping step (clipped sum + noise)": (
            jax.jit(lambda p, k: mech.privatize_dense(k, p, obs, losses).value), (params, key)),
        "clipped sum alone": (
            jax.jit(lambda p: clipped_grad_sum(p, obs, losses, bench_opacus.CLIP)[0]),
            (params,)),
        f"normal({d:,}) alone": (jax.jit(lambda k: jax.random.normal(k, (d,))), (key,)),
        f"x + normal({d:,})": (
            jax.jit(lambda k, x: x + jax.random.normal(k, (d,))), (key, jnp.ones(d))),
        f"concatenate({len(pieces)} pieces) + normal({d:,})": (
            jax.jit(lambda k, ps: jnp.concatenate(ps) + jax.random.normal(k, (d,))),
            (key, pieces)),
    }
    print(f"# Threefry {'unrolled' if prng.threefry_unrolled() else 'rolled'} on CPU, "
          f"jax {jax.__version__}; median of {args.repeats} × {args.calls} calls")
    print("| program | µs per call |")
    print("|---|---:|")
    for name, (fn, call_args) in rows.items():
        # bench_opacus's timer: calls per second, median over the repeats
        us = 1e6 / bench_opacus.median_rate(lambda f=fn, a=call_args: f(*a), 1, args.calls,
                                            args.repeats)
        print(f"| {name} | {us:.0f} |")


if __name__ == "__main__":
    main()
