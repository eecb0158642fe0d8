"""FedPG-Cen with the `continuous` preset on a continuous-action task (issue 39) through the
Python API, one JSON line per call. The same run (same seed, same returns) from the CLI:
`privrl run fedpg-cen --env gymnax:Pendulum-v1 --preset continuous --episodes 10000
--agents 10 --trials 3`.

    PYTHONPATH=src python benchmarks/fedpg_continuous.py [--env gymnax:Pendulum-v1]
        [--episodes 10000] [--agents 10] [--trials 3] [--mechanism none] [--epsilon E]
        [--clip C]

Prints each trial's mean return over its last 10 rounds (the mean of the agents' batch
returns, as metrics.csv's) and their median, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.fedpg.local import final_return, run_fedpg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="gymnax:Pendulum-v1")
    ap.add_argument("--episodes", type=int, default=10_000, help="per agent (budget)")
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--mechanism", default="none")
    ap.add_argument("--epsilon", type=float, default=None)
    ap.add_argument("--clip", type=float, default=None, help="default: none's; else 1 (CLI's)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = FedPGConfig.from_preset("continuous", env=a.env, budget=a.episodes, agents=a.agents,
                                  trials=a.trials, mechanism=a.mechanism, epsilon=a.epsilon,
                                  clip=a.clip if a.clip or a.mechanism == "none" else 1.0,
                                  seed=a.seed)
    start = time.perf_counter()
    run = run_fedpg(cfg)
    last = [round(float(x), 1) for x in final_return(run)]
    print(json.dumps({"env": a.env, "episodes_per_agent": a.episodes, "agents": a.agents,
                      "mechanism": a.mechanism, "epsilon": a.epsilon,
                      "last10_per_trial": last, "median": float(np.median(last)),
                      "wall_s": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
