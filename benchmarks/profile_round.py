"""Where a PGC-A3C round's time goes, by the profiler: JAX's trace of a few rounds of the local
runner's program, each XLA kernel's own time (its time minus the kernels it ran inside it,
such as a `while` loop's body) attributed through the compiled program's metadata to a piece
of the round (the rollout's step, the gradients, the mechanism, the aggregator) and a kind
(the Threefry hash behind every random draw, the environment, the network, the rest).

Paper preset, 20 trials per setting on the host's devices, as `privrl reproduce pgc-a3c`
runs them: "one" is one setting (Laplace ε = 5), "sweep" the 9 settings as one program. The
trace covers `--rounds` rounds after `--warm` untimed chunks of the same length (compilation
and the start of training). The profiler's own cost per kernel (a fraction of a µs) inflates
the many tiny kernels, so read the shares as where the kernels are, and the untraced wall
time per round (printed first) as the real speed. `PRIVRL_THREEFRY=rolled` profiles JAX's own
CPU lowering of the hash (privrl/prng.py).

    python benchmarks/profile_round.py [--program one|sweep] [--rounds 3] [--warm 20]
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import platform
import re
import sys
import tempfile
import time

os.environ.setdefault("PRIVRL_CACHE_DIR", "off")
from privrl.compute.devices import use_host_devices

PIECES = ("rollout", "gradients", "mechanism", "aggregator")  # PGCA3C.round's scopes


def stacks(hlo: str) -> dict[str, tuple[str, set[str]]]:
    """Each instruction's (op_name, functions on its call stack), from the compiled text."""
    def table(head: str) -> dict[int, str]:
        block = hlo.split(f"\n{head}\n", 1)[1].split("\n\n", 1)[0]
        return {int(line.split(" ", 1)[0]): line.split(" ", 1)[1] for line in block.splitlines()
                if line[:1].isdigit()}

    functions = {k: v.strip('"') for k, v in table("FunctionNames").items()}
    locations = {k: int(re.search(r"function_name_id=(\d+)", v).group(1))
                 for k, v in table("FileLocations").items()}
    frames = {k: (int(re.search(r"file_location_id=(\d+)", v).group(1)),
                  int(re.search(r"parent_frame_id=(\d+)", v).group(1)))
              for k, v in table("StackFrames").items()}

    def names(frame: int) -> set[str]:
        found, seen = set(), set()
        while frame in frames and frame not in seen:
            seen.add(frame)
            loc, parent = frames[frame]
            found.add(functions.get(locations.get(loc, -1), "").rsplit(".", 1)[-1])
            frame = parent
        return found

    out = {}
    pattern = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{op_name=\"([^\"]*)\""
                         r"(?:.*?stack_frame_id=(\d+))?")
    for line in hlo.splitlines():
        m = pattern.match(line)
        if m:
            out[m.group(1)] = (m.group(2), names(int(m.group(3))) if m.group(3) else set())
    return out


def classify(op_name: str, functions: set[str]) -> tuple[str, str]:
    piece = next((p for p in PIECES if f"/{p}/" in op_name), "other")
    if re.search(r"threefry|_randint|_uniform|_laplace|_normal|random_bits|random_wrap", op_name):
        kind = "random draws"
    elif functions & {"step_env", "reset_env", "is_terminated"}:
        kind = "environment"
    elif "Dense" in op_name or "apply" in functions or "__call__" in functions:
        kind = "network"
    elif op_name.endswith("/while") or op_name == "":
        kind = "loop control"
    else:
        kind = "other ops"
    return piece, kind


def label(kernel: str, op_name: str, functions: set[str] | None) -> tuple[str, str]:
    """(piece, kind) of one traced kernel; `functions` None: not in the program's metadata."""
    if kernel.startswith(("ThunkExecutor", "end: ")):  # the runtime between kernels
        return "executor", "scheduling kernels"
    return ("other", "no metadata") if functions is None else classify(op_name, functions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--program", choices=["one", "sweep"], default="one")
    ap.add_argument("--rounds", type=int, default=3, help="rounds traced (a chunk)")
    ap.add_argument("--warm", type=int, default=20, help="untraced chunks first")
    ap.add_argument("--top", type=int, default=15, help="kernels listed")
    args = ap.parse_args()
    use_host_devices()

    import jax
    import numpy as np

    from privrl.compute.sharding import setting_trial_keys, trial_devices
    from privrl.prng import threefry_unrolled
    from privrl.systems.pgc_a3c.algorithm import settings_algorithm, trial_group
    from privrl.systems.pgc_a3c.local import ShardedTrials, _seeded_by_default
    from privrl.systems.pgc_a3c.reproduce import SweepConfig

    k = 20
    sweep = SweepConfig(trials=k)
    every = [_seeded_by_default(sweep.run_config(s)) for s in sweep.settings()]
    configs = (every if args.program == "sweep" else
               [c for c in every if c.mechanism == "laplace" and c.epsilon == 5.0])
    algo = settings_algorithm(configs)  # as run_pgc_a3c(_settings) builds it
    runner = ShardedTrials(algo, len(configs) * k, args.rounds, None,
                           trial_group(k, trial_devices(k)))
    state = runner.init_keys(setting_trial_keys(0, k, len(configs), runner.padded, None))
    index = np.repeat(np.arange(len(configs)), k)
    index = np.concatenate([index, np.zeros(runner.padded - index.size, int)])
    state = state._replace(setting=algo.setting_data(index))
    walls = []
    for i in range(args.warm):
        t0 = time.perf_counter()
        state, _ = runner.run_chunk(state)
        if i >= 2:
            walls.append(time.perf_counter() - t0)
    state = jax.device_put(state, runner._sharding)
    mask = np.zeros(runner.padded, bool)
    mask[runner.trials:] = True
    info = stacks(runner._run.lower(state, mask).compile().as_text())

    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d)
        state, _ = runner.run_chunk(state)
        jax.profiler.stop_trace()
        trace = glob.glob(f"{d}/plugins/profile/*/*.trace.json.gz")[0]
        with gzip.open(trace) as f:
            events = json.load(f)["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    kernels = [e for e in events if e.get("ph") == "X" and "Eigen" in threads.get(e["tid"], "")]
    own: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for tid in {e["tid"] for e in kernels}:
        stack: list[dict] = []
        for e in sorted((e for e in kernels if e["tid"] == tid),
                        key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                own[stack[-1]["name"]] -= e["dur"]
            own[e["name"]] += e["dur"]
            calls[e["name"]] += 1
            stack.append(e)
    total = sum(own.values())
    by: collections.Counter = collections.Counter()
    for name, us in own.items():
        by[label(name, *info.get(name, ("", None)))] += us

    print(f"# {platform.machine()}, {os.cpu_count()} cores, {jax.local_device_count()} devices, "
          f"python {sys.version.split()[0]}, jax {jax.__version__}; program {args.program} "
          f"({len(configs) * k} trials), Threefry "
          f"{'unrolled' if threefry_unrolled() else 'rolled (JAX CPU default)'}")
    print(f"# untraced: {1e3 * float(np.median(walls)) / args.rounds:.2f} ms wall per round "
          f"(median of {len(walls)} chunks of {args.rounds} rounds); traced: {len(kernels)} "
          f"kernel events, {total / 1e3:.1f} ms of kernel time over {args.rounds} rounds and "
          f"{jax.local_device_count()} devices" + (" (TRUNCATED at the profiler's cap)"
                                                   if len(events) >= 1_000_000 else ""))
    print("| piece | kind | ms per round (traced) | share |")
    print("|---|---|---:|---:|")
    for (piece, kind), us in by.most_common():
        print(f"| {piece} | {kind} | {us / 1e3 / args.rounds:.2f} | {100 * us / total:.1f} % |")
    print("\n| kernel | calls per round | own ms per round | piece, kind | op |")
    print("|---|---:|---:|---|---|")
    for name, us in own.most_common(args.top):
        op, functions = info.get(name, ("", set()))
        piece, kind = label(name, op, functions)
        print(f"| {name} | {calls[name] / args.rounds:.0f} | {us / 1e3 / args.rounds:.2f} | "
              f"{piece}, {kind} | {op[-60:]} |")


if __name__ == "__main__":
    main()
