"""Agent-side environments (JAX, vectorizable) and batched episode rollouts.

CartPole with per-agent gravity (paper 000), the 1-D continuous task of paper 001 (Line1D), and
`Task`: any gymnax environment with its rewards and per-agent private dynamics (envs.task), and
`GymnasiumTask`: a Gymnasium environment, rolled out on the host into the same arrays.

Its names are imported on first use (privrl.lazy): a config's validation reads the CartPole
spec without importing JAX.
"""

from __future__ import annotations

import importlib
import importlib.machinery
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


def _renderers_on_first_use(*names: str) -> None:
    """gymnax's package imports every environment it ships, and Pong's and bsuite's modules
    import seaborn (with scipy.stats and pandas) and matplotlib.pyplot to render: about 1 CPU-s
    of every process that makes a gymnax environment (a Ray actor, a Flower agent executor, a
    `privrl run`), where nothing renders an environment and most processes draw no plot. Each
    of `names` not imported yet is imported on its first use instead (`_OnFirstUse`: privrl's
    plots load pyplot when they draw; benchmarks/log/34-procs.md). Its spec, the real one's
    for whoever asks, is found without importing its package."""
    for name in names:
        if name in sys.modules:
            continue
        package, _, _ = name.rpartition(".")
        if package:
            outer = importlib.util.find_spec(package)
            where = None if outer is None else outer.submodule_search_locations
            spec = None if where is None else importlib.machinery.PathFinder.find_spec(
                name, list(where))
        else:
            spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        stub = _OnFirstUse(name)
        stub.__spec__ = spec
        sys.modules[name] = stub


# before a module of this package imports gymnax
_renderers_on_first_use("seaborn", "matplotlib.pyplot")

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
