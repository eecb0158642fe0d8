"""FedPG on tasks other than CartPole: true (negative) rewards reach the gradient and the
returns, per-agent private dynamics (vector fields too), the user's policy, bad specs refused
before anything runs, config.json naming the task."""

from __future__ import annotations

import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from privrl.config import ConfigError
from privrl.envs.task import make_task
from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig
from privrl.systems.fedpg.local import run_fedpg, save


def _cfg(**kw) -> FedPGConfig:
    base = dict(agents=3, budget=10, batch_min=2, batch_max=3, minibatch=1, hidden=(4,),
                max_episode_steps=30)
    return FedPGConfig(**{**base, **kw})


class TinyPolicy(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(nn.tanh(nn.Dense(3)(x)))


def test_true_rewards_reach_the_episodes_and_the_gradient(walk) -> None:
    """The environment's rewards are recorded per step, and the gradient follows them: with
    the rewards negated (a reward transform) it is exactly the opposite (whitening is odd),
    where a +1-per-step learner would not change at all."""
    algo = FedPG(_cfg(), task=walk, model=TinyPolicy())
    neg = FedPG(_cfg(), task=replace(walk, reward_transform=lambda r: -r), model=TinyPolicy())
    theta = algo.model.init(jax.random.key(0))
    thetas = jnp.stack([theta, theta])
    live = jnp.ones((2, 3), bool)
    ep = jax.jit(algo.sample)(thetas, algo.env_params_of(jax.random.key(1), jnp.arange(2)),
                              live, jax.random.key(2))
    want = jnp.where(ep.actions == 1, -1.0, -2.0) * ep.mask  # the walker's rewards
    np.testing.assert_array_equal(np.asarray(ep.rewards), np.asarray(want))
    g, g_neg = jax.jit(algo.gradients)(thetas, ep), jax.jit(neg.gradients)(thetas, ep)
    assert float(jnp.linalg.norm(g)) > 1e-3
    np.testing.assert_allclose(np.asarray(g_neg), -np.asarray(g), rtol=1e-5, atol=1e-7)


def test_returns_are_the_environment_s_and_agents_have_private_dynamics(walk) -> None:
    algo = FedPG(_cfg(), task=walk)
    drift = np.asarray(algo.env_params_of(jax.random.key(0), jnp.arange(4)).drift)
    assert np.all((drift >= 0.6) & (drift <= 1.4)) and len(np.unique(drift)) == 4
    run = run_fedpg(_cfg(), task=walk)
    ret = run.mean_return[np.isfinite(run.mean_return)]
    # Every step costs 1 or 2 and the goal is >= 4 steps away: a return is in [−60, −4]
    # (a length-based return, the old CartPole score, would be positive).
    assert ret.size >= 2 and np.all((ret <= -4.0) & (ret >= -60.0)), ret


def test_acrobot_round_with_vector_private_params(tmp_path) -> None:
    """Acrobot's `available_torque` (shape (3,)) drawn per agent; a FedPG-Dec round runs and
    its returns are Acrobot's −1 per step (10-step episodes never swing up)."""
    cfg = _cfg(algorithm="dec", agents=2, budget=1, max_episode_steps=10,
               env="gymnax:Acrobot-v1",
               private_params=("available_torque=-1.2:-0.8", "link_mass_1=0.8:1.2"))
    run = run_fedpg(cfg)
    assert run.rounds_run == 1 and float(run.mean_return[0, 0]) == -10.0
    algo = FedPG(cfg)
    torque = np.asarray(algo.env_params_of(jax.random.key(0), jnp.arange(2)).available_torque)
    assert torque.shape == (2, 3) and torque[0, 0] != torque[1, 0]
    assert np.all((torque >= -1.2) & (torque <= -0.8))
    assert algo.model.dim == 6 * 4 + 4 + 4 * 3 + 3  # sized from Acrobot's spaces
    save(run, tmp_path / "run")
    config = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert config["env"] == "gymnax:Acrobot-v1"
    assert config["private_params"] == ["available_torque=-1.2:-0.8", "link_mass_1=0.8:1.2"]


def test_a_task_from_python_is_recorded_and_the_default_reproduces_gravity(walk) -> None:
    assert FedPG(_cfg(), task=walk).config.private_params == ("drift=0.6:1.4",)
    algo = FedPG(_cfg(gravities=(9.7, 9.8, 9.9)))
    from privrl.envs.cartpole import agent_gravity  # the per-agent gravity FedPG always drew

    key = jax.random.key(3)
    g = np.asarray(algo.env_params_of(key, jnp.arange(6)).gravity)
    old = [float(agent_gravity(jax.random.fold_in(key, 0x5EED), i, (9.7, 9.8, 9.9)))
           for i in range(6)]
    np.testing.assert_array_equal(g, np.asarray(old, np.float32))


def test_wrong_model_contract_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError) as e:
        FedPG(_cfg(), model=nn.Dense(3))  # CartPole has 2 actions
    assert e.value.field == "model" and "logits of shape (2,)" in str(e.value)
    with pytest.raises(ConfigError, match="gravities"):
        FedPG(_cfg(env="gymnax:Acrobot-v1", gravities=(9.7, 9.9)))
    assert make_task("gymnax:Acrobot-v1").num_actions == 3


@pytest.mark.parametrize("cmd, args, option", [
    ("fedpg-cen", ["--env", "gymnax:Nope"], "--env"),
    # a Gymnasium task runs on Ray (tests/systems/fedpg/test_ray.py); a bad one fails first,
    # before any cluster starts or any directory is made
    ("fedpg-dec", ["--env", "gymnasium:CartPole-v1", "--private", "nope=1:2", "--runtime",
                   "ray"], "--private"),
    ("fedpg-dec", ["--env", "gymnax:Acrobot-v1", "--private", "nope=1:2"], "--private"),
    ("fedpg-dec", ["--private", "gravity=x"], "--private"),
    ("fedpg-cen", ["--env", "gymnax:Acrobot-v1", "--gravities", "9.7,9.9"], "--gravities"),
])
def test_cli_env_errors_are_one_line(cmd, args, option, fails_in_one_line) -> None:
    fails_in_one_line(cmd, args, option)
