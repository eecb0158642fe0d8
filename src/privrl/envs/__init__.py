"""Agent-side environments (JAX, vectorizable) and batched episode rollouts.

CartPole with per-agent gravity (paper 000), the 1-D continuous task of paper 001 (Line1D), and
`Task`: any gymnax environment with its rewards and per-agent private dynamics (envs.task), and
`GymnasiumTask`: a Gymnasium environment, rolled out on the host into the same arrays.

Its names are imported on first use (privrl.lazy): a config's validation reads the CartPole
spec without importing JAX.
"""

from __future__ import annotations

from privrl.lazy import lazy_names, modules_on_first_use

# Before a module of this package imports gymnax: its package imports every environment it
# ships, and Pong's and bsuite's modules import seaborn (with scipy.stats and pandas) and
# matplotlib.pyplot to render, about 1 CPU-s of every process that makes a gymnax environment
# (a Ray actor, a Flower agent executor, a `privrl run`), where nothing renders an environment
# and most processes draw no plot (privrl's plots load pyplot when they draw;
# benchmarks/log/34-procs.md).
modules_on_first_use("seaborn", "matplotlib.pyplot")

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
