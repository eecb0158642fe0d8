"""Agent-side environments (JAX, vectorizable) and batched episode rollouts."""

from privrl.envs.cartpole import (
    PAPER_GRAVITIES,
    CartPoleSpec,
    agent_gravity,
    make_cartpole,
)
from privrl.envs.rollout import Trajectory, rollout_episodes

__all__ = [
    "PAPER_GRAVITIES",
    "CartPoleSpec",
    "Trajectory",
    "agent_gravity",
    "make_cartpole",
    "rollout_episodes",
]
