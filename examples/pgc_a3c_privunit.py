"""PGC-A3C with PrivUnit on your own gymnax environment and your own network.

Run: `python examples/pgc_a3c_privunit.py --out runs/walk-privunit`. The environment is
examples/byo_env.py's walker (reach x = 5; −1 a step, −2 a step back; each agent's `drift` is
private dynamics in [0.6, 1.4]); the network is any flax module mapping one observation to
(logits, value). Each agent sends one gradient through PrivUnit2 (ε = 5 for everything it
sends: local DP, the aggregator is not trusted); the run directory is the CLI's, policy.npz
included, and the saved policy is evaluated on the same task.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
from byo_env import Walk  # examples/byo_env.py: a 40-line gymnax environment
from flax import linen as nn


class ActorCritic(nn.Module):
    """One observation -> (logits of the 2 actions, a scalar value)."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = nn.tanh(nn.Dense(16)(obs))
        return nn.Dense(2)(h), nn.Dense(1)(h)[0]


def main(out: str | None = None, submissions: int = 6000, epsilon: float = 5.0,
         seed: int = 0) -> dict[str, Any]:
    import privrl
    from privrl import PGCA3CConfig, PrivateParam, Task

    env = Walk()
    task = Task(env, env.default_params, "byo_env:Walk",
                private=(PrivateParam("drift", 0.6, 1.4),))
    # "tuned-ldp": the algorithm's small-ε settings; reward "env": the walker's own rewards
    config = PGCA3CConfig.from_preset(
        "tuned-ldp", mechanism="privunit", epsilon=epsilon, reward="env",
        target_score=-7.0, max_episode_steps=30, submissions=submissions, seed=seed)
    result = privrl.run_pgc_a3c(config, task=task, model=ActorCritic(), out=out)
    scores = result.scores[0]  # each submission's episode return
    tenth = max(1, len(scores) // 10)
    print(f"mean return, first tenth: {scores[:tenth].mean():.1f}; last tenth: "
          f"{scores[-tenth:].mean():.1f} (best possible: -5; a random policy: about -38)")
    print(result.privacy_record["statement"])
    summary = None
    if out is not None:  # your module is passed back in: the file never names code to load
        ev = privrl.evaluate_run(out, env=task, episodes=20, seed=seed, model=ActorCritic())
        summary = ev.summary()
        print(f"saved policy, greedy, 20 episodes: mean return {summary['mean_return']:.1f}")
    return {"first": float(scores[:tenth].mean()), "last": float(scores[-tenth:].mean()),
            "privacy": result.privacy_record, "evaluation": summary}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="a new directory for the run")
    parser.add_argument("--submissions", type=int, default=6000)
    parser.add_argument("--epsilon", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.out, args.submissions, args.epsilon, args.seed)
