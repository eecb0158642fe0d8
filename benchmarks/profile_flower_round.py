"""Where a PGC-A3C Flower round's CPU goes (issue 52): one local deployment (4 SuperNodes,
P = 9, the pace benchmark's settings) with every process of this environment sampled from
/proc (utime + stime) while it runs. The steady state is the window between the ServerApp's
first and last PROGRESS write (one a round), so the processes' starts are not counted.
Prints CPU-s a round per process kind and the rounds' wall time. Linux only; run it niced:

    nice -n 10 .venv/bin/python benchmarks/profile_flower_round.py --submissions 135
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_flower_sum_pace import read_supernode_logs  # benchmarks/ is the script's folder

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


def timeline(starts: list[float], events: list[tuple[float, int, str]], nodes: int
             ) -> dict[str, object]:
    """Where a round's wall goes (20 ms resolution), from each round's start (the ServerApp's
    PROGRESS write, just before it pushes): each SuperNode's wait until it pulls the message
    (its poll phase), its pull-to-sent (the executor's answer and the SuperNode's 0.5 s reply
    step, then the push), and the ServerApp's turnaround from the round's last reply sent to
    the next round's start. A SuperNode that pulls its next message more than 4 s after it
    sent its reply slept through a 3 s poll after the message was there (a miss). Round trips
    a round: the round's wall over flwr 1.42's SuperNode poll (3 s), the issue's unit."""
    import statistics

    waits, steps, turns, gaps = [], [], [], []
    before: dict[int, float] | None = None
    for a, b in itertools.pairwise(starts):
        recv = {i: min((t for t, n, k in events if n == i and k == "recv" and a <= t < b),
                       default=None) for i in range(nodes)}
        sent = {i: min((t for t, n, k in events if n == i and k == "sent" and a <= t <= b),
                       default=None) for i in range(nodes)}
        if None in recv.values() or None in sent.values():
            before = None
            continue
        waits += [recv[i] - a for i in range(nodes)]
        steps += [sent[i] - recv[i] for i in range(nodes)]
        turns.append(b - max(sent.values()))
        if before is not None:
            gaps += [recv[i] - before[i] for i in range(nodes)]
        before = sent
    if not turns:
        return {}
    rounds = [b - a for a, b in itertools.pairwise(starts)]
    return {"median_s_until_pulled": statistics.median(waits),
            "max_s_until_pulled": max(waits),
            "median_s_pulled_to_sent": statistics.median(steps),
            "max_s_pulled_to_sent": max(steps),
            "median_s_turnaround": statistics.median(turns),
            "sent_to_next_pull_misses": f"{sum(g > 4.0 for g in gaps)} of {len(gaps)}",
            "median_s_per_round": statistics.median(rounds),
            "round_trips_per_round": statistics.mean(rounds) / 3.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--submissions", type=int, default=135)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=9)
    parser.add_argument("--keep-logs", type=Path, default=None,
                        help="copy the deployment's process logs here (their timelines)")
    args = parser.parse_args()
    from privrl.federation.flower import PROGRESS
    from privrl.runtime.flower import LocalDeployment
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
    from privrl.systems.pgc_a3c.flower import run_pgc_a3c_flower

    with tempfile.TemporaryDirectory() as d:
        progress = Path(d) / "run" / "aggregator" / PROGRESS
        marks: list[tuple[float, dict[int, tuple[str, float]]]] = []  # one per PROGRESS write
        events: list[tuple[float, int, str]] = []  # (time, SuperNode, "recv" | "sent")
        done = threading.Event()
        logs = [Path(d) / "run" / "logs" / f"supernode{i}.log" for i in range(args.nodes)]
        read = [0] * args.nodes

        def watch() -> None:
            last = None
            while not done.is_set():
                read_supernode_logs(logs, read, events)  # each SuperNode's pulls and pushes
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
        if args.keep_logs is not None:
            import shutil
            shutil.copytree(Path(d) / "run" / "logs", args.keep_logs, dirs_exist_ok=True)
    assert out.error is None, out.error
    (t0, first), (t1, last) = marks[1], marks[-1]  # from the 2nd round's start: all warm
    rounds = len(marks) - 2
    per: dict[str, float] = {}
    for pid, (k, cpu) in last.items():
        per[k] = per.get(k, 0.0) + cpu - first.get(pid, (k, 0.0))[1]
    print(json.dumps({"rounds": rounds, "wall_s_per_round": (t1 - t0) / rounds,
                      **timeline([m[0] for m in marks[1:]], events, args.nodes),
                      "cpu_s_per_round": {k: round(v / rounds, 3) for k, v in
                                          sorted(per.items(), key=lambda x: -x[1])},
                      "total_cpu_s_per_round": sum(per.values()) / rounds,
                      "run_wall_s": wall}, indent=1))


if __name__ == "__main__":
    main()
