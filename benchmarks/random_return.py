"""A uniformly random policy's mean return on a task: the floor a learning curve is read against.

    PYTHONPATH=src python benchmarks/random_return.py ENV MAX_STEPS [PRIVATE ...] [--episodes N]

e.g. `gymnax:Acrobot-v1 200 link_mass_1=0.8:1.2`. The episodes are played by privrl's own
rollout (`rollout_episodes`, or the task's host rollout for Gymnasium) on the same task the
learners build (`configured_task`: same cap, each episode its own draw of the private
parameters), so the number is comparable with `metrics.csv`'s scores. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from privrl.envs.rollout import rollout_episodes
from privrl.envs.task import cartpole_task, configured_task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("env")
    ap.add_argument("max_steps", type=int)
    ap.add_argument("private", nargs="*")
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    task = configured_task(a.env, a.private, cartpole_task).with_max_steps(a.max_steps)
    k_params, k_roll = jax.random.split(jax.random.PRNGKey(a.seed))
    params = task.agents_params(k_params, jax.numpy.arange(a.episodes))
    head = task.head  # uniform over the actions, or over a Box (continuous actions)

    def policy(key: jax.Array, obs: jax.Array) -> jax.Array:
        return head.uniform(key, obs.shape[0])

    if task.host:  # a Gymnasium task: stepped on the host
        traj = task.rollout(params, policy, k_roll, a.episodes, a.max_steps,
                            np.ones(a.episodes, bool))
    else:
        traj = jax.jit(lambda k: rollout_episodes(task.env, params, policy, k, a.episodes,
                                                  a.max_steps))(k_roll)
    returns = np.asarray(traj.rewards).sum(axis=0)
    print(json.dumps({"env": a.env, "private": a.private, "max_steps": a.max_steps,
                      "episodes": a.episodes, "mean_return": round(float(returns.mean()), 2),
                      "std_return": round(float(returns.std()), 2),
                      "terminated": round(float(np.mean(np.asarray(traj.terminated))), 3)}))


if __name__ == "__main__":
    main()
