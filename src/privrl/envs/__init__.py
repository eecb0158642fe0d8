"""Agent-side environments (JAX, vectorizable) and batched episode rollouts.

CartPole with per-agent gravity (paper 000) and the 1-D continuous task of paper 001 (Line1D).
"""

from privrl.envs.cartpole import (
    PAPER_GRAVITIES,
    CartPoleSpec,
    agent_gravity,
    make_cartpole,
)
from privrl.envs.line1d import Line1D, Line1DParams, Line1DState, make_line1d, optimal_return
from privrl.envs.rollout import Trajectory, rollout_episodes

__all__ = [
    "PAPER_GRAVITIES",
    "CartPoleSpec",
    "Line1D",
    "Line1DParams",
    "Line1DState",
    "Trajectory",
    "agent_gravity",
    "make_cartpole",
    "make_line1d",
    "optimal_return",
    "rollout_episodes",
]
