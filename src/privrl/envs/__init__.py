"""Agent-side environments (JAX, vectorizable) and batched episode rollouts.

CartPole with per-agent gravity (paper 000), the 1-D continuous task of paper 001 (Line1D), and
`Task`: any gymnax environment with its rewards and per-agent private dynamics (envs.task), and
`GymnasiumTask`: a Gymnasium environment, rolled out on the host into the same arrays.

Its names are imported on first use (privrl.lazy): a config's validation reads the CartPole
spec without importing JAX.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

from privrl.lazy import lazy_names


class _OnFirstUse(types.ModuleType):
    """A module imported only when one of its names is first read (`import` statements that
    find it bind it without reading any); then the real module takes its place in
    `sys.modules`, and this one forwards every name to it."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def _seaborn_on_first_use() -> None:
    """gymnax's package imports every environment it ships, Pong's among them, which imports
    seaborn (and with it scipy.stats and pandas) to render: about 1 CPU-s of every process that
    makes a gymnax environment (a Ray actor, a Flower agent executor, a `privrl run`), which
    privrl never renders. Unless seaborn is imported already, it is imported on its first use
    (`_OnFirstUse`; benchmarks/log/34-procs.md)."""
    if "seaborn" in sys.modules:
        return
    spec = importlib.util.find_spec("seaborn")
    if spec is None:
        return
    stub = _OnFirstUse("seaborn")
    stub.__spec__ = spec
    sys.modules["seaborn"] = stub


_seaborn_on_first_use()  # before a module of this package imports gymnax

# name -> the module of privrl.envs that defines it
_WHERE = {
    **dict.fromkeys(("PAPER_GRAVITIES", "CartPoleSpec", "agent_gravity", "make_cartpole"),
                    "cartpole"),
    **dict.fromkeys(("Line1D", "Line1DParams", "Line1DState", "make_line1d", "optimal_return"),
                    "line1d"),
    **dict.fromkeys(("Trajectory", "rollout_episodes", "rollout_host", "rollout_trials"),
                    "rollout"),
    **dict.fromkeys(("GymnasiumTask", "PrivateParam", "Task", "make_task", "parse_private"),
                    "task"),
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
