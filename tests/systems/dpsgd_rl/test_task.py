"""DP-REINFORCE on other tasks: true (negative) rewards reach the loss; the user's model; the
example of docs/environments.md runs."""

from __future__ import annotations

import math
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
    theta = jax.jit(algo.model.init)(jax.random.key(0))  # one program, not one per op
    t, obs = 10, jnp.linspace(-0.5, 0.5, 20).reshape(10, 2)
    actions, mask = jnp.arange(t) % 3, jnp.ones(t)
    masks = jnp.ones((t, 8))
    grad = jax.grad(algo.episode_loss)
    both = jax.jit(lambda th: (grad(th, obs, actions, mask, masks, -mask),  # one program
                               grad(th, obs, actions, mask, masks, None)))  # the old +1 per step
    g_env, g_plus = both(theta)
    np.testing.assert_allclose(np.asarray(g_env), -np.asarray(g_plus), rtol=1e-5, atol=1e-7)


def test_private_dynamics_per_episode_and_true_returns() -> None:
    cfg = ReinforceConfig(env="gymnax:MountainCar-v0", private_params=("gravity=0.002:0.003",),
                          hidden=8, max_episode_steps=15, batch_episodes=2, episodes=2)
    algo = Reinforce(cfg)
    assert algo.task.private[0].field == "gravity"
    _, metrics = jax.jit(lambda k: algo.episode(algo.init(k)))(jax.random.key(0))
    assert float(metrics.train_return) == -15.0 and float(metrics.eval_return) == -15.0


def test_example_runs_with_a_user_environment_and_model(load_example) -> None:
    module = load_example("byo_env")  # (its dataclasses look their module up)
    out = module.main(episodes=4, seed=0)
    assert -60.0 <= out["last"] <= -5.0 and -60.0 <= out["first"] <= -5.0
    eps = out["privacy"]["dpsgd"]["epsilon"]
    assert math.isfinite(eps) and eps > 0
    env_code = (EXAMPLE.read_text().split("# --- the environment")[1]
                .split("# --- the model")[0]).strip().splitlines()[1:]  # after the header
    assert len(env_code) <= 40


def test_gymnasium_task_learner_sees_true_returns(load_example) -> None:
    """DP-REINFORCE on a user's Gymnasium environment (host rollouts): training and evaluation
    returns are the environment's negative returns; the privacy account is the usual one."""
    from privrl.envs.task import PrivateParam, make_task
    from privrl.systems.dpsgd_rl.local import run_episodic

    module = load_example("byo_gymnasium")
    task = make_task("byo_gymnasium:Walk", [PrivateParam("drift", 0.6, 1.4)])
    cfg = ReinforceConfig(dp=True, noise_multiplier=1.0, episodes=3, batch_episodes=2,
                          max_episode_steps=12, hidden=8, seeds=2, stop_when_solved=False)
    out = run_episodic(Reinforce.settings_algorithm([cfg], task, module.Policy()),
                       "reinforce")
    assert out.config.env == "byo_gymnasium:Walk"
    assert out.train_returns.shape == (2, 3) and np.all(out.updates == 3)
    for returns in (out.train_returns, out.eval_returns):  # 4..12 steps at -1 or -2 each
        assert np.all((returns >= -24) & (returns <= -4)), returns
    assert math.isfinite(out.privacy["dpsgd"]["epsilon"])


def test_gymnasium_example_runs(load_example) -> None:
    module = load_example("byo_gymnasium")
    out = module.main(episodes=3, seed=0)
    assert -45.0 <= out["first"] <= -5.0 and -45.0 <= out["last"] <= -5.0
    assert out["config"].env == "byo_gymnasium:Walk"
    assert out["config"].private_params == ("drift=0.6:1.4",)
    source = (EXAMPLE.parent / "byo_gymnasium.py").read_text()
    env_code = (source.split("# --- the environment")[1]
                .split("# --- the model")[0]).strip().splitlines()[1:]  # after the header
    assert len(env_code) <= 40
