"""The A3C loss and returns against an independent float64 numpy implementation of the math."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.envs.rollout import Trajectory
from privrl.losses import discounted_returns
from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig


def test_returns_terminal_vs_truncated():
    g = 0.9
    rewards = jnp.array([1.0, 1.0, 1.0, 0.0, 0.0])
    mask = jnp.array([1.0, 1.0, 1.0, 0.0, 0.0])
    fell = discounted_returns(rewards, mask, jnp.float32(0.0), g)
    np.testing.assert_allclose(fell[:3], [1 + g + g * g, 1 + g, 1.0], rtol=1e-6)
    cut = discounted_returns(rewards, mask, jnp.float32(10.0), g)  # bootstrap V(s_T) = 10
    np.testing.assert_allclose(cut[:3], [1 + g + g * g + g**3 * 10, 1 + g + g * g * 10,
                                         1 + g * 10], rtol=1e-6)
    # Padded steps carry no reward of their own.
    np.testing.assert_allclose(fell[3:], 0.0)


def test_returns_loop_runs_an_eighth_of_the_padded_steps_to_the_same_floats():
    """The returns' scan runs over the padded time axis: unrolled 8 steps per loop iteration
    (each iteration is a few kernels, a GPU launch each: issue 54's kernel count), it computes
    the floats of the one-step loop, bit for bit."""
    import re

    from privrl.losses import RETURNS_UNROLL

    rng = np.random.default_rng(1)
    steps, episodes = 200, 12
    lengths = rng.integers(0, steps + 1, episodes)
    mask = (np.arange(steps)[None, :] < lengths[:, None]).astype(np.float32)
    rewards = rng.normal(size=(episodes, steps)).astype(np.float32) * mask
    boot = rng.normal(size=episodes).astype(np.float32)

    def one_step(r, m, b):  # the formulation before the unroll
        def step(carry, inp):
            g = jnp.where(inp[1] > 0, inp[0] + 0.95 * carry, carry)
            return g, g
        return jax.lax.scan(step, b, (r, m), reverse=True)[1]

    fast = jax.jit(jax.vmap(lambda r, m, b: discounted_returns(r, m, b, 0.95)))
    trips = re.findall(r'known_trip_count":\{"n":"(\d+)"', fast.lower(
        rewards, mask, boot).compile().as_text())
    assert RETURNS_UNROLL == 8 and trips == [str(steps // 8)]
    got = np.asarray(fast(rewards, mask, boot))
    want = np.asarray(jax.jit(jax.vmap(one_step))(rewards, mask, boot))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(got[mask == 0], np.repeat(boot, steps - lengths))


def _numpy_loss(params, obs, actions, mask, final_obs, terminated, cfg, theta_const=None,
                rewards=None):
    """Paper eq. 15-18 in float64 numpy. theta_const: params for the held-constant parts;
    rewards: the environment's per-step rewards (default CartPole's +1 per step)."""
    def forward(p, x):
        h = np.maximum(x @ p["common"]["kernel"], 0.0)
        return h @ p["policy"]["kernel"], (h @ p["value"]["kernel"])[..., 0]

    pc = theta_const if theta_const is not None else params
    logits, values = forward(params, obs)
    _, values_c = forward(pc, obs)
    _, v_final = forward(pc, final_obs[None])
    boot = 0.0 if terminated else float(v_final[0])
    t_len = int(mask.sum())
    returns = np.zeros(len(mask))
    g = boot
    for t in reversed(range(t_len)):
        g = (1.0 if rewards is None else rewards[t]) + cfg.gamma * g
        returns[t] = g
    adv = returns - values_c
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ent = -(np.exp(logp) * logp).sum(-1)
    logp_a = logp[np.arange(len(actions)), actions]
    policy = -np.sum(mask * (logp_a * adv + cfg.entropy_coef * ent))
    value = np.sum(mask * (returns - values) ** 2)
    return policy + cfg.value_coef * value


@pytest.mark.parametrize("terminated", [True, False])
def test_a2c_gradient_matches_finite_differences(terminated):
    algo = PGCA3C(PGCA3CConfig(mechanism="none", submissions=9))
    cfg = algo.config
    rng = np.random.default_rng(0)
    theta = np.asarray(jax.jit(algo.model.init)(jax.random.key(3)), np.float64)
    t_max, t_len = 12, 9
    obs = rng.normal(size=(t_max, 4)) * 0.3
    actions = rng.integers(0, 2, size=t_max)
    mask = (np.arange(t_max) < t_len).astype(np.float64)
    final_obs = rng.normal(size=4) * 0.3
    # The learner uses the environment's rewards (the config's reward "env"): not CartPole's
    # constant +1 here, so that the test sees them flow into the returns.
    rewards = rng.normal(size=t_max) * mask
    traj = Trajectory(jnp.asarray(obs, jnp.float32), jnp.asarray(actions, jnp.int32),
                      jnp.asarray(mask, jnp.float32), jnp.asarray(final_obs, jnp.float32),
                      jnp.asarray(terminated), jnp.int32(t_len),
                      rewards=jnp.asarray(rewards, jnp.float32))
    # the loss and its gradient in one program (eager, each op compiled one of its own)
    jax_val, grad = jax.jit(jax.value_and_grad(algo.episode_loss))(
        jnp.asarray(theta, jnp.float32), traj)
    jax_val, grad = float(jax_val), np.asarray(grad)

    # θ as float64 parameter dicts (same leaf order as the flat vector).
    leaves, treedef = jax.tree_util.tree_flatten(jax.eval_shape(
        algo.model.unravel, jax.ShapeDtypeStruct((algo.dim,), jnp.float32)))
    sizes = [leaf.size for leaf in leaves]

    def params_of(v):
        out, i = [], 0
        for leaf, n in zip(leaves, sizes, strict=True):
            out.append(np.asarray(v[i:i + n]).reshape(leaf.shape))
            i += n
        return jax.tree_util.tree_unflatten(treedef, out)

    const = params_of(theta)
    # The numpy loss must agree with JAX's value at θ...
    np_val = _numpy_loss(const, obs, actions, mask, final_obs, terminated, cfg,
                         rewards=rewards)
    assert np_val == pytest.approx(jax_val, rel=1e-4)
    # ...and its central finite differences (advantage/targets held at θ) must match the grad.
    h = 1e-6
    fd = np.zeros_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        fd[i] = (_numpy_loss(params_of(theta + e), obs, actions, mask, final_obs, terminated,
                             cfg, const, rewards)
                 - _numpy_loss(params_of(theta - e), obs, actions, mask, final_obs, terminated,
                               cfg, const, rewards)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=2e-3, atol=2e-3 * np.abs(fd).max())
    assert np.abs(fd).max() > 1e-3  # the check is not vacuous


def test_gae_is_the_sum_of_discounted_td_errors():
    """GAE(λ) against its definition, Â_t = Σ_j (γλ)^{j−t} δ_j over the valid prefix (the
    bootstrap after the last step); λ = 1 is Ĝ − V, λ = 0 the one-step TD error."""
    from privrl.losses import gae

    rng = np.random.default_rng(0)
    r, v = rng.normal(size=6).astype(np.float32), rng.normal(size=6).astype(np.float32)
    mask = np.float32([1, 1, 1, 1, 0, 0])  # four steps happened
    boot, gamma = np.float32(0.7), 0.9
    v_next = np.append(v[1:4], boot)
    delta = r[:4] + gamma * v_next - v[:4]
    for lam in (0.0, 0.5, 1.0):
        want = [sum((gamma * lam) ** (j - t) * delta[j] for j in range(t, 4)) for t in range(4)]
        got = np.asarray(gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(mask), jnp.asarray(boot),
                             gamma, lam))
        np.testing.assert_allclose(got[:4], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[4:], 0.0)
    g = discounted_returns(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(boot), gamma)
    np.testing.assert_allclose(np.asarray(gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(mask),
                                              jnp.asarray(boot), gamma, 1.0))[:4],
                               np.asarray(g)[:4] - v[:4], rtol=1e-5, atol=1e-6)
