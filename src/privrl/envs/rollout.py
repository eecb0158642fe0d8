"""Batched episode rollouts with early exit (agent side).

`rollout_episodes` runs one episode in each of P environments with a `lax.while_loop` that stops
as soon as every episode has ended (or hit the step cap), so short episodes cost little. Buffers
are padded to `max_steps`; `mask[t, p]` marks the steps that really happened and `rewards[t, p]`
is the environment's own reward for that step (learners use it, never an assumed +1 per step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array


class Trajectory(NamedTuple):
    """P padded episodes, time-major: obs (T, P, obs_dim), actions/mask (T, P)."""

    obs: Array
    actions: Array
    mask: Array  # 1.0 on steps that happened
    final_obs: Array  # (P, obs_dim): the observation after the last step
    terminated: Array  # (P,) bool: ended in a terminal state (not cut by the step cap)
    length: Array  # (P,) int32: steps taken (CartPole's score)
    aux: Any = None  # (T, P, ...) what the policy returned beside the action, if anything
    # (T, P) float32: the environment's reward for each step that happened (0 elsewhere)
    rewards: Any = None


# (key, obs (P, obs_dim)) -> actions (P,), or (actions, aux) to record aux (e.g. dropout masks)
PolicyFn = Callable[[Array, Array], Any]


def rollout_episodes(
    env: Any,
    env_params: Any,
    policy: PolicyFn,
    key: Array,
    num_envs: int,
    max_steps: int,
    active: Array | None = None,
) -> Trajectory:
    """Roll out one episode per environment; env_params has a leading axis of size num_envs.

    Environments with `active` False take no step (their episode has length 0), so a batch
    of inactive environments costs next to nothing. A policy that returns (actions, aux) has
    its aux recorded per step in `Trajectory.aux`.
    """
    k_reset, k_loop = jax.random.split(key)
    obs0, state0 = jax.vmap(env.reset_env)(jax.random.split(k_reset, num_envs), env_params)
    obs_dim = obs0.shape[-1]
    obs_buf = jnp.zeros((max_steps, num_envs, obs_dim), obs0.dtype)
    act_buf = jnp.zeros((max_steps, num_envs), jnp.int32)
    mask_buf = jnp.zeros((max_steps, num_envs), jnp.float32)
    rew_buf = jnp.zeros((max_steps, num_envs), jnp.float32)
    done0 = jnp.zeros((num_envs,), bool) if active is None else ~active
    term0 = jnp.zeros((num_envs,), bool)
    out = jax.eval_shape(policy, k_loop, obs0)
    with_aux = isinstance(out, tuple)
    aux_buf = (jax.tree_util.tree_map(lambda s: jnp.zeros((max_steps, *s.shape), s.dtype), out[1])
               if with_aux else None)

    def cond(carry: tuple) -> Array:
        t, _, _, done, *_ = carry
        return (t < max_steps) & ~jnp.all(done)

    def body(carry: tuple) -> tuple:
        t, state, obs, done, term, obs_b, act_b, mask_b, rew_b, aux_b, k = carry
        k, k_act, k_step = jax.random.split(k, 3)
        action = policy(k_act, obs)
        if with_aux:
            action, aux = action
            aux_b = jax.tree_util.tree_map(lambda b, a: b.at[t].set(a), aux_b, aux)
        keys = jax.random.split(k_step, num_envs)
        next_obs, next_state, reward, _, _ = jax.vmap(env.step_env)(keys, state, action, env_params)
        live = ~done
        obs_b = obs_b.at[t].set(obs)
        act_b = act_b.at[t].set(action)
        mask_b = mask_b.at[t].set(live.astype(jnp.float32))
        rew_b = rew_b.at[t].set(jnp.where(live, reward.astype(jnp.float32), 0.0))
        fell = jax.vmap(env.is_terminated)(next_state, env_params)
        # Environments that have ended keep their final observation and state.
        keep = lambda new, old: jnp.where(  # noqa: E731
            live.reshape((-1,) + (1,) * (new.ndim - 1)), new, old
        )
        state = jax.tree_util.tree_map(keep, next_state, state)
        obs = keep(next_obs, obs)
        term = term | (live & fell)
        done = done | fell
        return t + 1, state, obs, done, term, obs_b, act_b, mask_b, rew_b, aux_b, k

    carry = (jnp.int32(0), state0, obs0, done0, term0, obs_buf, act_buf, mask_buf, rew_buf,
             aux_buf, k_loop)
    _, _, final_obs, _, term, obs_b, act_b, mask_b, rew_b, aux_b, _ = jax.lax.while_loop(
        cond, body, carry)
    length = jnp.sum(mask_b, axis=0).astype(jnp.int32)
    return Trajectory(obs_b, act_b, mask_b, final_obs, term, length, aux_b, rew_b)
