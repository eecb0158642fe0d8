"""Kernels per submission of the PGC-A3C chunk program on CPU: issue 54's proxy for a GPU's
latency (on a GPU each kernel is a launch, and a round's loops run their bodies one launch at a
time), measured where no device is lent.

    .venv/bin/python benchmarks/bench_kernels.py [--agents 72 1800] [--rounds 5] [--warm 10]

For `make run`'s job (tuned preset, Laplace ε = 5, P = 9 agents per trial; `N / 9` trials on
one XLA CPU device, in the local runner's blocks), two counts of the program that advances a
chunk of rounds (`ShardedTrials`' jitted `advance`, a `--rounds`-round chunk):

* static: the kernels of its optimized HLO (`bench_compile.hlo_kernels`: every non-trivial
  instruction of the entry computation and of each loop or branch body, a fusion once);
* launched: the kernels XLA's CPU runtime ran in one call after `--warm` untimed chunks
  (JAX's profiler trace: every kernel event, the runtime's scheduling events left out), per
  round and per submission (N per round), split by the round's pieces (`PGCA3C.round`'s named
  scopes: rollout, gradients, mechanism, aggregator; "other": the rest and the unlabelled
  copies), and the kernels of while loops' conditions (a GPU syncs with the host on each).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import platform
import sys
import tempfile

from privrl.compute.devices import use_host_devices

use_host_devices(1)
os.environ.setdefault("PRIVRL_CACHE_DIR", "off")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_compile import hlo_kernels  # noqa: E402
from profile_round import PIECES, stacks  # noqa: E402


def launched(runner: object, state: object) -> list[tuple[str, str]]:
    """(kernel name, op name) of every kernel one `run_chunk` call launched."""
    import jax

    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d)
        runner.run_chunk(state)  # type: ignore[attr-defined]
        jax.profiler.stop_trace()
        with gzip.open(glob.glob(f"{d}/plugins/profile/*/*.trace.json.gz")[0]) as f:
            events = json.load(f)["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return [(e["name"], e.get("args", {}).get("long_name", "")) for e in events
            if e.get("ph") == "X" and "Eigen" in threads.get(e["tid"], "")
            and not e["name"].startswith(("ThunkExecutor", "end: ", "ThreadpoolListener"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[72, 1800])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per chunk (one call)")
    ap.add_argument("--warm", type=int, default=10, help="untraced chunks first")
    args = ap.parse_args()

    import jax

    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig, settings_algorithm
    from privrl.systems.pgc_a3c.local import ShardedTrials

    print(f"# jax {jax.__version__}, {platform.machine()}, python {sys.version.split()[0]}, "
          f"one XLA CPU device; chunks of {args.rounds} rounds after {args.warm} untraced")
    print("| N agents | static kernels (chunk program) | launched per round | per submission "
          "| loop-condition kernels per round | "
          + " | ".join(f"{p} per submission" for p in (*PIECES, "other")) + " |")
    print("|---:|---:|---:|---:|---:|" + "---:|" * (len(PIECES) + 1))
    for n in args.agents:
        cfg = PGCA3CConfig.from_preset("tuned", mechanism="laplace", epsilon=5.0,
                                       trials=max(1, n // 9), submissions=10**9, noise="seeded")
        algo = settings_algorithm([cfg])  # as run_pgc_a3c builds it
        runner = ShardedTrials(algo, cfg.trials, args.rounds, 1)
        state = runner.init(jax.random.key(0))
        if algo.setting_mechanisms is not None:
            state = state._replace(setting=algo.setting_data([0] * runner.padded))
        for _ in range(args.warm):
            state, _ = runner.run_chunk(state)
        state = jax.device_put(state, runner._sharding)
        mask = jax.numpy.zeros(runner.padded, bool)
        text = runner._run.lower(state, mask).compile().as_text()
        info = stacks(text)
        events = launched(runner, state)
        pieces: collections.Counter = collections.Counter()
        loops = 0
        for name, _ in events:
            op = info.get(name, ("", set()))[0]
            pieces[next((p for p in PIECES if f"/{p}/" in op or f"({p})/" in op),
                        "other")] += 1
            loops += op.endswith("/while/cond/and") or "/while/cond/" in op
        subs = n * args.rounds
        print(f"| {n:,} | {hlo_kernels(text):,} | {len(events) / args.rounds:,.0f} | "
              f"{len(events) / subs:.1f} | {loops / args.rounds:,.0f} | "
              + " | ".join(f"{pieces[p] / subs:.2f}" for p in (*PIECES, "other")) + " |",
              flush=True)


if __name__ == "__main__":
    main()
