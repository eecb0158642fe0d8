"""CartPole rollouts: scores from termination flags, early exit, per-agent private gravity."""

import jax
import jax.numpy as jnp
import numpy as np

from privrl.envs import CartPoleSpec, agent_gravity, make_cartpole, rollout_episodes


def _random_policy(key, obs):
    return jax.random.randint(key, obs.shape[:1], 0, 2)


def _rollout(p=64, max_steps=200, gravity=9.8, active=None, policy=_random_policy, seed=0):
    env, params = make_cartpole(CartPoleSpec(max_steps=max_steps))
    batched = jax.vmap(lambda g: params.replace(gravity=g))(jnp.full((p,), gravity))
    return rollout_episodes(env, batched, policy, jax.random.key(seed), p, max_steps, active)


def test_scores_are_lengths_of_a_mask_prefix():
    traj = _rollout()
    mask = np.asarray(traj.mask)
    lengths = np.asarray(traj.length)
    assert np.all(mask.sum(0) == lengths)
    for p in range(mask.shape[1]):  # the valid steps form a prefix
        assert np.all(mask[: lengths[p], p] == 1) and np.all(mask[lengths[p]:, p] == 0)
    # A random policy falls quickly: CartPole's random-policy mean score is about 22.
    assert 12 < lengths.mean() < 35
    assert np.all(np.asarray(traj.terminated)[lengths < 200])


def test_step_cap_truncates_without_terminal_flag():
    always_alive = CartPoleSpec(max_steps=5)
    assert always_alive.max_steps == 5
    traj = _rollout(p=16, max_steps=5)
    lengths = np.asarray(traj.length)
    # No random episode falls within 5 steps from CartPole's start state (|θ| ≤ 0.05 rad).
    assert np.all(lengths == 5)
    assert not np.any(np.asarray(traj.terminated))


def test_inactive_environments_take_no_step():
    active = jnp.arange(8) < 3
    traj = _rollout(p=8, active=active)
    lengths = np.asarray(traj.length)
    assert np.all(lengths[3:] == 0) and np.all(lengths[:3] > 0)


def test_per_agent_gravity_changes_dynamics():
    # Same seed, so the same start states and actions: only gravity differs.
    a = _rollout(p=8, gravity=9.7)
    b = _rollout(p=8, gravity=9.9)
    np.testing.assert_array_equal(a.obs[0], b.obs[0])
    assert np.abs(np.asarray(a.obs[3]) - np.asarray(b.obs[3]))[:, 3].min() > 0  # pole velocity
    # The pole's angular acceleration grows with gravity: compare the first step's change of
    # θ_dot from an upright start with the cart at rest (sin θ > 0 ⇒ larger ψ, faster fall).
    env, params = make_cartpole(CartPoleSpec())
    _, state = env.reset_env(jax.random.key(0), params)
    state = state.replace(x_dot=0.0, theta=0.04, theta_dot=0.0)
    dv = [env.step_env(jax.random.key(0), state, 1, params.replace(gravity=g))[1].theta_dot
          for g in (9.7, 9.9)]
    assert dv[1] > dv[0]


def test_agent_gravity_is_private_fixed_and_uniform():
    key = jax.random.key(7)
    ids = jnp.arange(30_000)
    g = np.asarray(jax.vmap(agent_gravity, (None, 0, None))(key, ids, (9.7, 9.8, 9.9)))
    g_again = np.asarray(jax.vmap(agent_gravity, (None, 0, None))(key, ids, (9.7, 9.8, 9.9)))
    np.testing.assert_array_equal(g, g_again)  # an agent's environment does not change
    values, counts = np.unique(g, return_counts=True)
    np.testing.assert_allclose(values, [9.7, 9.8, 9.9], rtol=1e-6)
    # Each count ~ Binomial(30000, 1/3): sd ≈ 81.6; 6 sd (490) bounds a false failure by ~1e-8.
    assert np.all(np.abs(counts - 10_000) < 490)
