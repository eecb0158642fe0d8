"""DP-DQN's `adaptive` preset against its defaults at one ε (issue 51; benchmarks/log/26-dqn.md).

Per task, at one target ε per transition, the same trials and seed: a uniformly random policy,
non-private DQN (the `paper` preset without DP-SGD), DP-DQN's `paper` (the default) and `dp-sgd`
presets, and the `adaptive` preset (dp-sgd with the levers). Every row's final policy is played
on the same 25 fresh episodes per trial of the task's public simulator (the verdict's keys),
so the rows compare like for like; `fraction` = (row − random) / (non-private − random).

    nice -n 10 python benchmarks/bench_dqn_adaptive.py --task corridor --episodes 300
    nice -n 10 python benchmarks/bench_dqn_adaptive.py --task cartpole --episodes 300

`corridor` is benchmarks/untuned.py's task (its private slip per agent); CartPole is gymnax's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

TASKS = {"cartpole": ("gymnax:CartPole-v1", ()),
         "corridor": ("untuned:corridor", ("slip=0:0.2",)),
         "acrobot": ("gymnax:Acrobot-v1", ("link_mass_1=0.8:1.2",))}
ROWS = ("non-private", "paper", "dp-sgd", "adaptive")


def run_row(row: str, task: str, args: argparse.Namespace) -> dict:
    from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
    from privrl.systems.dpsgd_rl.local import final_policy_returns, run_episodic, summarize

    env, private = TASKS[task]
    common = dict(env=env, private_params=private, episodes=args.episodes, seeds=args.trials,
                  seed=args.seed, stop_when_solved=False)
    if row == "non-private":
        cfg = DQNConfig(dp=False, **common)
    else:
        cfg = DQNConfig.from_preset(row, dp=True, target_epsilon=args.epsilon, **common)
    for field in args.set or ():
        name, value = field.split("=", 1)
        if row == "adaptive":
            cfg = replace(cfg, **{name: json.loads(value)})
    t0 = time.perf_counter()
    algo = DQN.settings_algorithm([cfg])
    out = run_episodic(algo, f"dp-dqn-{row}")
    wall = time.perf_counter() - t0
    s = summarize(out)
    thetas = np.asarray(out.policy.theta).reshape(args.trials, -1)
    final = (out.final_returns if out.final_returns is not None
             else final_policy_returns(algo, thetas))
    dp = out.privacy["dpsgd"]
    return {"task": task, "row": row, "final_policy_return": float(np.mean(final)),
            "final_per_trial": [float(x) for x in np.mean(final, axis=1)],
            "curve_last_25": s["final_eval_mean"], "random_return": s.get("random_return"),
            "epsilon": dp.get("epsilon"), "sigma": out.config.noise_multiplier,
            "levers": s.get("levers"), "updates": s["updates"], "wall_seconds": wall,
            "set": args.set if row == "adaptive" else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=tuple(TASKS), required=True)
    p.add_argument("--episodes", type=int, default=300)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epsilon", type=float, default=5.0)
    p.add_argument("--row", action="append", choices=ROWS, help="Only these rows.")
    p.add_argument("--set", action="append", help="field=JSON for the adaptive row only.")
    p.add_argument("--out", type=Path, default=Path("/tmp/dqn-adaptive"))
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))  # `untuned:corridor`
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for row in args.row or ROWS:
        d = run_row(row, args.task, args)
        tag = "" if not args.set or row != "adaptive" else "-" + "-".join(args.set)
        (args.out / f"{args.task}-{row}{tag}-e{args.epsilon:g}.json").write_text(json.dumps(d))
        rows.append(d)
        print(json.dumps({k: d[k] for k in ("row", "final_policy_return", "final_per_trial",
                                             "curve_last_25", "random_return", "epsilon",
                                             "wall_seconds")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
