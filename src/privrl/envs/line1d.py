"""The 1-D continuous task of paper 001's experiment (the authors' "hit or stand").

State s ∈ [0, 1], s_0 ~ U(0, 1). Action 0: s ← min(s + U(0, 0.25), 1); action 1:
s ← max(s − U(0, 0.25), 0). Reward 0.5 − |s′ − 0.5| (the *new* state); 50 steps per episode, the
last transition terminal. A gymnax environment, so it jits, vmaps and scans like CartPole.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces
from jax import Array


@struct.dataclass
class Line1DState(environment.EnvState):
    s: Array
    time: int


@struct.dataclass
class Line1DParams(environment.EnvParams):
    max_step: float = 0.25  # a move is U(0, max_step)
    max_steps_in_episode: int = 50


class Line1D(environment.Environment[Line1DState, Line1DParams]):
    """Paper 001's 1-D environment (observation: the state, shape (1,))."""

    def __init__(self) -> None:
        super().__init__()
        self.obs_shape = (1,)

    @property
    def default_params(self) -> Line1DParams:
        return Line1DParams()

    def step_env(self, key: Array, state: Line1DState, action: int | float | Array,
                 params: Line1DParams) -> tuple[Array, Line1DState, Array, Array, dict]:
        move = jax.random.uniform(key, (), minval=0.0, maxval=params.max_step)
        s = jnp.clip(state.s + jnp.where(action == 0, move, -move), 0.0, 1.0)
        reward = 0.5 - jnp.abs(s - 0.5)
        state = Line1DState(s=s, time=state.time + 1)
        done = self.is_terminated(state, params)
        return self.get_obs(state), state, reward, done, {}

    def reset_env(self, key: Array, params: Line1DParams) -> tuple[Array, Line1DState]:
        state = Line1DState(s=jax.random.uniform(key, ()), time=0)
        return self.get_obs(state), state

    def get_obs(self, state: Line1DState, params: Any = None, key: Any = None) -> Array:
        return jnp.reshape(state.s, (1,))

    def is_terminated(self, state: Line1DState, params: Line1DParams) -> Array:
        """The 50th transition is terminal (no bootstrap beyond it), as in the authors' code."""
        return state.time >= params.max_steps_in_episode

    @property
    def name(self) -> str:
        return "Line1D"

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params: Line1DParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: Line1DParams) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)


def make_line1d(max_steps: int = 50) -> tuple[Line1D, Line1DParams]:
    env = Line1D()
    return env, env.default_params.replace(max_steps_in_episode=max_steps)


def optimal_return(params: Line1DParams | None = None, grid: int = 1001,
                   moves: int = 200) -> tuple[float, np.ndarray]:
    """Expected return of the optimal policy from s_0 ~ U(0, 1), by backward induction.

    The finite-horizon MDP is discretized: states on a uniform grid of `grid` points, the move
    U(0, max_step) by the midpoint rule with `moves` points, next states linearly interpolated
    between grid points (grid 1001 / 2001 / 4001 agree to 1e-5 on E[V]). Returns
    (E[V_H(s_0)], the optimal first action per grid point).
    """
    p = params or Line1DParams()
    x = np.linspace(0.0, 1.0, grid)
    u = (np.arange(moves) + 0.5) / moves * p.max_step
    reward = lambda s: 0.5 - np.abs(s - 0.5)  # noqa: E731

    def transition(direction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nxt = np.clip(x[:, None] + direction * u[None, :], 0.0, 1.0)  # (grid, moves)
        pos = nxt * (grid - 1)
        lo = np.minimum(np.floor(pos).astype(int), grid - 2)
        frac = pos - lo
        return lo, frac, reward(nxt).mean(1)

    plans = [transition(+1.0), transition(-1.0)]
    v = np.zeros(grid)
    first = np.zeros(grid, int)
    for _ in range(p.max_steps_in_episode):
        q = np.stack([r + ((1 - f) * v[lo] + f * v[lo + 1]).mean(1) for lo, f, r in plans])
        v, first = q.max(0), q.argmax(0)
    # E over s_0 ~ U(0, 1): trapezoidal rule on the grid
    return float(np.trapezoid(v, x)), first


def policy_return(policy: Any, key: Array, episodes: int,
                  params: Line1DParams | None = None) -> np.ndarray:
    """Monte Carlo returns of `policy(key, obs (P, 1)) -> actions (P,)` over `episodes`."""
    from privrl.envs.rollout import rollout_episodes

    env = Line1D()
    p = params or env.default_params
    batched = jax.tree_util.tree_map(lambda v: jnp.full((episodes,), v), p)
    steps = p.max_steps_in_episode
    traj = jax.jit(lambda k: rollout_episodes(env, batched, policy, k, episodes, steps))(key)
    nxt = jnp.concatenate([traj.obs[1:], traj.final_obs[None]], axis=0)[..., 0]  # s′ per step
    return np.asarray(jnp.sum(traj.mask * (0.5 - jnp.abs(nxt - 0.5)), axis=0))


def random_policy(key: Array, obs: Array) -> Array:
    return jax.random.randint(key, obs.shape[:1], 0, 2)


def table_policy(first_action: np.ndarray) -> Any:
    """The stationary policy that plays a grid table's action at the nearest grid point."""
    table = jnp.asarray(first_action, jnp.int32)
    n = table.shape[0]

    def policy(key: Array, obs: Array) -> Array:
        del key
        return table[jnp.clip(jnp.round(obs[:, 0] * (n - 1)).astype(jnp.int32), 0, n - 1)]

    return policy
