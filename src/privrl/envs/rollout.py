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
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.compute.sharding import in_blocks
from privrl.prng import unroll_threefry

unroll_threefry()  # the step loops' random draws: privrl/prng.py


class Trajectory(NamedTuple):
    """P padded episodes, time-major: obs (T, P, obs_dim), actions/mask (T, P) (continuous
    actions: (T, P, d) float32, as the environment got them)."""

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
    live, bufs = _start(env, env_params, policy, key, num_envs, max_steps, active)

    def cond(c: tuple) -> Array:
        t, live, _ = c
        return (t < max_steps) & ~jnp.all(live.done)

    def body(c: tuple) -> tuple:
        t, live, bufs = c
        live, rec = _advance(env, env_params, policy, num_envs, live)
        return t + 1, live, jax.tree_util.tree_map(lambda b, r: b.at[t].set(r), bufs, rec)

    _, live, bufs = jax.lax.while_loop(cond, body, (jnp.int32(0), live, bufs))
    return _finish(live, bufs)


def rollout_trials(
    env: Any,
    env_params: Any,
    policy: Callable[[Any, Array, Array], Any],
    policy_args: Any,
    keys: Array,
    num_envs: int,
    max_steps: int,
    active: Array,
    block: int,
    stages: Sequence[int] = (),
) -> Trajectory:
    """`rollout_episodes` for N independent trials at once (N a multiple of `block`): trial
    i's episodes are `rollout_episodes(env, env_params[i], partial(policy, policy_args[i]),
    keys[i], num_envs, max_steps, active[i])` (every argument but the policy has a leading
    trial axis; outputs too), and a trial whose episodes have all ended stops costing steps.

    How: the trials step `block` at a time (`compute.sharding.in_blocks`), so a trial's step is
    the same compiled arithmetic in any stage and any batch of trials. The loop
    runs in `stages` (decreasing multiples of `block`): once at most `stages[0]` trials still
    run, those are gathered and stepped on alone, then at most `stages[1]`, and so on. Why not
    `vmap(rollout_episodes)`: its loop steps every trial until the batch's longest episode
    ends (one almost always runs to `max_steps`), and selects old or new for every trial's
    whole loop state, buffers included, on every step.
    """

    def begin(params: Any, args: Any, key: Array, act: Array) -> tuple[_Live, _Record]:
        return _start(env, params, partial(policy, args), key, num_envs, max_steps, act)

    def advance_one(params: Any, args: Any, live: _Live) -> tuple[_Live, _Record]:
        return _advance(env, params, partial(policy, args), num_envs, live)

    advance = in_blocks(jax.vmap(advance_one), block)

    def running(live: _Live) -> Array:  # (trials,) bool: some episode of the trial still runs
        return ~jnp.all(live.done, axis=-1)

    def run(t: Array, live: _Live, bufs: _Record, rows: Array | None, consts: tuple,
            sizes: Sequence[int]) -> tuple[Array, _Live, _Record]:
        # rows None: every trial, in order (a dynamic-update-slice of the buffers at step t,
        # in place); a stage's rows: the trials it gathered (a scatter).
        bound = sizes[0] if sizes else 0

        def write(b: Array, r: Array, t: Array) -> Array:
            return (jax.lax.dynamic_update_index_in_dim(b, r, t, 1) if rows is None
                    else b.at[rows, t].set(r))

        def cond(c: tuple) -> Array:
            t, live, _ = c
            return (t < max_steps) & (jnp.sum(running(live)) > bound)

        def body(c: tuple) -> tuple:
            t, live, bufs = c
            live, rec = advance(*consts, live)
            return t + 1, live, jax.tree_util.tree_map(lambda b, r: write(b, r, t), bufs, rec)

        t, live, bufs = jax.lax.while_loop(cond, body, (t, live, bufs))
        if not sizes:
            return t, live, bufs
        # The still-running trials first (stable), then finished ones to fill the stage.
        pick = jnp.argsort(~running(live), stable=True)[: sizes[0]]
        take = lambda x: x[pick]  # noqa: E731
        t, sub, bufs = run(t, jax.tree_util.tree_map(take, live), bufs,
                           pick if rows is None else rows[pick],
                           jax.tree_util.tree_map(take, consts), sizes[1:])
        return t, jax.tree_util.tree_map(lambda x, y: x.at[pick].set(y), live, sub), bufs

    n = keys.shape[0]
    if n % block or any(s % block for s in stages):
        raise ValueError(f"trials ({n}) and stages ({stages}) must be multiples of block {block}")
    live, bufs = jax.vmap(begin)(env_params, policy_args, keys, active)
    _, live, bufs = run(jnp.int32(0), live, bufs, None, (env_params, policy_args),
                        [s for s in stages if s < n])
    return jax.vmap(_finish)(live, bufs)


class _Live(NamedTuple):
    """A batch of environments' episodes in progress."""

    state: Any
    obs: Array
    done: Array
    term: Array
    key: Array


class _Record(NamedTuple):
    """One step of every environment (or, stacked over time, the trajectory's buffers)."""

    obs: Array
    action: Array
    mask: Array  # 1.0 where the environment's episode was still running
    reward: Array
    aux: Any


def _start(env: Any, env_params: Any, policy: PolicyFn, key: Array, num_envs: int,
           max_steps: int, active: Array | None) -> tuple[_Live, _Record]:
    """Reset every environment; empty (max_steps, num_envs, ...) buffers."""
    k_reset, k_loop = jax.random.split(key)
    obs0, state0 = jax.vmap(env.reset_env)(jax.random.split(k_reset, num_envs), env_params)
    out = jax.eval_shape(policy, k_loop, obs0)
    aux = (jax.tree_util.tree_map(lambda s: jnp.zeros((max_steps, *s.shape), s.dtype), out[1])
           if isinstance(out, tuple) else None)
    zeros = lambda dtype, *shape: jnp.zeros((max_steps, num_envs, *shape), dtype)  # noqa: E731
    # Discrete actions: (T, P) int32; continuous ones (a Gaussian head): (T, P, d) float32.
    act = out[0] if isinstance(out, tuple) else out
    actions = (zeros(jnp.int32) if jnp.issubdtype(act.dtype, jnp.integer)
               else zeros(jnp.float32, *act.shape[1:]))
    done = jnp.zeros((num_envs,), bool) if active is None else ~active
    return (_Live(state0, obs0, done, jnp.zeros((num_envs,), bool), k_loop),
            _Record(zeros(obs0.dtype, obs0.shape[-1]), actions, zeros(jnp.float32),
                    zeros(jnp.float32), aux))


def _advance(env: Any, env_params: Any, policy: PolicyFn, num_envs: int, live: _Live
             ) -> tuple[_Live, _Record]:
    """One step of every environment and what it records; ended ones keep their final
    observation and state."""
    k, k_act, k_step = jax.random.split(live.key, 3)
    action, aux = policy(k_act, live.obs), None
    if isinstance(action, tuple):
        action, aux = action
    keys = jax.random.split(k_step, num_envs)
    next_obs, next_state, reward, _, _ = jax.vmap(env.step_env)(keys, live.state, action,
                                                                env_params)
    running = ~live.done
    fell = jax.vmap(env.is_terminated)(next_state, env_params)
    keep = lambda new, old: jnp.where(  # noqa: E731
        running.reshape((-1,) + (1,) * (new.ndim - 1)), new, old
    )
    record = _Record(live.obs, action, running.astype(jnp.float32),
                     jnp.where(running, reward.astype(jnp.float32), 0.0), aux)
    return (_Live(jax.tree_util.tree_map(keep, next_state, live.state), keep(next_obs, live.obs),
                  live.done | fell, live.term | (running & fell), k), record)


def _finish(live: _Live, bufs: _Record) -> Trajectory:
    length = jnp.sum(bufs.mask, axis=0).astype(jnp.int32)
    return Trajectory(bufs.obs, bufs.action, bufs.mask, live.obs, live.term, length, bufs.aux,
                      bufs.reward)


# A growing host rollout's first length (`rollout_host`'s `grow`): doubled as episodes need.
GROW_FROM = 64


@partial(jax.jit, static_argnums=(1, 2, 3))
def host_keys(key: Array, n: int, max_steps: int, observed: bool
              ) -> tuple[Array, Array, Array | None]:
    """`rollout_host`'s draws from its key, in one program (each eager op costs a dispatch per
    rollout): the n reset seeds, the policy's key per step and, `observed`, the observation
    release's key per release time, the keys as their raw data (uint32, one row per key: taking
    a typed key out of an array costs an eager op per step). Integer draws: the same bits as
    computed op by op."""
    obs_keys = None
    if observed:
        key, k_obs = jax.random.split(key)
        obs_keys = jax.random.key_data(jax.random.split(k_obs, max_steps + 1))
    k_reset, k_loop = jax.random.split(key)
    seeds = jax.random.randint(k_reset, (n,), 0, np.iinfo(np.int32).max)
    return seeds, jax.random.key_data(jax.random.split(k_loop, max_steps)), obs_keys


def rollout_host(envs: Sequence[Any] | HostLanes, policy: PolicyFn, key: Array,
                 max_steps: int, active: Any = None, observe: ObserveFn | None = None,
                 grow: bool = False) -> Trajectory:
    """One episode in each Gymnasium environment (`reset(seed=...)`, `step(action)` returning
    (obs, reward, terminated, truncated, info)), stepped on the host: `rollout_episodes`'s arrays.
    `envs`: the environments, one per lane, or lanes that step together (`HostLanes`: a
    Gymnasium vector environment, privrl.envs.gymnasium_env.VectorLanes), the same episodes.

    Each step the policy (jit it: one call per step) sees every environment's observation, as in
    the jitted rollout, and its key as raw key data (uint32, what `jax.random.key_data` gives:
    every `jax.random` function takes it and draws what the typed key draws); of a list of
    environments only those whose episode is still running step, so an episode that ended costs
    nothing (a vector environment steps every lane in its one call: what an ended lane does is
    not read). An episode ends when the environment terminates or
    truncates (its own time limit) or at `max_steps`; `terminated` is the environment's flag
    alone. Reset seeds come from `key`, so a rollout is reproducible. Returns numpy arrays
    (float32 observations and rewards). Per step, the host does no more than the policy call
    and the environments' steps: the keys are drawn before the loop, the buffers kept in numpy.

    `observe` (jit it): what the policy and the arrays see of each observation the
    environments return, e.g. an LDP mechanism's release; the raw observations never leave
    this function. Its keys (one per release time: reset, then each step; raw key data, as the
    policy's) are split from `key` apart from the rest; None: the raw observations, and the
    keys of a rollout without it.

    `grow`: for environments that end their own episodes (no stated step limit), `max_steps`
    is a safety cap, not the episode's length: the arrays grow with the longest episode
    (64 steps, doubled as needed, at most `max_steps`) instead of being `max_steps` long; the
    episodes and keys are the same.
    """
    n = _lanes(envs).size
    seeds, step_keys, obs_keys = jax.device_get(host_keys(key, n, max_steps, observe is not None))
    return _host_loop(envs, policy, seeds, step_keys, max_steps, active, observe, obs_keys,
                      grow)


def rollout_host_trials(envs: Sequence[Any] | HostLanes, policy: PolicyFn,
                        keys: Sequence[Array], max_steps: int, active: Any = None,
                        grow: bool = False) -> Trajectory:
    """`rollout_host` for T trials at once, with one policy call per step for all of them:
    trial k's P agents are `envs[k·P:(k+1)·P]`, `keys` the T trials' rollout keys, `active`
    (T, P). The policy gets the step keys (T, 2) (raw, as `rollout_host`'s) and observations
    (T, P, obs_dim), and returns actions (T, P) or (T, P, d), or (actions, aux) (vmap one
    trial's policy over trials). Each
    trial's episodes are `rollout_host`'s from its key, padding included: the same seeds, step
    keys and arrays. Returns the arrays with a leading trial axis (T, ...)."""
    t_n, n = len(keys), _lanes(envs).size
    p = n // t_n
    drawn = [jax.device_get(host_keys(k, p, max_steps, False)) for k in keys]
    seeds = np.concatenate([d[0] for d in drawn])
    step_keys = np.stack([d[1] for d in drawn], 1)  # (max_steps, T, 2)

    def flat(keys_t: Any, obs: np.ndarray) -> Any:  # trials' actions (and aux) as n rows
        out = policy(keys_t, obs.reshape(t_n, p, *obs.shape[1:]))
        if not isinstance(out, tuple):  # actions alone: no pytree walk per step
            out = np.asarray(out)
            return out.reshape(n, *out.shape[2:])
        return jax.tree_util.tree_map(lambda a: np.asarray(a).reshape(n, *np.shape(a)[2:]),
                                      jax.device_get(out))

    traj = _host_loop(envs, flat, seeds, step_keys, max_steps,
                      None if active is None else np.asarray(active, bool).reshape(n),
                      grow=grow)
    length = traj.length.reshape(t_n, p)
    for k, end in enumerate(length.max(1)):  # `rollout_host` stops each trial at its end
        rows = slice(k * p, (k + 1) * p)
        traj.obs[end:, rows], traj.actions[end:, rows] = 0.0, 0
        for b in jax.tree_util.tree_leaves(traj.aux):
            b[end:, rows] = 0

    def per_trial(x: np.ndarray) -> np.ndarray:  # (T_max, n, ...) -> (T, T_max, P, ...)
        return np.ascontiguousarray(np.moveaxis(x.reshape(x.shape[0], t_n, p, *x.shape[2:]),
                                                1, 0))

    return Trajectory(per_trial(traj.obs), per_trial(traj.actions), per_trial(traj.mask),
                      traj.final_obs.reshape(t_n, p, *traj.final_obs.shape[1:]),
                      traj.terminated.reshape(t_n, p), length,
                      jax.tree_util.tree_map(per_trial, traj.aux), per_trial(traj.rewards))


@runtime_checkable
class HostLanes(Protocol):
    """n environments stepped on the host for `rollout_host` (one episode per lane): one Gymnasium
    environment per lane (`EnvLanes`), or a Gymnasium vector environment that steps every lane
    in one call (privrl.envs.gymnasium_env.VectorLanes). Both write into the loop's arrays."""

    size: int  # the number of lanes
    obs_shape: tuple[int, ...]

    def reset(self, rows: np.ndarray, seeds: np.ndarray, obs: np.ndarray) -> None:
        """Reset lane i of `rows` with `seeds[i]`, its first observation into obs[i]."""
        ...

    def step(self, rows: np.ndarray, actions: np.ndarray, obs: np.ndarray,
             reward: np.ndarray, fell: np.ndarray, cut: np.ndarray) -> None:
        """Step lane i of `rows` with actions[i] (`actions`: every lane's); its next
        observation, reward, terminated and truncated into row i of obs, reward, fell, cut,
        and no other row (a lane's flags stay those of its last step)."""
        ...


class EnvLanes:
    """One Gymnasium environment per lane, each stepped by its own Python call."""

    def __init__(self, envs: Sequence[Any]) -> None:
        self.envs, self.size = envs, len(envs)
        self.obs_shape = tuple(envs[0].observation_space.shape)

    def reset(self, rows: np.ndarray, seeds: np.ndarray, obs: np.ndarray) -> None:
        for i in rows.tolist():
            obs[i] = self.envs[i].reset(seed=int(seeds[i]))[0]

    def step(self, rows: np.ndarray, actions: np.ndarray, obs: np.ndarray,
             reward: np.ndarray, fell: np.ndarray, cut: np.ndarray) -> None:
        # Discrete actions as Python ints (they index faster), a Box's as float32 vectors
        # (the dtype's kind: np.issubdtype costs a microsecond a step).
        steps = (actions[rows].tolist() if actions.dtype.kind in "iu"
                 else list(actions[rows]))
        for i, a in zip(rows.tolist(), steps, strict=True):
            obs[i], reward[i], fell[i], cut[i], _ = self.envs[i].step(a)


def _lanes(envs: Sequence[Any] | HostLanes) -> HostLanes:
    """Lanes as given, or one environment per lane (`EnvLanes`)."""
    return envs if isinstance(envs, HostLanes) else EnvLanes(envs)


def _host_loop(envs: Sequence[Any] | HostLanes, policy: PolicyFn, seeds: np.ndarray,
               step_keys: np.ndarray, max_steps: int, active: Any = None,
               observe: ObserveFn | None = None, obs_keys: np.ndarray | None = None,
               grow: bool = False) -> Trajectory:
    """`rollout_host`'s episodes from its draws (`host_keys`): the policy gets `step_keys[t]`;
    `grow`: the arrays as long as the longest episode needs (`rollout_host`)."""
    lanes = _lanes(envs)
    n = lanes.size
    size = min(max_steps, GROW_FROM) if grow else max_steps  # the buffers' length now
    live = np.ones(n, bool) if active is None else np.array(active, bool).reshape(n)
    obs = np.zeros((n, *lanes.obs_shape), np.float32)
    raw = obs.copy() if observe is not None else obs  # the environments' own observations

    def seen(t: int, rows: Any) -> None:  # the observed rows after release time t
        if observe is not None and rows.size:
            obs[rows] = np.asarray(observe(obs_keys[t], raw), np.float32)[rows]

    lanes.reset(np.flatnonzero(live), seeds, raw)
    seen(0, np.flatnonzero(live))
    obs_b = np.zeros((size, *obs.shape), np.float32)
    mask_b = np.zeros((size, n), np.float32)
    rew_b = np.zeros((size, n), np.float32)
    # Each lane's terminated and truncated flags of its last step (a lane writes them only
    # while it steps, so after its end they stay its final ones: `fell` is the episodes'
    # `terminated`).
    fell, cut = np.zeros(n, bool), np.zeros(n, bool)
    # The actions' and aux's buffers, made at the first step from what the policy returns.
    act_b: Any = None
    aux_b: Any = None

    def split(out: Any) -> tuple[np.ndarray, Any]:
        """One step's actions (numpy) and aux (None: the policy returns actions alone)."""
        action, aux = jax.device_get(out) if isinstance(out, tuple) else (out, None)
        return np.asarray(action), aux

    def buffers(action: np.ndarray, aux: Any) -> tuple[np.ndarray, Any]:
        """(T, ...) zero buffers for the actions and aux: discrete actions (T, n) int32,
        stepped as ints; continuous ones (a Box) (T, n, d) float32 vectors, as the jitted
        rollout records them."""
        dtype = np.int32 if np.issubdtype(action.dtype, np.integer) else np.float32
        return np.zeros((size, *action.shape), dtype), jax.tree_util.tree_map(
            lambda a: np.zeros((size, *np.shape(a)), np.asarray(a).dtype), aux)

    def longer(b: np.ndarray) -> np.ndarray:  # a buffer grown to `size` steps, zero-padded
        return np.concatenate([b, np.zeros((size - b.shape[0], *b.shape[1:]), b.dtype)])

    for t in range(max_steps):
        if not live.any():
            break
        if t == size:  # only when growing: double the buffers, up to the cap
            size = min(max_steps, 2 * size)
            obs_b, mask_b, rew_b, act_b = map(longer, (obs_b, mask_b, rew_b, act_b))
            aux_b = jax.tree_util.tree_map(longer, aux_b)
        action, aux = split(policy(step_keys[t], obs))
        if act_b is None:
            act_b, aux_b = buffers(action, aux)
        for b, a in zip(jax.tree_util.tree_leaves(aux_b), jax.tree_util.tree_leaves(aux),
                        strict=True):
            b[t] = a
        obs_b[t], act_b[t], mask_b[t] = obs, action, live
        stepped = np.flatnonzero(live)
        lanes.step(stepped, action, raw, rew_b[t], fell, cut)
        live &= ~(fell | cut)  # a lane not stepped is not live already
        seen(t + 1, stepped)
    length = mask_b.sum(0).astype(np.int32)
    if act_b is None:
        # No step taken (every environment inactive: a round past the cap, a retired trial):
        # one policy call shapes the buffers, left zero, so that the arrays have the shapes of
        # any other rollout's (a Box's (T, n, d) actions, the aux a Gaussian head's
        # log-probability reads), for every caller (`rollout_host`, `rollout_host_trials`).
        act_b, aux_b = buffers(*split(policy(step_keys[0], obs)))
    return Trajectory(obs_b, act_b, mask_b, obs, fell, length, aux_b, rew_b)
