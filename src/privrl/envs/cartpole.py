"""CartPole with per-agent private dynamics (paper 000, section 4): gravity ψ per agent.

We use gymnax's CartPole physics through `step_env` (no auto-reset): under gymnax's auto-reset
`step` the reward is always 1.0 and the terminal observation is replaced by a reset one, so the
rollout builds rewards and returns from the termination flags itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a config's validation reads CartPoleSpec before JAX
    from gymnax.environments.classic_control.cartpole import CartPole, EnvParams
    from jax import Array

PAPER_GRAVITIES: tuple[float, ...] = (9.7, 9.8, 9.9)


@dataclass(frozen=True)
class CartPoleSpec:
    """The environment family: gymnax CartPole, episodes capped at `max_steps`."""

    max_steps: int = 200  # paper 000 uses CartPole-v0's 200-step episodes (max score 200)
    gravities: tuple[float, ...] = PAPER_GRAVITIES

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if not self.gravities or any(not g > 0 for g in self.gravities):
            raise ValueError(f"gravities must be a non-empty tuple of positive values, "
                             f"got {self.gravities}")


def make_cartpole(spec: CartPoleSpec) -> tuple[CartPole, EnvParams]:
    from gymnax.environments.classic_control.cartpole import CartPole

    env = CartPole()
    params = env.default_params.replace(max_steps_in_episode=spec.max_steps)
    return env, params


def agent_gravity(env_key: Array, agent_id: Array, gravities: tuple[float, ...]) -> Array:
    """The private gravity of `agent_id`: uniform over `gravities`, fixed per agent."""
    import jax
    import jax.numpy as jnp

    idx = jax.random.randint(jax.random.fold_in(env_key, agent_id), (), 0, len(gravities))
    return jnp.asarray(gravities, dtype=jnp.float32)[idx]
