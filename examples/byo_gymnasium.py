"""Bring your own Gymnasium environment: a plain `gymnasium.Env`, a flax policy, DP-REINFORCE.

Run: `python examples/byo_gymnasium.py`. The walker starts at 0 on a line and must reach `goal`;
every step costs 1 and a step back 2 (true, negative rewards the learner sees), and each
training episode's `drift` (how far a step moves it) is private dynamics drawn in [0.6, 1.4]:
an attribute of the environment, set per episode. Gymnasium environments are stepped on the
host, each action chosen by the jitted network; the gradient, its clipping and noise are the
same code as for a gymnax environment (examples/byo_env.py). From the command line:
`privrl run dp-reinforce --env byo_gymnasium:Walk --private drift=0.6:1.4` (or `pgc-a3c`).
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium
import jax
import numpy as np
from flax import linen as nn
from gymnasium import spaces


# --- the environment (40 lines) ---------------------------------------------------------------
class Walk(gymnasium.Env):
    """Move left (0) or right (1) by `drift` until x >= goal (truncated after 30 steps)."""

    observation_space = spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, drift: float = 1.0, goal: float = 5.0, max_steps: int = 30) -> None:
        self.drift, self.goal, self.max_steps = drift, goal, max_steps
        self.x, self.t = 0.0, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x, self.t = 0.0, 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.x += self.drift * (2.0 * action - 1.0)
        self.t += 1
        reward = -1.0 if action == 1 else -2.0  # a step costs 1, a step back 2
        return self._obs(), reward, self.x >= self.goal, self.t >= self.max_steps, {}

    def _obs(self) -> np.ndarray:
        return np.array([self.x / 5.0, self.t / 30.0], np.float32)


# --- the model: any flax module that maps an observation to logits ----------------------------
class Policy(nn.Module):
    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return nn.Dense(2)(nn.tanh(nn.Dense(16)(obs)))


def main(episodes: int = 150, seed: int = 0) -> dict[str, Any]:
    """Train with DP-SGD REINFORCE (σ = 0.5, one episode = the unit of privacy)."""
    from privrl.envs.task import PrivateParam, make_task
    from privrl.systems.dpsgd_rl.local import run_episodic
    from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

    # `module:callable` (here this module's Walk class): called once per parallel environment.
    task = make_task(f"{__name__}:Walk", [PrivateParam("drift", 0.6, 1.4)])
    config = ReinforceConfig(dp=True, noise_multiplier=0.5, clip=1.0, episodes=episodes,
                             max_episode_steps=30, learning_rate=0.01, batch_episodes=8,
                             stop_when_solved=False, seed=seed)
    result = run_episodic(Reinforce.settings_algorithm([config], task, Policy()), "byo-gymnasium")
    train = result.train_returns[0]  # the sampled policy's true (negative) returns
    print(f"mean return, first 10 updates: {train[:10].mean():.1f}; last 10: "
          f"{train[-10:].mean():.1f} (best possible: -5; a random policy: about -45)")
    print(result.privacy["dpsgd"]["statement"])
    return {"first": float(train[:10].mean()), "last": float(train[-10:].mean()),
            "privacy": result.privacy, "config": result.config}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.episodes, args.seed)
