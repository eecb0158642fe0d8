"""Error and upload size of the compact ε-LDP mechanisms against PrivUnitG (issue 42).

For each ε: E‖x̂ − x‖² of PrivUnitG, ProjUnit (k = 11, 16) and seed-compressed PrivUnitG at
the same ε and d, on one input with ‖x‖ = clip = 1 (the lifted u is then x itself, so the error
is the mechanisms' worst), measured over N seeded draws (mean ± standard error) beside the exact
formula (`mse_bound`), the bytes each report uploads, and the time to release a batch of
reports (jit + vmap, after a warm-up call).

    python benchmarks/bench_compact_ldp.py [--dim 131] [--draws 20000] [--epsilons 0.5,1,2,4]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from privrl.privacy.ldp_compact import ProjUnitMechanism, SeedPrivUnitGMechanism
from privrl.privacy.ldp_vector import PrivUnitGMechanism


def measure(mech, x: jax.Array, draws: int, seed: int) -> tuple[float, float, float]:
    """(mean error, its standard error, seconds per batch of `draws` releases)."""
    fn = jax.jit(jax.vmap(lambda k: mech.privatize(k, x).value))
    keys = jax.random.split(jax.random.key(seed), draws)
    fn(keys).block_until_ready()  # compile
    start = time.perf_counter()
    ys = np.asarray(fn(keys).block_until_ready(), np.float64)
    wall = time.perf_counter() - start
    err = ((ys - np.asarray(x, np.float64)) ** 2).sum(1)
    return float(err.mean()), float(err.std() / np.sqrt(draws)), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=131)
    ap.add_argument("--draws", type=int, default=20_000)
    ap.add_argument("--epsilons", default="0.5,1,2,4")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    d = args.dim
    x = jax.random.normal(jax.random.key(args.seed + 1), (d,))
    x = x / jnp.linalg.norm(x)
    print(f"d = {d}, {args.draws:,} draws per cell, ‖x‖ = clip = 1, seed {args.seed}; "
          f"jax {jax.__version__}\n")
    print("| ε | mechanism | upload bytes | bytes vs PrivUnitG | E‖x̂ − x‖² measured | exact "
          "| error vs PrivUnitG (exact) | release time per 1,000 |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for eps in (float(e) for e in args.epsilons.split(",")):
        mechs = [PrivUnitGMechanism(eps, 1.0), ProjUnitMechanism(eps, 1.0, k=11),
                 ProjUnitMechanism(eps, 1.0, k=16), SeedPrivUnitGMechanism(eps, 1.0)]
        base_bytes, base_mse = mechs[0].upload_bytes(d), mechs[0].mse_bound(d)
        for m in mechs:
            mean, se, wall = measure(m, x, args.draws, args.seed)
            label = m.name + (f" (k = {m.k})" if isinstance(m, ProjUnitMechanism) else "")
            size = m.upload_bytes(d)
            print(f"| {eps:g} | {label} | {size} | {base_bytes / size:.1f}× fewer | "
                  f"{mean:,.1f} ± {se:,.1f} | {m.mse_bound(d):,.1f} | "
                  f"{m.mse_bound(d) / base_mse:.4f}× | {1000 * wall / args.draws * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
