"""Agent-side environments (JAX, vectorizable) and batched episode rollouts.

CartPole with per-agent gravity (paper 000), the 1-D continuous task of paper 001 (Line1D), and
`Task`: any gymnax environment with its rewards and per-agent private dynamics (envs.task), and
`GymnasiumTask`: a Gymnasium environment, rolled out on the host into the same arrays.
"""

from privrl.envs.cartpole import (
    PAPER_GRAVITIES,
    CartPoleSpec,
    agent_gravity,
    make_cartpole,
)
from privrl.envs.line1d import Line1D, Line1DParams, Line1DState, make_line1d, optimal_return
from privrl.envs.rollout import Trajectory, rollout_episodes, rollout_host, rollout_trials
from privrl.envs.task import GymnasiumTask, PrivateParam, Task, make_task, parse_private

__all__ = [
    "PAPER_GRAVITIES",
    "CartPoleSpec",
    "GymnasiumTask",
    "Line1D",
    "Line1DParams",
    "Line1DState",
    "PrivateParam",
    "Task",
    "Trajectory",
    "agent_gravity",
    "make_cartpole",
    "make_line1d",
    "make_task",
    "optimal_return",
    "parse_private",
    "rollout_episodes",
    "rollout_host",
    "rollout_trials",
]
