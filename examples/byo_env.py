"""Bring your own environment: a 40-line gymnax environment, a flax policy, DP-REINFORCE.

Run: `python examples/byo_env.py`. The walker starts at 0 on a line and must reach `goal`;
every step costs 1 and a step back 2 (true, negative rewards the learner sees), and each
training episode's `drift` (how far a step moves it) is private dynamics drawn in [0.6, 1.4].
Prints the start and end of the learning curve and the privacy record of the trained model.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import struct
from gymnax.environments import environment, spaces


# --- the environment (40 lines) ---------------------------------------------------------------
@struct.dataclass
class WalkState(environment.EnvState):
    x: jax.Array
    time: int


@struct.dataclass
class WalkParams(environment.EnvParams):
    drift: float = 1.0
    goal: float = 5.0
    max_steps_in_episode: int = 30


class Walk(environment.Environment[WalkState, WalkParams]):
    """Move left (0) or right (1) by `drift` until x >= goal (or the step cap)."""
    @property
    def default_params(self) -> WalkParams:
        return WalkParams()

    def step_env(self, key: Any, state: WalkState, action: Any, params: WalkParams) -> Any:
        x = state.x + params.drift * (2.0 * action - 1.0)
        state = WalkState(x=x, time=state.time + 1)
        reward = jnp.where(action == 1, -1.0, -2.0)  # a step costs 1, a step back 2
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def reset_env(self, key: Any, params: WalkParams) -> Any:
        state = WalkState(x=jnp.float32(0.0), time=0)
        return self.get_obs(state), state

    def get_obs(self, state: WalkState, params: Any = None, key: Any = None) -> jax.Array:
        return jnp.array([state.x / 5.0, state.time / 30.0], jnp.float32)

    def is_terminated(self, state: WalkState, params: WalkParams) -> jax.Array:
        return (state.x >= params.goal) | (state.time >= params.max_steps_in_episode)

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(-10.0, 10.0, (2,), jnp.float32)


# --- the model: any flax module that maps an observation to logits ----------------------------
class Policy(nn.Module):
    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return nn.Dense(2)(nn.tanh(nn.Dense(16)(obs)))


def main(episodes: int = 150, seed: int = 0) -> dict[str, Any]:
    """Train with DP-SGD REINFORCE (σ = 0.5, one episode = the unit of privacy)."""
    from privrl.envs.task import PrivateParam, Task
    from privrl.systems.dpsgd_rl.local import run_episodic
    from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

    env = Walk()
    task = Task(env, env.default_params, "examples.byo_env:Walk",
                private=(PrivateParam("drift", 0.6, 1.4),))
    config = ReinforceConfig(dp=True, noise_multiplier=0.5, clip=1.0, episodes=episodes,
                             max_episode_steps=30, learning_rate=0.003, batch_episodes=8,
                             stop_when_solved=False, seed=seed)
    result = run_episodic(Reinforce.settings_algorithm([config], task, Policy()), "byo-env")
    train = result.train_returns[0]  # the sampled policy's true (negative) returns
    print(f"mean return, first 10 updates: {train[:10].mean():.1f}; last 10: "
          f"{train[-10:].mean():.1f} (best possible: -5; a random policy: about -30)")
    print(result.privacy["dpsgd"]["statement"])
    return {"first": float(train[:10].mean()), "last": float(train[-10:].mean()),
            "privacy": result.privacy}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.episodes, args.seed)
