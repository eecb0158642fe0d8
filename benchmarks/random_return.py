"""A uniformly random policy's mean return on a task: the floor a learning curve is read against.

    PYTHONPATH=src python benchmarks/random_return.py ENV MAX_STEPS [PRIVATE ...] [--episodes N]

e.g. `gymnax:Acrobot-v1 200 link_mass_1=0.8:1.2`. The episodes are played by
`privrl.evaluation.random_returns`, the function every run's random baseline comes from, on the
same task the learners build (`configured_task`: same cap, each episode its own draw of the
private parameters), so the number is comparable with `metrics.csv`'s scores and with
summary.json's `random_return`. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json

from privrl.envs.task import cartpole_task, configured_task
from privrl.evaluation import random_returns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("env")
    ap.add_argument("max_steps", type=int)
    ap.add_argument("private", nargs="*")
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    task = configured_task(a.env, a.private, cartpole_task)
    returns = random_returns(task, a.episodes, a.seed, a.max_steps)
    print(json.dumps({"env": a.env, "private": a.private, "max_steps": a.max_steps,
                      "episodes": a.episodes, "mean_return": round(float(returns.mean()), 2),
                      "std_return": round(float(returns.std()), 2)}))


if __name__ == "__main__":
    main()
