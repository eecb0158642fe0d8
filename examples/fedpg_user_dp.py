"""FedPG-Cen with user-level DP: each agent's whole participation is protected, in one run.

Run: `python examples/fedpg_user_dp.py --out runs/walk-user-dp`. K agents (default 1,000)
learn a policy for examples/byo_env.py's walker with your own network. Every round each agent
is sampled with probability q; it clips its gradient estimate to L2 norm C and adds a share of
Gaussian noise; the server sees only the (simulated) secure sum. The accountant calibrates the
noise so that the whole run is (ε = 2, δ = 1e-5)-DP for any one agent's data (add or remove
one agent), and refuses a round beyond that budget. Prints the statement privacy.json holds.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
from byo_env import Walk  # examples/byo_env.py: a 40-line gymnax environment
from flax import linen as nn


class Policy(nn.Module):
    """One observation -> the logits of the 2 actions."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return nn.Dense(2)(nn.tanh(nn.Dense(16)(obs)))


def main(out: str | None = None, agents: int = 1000, episodes: int = 600, epsilon: float = 2.0,
         seed: int = 0) -> dict[str, Any]:
    import privrl
    from privrl import FedPGConfig, PrivateParam, Task

    env = Walk()
    task = Task(env, env.default_params, "byo_env:Walk",
                private=(PrivateParam("drift", 0.6, 1.4),))
    config = FedPGConfig(
        algorithm="cen", agents=agents, budget=episodes, mechanism="distributed-gaussian",
        epsilon=epsilon, delta=1e-5, clip=1.0, max_episode_steps=30, target_return=-7.0,
        seed=seed)
    run = privrl.run_fedpg(config, task=task, model=Policy(), out=out)
    curve = run.mean_return[0][~jax.numpy.isnan(run.mean_return[0])]  # per round
    print(f"{run.rounds_run} rounds; mean return of the first: {curve[0]:.1f}, of the last: "
          f"{curve[-1]:.1f} (best possible: -5; a random policy: about -38)")
    print(run.privacy_record["statement"])
    print(f"ε per agent over the run: {run.accounting['epsilon']:.3f} (δ = 1e-5)")
    return {"first": float(curve[0]), "last": float(curve[-1]), "privacy": run.privacy_record}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="a new directory for the run")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=600, help="episodes per agent")
    parser.add_argument("--epsilon", type=float, default=2.0)
    args = parser.parse_args()
    main(args.out, args.agents, args.episodes, args.epsilon)
