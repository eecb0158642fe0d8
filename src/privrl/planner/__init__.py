"""`privrl plan`: what ε and fleet a task needs, from its public simulator only.

`plan(system, PlanConfig(...))` returns a `PlanResult`; privrl.planner.api says how.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PlanConfig", "PlanResult", "plan", "run_command"]


def __getattr__(name: str) -> Any:  # imported lazily: the CLI reads this package before JAX
    if name in ("PlanConfig", "PlanResult", "plan"):
        from privrl.planner import api

        return getattr(api, name)
    if name == "run_command":
        from privrl.planner.command import run_command

        return run_command
    raise AttributeError(name)
