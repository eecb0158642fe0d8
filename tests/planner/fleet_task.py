"""A task for the fleet plan's end-to-end test (tests/planner/test_fleet_sweep.py), named on
its command line as `--env planner.fleet_task:short_cartpole` (tests/ is on the path)."""

from __future__ import annotations

from privrl.envs.task import Task, make_task

# CartPole's episodes capped at 50 steps, not 500: a FedPG round's buffers (each agent's
# episodes, the server's SCSG steps) are sized by the cap, and a sweep on the unoptimized
# programs of the tests spent most of its running on them; the plan's logic reads no step
# count (benchmarks/log/37-fedpg2.md)
SHORT_STEPS = 50


def short_cartpole() -> Task:
    """gymnax CartPole-v1, its episodes capped at SHORT_STEPS."""
    return make_task("gymnax:CartPole-v1").with_max_steps(SHORT_STEPS)
