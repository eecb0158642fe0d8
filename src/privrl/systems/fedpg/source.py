"""Where a FedPG round's episodes come from, and how the round's pieces are composed around them
(the composition: privrl.envs.source, shared with dpsgd-rl).

A round (privrl.systems.fedpg.cen, privrl.systems.fedpg.dec) is written once, as pure pieces
(plan, μ, the SCSG step, release, finish) around its episode source's `sample`. The source
decides how the pieces run:
- `JittedSource`: a gymnax task's rollout, traced with everything else: the pieces, the SCSG
  loop (`lax.while_loop`) and Dec's nodes (`lax.map`) compose into one jitted program;
- `HostSource`: a Gymnasium task's rollout, played on the host (it cannot be traced): each
  piece is jitted on its own, the loops run in Python, and the episodes come back in the same
  arrays, so that the same agent-side code uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.envs.rollout import Trajectory, rollout_episodes
from privrl.envs.source import HostPieces, JittedPieces, Pieces
from privrl.envs.task import Task

Act = Callable[[Array, Array, Array], Array]  # (θ per environment, key, obs) -> actions


class Episodes(NamedTuple):
    """M learners × n episodes each, learner-major and padded to T steps."""

    obs: Array  # (M, n, T, obs_dim)
    # (M, n, T): the actions; a Gaussian head's (M, n, T, d): its unclipped samples (what the
    # log-probability is of; the environment got them clipped to the Box)
    actions: Array
    mask: Array  # (M, n, T)
    live: Array  # (M, n) the episode was sampled
    length: Array  # (M, n) its length (CartPole: its return)
    rewards: Array  # (M, n, T) the environment's reward per step (0 on padded steps)


class JittedSource(JittedPieces):
    """A gymnax task's episodes, rolled out inside the round's one jitted program."""

    def __init__(self, task: Task, act: Act, max_steps: int) -> None:
        self.task, self.act, self.max_steps = task, act, max_steps

    def sample(self, thetas: Array, env_params: Any, live: Array, key: Array) -> Episodes:
        """Each of M learners plays `live.shape[1]` episodes with its own θ (M, d); episodes
        with `live` False are not played (they cost nothing)."""
        m, n = live.shape
        rep = lambda a: jnp.repeat(a, n, axis=0)  # noqa: E731
        theta_env = rep(thetas)
        params = jax.tree_util.tree_map(rep, env_params)

        def policy(k: Array, obs: Array) -> Array:
            return self.act(theta_env, k, obs)

        traj: Trajectory = rollout_episodes(self.task.env, params, policy, key, m * n,
                                            self.max_steps, live.reshape(-1))
        return episodes_of(traj, live)


class HostSource(HostPieces):
    """A Gymnasium task's episodes, played on the host (each action by the jitted policy);
    the round's pieces are jitted one by one (each compiled once per run) and its loops run
    here. The host's randomness (reset seeds, actions) is its own, drawn from the key it is
    given, not the jitted rollout's."""

    def __init__(self, task: Task, act: Act, max_steps: int) -> None:
        super().__init__()
        self.task, self.max_steps = task, max_steps
        self._act = jax.jit(act)

    def sample(self, thetas: Array, env_params: Any, live: Array, key: Array) -> Episodes:
        """`JittedSource.sample`'s episodes, played on the host, in the same arrays."""
        m, n = live.shape
        rep = lambda a: np.repeat(np.asarray(a), n, axis=0)  # noqa: E731
        theta_env = jax.device_put(rep(thetas))
        params = jax.tree_util.tree_map(rep, env_params)
        live = np.asarray(live)
        traj = self.task.rollout(params, lambda k, obs: self._act(theta_env, k, obs), key,
                                 m * n, self.max_steps, live.reshape(-1))
        return host_episodes(traj, live)


class EpisodeSource(Pieces, Protocol):
    """What a round needs of its episode source (`JittedSource`, `HostSource`, or your own):
    its episodes, and the composition of its pieces (privrl.envs.source)."""

    def sample(self, thetas: Array, env_params: Any, live: Array, key: Array) -> Episodes:
        """M learners' episodes: learner m plays live[m].sum() of them with θ_m."""
        ...


def episode_source(task: Task, act: Act, max_steps: int) -> EpisodeSource:
    """The task's own source: on the host for a Gymnasium task, else jitted."""
    return (HostSource if task.host else JittedSource)(task, act, max_steps)


def episodes_of(traj: Trajectory, live: Array) -> Episodes:
    """A rollout of M·n episodes (time-major, learner-major order) as `Episodes` (M, n, ...);
    a rollout whose policy recorded the unclipped samples of a Gaussian head (`aux`) gives
    those as the actions."""
    m, n = live.shape
    per = lambda a: jnp.swapaxes(a, 0, 1).reshape((m, n, *a.shape[:1], *a.shape[2:]))  # noqa: E731
    actions = traj.actions if traj.aux is None else traj.aux
    return Episodes(per(traj.obs), per(actions), per(traj.mask), live,
                    traj.length.reshape(m, n), per(traj.rewards))


# The host's rollout (numpy arrays) as `Episodes` on the device, in one program: op by op
# (`jnp.asarray` of each array, then a swap and a reshape of each) JAX compiled each operation
# as a program of its own, at every shape: most of a host round's compiles. The same arrays.
host_episodes = jax.jit(episodes_of)


def mean_return(ep: Episodes) -> Array:
    """The mean of the live episodes' returns: the sum of the environment's rewards (CartPole:
    the episode's length)."""
    live = ep.live.astype(jnp.float32)
    return jnp.sum(jnp.sum(ep.rewards, axis=-1) * live) / jnp.maximum(jnp.sum(live), 1.0)
