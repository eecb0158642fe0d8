"""The pilot: measurements on the task's PUBLIC simulator, never on an agent's data.

Agents' private parameters are drawn from the `--private` ranges the user gives (the task's
`agents_params`), not from any agent. The measurement:
- `gradient_sample`: per-episode policy-gradient vectors of a fresh policy of the system's
  network size (REINFORCE with per-episode standardized returns-to-go: the score-function
  gradient FedPG-Cen and DP-REINFORCE clip), from which the pilot reads the norms, their
  spread, and at a clip the mean clipped gradient and its variance. PGC-A3C's plan reads them
  from its own reports instead (`privrl.planner.systems.report_sample`: the gradient of
  its own loss, a sum over the episode's steps, far from this proxy's norms).
A uniformly random policy's return comes from the library's one baseline
(`privrl.evaluation.random_returns`), the one every run's verdict uses.
The non-private learning speed is measured by each system's own non-private run
(privrl.planner.systems).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from privrl.envs.rollout import Trajectory, rollout_episodes
from privrl.envs.task import Task
from privrl.losses import discounted_returns, masked_standardize
from privrl.nets.flat import mlp


def _play(task: Task, policy: Callable[[Any, Any], Any], key: jax.Array, episodes: int
          ) -> Trajectory:
    """`episodes` episodes, agent i's private parameters drawn from the ranges (agent id i)."""
    k_env, k_play = jax.random.split(key)
    params = task.agents_params(k_env, jnp.arange(episodes))
    steps = task.episode_steps
    if steps is None:
        raise ValueError(f"{task.name} states no step limit")
    if task.host:
        return task.rollout(params, policy, k_play, episodes, steps)
    return jax.jit(lambda p, k: rollout_episodes(task.env, p, policy, k, episodes, steps))(
        params, k_play)


def _rewards(task: Task, traj: Trajectory) -> np.ndarray:
    """(T, P) the environment's own rewards of the steps that happened."""
    return np.asarray(traj.rewards) * np.asarray(traj.mask)


def gradient_sample(task: Task, hidden: tuple[int, ...], episodes: int = 64, seed: int = 0,
                    gamma: float = 0.99) -> tuple[np.ndarray, int]:
    """(episodes, d) per-episode policy-gradient vectors of a fresh policy with `hidden`
    layers, and d. Each is the gradient of −(1/T) Σ_t log π(a_t|s_t) Ĝ_t with Ĝ the episode's
    standardized discounted returns-to-go."""
    head = task.head
    model = mlp(tuple(hidden), head.outputs, task.obs_dim)
    k_init, k_play = jax.random.split(jax.random.key(seed))
    theta = model.init(k_init)

    def policy(key: jax.Array, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        keys = jax.random.split(key, obs.shape[0])
        outs = jax.vmap(model.bind(theta))(obs)
        return jax.vmap(head.sample)(keys, outs)  # (env action, the sampled action) as aux

    traj = _play(task, policy, k_play, episodes)
    rewards = jnp.asarray(_rewards(task, traj), jnp.float32)
    mask = jnp.asarray(traj.mask, jnp.float32)
    obs, raw = jnp.asarray(traj.obs), jnp.asarray(traj.aux)

    def one(o: jax.Array, a: jax.Array, r: jax.Array, m: jax.Array) -> jax.Array:
        g = masked_standardize(discounted_returns(r, m, jnp.float32(0), gamma), m)

        def loss(th: jax.Array) -> jax.Array:
            logp = head.log_prob(jax.vmap(model.bind(th))(o), a)
            return -jnp.sum(m * logp * g) / jnp.maximum(jnp.sum(m), 1.0)

        return jax.grad(loss)(theta)

    grads = jax.jit(jax.vmap(one, in_axes=1))(obs, raw, rewards, mask)
    return np.asarray(grads, np.float64), int(theta.size)


def clip_rows(grads: np.ndarray, bound: float, norm: str) -> np.ndarray:
    """Each row scaled into the `norm` ("l1" or "l2") ball of radius `bound`."""
    n = norms(grads, norm)
    return grads * np.minimum(1.0, bound / np.maximum(n, 1e-30))[:, None]


def norms(grads: np.ndarray, norm: str) -> np.ndarray:
    return np.abs(grads).sum(axis=1) if norm == "l1" else np.linalg.norm(grads, axis=1)


def clipped_moments(grads: np.ndarray, bound: float, norm: str) -> tuple[float, float]:
    """(‖mean clipped gradient‖₂, E‖clipped − mean‖₂²) at clip radius `bound`."""
    c = clip_rows(grads, bound, norm)
    mean = c.mean(axis=0)
    return float(np.linalg.norm(mean)), float(np.mean(np.sum((c - mean) ** 2, axis=1)))


def signal_spread(grads: np.ndarray, bound: float, norm: str) -> float:
    """(‖s‖₁/‖s‖₂)²/d of the mean clipped gradient s at clip radius `bound`: the share of the
    coordinates its signal spreads over (1: evenly), for FedPG-Cen `fleet`'s law
    (`model.FleetLaw`). The sample's noise in s spreads evenly too, so a few episodes read it
    high: the law then counts more of the noise, not less."""
    m = clip_rows(grads, bound, norm).mean(axis=0)
    l2 = float(np.linalg.norm(m))
    return 1.0 if l2 == 0 else float((np.abs(m).sum() / l2) ** 2 / m.size)
