"""FedPG-Cen's secure sum on Flower: the pace of a round (issue 52; goal <= 15 s a round at 200
agents on 10 SuperNodes). One local deployment (`run_fedpg_cen_flower`: TLS, SuperNode
authentication, SecAgg+ with the fleet roster, distributed-gaussian ε = 2 at δ = 1e-5) and
the time and CPU between the starts of consecutive rounds after the first (round 0 also waits
for the ServerApp to start): seconds a round and CPU-seconds a round of this process and every
process it started (SuperLink, SuperNodes, agent executors, ServerApp). The machine may be
shared: run it niced, and read it as indicative.

    nice -n 10 .venv/bin/python benchmarks/bench_flower_sum_pace.py --agents 200 --nodes 10
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

STAGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")


def tree_cpu_s() -> float:
    """CPU seconds of this process and all its live descendants (and the children they
    waited for)."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass  # exited between the listing and the reading
    return total


KINDS = (("flower-superlink", "superlink"), ("flower-superexec", "superexec"),
         ("flwr-serverapp", "serverapp"), ("flower-supernode", "supernode"),
         ("fedpg.flower", "agent executor"), ("bench_flower_sum_pace", "learner (privrl)"))


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds (own: user + system) of this process and its live descendants, by kind."""
    import psutil

    out: dict[str, float] = {}
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            cmd, t = " ".join(p.cmdline()), p.cpu_times()
        except psutil.Error:
            continue
        kind = next((name for key, name in KINDS if key in cmd), "other")
        out[kind] = out.get(kind, 0.0) + t.user + t.system
    return out


def read_supernode_logs(logs: list[Path], read: list[int],
                        events: list[tuple[float, int, str]]) -> None:
    """One pass over the SuperNodes' logs from `read` (bytes read so far, per log; advanced):
    (time, SuperNode, "recv" | "sent") of each message a SuperNode pulled and each reply it
    pushed since, as it logged them."""
    for i, log in enumerate(logs):
        try:
            with open(log, "rb") as f:
                f.seek(read[i])
                new = f.read()
        except OSError:
            continue
        new = new[:new.rfind(b"\n") + 1]
        read[i] += len(new)
        now = time.perf_counter()
        events.extend((now, i, "recv" if b"Receiving:" in line else "sent")
                      for line in new.splitlines()
                      if b"Receiving:" in line or b"Sent successfully" in line)


def watch_supernodes(logs: list[Path], events: list[tuple[float, int, str]],
                     done: threading.Event) -> None:
    """`read_supernode_logs` every 20 ms (that resolution) until `done`."""
    read = [0] * len(logs)
    while not done.is_set():
        read_supernode_logs(logs, read, events)
        time.sleep(0.02)


def stage_table(marks: list[float], rounds: list[dict], events: list[tuple[float, int, str]],
                nodes: int) -> dict[str, dict[str, float]]:
    """Per SecAgg+ stage, medians over the steady rounds (each round's stage times are the
    ServerApp's, `stage_seconds`, from the round's start as the learner marked it): the
    stage's wall (its requests' push to its last reply), the ServerApp's own time before it
    (the workflow's compute; for SETUP, from the round's start), and per SuperNode the wait
    from the push until it pulled the request (its poll) and from the pull until its reply
    was pushed (its executor's answer and the SuperNode's 0.5 s reply steps)."""
    rows: dict[str, dict[str, list[float]]] = {s: {"stage_s": [], "server_before_s": [],
                                                   "pulled_after_s": [], "max_pulled_after_s":
                                                   [], "reply_s": [], "max_reply_s": []}
                                               for s in STAGES}
    tails = []
    for k, (mark, nxt) in enumerate(itertools.pairwise(marks)):
        if k == 0:
            continue  # round 0 waits for the ServerApp to start
        st = rounds[k].get("stage_seconds", {})
        if list(st) != list(STAGES):
            continue
        prev_end = 0.0
        for j, s in enumerate(STAGES):
            a, b = (mark + x for x in st[s])
            until = mark + st[STAGES[j + 1]][0] if j + 1 < len(STAGES) else nxt
            row = rows[s]
            row["stage_s"].append(b - a)
            row["server_before_s"].append(st[s][0] - prev_end)
            prev_end = st[s][1]
            waits, replies = [], []
            for i in range(nodes):
                recv = min((t for t, n, e in events if n == i and e == "recv" and a <= t < until),
                           default=None)
                sent = min((t for t, n, e in events if n == i and e == "sent" and recv is not None
                            and recv <= t <= until), default=None)
                if recv is not None and sent is not None:
                    waits.append(recv - a)
                    replies.append(sent - recv)
            if waits:
                row["pulled_after_s"].append(statistics.median(waits))
                row["max_pulled_after_s"].append(max(waits))
                row["reply_s"].append(statistics.median(replies))
                row["max_reply_s"].append(max(replies))
        tails.append(nxt - (mark + st[STAGES[-1]][1]))
    out = {s: {k: round(statistics.median(v), 2) for k, v in row.items() if v}
           for s, row in rows.items()}
    if tails:
        out["after_unmask"] = {"to_next_round_s": round(statistics.median(tails), 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--budget", type=int, default=250, help="episodes per agent (8 rounds)")
    parser.add_argument("--no-roster", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cache = Path(d) / "jax-cache"
        cache.mkdir(mode=0o700)
        # the executors share one compilation cache (agent 0 compiles, the others load)
        os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(cache))
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        from privrl.systems.fedpg.config import FedPGConfig
        from privrl.systems.fedpg.flower import plan_run, run_fedpg_cen_flower

        cfg = FedPGConfig(algorithm="cen", agents=args.agents, budget=args.budget,
                          mechanism="distributed-gaussian", epsilon=2.0, delta=1e-5,
                          sampling_rate=1.0, clip=1.0, roster=not args.no_roster, seed=1)
        marks: list[tuple[int, float, float]] = []
        kinds: list[dict[str, float]] = []
        events: list[tuple[float, int, str]] = []
        done = threading.Event()
        watcher = threading.Thread(target=watch_supernodes, daemon=True, args=(
            [Path(d) / "run" / "logs" / f"supernode{i}.log" for i in range(args.nodes)],
            events, done))
        watcher.start()

        def on_round(t: int, deployment: object) -> None:
            marks.append((t, time.perf_counter(), tree_cpu_s()))
            kinds.append(cpu_by_kind())
            print(json.dumps({"round": t, "at_s": round(marks[-1][1] - start, 1),
                              "cpu_s": round(marks[-1][2] - cpu0, 1)}), flush=True)

        start, cpu0 = time.perf_counter(), tree_cpu_s()
        run = run_fedpg_cen_flower(plan_run(cfg, args.nodes), Path(d) / "run",
                                   stage_timeout_s=120.0, on_round=on_round)
        end = time.perf_counter()
        done.set()
        watcher.join()
    steady = marks[1:]  # the last round's end is not marked (the run then stops everything)
    walls = [b[1] - a[1] for a, b in itertools.pairwise(steady)]
    cpus = [b[2] - a[2] for a, b in itertools.pairwise(steady)]
    per_kind = {k: statistics.median(b.get(k, 0.0) - a.get(k, 0.0)
                                     for a, b in itertools.pairwise(kinds[1:]))
                for k in kinds[-1]} if len(kinds) > 2 else {}
    print(json.dumps({
        "agents": args.agents, "supernodes": args.nodes, "roster": not args.no_roster,
        "rounds": len(run.rounds), "agents_in_sum": [r.get("agents_in_sum") for r in run.rounds],
        "secagg_runs": [r.get("secagg_runs") for r in run.rounds],
        "s_per_round": walls, "median_s_per_round": statistics.median(walls),
        "cpu_s_per_round": cpus, "median_cpu_s_per_round": statistics.median(cpus),
        "median_cpu_s_per_round_by_kind": {k: round(v, 2) for k, v in sorted(
            per_kind.items(), key=lambda x: -x[1])},
        "stages": stage_table([m[1] for m in marks], run.rounds, events, args.nodes),
        "startup_s": marks[0][1] - start, "wall_s": end - start,
        "loadavg": os.getloadavg()}))


if __name__ == "__main__":
    main()
