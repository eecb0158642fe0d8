"""Gymnasium tasks: the host-side rollout gives the jitted rollout's arrays, replays in the
environment, sets each agent's private attribute, and refuses bad specs before computing."""

from __future__ import annotations

import sys
import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from privrl.config import ConfigError
from privrl.envs.rollout import rollout_episodes
from privrl.envs.task import PrivateParam, Task, make_task


def _walk_policy(key: jax.Array, obs: jax.Array) -> jax.Array:
    """Deterministic: two steps right, one step back (by the step count in obs[:, 1])."""
    t = jnp.round(obs[:, 1] * 30.0).astype(jnp.int32)
    return (t % 3 != 2).astype(jnp.int32)


def test_host_rollout_is_the_jitted_rollouts_twin(load_example) -> None:
    """The same walker written for gymnax (examples/byo_env.py) and for Gymnasium
    (examples/byo_gymnasium.py), the same private drifts and policy: the same arrays."""
    gx = load_example("byo_env")
    load_example("byo_gymnasium")
    drift = PrivateParam("drift", 0.6, 1.4)
    env = gx.Walk()
    jx_task = Task(env, env.default_params, "byo_env", (drift,)).with_max_steps(12)
    gym_task = make_task("byo_gymnasium:Walk", [drift]).with_max_steps(12)
    ids, n = jnp.arange(6), 6
    k_env, k_roll = jax.random.key(3), jax.random.key(4)
    a = rollout_episodes(jx_task.env, jx_task.agents_params(k_env, ids), _walk_policy, k_roll,
                         n, 12)
    b = gym_task.rollout(gym_task.agents_params(k_env, ids), jax.jit(_walk_policy), k_roll, n,
                         12)
    np.testing.assert_array_equal(b.mask, np.asarray(a.mask))
    np.testing.assert_array_equal(b.actions, np.asarray(a.actions))
    np.testing.assert_array_equal(b.length, np.asarray(a.length))
    np.testing.assert_array_equal(b.rewards, np.asarray(a.rewards))  # -1 and -2: true rewards
    # Gymnasium moves x in float64, gymnax in float32: observations agree to float32 rounding.
    np.testing.assert_allclose(b.obs, np.asarray(a.obs), atol=1e-6)
    np.testing.assert_allclose(b.final_obs, np.asarray(a.final_obs), atol=1e-6)
    reached = np.asarray(b.length) < 12
    assert reached.any() and (~reached).any()  # both kinds of episode end are compared
    np.testing.assert_array_equal(b.terminated, reached)  # reached the goal
    # At the step cap gymnax's walker counts as terminated (its is_terminated includes the
    # time limit), Gymnasium's is cut (not terminated): the one documented difference.
    np.testing.assert_array_equal(np.asarray(a.terminated), np.ones(n, bool))
    assert float(np.sum(b.rewards)) < -6 * 4


def test_trials_rolled_out_together_are_each_trials_own_rollout(load_example) -> None:
    """`rollout_trials` (one policy call per step for every trial, PGC-A3C's host episodes)
    gives each trial exactly the arrays of its own `rollout`, padding included: trials that
    end at different steps, one with an inactive agent, one with none active."""
    load_example("byo_gymnasium")
    task = make_task("byo_gymnasium:Walk", [PrivateParam("drift", 0.6, 1.4)]).with_max_steps(12)
    t_n, p = 3, 2
    params = jax.vmap(lambda k: task.agents_params(k, jnp.arange(p)))(
        jax.random.split(jax.random.key(0), t_n))
    keys = jax.random.split(jax.random.key(1), t_n)
    active = np.array([[True, True], [True, False], [False, False]])
    both = task.rollout_trials(params, jax.jit(jax.vmap(_walk_policy)), keys, p, 12, active)
    for k in range(t_n):
        own = task.rollout(jax.tree_util.tree_map(lambda x, k=k: x[k], params),
                           jax.jit(_walk_policy), keys[k], p, 12, active[k])
        for name, x in own._asdict().items():
            if x is not None:
                np.testing.assert_array_equal(getattr(both, name)[k], x, err_msg=name)
    assert len(set(both.length.max(1).tolist())) == t_n  # the trials end at different steps


def test_cartpole_rollout_replays_in_the_environment_with_each_agents_gravity() -> None:
    gravity = PrivateParam("gravity", fn=lambda key, i: 5.0 + 15.0 * (i % 2))
    task = make_task("gymnasium:CartPole-v1", [gravity]).with_max_steps(40)
    params = task.agents_params(jax.random.key(0), jnp.arange(4))
    g = np.asarray(params.gravity)
    assert g.tolist() == [5.0, 20.0, 5.0, 20.0]
    push = jax.jit(lambda k, o: (o[:, 2] > 0).astype(jnp.int32))  # push under the lean
    active = np.array([True, True, True, False])
    traj = task.rollout(params, push, jax.random.key(1), 4, 40, active)
    again = task.rollout(params, push, jax.random.key(1), 4, 40, active)
    for x, y in zip(traj, again, strict=True):
        if x is not None:
            np.testing.assert_array_equal(x, y)  # same key, same episodes
    length = np.asarray(traj.length)
    assert length[3] == 0 and not np.asarray(traj.mask)[:, 3].any()  # inactive: no step
    assert [e.unwrapped.gravity for e in task.envs(3)] == [5.0, 20.0, 5.0]
    # CartPole's reward is +1 per step: rewards are the mask, the return the length.
    np.testing.assert_array_equal(traj.rewards, traj.mask)
    np.testing.assert_array_equal(np.asarray(traj.terminated)[:3], length[:3] < 40)
    assert (length[:3] == 40).any() and (length[:3] < 40).any()  # capped and fallen

    def replay(i: int, grav: float) -> float:
        """Largest gap between the recorded next observations and CartPole's dynamics."""
        env = CartPoleEnv()
        env.gravity = grav
        gap = 0.0
        for t in range(length[i]):
            env.state = np.asarray(traj.obs[t, i], np.float64)
            nxt = env.step(int(traj.actions[t, i]))[0]
            want = traj.obs[t + 1, i] if t + 1 < length[i] else traj.final_obs[i]
            gap = max(gap, float(np.max(np.abs(nxt - want))))
        return gap

    for i in range(3):
        # The recorded observations are float32 roundings of the float64 state.
        assert replay(i, g[i]) < 1e-5
        assert replay(i, 25.0 - g[i]) > 1e-3  # the other agent's gravity does not replay


def test_a_callable_must_make_a_new_environment_each_call(monkeypatch) -> None:
    module = types.ModuleType("one_env")
    shared = CartPoleEnv()
    module.same = lambda: shared
    module.fresh = CartPoleEnv
    monkeypatch.setitem(sys.modules, "one_env", module)
    with pytest.raises(ConfigError, match="same Gymnasium environment twice") as e:
        make_task("one_env:same")
    assert e.value.field == "env"
    task = make_task("one_env:fresh", [PrivateParam("masscart", 0.5, 2.0)])
    assert task.host and task.obs_dim == 4 and task.num_actions == 2
    assert task.private_spec() == ["masscart=0.5:2"]
    assert isinstance(task.envs(2)[1], gymnasium.Env) and task.envs(2)[0] is not task.envs(2)[1]
