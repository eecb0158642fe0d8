"""`rollout_trials` (many trials' episodes in one loop) against `rollout_episodes` per trial."""

import jax
import jax.numpy as jnp
import numpy as np

from privrl.envs import CartPoleSpec, agent_gravity, make_cartpole
from privrl.envs.rollout import rollout_episodes, rollout_trials


def _policy(w, key, obs):
    """A linear policy with random exploration: both the trial's weights and the key matter."""
    explore = jax.random.bernoulli(key, 0.2, obs.shape[:1])
    return jnp.where(explore, 0, (obs @ w > 0).astype(jnp.int32))


def test_each_trial_gets_its_own_rollout_episodes():
    env, params = make_cartpole(CartPoleSpec(max_steps=40))
    trials, p = 8, 9
    gravities = jax.vmap(lambda i: agent_gravity(jax.random.key(0), i, (9.7, 9.8, 9.9)))(
        jnp.arange(p))
    batched = jax.vmap(lambda g: params.replace(gravity=g))(gravities)
    per_trial = jax.tree_util.tree_map(lambda x: jnp.stack([x] * trials), batched)
    weights = jax.random.normal(jax.random.key(1), (trials, 4))
    keys = jax.random.split(jax.random.key(2), trials)
    active = jnp.ones((trials, p), bool).at[1].set(False).at[3, 0].set(False)
    run = jax.jit(lambda prm, w, k, stages: rollout_trials(
        env, prm, _policy, w, k, p, 40, active, 2, stages), static_argnums=3)
    together = run(per_trial, weights, keys, (4, 2))  # 4 blocks of 2, then 2 blocks, then 1
    lengths = np.asarray(together.length)
    assert lengths[1].sum() == 0 and lengths[3, 0] == 0  # inactive agents take no step
    assert len(set(lengths[[0, 2, 4]].max(axis=1))) > 1  # trials end at different steps
    # Stages only change which trials step together: every trial's floats are the same.
    plain = run(per_trial, weights, keys, ())
    mask = np.asarray(plain.mask)
    for field in ("mask", "terminated", "length", "final_obs", "rewards"):
        np.testing.assert_array_equal(np.asarray(getattr(together, field)),
                                      np.asarray(getattr(plain, field)))
    np.testing.assert_array_equal(np.asarray(together.actions) * mask,
                                  np.asarray(plain.actions) * mask)
    np.testing.assert_array_equal(np.asarray(together.obs) * mask[..., None],
                                  np.asarray(plain.obs) * mask[..., None])
    # The vmapped per-trial rollout it replaces. XLA CPU may fuse CartPole's element-wise
    # physics differently in the two programs, so observations may differ in their last bits
    # (float32 multiply-adds contracted or not); the episodes' structure and actions agree.
    alone = jax.jit(jax.vmap(lambda prm, w, k, a: rollout_episodes(
        env, prm, lambda kk, o: _policy(w, kk, o), k, p, 40, a)))(per_trial, weights, keys,
                                                                  active)
    mask = np.asarray(alone.mask)
    for field in ("mask", "terminated", "length"):
        np.testing.assert_array_equal(np.asarray(getattr(together, field)),
                                      np.asarray(getattr(alone, field)))
    np.testing.assert_array_equal(np.asarray(together.actions) * mask,
                                  np.asarray(alone.actions) * mask)
    np.testing.assert_allclose(np.asarray(together.obs) * mask[..., None],
                               np.asarray(alone.obs) * mask[..., None], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(together.final_obs), np.asarray(alone.final_obs),
                               rtol=1e-5, atol=1e-6)


def test_a_batch_without_stages_writes_its_buffers_in_place():
    """Every trial stepping in order (no stage gathered them) writes step t of the episode
    buffers as one slice: no scatter (per step a scatter kernel for each buffer, before)."""
    env, params = make_cartpole(CartPoleSpec(max_steps=40))
    trials, p = 8, 9
    per_trial = jax.tree_util.tree_map(
        lambda x: jnp.broadcast_to(x, (trials, p, *jnp.shape(x))), params)
    run = jax.jit(lambda prm, w, k: rollout_trials(
        env, prm, _policy, w, k, p, 40, jnp.ones((trials, p), bool), trials))
    args = (per_trial, jnp.ones((trials, 4)), jax.random.split(jax.random.key(0), trials))
    assert "scatter" not in str(jax.make_jaxpr(run)(*args))
    assert int(np.asarray(run(*args).length).min()) > 0
