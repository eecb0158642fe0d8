"""PGC-A3C on a task other than CartPole, with the user's network; the reward options."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from privrl.config import ConfigError
from privrl.envs.task import PrivateParam, make_task
from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig


class TinyAC(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.tanh(nn.Dense(4)(x))
        return nn.Dense(3)(h), nn.Dense(1)(h)[..., 0]


def _cfg(**kw):
    return PGCA3CConfig(parallel_agents=3, submissions=6, max_episode_steps=12, **kw)


def test_acrobot_task_with_private_masses_and_user_model() -> None:
    task = make_task("gymnax:Acrobot-v1", [PrivateParam("link_mass_1", 0.8, 1.2)])
    algo = PGCA3C(_cfg(), task=task.with_max_steps(12), model=TinyAC())
    assert algo.dim == 6 * 4 + 4 + 4 * 3 + 3 + 4 + 1  # sized from Acrobot's spaces
    assert algo.config.env == "gymnax:Acrobot-v1"
    assert algo.config.private_params == ("link_mass_1=0.8:1.2",)
    state = algo.init(jax.random.key(0))
    state, scores = jax.jit(lambda s: algo.run_rounds(s, 2))(state)
    # never swung up: 12 steps at -1 each, the true return (not the length)
    assert int(state.submitted) == 6 and np.all(np.asarray(scores) == -12)
    assert np.all(np.isfinite(np.asarray(state.agg.theta)))


def test_default_network_is_sized_from_the_spaces_and_wrong_models_refused() -> None:
    algo = PGCA3C(_cfg(env="gymnax:MountainCar-v0"))
    assert algo.dim == 2 * 16 + 16 * 3 + 16  # no biases (the paper's network)
    with pytest.raises(ConfigError, match="model"):
        PGCA3C(_cfg(env="gymnax:MountainCar-v0"), model=nn.Dense(3))


def test_env_reward_reaches_the_loss() -> None:
    """MountainCar's −1 per step, not an assumed +1: "env" and "step" rewards differ in sign."""
    algo = PGCA3C(_cfg(env="gymnax:MountainCar-v0"))
    step = PGCA3C(_cfg(env="gymnax:MountainCar-v0", reward="step"))
    from privrl.envs.rollout import rollout_episodes

    params = algo.task.agents_params(jax.random.key(0), jnp.arange(2))
    traj = rollout_episodes(algo.env, params, lambda k, o: jnp.zeros(2, jnp.int32),
                            jax.random.key(1), 2, 12)
    np.testing.assert_array_equal(np.asarray(algo.rewards(traj)), -np.asarray(traj.mask))
    np.testing.assert_array_equal(np.asarray(step.rewards(traj)), np.asarray(traj.mask))
