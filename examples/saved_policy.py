"""Load and evaluate a saved policy: every run writes one (policy.npz) into its run directory.

Run: `python examples/saved_policy.py --out runs/fedpg-policy`. It trains FedPG-Cen briefly
(the same files as `privrl run fedpg-cen --out DIR`), then uses the policy as you would after
any run: load it (nothing in the file can run code: θ and a JSON description of the network),
act with it in your own loop, and evaluate it (what `privrl evaluate DIR` reports and writes).
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnax
import jax
import numpy as np


def main(out: str, budget: int = 300, episodes: int = 10, seed: int = 0) -> dict[str, Any]:
    import privrl

    # 1. Train (any system, CLI or API): the run directory holds policy.npz.
    privrl.run_fedpg(privrl.FedPGConfig(agents=2, budget=budget, seed=seed), out=out)

    # 2. Load trial 0's policy: the network is rebuilt from the file's description.
    policy = privrl.load_policy(out, trial=0)
    print("trained on", policy.env, "with", policy.description["model"])

    # 3. Act in your own loop: greedy without a key, a sample of π with one.
    env, params = gymnax.make("CartPole-v1")
    key = jax.random.key(seed)
    key, k_reset = jax.random.split(key)
    obs, state = env.reset(k_reset, params)
    total, done = 0.0, False
    while not done:
        key, k_step = jax.random.split(key)
        action = int(policy.act(np.asarray(obs)))  # or policy.act(obs, key=k_act)
        obs, state, reward, terminated, truncated, _ = env.step(k_step, state, action, params)
        total, done = total + float(reward), bool(terminated | truncated)
    print(f"one greedy episode in my own loop: return {total:g}")

    # 4. Evaluate every trial over `episodes` episodes, as `privrl evaluate DIR` does.
    ev = privrl.evaluate_run(out, episodes=episodes, seed=seed)
    summary = ev.summary()
    print("written to", *ev.write())  # evaluate-N.json and .csv, never over a file
    print(f"greedy mean return over {episodes} episodes: {summary['mean_return']:.1f} "
          f"(a random policy: about 22)")
    return {"own_loop": total, "summary": summary}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a new directory for the run")
    parser.add_argument("--episodes-per-agent", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=10)
    args = parser.parse_args()
    main(args.out, args.episodes_per_agent, args.episodes)
