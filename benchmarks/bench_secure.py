"""The cost of float-safe (secure) noise and of secret keys.

1. Mechanisms on a d = 1000 vector: float (jax.random under jit) vs secure (exact discrete
   sampler on the host, from os.urandom), Laplace and Gaussian, and the DP-SGD sum of 8 rows.
   Noise samples per second: `batch` releases per timed call, median of `repeats` calls after
   a warm-up call that compiles. Secure is timed both as the host sampler alone and through
   the mechanism in a jitted vmap (io_callback per release).
2. End to end: `privrl run pgc-a3c` (laplace ε = 5, 1 trial) with seeded keys, secret keys
   and --secure-noise; wall time of one run each (compile included) from the CLI's summary.

    python benchmarks/bench_secure.py [--repeats 5] [--batch 20] [--submissions 900]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

D = 1000


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: compiles
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def mechanisms(repeats: int, batch: int) -> list[tuple[str, str, float]]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from privrl.privacy import GaussianMechanism, GaussianSumMechanism, LaplaceMechanism, secure

    x = jnp.asarray(np.random.default_rng(0).normal(size=(batch, D)) * 1e-3, jnp.float32)
    rows = jnp.asarray(np.random.default_rng(1).normal(size=(batch, 8, D)) * 1e-2, jnp.float32)
    keys = jax.random.split(jax.random.key(0), batch)
    out = []
    for name, make, data in [
        ("laplace ε=1, C=1", lambda s: LaplaceMechanism(1.0, 1.0, secure=s), x),
        ("gaussian σ=1, C=1", lambda s: GaussianMechanism(1.0, 1.0, secure=s), x),
        ("dp-sgd sum σ=1, C=1, B=8", lambda s: GaussianSumMechanism(1.0, 1.0, secure=s), rows),
    ]:
        for mode in ("float", "secure"):
            mech = make(mode == "secure")
            f = jax.jit(jax.vmap(lambda k, v, m=mech: m.privatize(k, v).value))
            t = _median_time(lambda f=f, data=data: f(keys, data).block_until_ready(), repeats)
            out.append((name, f"{mode} (mechanism, jit+vmap)", batch * D / t))
    host = np.asarray(x)
    hrows = np.asarray(rows)
    for name, fn in [
        ("laplace ε=1, C=1", lambda: [secure.secure_laplace(v, 1.0, 1.0) for v in host]),
        ("gaussian σ=1, C=1", lambda: [secure.secure_gaussian(v, 1.0, 1.0) for v in host]),
        ("dp-sgd sum σ=1, C=1, B=8",
         lambda: [secure.secure_gaussian_sum(r, 1.0, 1.0) for r in hrows]),
    ]:
        out.append((name, "secure (host sampler alone)", batch * D / _median_time(fn, repeats)))
    return out


def end_to_end(submissions: int) -> list[tuple[str, float, float, float]]:
    out = []
    base = [sys.executable, "-m", "privrl", "run", "pgc-a3c", "--epsilon", "5", "--trials", "1",
            "--submissions", str(submissions), "--no-progress"]
    for extra in (["--noise", "seeded"], ["--noise", "secret"], ["--secure-noise"]):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            subprocess.run([*base, *extra, "--out", str(Path(tmp) / "run")], check=True,
                           stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t
            summary = json.loads((Path(tmp) / "run" / "summary.json").read_text())
        out.append((f"pgc-a3c {' '.join(extra)}", wall, summary["wall_seconds"],
                    summary["compile_seconds"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--submissions", type=int, default=900)
    args = ap.parse_args()
    import jax
    import numpy as np

    print(f"python {platform.python_version()}, jax {jax.__version__}, numpy {np.__version__}, "
          f"{platform.processor() or platform.machine()}")
    print(f"\n| mechanism (d = {D}) | path | noise samples/s |\n|---|---|---:|")
    for name, path, rate in mechanisms(args.repeats, args.batch):
        print(f"| {name} | {path} | {rate:,.0f} |")
    print("\n| run | process wall s | run wall s (summary) | of which compile s |\n"
          "|---|---:|---:|---:|")
    for label, wall, run_wall, compile_s in end_to_end(args.submissions):
        print(f"| `{label}` | {wall:.1f} | {run_wall:.1f} | {compile_s:.1f} |")


if __name__ == "__main__":
    main()
