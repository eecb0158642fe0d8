"""Where the test suite's time goes: a pytest plugin that records each test's wall time, its
process's CPU time (children not included: a Ray or Flower test's processes are not counted)
and JAX's own monitoring events (tracing, lowering to MLIR, XLA's backend compile with each
compiled program's name, persistent-cache hits), and a summary of what it recorded. CPU time is
the figure to rank by on a loaded machine (the events' durations are wall time).

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -q -n auto --dist loadgroup \\
        --no-loadscope-reorder -p suite_profile -m "not processes"
    .venv/bin/python benchmarks/suite_profile.py [--cpu]  # totals and the 25 slowest tests
    .venv/bin/python benchmarks/suite_profile.py --files     # CPU by test file
    .venv/bin/python benchmarks/suite_profile.py --programs  # compiles by program name
    .venv/bin/python benchmarks/suite_profile.py --classes   # learning / documented / other

Each xdist worker writes `suite-profile-<worker>.jsonl` in $SUITE_PROFILE_DIR (default: the
system's temporary directory); a new run appends, so empty it first.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_DIR = Path(os.environ.get("SUITE_PROFILE_DIR", tempfile.gettempdir()))
_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
           "/jax/core/compile/backend_compile_duration": "compile"}
_now: dict[str, Any] = {"test": None, "start": 0.0, "cpu": 0.0, "acc": collections.Counter(),
                        "compiled": [], "controller": False}


def _duration(event: str, secs: float, fun_name: str = "?", **_: Any) -> None:
    name = _EVENTS.get(event)
    if name is not None and _now["test"] is not None:
        _now["acc"][name] += secs
        if name == "compile":
            _now["acc"]["programs"] += 1
            _now["compiled"].append((fun_name, round(secs, 4)))


def _event(event: str, **_: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits" and _now["test"] is not None:
        _now["acc"]["cache_hits"] += 1


def pytest_configure(config: Any) -> None:
    # xdist's controller hears every worker's test reports too: only where tests run records
    _now["controller"] = ("PYTEST_XDIST_WORKER" not in os.environ
                          and getattr(config.option, "numprocesses", None) not in (None, 0))
    import jax.monitoring

    _DIR.mkdir(parents=True, exist_ok=True)  # a worker that cannot write its rows dies
    jax.monitoring.register_event_duration_secs_listener(_duration)
    jax.monitoring.register_event_listener(_event)


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _now.update(test=nodeid, start=time.perf_counter(), cpu=time.process_time(),
                acc=collections.Counter(), compiled=[])


def pytest_runtest_setup(item: Any) -> None:
    _now["learning"] = item.get_closest_marker("learning") is not None


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    if _now["controller"]:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    row = {"test": nodeid, "wall": time.perf_counter() - _now["start"],
           "cpu": time.process_time() - _now["cpu"], **_now["acc"],
           "learning": _now.pop("learning", False), "compiled": _now["compiled"]}
    with open(_DIR / f"suite-profile-{worker}.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    _now["test"] = None


def main() -> None:
    rows = [json.loads(line) for path in sorted(_DIR.glob("suite-profile-*.jsonl"))
            for line in path.read_text().splitlines()]
    if not rows:
        sys.exit(f"no suite-profile-*.jsonl in {_DIR}")
    total = collections.Counter()
    for r in rows:
        total.update({k: v for k, v in r.items() if k not in ("test", "compiled", "learning")})
    print(f"{len(rows)} tests; worker-seconds: " + ", ".join(
        f"{k} {total[k]:.1f}" for k in ("wall", "cpu", "compile", "lower", "trace")) +
        f"; programs compiled {total['programs']:.0f}, persistent-cache hits "
        f"{total['cache_hits']:.0f}")
    if "--files" in sys.argv:
        files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for r in rows:
            files[r["test"].split("::")[0]].update(
                tests=1, cpu=r["cpu"], programs=r.get("programs", 0))
        print("CPU-s  tests  programs  file")
        for f, c in sorted(files.items(), key=lambda kv: -kv[1]["cpu"])[:40]:
            print(f"{c['cpu']:6.1f} {c['tests']:6d} {c['programs']:9d}  {f}")
        return
    if "--programs" in sys.argv:  # the same name compiled in many tests: a shared-fixture lead
        names: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, set()])
        for r in rows:
            for name, secs in r.get("compiled", []):
                entry = names[name]
                entry[0] += 1
                entry[1] += secs
                entry[2].add(r["test"].split("::")[0])
        print("compiles  compile-s  files  program")
        for name, (n, secs, fs) in sorted(names.items(), key=lambda kv: -kv[1][1])[:40]:
            print(f"{n:8d} {secs:10.1f} {len(fs):6d}  {name}")
        return
    if "--classes" in sys.argv:  # what the issue keeps (learning tests, documented commands)
        classes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for r in rows:
            kind = ("learning" if r.get("learning") else "documented commands"
                    if r["test"].startswith("tests/test_documented_commands.py") else "other")
            classes[kind].update(tests=1, cpu=r["cpu"], jax=r.get("compile", 0)
                                 + r.get("lower", 0) + r.get("trace", 0))
        print("tests   CPU-s  of which compile+lower+trace  class")
        for kind, c in classes.items():
            print(f"{c['tests']:5d} {c['cpu']:7.1f} {c['jax']:28.1f}  {kind}")
        return
    key = "cpu" if "--cpu" in sys.argv else "wall"
    for r in sorted(rows, key=lambda r: -r.get(key, 0))[:25]:
        print(f"{r['wall']:6.1f} s  cpu {r.get('cpu', 0):6.1f}  "
              f"compile {r.get('compile', 0):5.1f}  "
              f"trace+lower {r.get('trace', 0) + r.get('lower', 0):4.1f}  {r['test']}")


if __name__ == "__main__":
    main()
