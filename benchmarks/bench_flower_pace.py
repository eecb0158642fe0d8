"""PGC-A3C on Flower: the pace of a round (issue 52). Runs the same local deployment twice
(4 SuperNodes, P = 9 agents a round, laplace ε = 2, tuned preset) with 200 and with 1,000
submissions and reports the extra wall time and CPU of the 800 extra submissions: the
steady state, without the deployment's start. A round trip's floor is Flower 1.42's fixed
polls (docs/flower.md "Pace"). The machine may be shared: read the ratio, and run it niced
(`nice -n 10 .venv/bin/python benchmarks/bench_flower_pace.py`).

    --small 200 --large 1000 --nodes 4 --parallel 9
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path


def cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (the deployment's processes)."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def one(submissions: int, nodes: int, parallel: int, root: Path) -> dict[str, float]:
    from privrl.runtime.flower import LocalDeployment
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
    from privrl.systems.pgc_a3c.flower import run_pgc_a3c_flower

    cfg = PGCA3CConfig(preset="tuned", trials=1, mechanism="laplace", epsilon=2.0,
                       submissions=submissions, parallel_agents=parallel, seed=1)
    cpu, wall = cpu_s(), time.perf_counter()
    out = run_pgc_a3c_flower(cfg, root / f"run{submissions}", nodes,
                             deployment=lambda n, logs: LocalDeployment(n, logs, 300.0))
    wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
    assert out.error is None and out.status["accepted"] == submissions, out.status
    return {"submissions": submissions, "wall_s": wall, "cpu_s": cpu,
            "rounds": -(-submissions // parallel)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        small = one(args.small, args.nodes, args.parallel, Path(d))
        print(json.dumps(small), flush=True)
        large = one(args.large, args.nodes, args.parallel, Path(d))
        print(json.dumps(large), flush=True)
    extra = args.large - args.small
    rounds = large["rounds"] - small["rounds"]
    wall, cpu = large["wall_s"] - small["wall_s"], large["cpu_s"] - small["cpu_s"]
    print(json.dumps({"extra_submissions": extra, "extra_rounds": rounds,
                      "s_per_submission": wall / extra, "s_per_round": wall / rounds,
                      "cpu_s_per_round": cpu / rounds}))


if __name__ == "__main__":
    main()
