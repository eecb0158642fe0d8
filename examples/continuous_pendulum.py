"""A continuous-action task: PGC-A3C learns gymnax Pendulum-v1 (torque in [−2, 2]).

Run: `python examples/continuous_pendulum.py --out runs/pendulum` (about 2 minutes on 2 CPU
cores). The action space chooses the policy head: a Box takes a Gaussian whose mean is
squashed into the bounds by tanh and whose samples are clipped to them. The "continuous" preset
gives it a learned log-std that does not depend on the state, GAE and a scaled reward
(benchmarks/RESULTS.md). Add `mechanism="privunit", epsilon=5` for local DP (it does not learn
Pendulum at that ε in this budget). Then load the saved policy and act in your own loop.
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnax
import jax
import numpy as np


def main(out: str | None = None, submissions: int = 36_000, seed: int = 0,
         max_episode_steps: int | None = None) -> dict[str, Any]:
    import privrl
    from privrl import PGCA3CConfig

    config = PGCA3CConfig.from_preset(
        "continuous", env="gymnax:Pendulum-v1", mechanism="none", submissions=submissions,
        max_episode_steps=max_episode_steps, seed=seed)
    result = privrl.run_pgc_a3c(config, out=out)
    scores = result.scores[0]  # each episode's return (random policy: about −1,230)
    tenth = max(1, len(scores) // 10)
    first, last = float(scores[:tenth].mean()), float(scores[-tenth:].mean())
    print(f"mean return, first tenth: {first:.0f}; last tenth: {last:.0f}")
    own = None
    if out is not None:
        policy = privrl.load_policy(out)  # a float32 torque vector for each observation
        env, params = gymnax.make("Pendulum-v1")
        step = jax.jit(env.step)  # one compiled step (eager, each step costs ~100 dispatches)
        key, k_reset = jax.random.split(jax.random.key(seed))
        obs, state = env.reset(k_reset, params)
        own, done = 0.0, False
        while not done:
            key, k_act, k_step = jax.random.split(key, 3)
            action = policy.act(np.asarray(obs), key=k_act)  # a sample, clipped to [−2, 2]
            obs, state, reward, terminated, truncated, _ = step(k_step, state, action, params)
            own, done = own + float(reward), bool(terminated | truncated)
        print(f"one sampled episode of the saved policy in my own loop: {own:.0f}")
    return {"first": first, "last": last, "own_loop": own}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="a new directory for the run")
    parser.add_argument("--submissions", type=int, default=36_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.out, args.submissions, args.seed)
