"""Where a command's time goes: tracing, lowering and XLA compilation against the rest, and
which programs it compiles (JAX's own `jax.monitoring` events, as `suite_profile.py` reads them
for the test suite).

    .venv/bin/python benchmarks/bench_compile.py                 # the default commands
    .venv/bin/python benchmarks/bench_compile.py --only make-run --modes cold warm
    .venv/bin/python benchmarks/bench_compile.py --kernels make-run   # + kernels per program
    .venv/bin/python benchmarks/bench_compile.py --only make-run --fill-with make-warm

Each command runs as its own `privrl` process (`privrl.main.main`, as the installed script
runs it), once per mode: "cold" (PRIVRL_CACHE_DIR=off: every program compiled), "fill" and then
"warm" (a fresh persistent compilation cache, filled by the first run and read by the second).
Per run: the process's wall time and CPU seconds (every thread of it: `getrusage` of the
child), the time to import privrl, the wall time spent inside JAX's compile events (tracing,
lowering to MLIR, XLA's backend compile or a persistent-cache read; overlapping events counted
once), the rest ("run"), the number of programs compiled and of persistent-cache hits. Per
command, the cold run over the warm one, in wall time and in CPU seconds (issue 54's goal:
`make run`'s job cold within 1.25x of it warm; on a machine other jobs load, the CPU ratio is
the steadier reading). `--programs` lists each compiled program's name and seconds.
`--kernels` adds, per program, the kernels XLA's CPU backend emits (from an `--xla_dump_to`
dump of the optimized HLO: the fusions, custom calls and other non-trivial instructions a
launch runs, `hlo_kernels`), in a separate run (dumping slows compilation).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PRIVRL = [sys.executable, "-c", "import sys; from privrl.main import main; sys.exit(main())"]
# `make run`'s job and the seven checksum commands (benchmarks/checksums.sh), each named.
COMMANDS: dict[str, str] = {
    "make-run": "run pgc-a3c --preset tuned --mechanism laplace --epsilon 5 --trials 8 "
                "--submissions 30000",
    # the Makefile's warm-up of make-run's programs (`.venv/.warm`): the job at 2,500
    "make-warm": "run pgc-a3c --preset tuned --mechanism laplace --epsilon 5 --trials 8 "
                 "--submissions 2500",
    "pgc-tuned": "run pgc-a3c --preset tuned --mechanism laplace --epsilon 5 --trials 2 "
                 "--submissions 3000 --seed 3",
    "pgc-paper": "run pgc-a3c --preset paper --trials 1 --submissions 1800 --seed 5",
    "dp-reinforce": "run dp-reinforce --noise-multiplier 0.6 --episodes 60 --seed 4",
    "fedpg-cen": "run fedpg-cen --episodes 300 --seed 5",
    "dp-dqn": "run dp-dqn --noise-multiplier 1.0 --episodes 40 --seed 1",
    "ldp-reinforce": "run ldp-reinforce --mode box --episodes 40 --seed 3",
    "fedpg-dec": "run fedpg-dec --episodes 300 --seed 5",
}
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_BACKEND = _COMPILE_EVENTS[2]
# Optimized-HLO instructions that are no kernel of their own on XLA's CPU backend.
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "copy-start",
         "copy-done", "after-all", "partition-id", "replica-id", "opt-barrier"}


def child(out: str, argv: list[str]) -> int:
    """Run `privrl argv` in this process, recording JAX's compile events into `out`."""
    t0 = time.perf_counter()
    from privrl.compute.devices import use_compilation_cache, use_host_devices

    # JAX reads the cache's location when it is imported: set it first, as `main` would
    use_host_devices()
    use_compilation_cache()
    import jax.monitoring

    spans: list[tuple[float, float]] = []
    programs: list[dict[str, Any]] = []
    hits = [0]

    def span(event: str, start: float, end: float, **_: Any) -> None:
        if event in _COMPILE_EVENTS:
            spans.append((start, end))

    def duration(event: str, secs: float, fun_name: str = "?", **_: Any) -> None:
        if event == _BACKEND:
            programs.append({"name": fun_name, "seconds": secs})

    def count(event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            hits[0] += 1

    jax.monitoring.register_event_time_span_listener(span)
    jax.monitoring.register_event_duration_secs_listener(duration)
    jax.monitoring.register_event_listener(count)
    from privrl.main import main

    t1 = time.perf_counter()
    sys.argv = ["privrl", *argv]
    status = main()
    t2 = time.perf_counter()
    spans.sort()
    busy, end = 0.0, -1.0  # the union of the compile events' intervals (they nest)
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    Path(out).write_text(json.dumps({
        "status": status, "import": t1 - t0, "main": t2 - t1, "compile": busy,
        "programs": programs, "cache_hits": hits[0]}))
    return 0


def hlo_kernels(text: str) -> int:
    """Kernels one optimized CPU HLO module launches per call, counted statically: the
    non-trivial instructions of its entry computation and of every computation a control-flow
    instruction (while, conditional, call) runs; a fusion counts once (its body is one kernel)."""
    comps: dict[str, list[str]] = {}
    name, entry = None, None
    for line in text.splitlines():
        m = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line)
        if m:
            name = m.group(2)
            comps[name] = []
            if m.group(1):
                entry = name
        elif line.startswith("}"):
            name = None
        elif name is not None and "=" in line:
            comps[name].append(line)
    if entry is None:
        return 0
    seen, todo, kernels = set(), [entry], 0
    while todo:
        comp = todo.pop()
        if comp in seen or comp not in comps:
            continue
        seen.add(comp)
        for line in comps[comp]:
            m = re.search(r"=\s*[^ ]+(?:\s+[^ ]+)*?\s([a-z][\w\-]*)\(", line)
            op = m.group(1) if m else ""
            if op in ("while", "conditional", "call"):
                todo += re.findall(r"(?:body|condition|to_apply|branch_computations=\{|"
                                   r"true_computation|false_computation)=?%?([\w.\-]+)", line)
                todo += [c for group in re.findall(r"branch_computations=\{([^}]*)\}", line)
                         for c in re.findall(r"%?([\w.\-]+)", group)]
                continue
            if op and op not in _FREE:
                kernels += 1
    return kernels


def dump_kernels(dump: Path) -> dict[str, int]:
    """Kernels per program (`hlo_kernels`) of an --xla_dump_to directory's optimized modules."""
    out: dict[str, int] = {}
    for path in sorted(dump.glob("*after_optimizations.txt")):
        m = re.match(r"module_\d+\.(.+?)\.(?:cpu_)?after_optimizations", path.name)
        key = m.group(1) if m else path.name
        out[key] = out.get(key, 0) + hlo_kernels(path.read_text())
    return out


def run(name: str, mode: str, cache: str, extra_env: dict[str, str] | None = None
        ) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "profile.json")
        env = {**os.environ, "PRIVRL_CACHE_DIR": cache if mode != "cold" else "off",
               **(extra_env or {})}
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        argv = [*shlex.split(COMMANDS[name]), "--no-progress", "--out", os.path.join(tmp, "o")]
        t0, cpu0 = time.perf_counter(), _children_cpu()
        proc = subprocess.run([sys.executable, __file__, "--child", out, "--", *argv],
                              env=env, cwd=tmp, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        if proc.returncode != 0 or not os.path.exists(out):
            sys.exit(f"{name} ({mode}) failed:\n{proc.stderr[-2000:]}")
        row = json.loads(Path(out).read_text())
    row.update(command=name, mode=mode, wall=wall, cpu=cpu)
    return row


def _children_cpu() -> float:
    """User + system CPU seconds of every child process waited for so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    ap.add_argument("--modes", nargs="+", choices=["cold", "warm"], default=["cold", "warm"])
    ap.add_argument("--fill-with", choices=list(COMMANDS),
                    help="fill the warm runs' cache with this command instead of the command "
                         "itself (make-warm: the Makefile's warm-up for make-run)")
    ap.add_argument("--programs", action="store_true", help="list every compiled program")
    ap.add_argument("--kernels", action="store_true",
                    help="kernels per compiled program, from an XLA dump (a separate run)")
    ap.add_argument("--json", help="also write every row to this file")
    args = ap.parse_args()
    print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; "
          f"python {sys.version.split()[0]}")
    print("| command | mode | process s | process CPU-s | import s | compile s | run s | programs "
          "| cache hits |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in args.only:
        with tempfile.TemporaryDirectory() as cache:
            modes = ["cold"] if "cold" in args.modes else []
            modes += ["fill", "warm"] if "warm" in args.modes else []
            for mode in modes:
                row = run(args.fill_with or name if mode == "fill" else name, mode, cache)
                row["command"] = name
                if mode == "fill" and args.fill_with:
                    row["mode"] = mode = f"fill ({args.fill_with})"
                rows.append(row)
                rest = row["main"] - row["compile"]
                print(f"| {name} | {mode} | {row['wall']:.2f} | {row['cpu']:.2f} | "
                      f"{row['import']:.2f} | {row['compile']:.2f} | {rest:.2f} | "
                      f"{len(row['programs'])} | {row['cache_hits']} |", flush=True)
                if args.programs and mode != "warm":
                    for p in sorted(row["programs"], key=lambda p: -p["seconds"]):
                        print(f"|   {p['name']} | | | | | {p['seconds']:.3f} | | | |")
        if args.kernels:
            with tempfile.TemporaryDirectory() as dump:
                run(name, "cold", "off", {"XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") +
                                                        f" --xla_dump_to={dump}").strip()})
                kernels = dump_kernels(Path(dump))
            print(f"| {name} | kernels per program | " + ", ".join(
                f"{k}: {v}" for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])) + " |")
            rows.append({"command": name, "mode": "kernels", "kernels": kernels})
    for name in args.only:
        cold = next((r for r in rows if r["command"] == name and r["mode"] == "cold"), None)
        warm = next((r for r in rows if r["command"] == name and r["mode"] == "warm"), None)
        if cold and warm:
            print(f"# {name}: cold / warm = {cold['wall'] / warm['wall']:.2f}x in wall time, "
                  f"{cold['cpu'] / warm['cpu']:.2f}x in CPU seconds (goal for make-run: "
                  "<= 1.25x)")
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2], sys.argv[4:]))
    main()
