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
from privrl.envs.gymnasium_env import VectorLanes, set_attributes
from privrl.envs.rollout import rollout_episodes, rollout_host
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
    assert task.lanes(4, params).vec.gravity.tolist() == [5.0, 20.0, 5.0, 20.0]  # per lane
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


def _noisy_balance(key: jax.Array, obs: jax.Array) -> jax.Array:
    """Pushes under the lean, with noise: some episodes fall, some reach the time limit."""
    p = jax.nn.sigmoid(1.5 * obs[:, 3])
    return (jax.random.uniform(key, (obs.shape[0],)) < p).astype(jnp.int32)


def test_cartpole_lanes_step_in_one_vector_call_and_play_the_scalar_episodes() -> None:
    """CartPole-v1 has a vector entry point: its lanes are Gymnasium's own `CartPoleVectorEnv`,
    stepped once per step for all lanes, and every array equals the one-environment-per-lane
    rollout's, bit for bit (same seeds, private gravity per lane, an inactive lane, episodes
    that fall or reach the task's 60-step limit before the rollout's cap, and a second rollout
    on the same vector env after its lanes ended and auto-reset), for one trial and for
    several trials stepped together."""
    task = make_task("gymnasium:CartPole-v1",
                     [PrivateParam("gravity", 8.0, 12.0)]).with_max_steps(60)
    n, policy = 8, jax.jit(_noisy_balance)
    params = task.agents_params(jax.random.key(0), jnp.arange(n))
    active = np.array([True] * 7 + [False])
    lanes = task.lanes(n, params)
    assert isinstance(lanes, VectorLanes)
    calls = []
    step = lanes.vec.step
    lanes.vec.step = lambda a: calls.append(1) or step(a)
    for key in (jax.random.key(1), jax.random.key(2)):
        vec = task.rollout(params, policy, key, n, 80, active)
        envs = task.envs(n)
        set_attributes(envs, params)
        one = rollout_host(envs, policy, key, 80, active)
        for name, x in one._asdict().items():
            if x is not None:
                np.testing.assert_array_equal(getattr(vec, name), x, err_msg=name)
        assert len(calls) == int(vec.length.max())  # one vector step per time step
        calls.clear()
        length = np.asarray(vec.length)
        assert length[7] == 0 and (length[:7] == 60).any() and (length[:7] < 60).any()
        np.testing.assert_array_equal(vec.terminated[:7], length[:7] < 60)
    t_n = 2
    both_params = jax.vmap(lambda k: task.agents_params(k, jnp.arange(n)))(
        jax.random.split(jax.random.key(3), t_n))
    keys = jax.random.split(jax.random.key(4), t_n)
    both = task.rollout_trials(both_params, jax.jit(jax.vmap(_noisy_balance)), keys, n, 80)
    assert isinstance(task.lanes(t_n * n, both_params), VectorLanes)
    for k in range(t_n):
        envs = task.envs(n)
        set_attributes(envs, jax.tree_util.tree_map(lambda x, k=k: x[k], both_params))
        own = rollout_host(envs, policy, keys[k], 80)
        for name, x in own._asdict().items():
            if x is not None:
                np.testing.assert_array_equal(getattr(both, name)[k], x, err_msg=name)


def test_a_task_without_a_vector_entry_point_steps_one_environment_per_lane(
        monkeypatch) -> None:
    """Acrobot-v1 has no vector entry point, a user's callable no registry id: each lane
    steps its own environment, as before."""
    module = types.ModuleType("own_cartpole")
    module.make = CartPoleEnv
    monkeypatch.setitem(sys.modules, "own_cartpole", module)
    for spec in ("gymnasium:Acrobot-v1", "own_cartpole:make"):
        task = make_task(spec)
        lanes = task.lanes(2, task.agents_params(jax.random.key(0), jnp.arange(2)))
        assert isinstance(lanes, list) and lanes == task.envs(2)


def test_vector_lanes_refuse_a_private_attribute_the_environment_keeps_as_an_int() -> None:
    """An environment's int attribute gets an int (`set_attributes`), the vector env's lanes a
    float: they would not play its episodes, so no vector lanes; as floats on both, lanes."""
    from privrl.envs.gymnasium_env import make_registered, vector_lanes

    one = make_registered("CartPole-v1")
    assert isinstance(vector_lanes("CartPole-v1", 2, None, ["gravity"], one), VectorLanes)
    one.unwrapped.gravity = 10
    assert vector_lanes("CartPole-v1", 2, None, ["gravity"], one) is None
