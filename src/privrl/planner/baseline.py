"""A task's random-policy return: the one call site the planner and the untuned benchmark use,
so that it can become the library's shared baseline (issue 51 item 3) in one place."""

from __future__ import annotations

from privrl.envs.task import Task


def random_return(task: Task, episodes: int = 32, seed: int = 0) -> float:
    """A uniformly random policy's mean return on `task`'s simulator (agents' private
    parameters drawn from the task's ranges)."""
    from privrl.planner.pilot import random_return as measured

    return measured(task, episodes, seed)
