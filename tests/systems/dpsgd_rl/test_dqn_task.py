"""DP-DQN (and the LDP commands) on tasks other than CartPole: true (negative) rewards in the
replay buffer and the returns, each training episode's private dynamics, the user's Q-network
(its per-transition clipping agrees with the one-pass clipping of privrl's MLP), bad specs
refused before anything runs, config.json naming the task."""

from __future__ import annotations

import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from privrl.config import ConfigError
from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
from privrl.systems.dpsgd_rl.local import run_episodic, save


def _cfg(**kw) -> DQNConfig:
    base = dict(hidden=(8,), batch_size=4, buffer_size=64, episodes=2, max_episode_steps=30,
                stop_when_solved=False)
    return DQNConfig(**{**base, **kw})


class QNet(nn.Module):
    """The same function and parameter layout as privrl's MLP((8,)): Dense_0, ReLU, Dense_1."""

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(8)(x))  # made first, so named Dense_0
        return nn.Dense(2)(h)


@pytest.fixture(scope="module")
def walk_episode(walk) -> tuple[DQN, Any, Any]:
    """One DP-DQN episode on the walker (compiled once): its algorithm, state and metrics,
    which the replay-buffer test inspects and the clipping test takes its transitions from."""
    algo = DQN(_cfg(dp=True, noise_multiplier=1.0), task=walk)
    state, metrics = jax.jit(algo.episode)(algo.init(jax.random.key(1)))
    return algo, state, metrics


def test_true_rewards_and_private_dynamics_reach_the_replay_buffer(walk, walk_episode) -> None:
    algo, state, metrics = walk_episode
    r = state.replay
    n = int(r.size)
    assert n >= 4
    want = np.where(np.asarray(r.action[:n]) == 1, -1.0, -2.0)  # the walker's rewards
    np.testing.assert_array_equal(np.asarray(r.reward[:n]), want)
    assert float(metrics.train_return) == pytest.approx(want.sum())  # the true return
    # The first step moved x by ±drift: episode 0's agent's private drift.
    moved = 5.0 * abs(float(r.next_obs[0, 0] - r.obs[0, 0]))
    drift = float(walk.agent_params(algo.env_key, jnp.int32(0)).drift)
    assert moved == pytest.approx(drift, rel=1e-5) and 0.6 <= drift <= 1.4 and drift != 1.0


def test_user_q_network_clipped_per_transition_like_the_dense_path(walk, walk_episode) -> None:
    """σ = 0 (clip only): the user module's materialized per-transition clipping gives the
    gradient the one-pass clipping gives for the same network (clip small enough to bind), on
    the transitions of a walker episode."""
    cfg = _cfg(dp=True, noise_multiplier=0.0, clip=0.01)
    dense, user = DQN(cfg, task=walk), DQN(cfg, task=walk, model=QNet())
    assert dense.dense and not user.dense and user.model.dim == dense.model.dim
    state = walk_episode[1]
    assert int(state.replay.size) >= cfg.batch_size
    theta = dense.model.init(jax.random.key(2))
    key = jax.random.key(3)
    both = jax.jit(lambda *args: (dense.gradient(*args), user.gradient(*args)))  # one program
    g_dense, g_user = both(theta, state.target, state.replay, key)
    assert float(jnp.linalg.norm(g_dense)) > 1e-4
    np.testing.assert_allclose(np.asarray(g_user), np.asarray(g_dense), rtol=1e-4, atol=1e-7)


def test_adaptive_clip_same_through_one_pass_clipping_and_a_users_module(walk, walk_episode
                                                                         ) -> None:
    """--adaptive-clip's released gradient and next clip: privacy.dpsgd's one-pass norms (the
    dense MLP) and a user's module's materialized gradients agree (same keys, same sample)."""
    cfg = _cfg(dp=True, noise_multiplier=1.0, adaptive_clip=True,
               sampling_probability=1.0).resolved()  # every stored transition: 30
    dense, user = DQN(cfg, task=walk), DQN(cfg, task=walk, model=QNet())
    state = walk_episode[1]
    theta = dense.model.init(jax.random.key(2))
    clip = jnp.float32(1.1)  # 19 of the 30 norms (0.81 to 1.28) within: both sides occur

    def both(*args):  # one program
        return (dense.adaptive_gradient(*args, None, clip),
                user.adaptive_gradient(*args, None, clip))

    (g_dense, c_dense), (g_user, c_user) = jax.jit(both)(theta, state.target, state.replay,
                                                          jax.random.key(3))
    assert float(jnp.linalg.norm(g_dense)) > 1e-4 and float(c_dense) != float(clip)
    np.testing.assert_allclose(np.asarray(g_user), np.asarray(g_dense), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(float(c_user), float(c_dense), rtol=1e-6)


def test_wrong_q_network_contract_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError) as e:
        DQN(_cfg(), model=nn.Dense(3))  # CartPole has 2 actions
    assert e.value.field == "model" and "Q-values of shape (2,)" in str(e.value)


def test_acrobot_episode_and_config_json(tmp_path) -> None:
    cfg = _cfg(episodes=1, max_episode_steps=10, env="gymnax:Acrobot-v1",
               private_params=("available_torque=-1.2:-0.8", "link_mass_1=0.8:1.2"))
    algo = DQN(cfg)
    assert algo.model.dim == 6 * 8 + 8 + 8 * 3 + 3  # sized from Acrobot's spaces
    out = run_episodic(algo, "dp-dqn")
    assert float(out.train_returns[0, 0]) == -10.0  # −1 per step, never swung up
    save(out, tmp_path / "run")
    config = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert config["env"] == "gymnax:Acrobot-v1"
    assert config["private_params"] == ["available_torque=-1.2:-0.8", "link_mass_1=0.8:1.2"]


@pytest.mark.parametrize("cmd, args, option", [
    ("dp-dqn", ["--env", "gymnax:Nope"], "--env"),
    ("dp-dqn", ["--env", "gymnax:Acrobot-v1", "--private", "nope=1:2"], "--private"),
    ("ldp-dqn", ["--env", "gymnax:Acrobot-v1"], "--mode"),  # sigma mode is CartPole's
    ("ldp-reinforce", ["--env", "gymnax:Acrobot-v1", "--mode", "box"], "--box-low"),
    ("ldp-reinforce", ["--private", "gravity=0:inf"], "--private"),
])
def test_cli_env_errors_are_one_line(cmd, args, option, fails_in_one_line) -> None:
    fails_in_one_line(cmd, args, option)
