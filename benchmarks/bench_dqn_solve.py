"""Issue 19: one DQN setting on CartPole-v1 over seeds: solved?, best and last 25-eval means, ε.

Usage (from the repo root):
  PYTHONPATH=src python benchmarks/bench_dqn_solve.py --preset dp-sgd --seeds 3 --episodes 600 \
      [--set target_epsilon=8] [--set double_dqn=true] ...
`--set k=v` overrides one DQNConfig field (v parsed as JSON; `sigma` = noise_multiplier, and any
σ > 0 or target_epsilon turns DP-SGD on). Prints one JSON line per run (append it to a log).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
from privrl.systems.dpsgd_rl.local import run_episodic


def window_means(evals: np.ndarray, window: int = 25) -> tuple[float, float]:
    """(best, last) mean of `window` consecutive evaluations of one seed (NaN tail dropped)."""
    x = evals[np.isfinite(evals)]
    if x.size < window:
        return float("nan"), float(np.mean(x)) if x.size else float("nan")
    means = np.convolve(x, np.ones(window) / window, mode="valid")
    return float(means.max()), float(means[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="dp-sgd")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, default=600)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    over: dict = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        over["noise_multiplier" if k == "sigma" else k] = json.loads(v)
    if over.get("noise_multiplier", 0) > 0 or over.get("target_epsilon") is not None:
        over.setdefault("dp", True)
    cfg = DQNConfig.from_preset(args.preset, seeds=args.seeds, seed=args.seed,
                                episodes=args.episodes, **over)
    t = time.time()
    algo = DQN.settings_algorithm([cfg])
    out = run_episodic(algo, "dp-dqn", devices=1, chunk=25, progress=lambda done, total: print(
        f"  {done}/{total} episodes, {time.time() - t:.0f} s", file=sys.stderr, flush=True))
    rows = [window_means(out.eval_returns[s]) for s in range(cfg.seeds)]
    dp = out.privacy["dpsgd"]
    print(json.dumps({
        "preset": args.preset, "set": over, "seeds": args.seeds, "episodes": args.episodes,
        "sigma": round(out.config.noise_multiplier, 4),
        "epsilon": dp.get("epsilon") if dp.get("formal_guarantee") else None,
        "solved_at": out.solved_at.tolist(), "updates": out.updates.tolist(),
        "best25": [round(b, 1) for b, _ in rows], "last25": [round(la, 1) for _, la in rows],
        "wall_s": round(time.time() - t)}), flush=True)


if __name__ == "__main__":
    main()
