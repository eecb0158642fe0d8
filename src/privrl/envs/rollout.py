"""Batched episode rollouts with early exit (agent side).

`rollout_episodes` runs one episode in each of P environments with a `lax.while_loop` that stops
as soon as every episode has ended (or hit the step cap), so short episodes cost little. Buffers
are padded to `max_steps`; `mask[t, p]` marks the steps that really happened and `rewards[t, p]`
is the environment's own reward for that step (learners use it, never an assumed +1 per step).

`rollout_trials` runs N independent trials' rollouts in one loop (PGC-A3C's local runner).

`rollout_host` is its host-side twin for Gymnasium environments (Python objects that cannot run
inside jit): the same padded arrays, so the same agent-side code (loss, gradient, mechanism)
consumes either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
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
# (key, raw obs (P, obs_dim)) -> the observations the learner sees (LDP observations)
ObserveFn = Callable[[Array, Any], Any]


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
    carry = _start(env, env_params, policy, key, num_envs, max_steps, active)

    def cond(tc: tuple) -> Array:
        t, c = tc
        return (t < max_steps) & ~jnp.all(c.done)

    def body(tc: tuple) -> tuple:
        t, c = tc
        return t + 1, _step(env, env_params, policy, num_envs, t, c)

    _, carry = jax.lax.while_loop(cond, body, (jnp.int32(0), carry))
    return _finish(carry)


def rollout_trials(
    env: Any,
    env_params: Any,
    policy: Callable[[Any, Array, Array], Any],
    policy_args: Any,
    keys: Array,
    num_envs: int,
    max_steps: int,
    active: Array,
) -> Trajectory:
    """`rollout_episodes` for N independent trials at once: trial i's episodes are the same
    computation as `rollout_episodes(env, env_params[i], partial(policy, policy_args[i]),
    keys[i], num_envs, max_steps, active[i])` (every argument but the policy has a leading
    trial axis; outputs too). XLA may fuse the element-wise steps differently in the two
    programs, so floats can differ in their last bits (tests/kernel/envs/test_rollout_trials.py).

    Why not `vmap(rollout_episodes)`: a vmapped `while_loop` selects between the old and the
    new value of its whole carry on every step (the trials that have finished keep theirs),
    buffers included; here one loop steps every trial until all are done, and a finished
    trial's environments keep their state by themselves (`_step`), so nothing is copied.
    """

    def begin(params: Any, args: Any, key: Array, act: Array) -> _Carry:
        return _start(env, params, partial(policy, args), key, num_envs, max_steps, act)

    def step(params: Any, args: Any, t: Array, c: _Carry) -> _Carry:
        return _step(env, params, partial(policy, args), num_envs, t, c)

    def cond(tc: tuple) -> Array:
        t, c = tc
        return (t < max_steps) & ~jnp.all(c.done)

    def body(tc: tuple) -> tuple:
        t, c = tc
        return t + 1, jax.vmap(step, (0, 0, None, 0))(env_params, policy_args, t, c)

    carry = jax.vmap(begin)(env_params, policy_args, keys, active)
    _, carry = jax.lax.while_loop(cond, body, (jnp.int32(0), carry))
    return jax.vmap(_finish)(carry)


class _Carry(NamedTuple):
    """One batch of episodes in progress (a `rollout_episodes` loop's state)."""

    state: Any
    obs: Array
    done: Array
    term: Array
    obs_b: Array
    act_b: Array
    mask_b: Array
    rew_b: Array
    aux_b: Any
    key: Array


def _start(env: Any, env_params: Any, policy: PolicyFn, key: Array, num_envs: int,
           max_steps: int, active: Array | None) -> _Carry:
    k_reset, k_loop = jax.random.split(key)
    obs0, state0 = jax.vmap(env.reset_env)(jax.random.split(k_reset, num_envs), env_params)
    obs_dim = obs0.shape[-1]
    out = jax.eval_shape(policy, k_loop, obs0)
    aux_buf = (jax.tree_util.tree_map(lambda s: jnp.zeros((max_steps, *s.shape), s.dtype), out[1])
               if isinstance(out, tuple) else None)
    return _Carry(
        state0, obs0, jnp.zeros((num_envs,), bool) if active is None else ~active,
        jnp.zeros((num_envs,), bool), jnp.zeros((max_steps, num_envs, obs_dim), obs0.dtype),
        jnp.zeros((max_steps, num_envs), jnp.int32), jnp.zeros((max_steps, num_envs), jnp.float32),
        jnp.zeros((max_steps, num_envs), jnp.float32), aux_buf, k_loop)


def _step(env: Any, env_params: Any, policy: PolicyFn, num_envs: int, t: Array, c: _Carry
          ) -> _Carry:
    """Step t of every environment; ended ones keep their final observation and state."""
    k, k_act, k_step = jax.random.split(c.key, 3)
    action = policy(k_act, c.obs)
    aux_b = c.aux_b
    if aux_b is not None:
        action, aux = action
        aux_b = jax.tree_util.tree_map(lambda b, a: b.at[t].set(a), aux_b, aux)
    keys = jax.random.split(k_step, num_envs)
    next_obs, next_state, reward, _, _ = jax.vmap(env.step_env)(keys, c.state, action, env_params)
    live = ~c.done
    obs_b = c.obs_b.at[t].set(c.obs)
    act_b = c.act_b.at[t].set(action)
    mask_b = c.mask_b.at[t].set(live.astype(jnp.float32))
    rew_b = c.rew_b.at[t].set(jnp.where(live, reward.astype(jnp.float32), 0.0))
    fell = jax.vmap(env.is_terminated)(next_state, env_params)
    keep = lambda new, old: jnp.where(  # noqa: E731
        live.reshape((-1,) + (1,) * (new.ndim - 1)), new, old
    )
    state = jax.tree_util.tree_map(keep, next_state, c.state)
    obs = keep(next_obs, c.obs)
    return _Carry(state, obs, c.done | fell, c.term | (live & fell), obs_b, act_b, mask_b, rew_b,
                  aux_b, k)


def _finish(c: _Carry) -> Trajectory:
    length = jnp.sum(c.mask_b, axis=0).astype(jnp.int32)
    return Trajectory(c.obs_b, c.act_b, c.mask_b, c.obs, c.term, length, c.aux_b, c.rew_b)


def rollout_host(envs: Sequence[Any], policy: PolicyFn, key: Array, max_steps: int,
                 active: Any = None, observe: ObserveFn | None = None) -> Trajectory:
    """One episode in each Gymnasium environment (`reset(seed=...)`, `step(action)` returning
    (obs, reward, terminated, truncated, info)), stepped on the host: `rollout_episodes`'s arrays.

    Each step the policy (jit it: one call per step) sees every environment's observation, as in
    the jitted rollout; only environments whose episode is still running step, so an episode
    that ended costs nothing (Gymnasium's vector envs would reset and replay it). An episode
    ends when the environment terminates or truncates (its own time limit) or at `max_steps`;
    `terminated` is the environment's flag alone. Reset seeds come from `key`, so a rollout is
    reproducible. Returns numpy arrays (float32 observations and rewards).

    `observe` (jit it): what the policy and the arrays see of each observation the
    environments return, e.g. an LDP mechanism's release; the raw observations never leave
    this function. Its keys (one per release time: reset, then each step) are split from `key`
    apart from the rest; None: the raw observations, and the keys of a rollout without it.
    """
    n = len(envs)
    if observe is not None:
        key, k_obs = jax.random.split(key)
        obs_keys = jax.random.split(k_obs, max_steps + 1)
    k_reset, k_loop = jax.random.split(key)
    seeds = np.asarray(jax.random.randint(k_reset, (n,), 0, np.iinfo(np.int32).max))
    live = np.ones(n, bool) if active is None else np.array(active, bool).reshape(n)
    obs = np.zeros((n, *envs[0].observation_space.shape), np.float32)
    raw = obs.copy() if observe is not None else obs  # the environments' own observations

    def seen(t: int, rows: Any) -> None:  # the observed rows after release time t
        if observe is not None and rows.size:
            obs[rows] = np.asarray(observe(obs_keys[t], raw), np.float32)[rows]

    for i in np.flatnonzero(live):
        raw[i] = envs[i].reset(seed=int(seeds[i]))[0]
    seen(0, np.flatnonzero(live))
    obs_b = np.zeros((max_steps, *obs.shape), np.float32)
    act_b = np.zeros((max_steps, n), np.int32)
    mask_b = np.zeros((max_steps, n), np.float32)
    rew_b = np.zeros((max_steps, n), np.float32)
    term = np.zeros(n, bool)
    step_keys = jax.random.split(k_loop, max_steps)
    out = jax.eval_shape(policy, step_keys[0], obs)
    with_aux = isinstance(out, tuple)
    aux_b = (jax.tree_util.tree_map(lambda s: np.zeros((max_steps, *s.shape), s.dtype), out[1])
             if with_aux else None)
    for t, k in zip(range(max_steps), step_keys, strict=False):
        if not live.any():
            break
        action = policy(k, obs)
        if with_aux:
            action, aux = action
            for b, a in zip(jax.tree_util.tree_leaves(aux_b), jax.tree_util.tree_leaves(aux),
                            strict=True):
                b[t] = np.asarray(a)
        action = np.asarray(action)
        obs_b[t], act_b[t], mask_b[t] = obs, action, live
        stepped = np.flatnonzero(live)
        for i in stepped:
            raw[i], reward, fell, cut, _ = envs[i].step(int(action[i]))
            rew_b[t, i] = reward
            term[i] = bool(fell)
            live[i] = not (fell or cut)
        seen(t + 1, stepped)
    length = mask_b.sum(0).astype(np.int32)
    return Trajectory(obs_b, act_b, mask_b, obs, term, length, aux_b, rew_b)
