"""DP-REINFORCE on other tasks: true (negative) rewards reach the loss; the user's model; the
example of docs/environments.md runs."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

EXAMPLE = Path(__file__).parents[3] / "examples" / "byo_env.py"


def test_negative_rewards_reach_the_gradient() -> None:
    """-1 per step (MountainCar) gives exactly the opposite update of +1 per step: the learner
    no longer maximises survival when the environment punishes it."""
    algo = Reinforce(ReinforceConfig(env="gymnax:MountainCar-v0", hidden=8,
                                     max_episode_steps=10))
    theta = algo.model.init(jax.random.key(0))
    t, obs = 10, jnp.linspace(-0.5, 0.5, 20).reshape(10, 2)
    actions, mask = jnp.arange(t) % 3, jnp.ones(t)
    masks = jnp.ones((t, 8))
    grad = jax.grad(algo.episode_loss)
    g_env = grad(theta, obs, actions, mask, masks, -mask)
    g_plus = grad(theta, obs, actions, mask, masks, None)  # the old +1 per step
    np.testing.assert_allclose(np.asarray(g_env), -np.asarray(g_plus), rtol=1e-5, atol=1e-7)


def test_private_dynamics_per_episode_and_true_returns() -> None:
    cfg = ReinforceConfig(env="gymnax:MountainCar-v0", private_params=("gravity=0.002:0.003",),
                          hidden=8, max_episode_steps=15, batch_episodes=2, episodes=2)
    algo = Reinforce(cfg)
    assert algo.task.private[0].field == "gravity"
    state = algo.init(jax.random.key(0))
    state, metrics = jax.jit(algo.episode)(state)
    assert float(metrics.train_return) == -15.0 and float(metrics.eval_return) == -15.0


def test_example_runs_with_a_user_environment_and_model(monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("byo_env", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "byo_env", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    out = module.main(episodes=4, seed=0)
    assert -60.0 <= out["last"] <= -5.0 and -60.0 <= out["first"] <= -5.0
    eps = out["privacy"]["dpsgd"]["epsilon"]
    assert math.isfinite(eps) and eps > 0
    env_code = (EXAMPLE.read_text().split("# --- the environment")[1]
                .split("# --- the model")[0]).strip().splitlines()[1:]  # after the header
    assert len(env_code) <= 40
