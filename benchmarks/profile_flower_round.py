"""Where a PGC-A3C Flower round's CPU goes (issue 52): one local deployment (4 SuperNodes,
P = 9, the pace benchmark's settings) with every process of this environment sampled from
/proc (utime + stime) while it runs. The steady state is the window between the ServerApp's
first and last PROGRESS write (one a round), so the processes' starts are not counted.
Prints CPU-s a round per process kind and the rounds' wall time. Linux only; run it niced:

    nice -n 10 .venv/bin/python benchmarks/profile_flower_round.py --submissions 135
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
VENV = str(Path(sys.executable).parent.parent)


def kind(cmdline: str) -> str:
    for key, name in (("flower-superlink", "superlink"), ("flower-superexec", "superexec"),
                      ("flwr-serverapp", "serverapp"), ("flower-supernode", "supernode"),
                      ("pgc_a3c.flower", "agent executor"), ("profile_flower", "privrl driver"),
                      ("flwr", "flwr cli")):
        if key in cmdline:
            return name
    return cmdline[:60]


def sample() -> dict[int, tuple[str, float]]:
    """pid -> (kind, CPU-s so far) of every process started from this environment."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if VENV not in cmd and "flwr" not in cmd and int(entry.name) != os.getpid():
                continue
            if os.stat(f"/proc/{entry.name}").st_uid != os.getuid():
                continue
            stat = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(entry.name)] = (kind(cmd), (int(stat[11]) + int(stat[12])) / TICK)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--submissions", type=int, default=135)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=9)
    args = parser.parse_args()
    from privrl.federation.flower import PROGRESS
    from privrl.runtime.flower import LocalDeployment
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
    from privrl.systems.pgc_a3c.flower import run_pgc_a3c_flower

    with tempfile.TemporaryDirectory() as d:
        progress = Path(d) / "run" / "aggregator" / PROGRESS
        marks: list[tuple[float, dict[int, tuple[str, float]]]] = []  # one per PROGRESS write
        done = threading.Event()

        def watch() -> None:
            last = None
            while not done.is_set():
                try:
                    m = progress.stat().st_mtime_ns
                except OSError:
                    m = None
                if m is not None and m != last:
                    last = m
                    marks.append((time.perf_counter(), sample()))
                time.sleep(0.02)

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        cfg = PGCA3CConfig(preset="tuned", trials=1, mechanism="laplace", epsilon=2.0,
                           submissions=args.submissions, parallel_agents=args.parallel, seed=1)
        wall = time.perf_counter()
        out = run_pgc_a3c_flower(cfg, Path(d) / "run", args.nodes,
                                 deployment=lambda n, logs: LocalDeployment(n, logs, 300.0))
        wall = time.perf_counter() - wall
        done.set()
        t.join()
    assert out.error is None, out.error
    (t0, first), (t1, last) = marks[1], marks[-1]  # from the 2nd round's start: all warm
    rounds = len(marks) - 2
    per: dict[str, float] = {}
    for pid, (k, cpu) in last.items():
        per[k] = per.get(k, 0.0) + cpu - first.get(pid, (k, 0.0))[1]
    print(json.dumps({"rounds": rounds, "wall_s_per_round": (t1 - t0) / rounds,
                      "cpu_s_per_round": {k: round(v / rounds, 3) for k, v in
                                          sorted(per.items(), key=lambda x: -x[1])},
                      "total_cpu_s_per_round": sum(per.values()) / rounds,
                      "run_wall_s": wall}, indent=1))


if __name__ == "__main__":
    main()
