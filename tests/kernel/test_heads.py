"""Policy heads (issue 39): the head an action space takes, the Gaussian's bounds and its
log-probability, and DP-REINFORCE learning a continuous action."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces
from jax.scipy.stats import norm

from privrl.envs.task import make_task
from privrl.nets.heads import LOG_STD_MAX, LOG_STD_MIN, Categorical, Gaussian, head_for


def test_the_action_space_chooses_the_head() -> None:
    assert head_for(spaces.Discrete(3)) == Categorical(3)
    assert head_for(spaces.Box(-2.0, 2.0, (1,), jnp.float32)) == Gaussian((-2.0,), (2.0,))
    assert head_for(spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)) is None  # unbounded
    assert head_for(spaces.Box(0.0, 1.0, (2, 2), jnp.float32)) is None  # not a vector
    assert make_task("gymnax:Pendulum-v1").head == Gaussian((-2.0,), (2.0,))
    assert make_task("gymnax:MountainCarContinuous-v0").head == Gaussian((-1.0,), (1.0,))


def test_gaussian_samples_are_clipped_and_the_log_prob_is_the_unclipped_samples() -> None:
    head = Gaussian((-1.0, 0.0), (1.0, 0.5))
    out = jnp.tile(jnp.array([0.9, 0.4, 0.0, 9.0]), (2000, 1))  # (raw μ, log σ): 0, then 9
    mean = np.float32([np.tanh(0.9), 0.25 + 0.25 * np.tanh(0.4)])  # μ squashed into the Box
    action, raw = head.sample(jax.random.key(0), out)
    assert action.shape == raw.shape == (2000, 2)
    assert float(action[:, 0].min()) >= -1.0 and float(action[:, 0].max()) <= 1.0
    assert float(action[:, 1].min()) >= 0.0 and float(action[:, 1].max()) <= 0.5
    assert float(jnp.mean(raw[:, 0] > 1.0)) > 0.3  # raw samples pass the bound; actions do not
    np.testing.assert_array_equal(np.asarray(action), np.clip(raw, [-1.0, 0.0], [1.0, 0.5]))
    # log σ is clipped to [LOG_STD_MIN, LOG_STD_MAX]: the second component's σ is e^2
    assert float(jnp.std(raw[:, 1])) == pytest.approx(np.exp(LOG_STD_MAX), rel=0.1)
    want = (norm.logpdf(raw[:, 0], mean[0], 1.0)
            + norm.logpdf(raw[:, 1], mean[1], np.exp(LOG_STD_MAX)))
    np.testing.assert_allclose(np.asarray(head.log_prob(out, raw)), np.asarray(want),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(head.greedy(out[:1]))[0], mean, rtol=1e-6)
    far = float(head.greedy(jnp.array([50.0, -30.0, LOG_STD_MIN, 0.0]))[0])
    assert 0.99 < far <= 1.0  # the mean never leaves the Box


def test_categorical_learners_still_refuse_continuous_actions() -> None:
    from privrl.config import ConfigError
    from privrl.systems.fedpg.algorithm import FedPG
    from privrl.systems.fedpg.config import FedPGConfig

    with pytest.raises(ConfigError, match="DP-REINFORCE only"):
        FedPG(FedPGConfig(env="gymnax:Pendulum-v1", max_episode_steps=10, budget=12))
    with pytest.raises(ConfigError, match="DP-REINFORCE only"):
        make_task("gymnasium:Pendulum-v1").num_actions  # noqa: B018


def test_dp_reinforce_refuses_continuous_actions_on_the_host() -> None:
    from privrl.config import ConfigError
    from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

    with pytest.raises(ConfigError, match="gymnax tasks only"):
        Reinforce(ReinforceConfig(env="gymnasium:Pendulum-v1"))


@struct.dataclass
class AimState(environment.EnvState):
    time: int


@struct.dataclass
class AimParams(environment.EnvParams):
    max_steps_in_episode: int = 10


class Aim(environment.Environment[AimState, AimParams]):
    """Ten steps; each pays 1 − (a − 0.5)², a ∈ [−1, 1]: the best action is 0.5 (return 10)."""

    @property
    def default_params(self) -> AimParams:
        return AimParams()

    def step_env(self, key: Any, state: AimState, action: Any, params: AimParams) -> Any:
        state = AimState(time=state.time + 1)
        reward = 1.0 - jnp.sum(jnp.square(action - 0.5))
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def reset_env(self, key: Any, params: AimParams) -> Any:
        state = AimState(time=0)
        return self.get_obs(state), state

    def get_obs(self, state: AimState, params: Any = None, key: Any = None) -> jax.Array:
        return jnp.ones((1,), jnp.float32)

    def is_terminated(self, state: AimState, params: AimParams) -> jax.Array:
        return state.time >= params.max_steps_in_episode

    def action_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(1.0, 1.0, (1,), jnp.float32)


@pytest.mark.learning(xla_optimize=False)
def test_dp_reinforce_learns_a_continuous_action(tmp_path) -> None:
    """The untrained Gaussian (μ ≈ 0, σ ≈ 1, clipped) returns about 5.3 per 10-step episode;
    DP-REINFORCE with clipped per-episode gradients (no baseline, as the slides') moves the
    mean towards 0.5: greedy returns above 8 (10 at best). Actions stay in the Box."""
    from privrl.envs.task import Task
    from privrl.policy import load_policy
    from privrl.systems.dpsgd_rl.local import run_episodic, save
    from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

    env = Aim()
    task = Task(env, env.default_params, "aim")
    cfg = ReinforceConfig(dp=True, noise_multiplier=0.0, clip=1.0, episodes=150,
                          batch_episodes=4, learning_rate=0.003, normalize_returns=False,
                          seed=0)
    algo = Reinforce.settings_algorithm([cfg], task)
    out = run_episodic(algo, "dp-reinforce")
    assert out.config.max_episode_steps == 10
    train = out.train_returns[0]
    assert float(train[:10].mean()) < 6.5
    assert float(train[-20:].mean()) > 8.0 and float(out.eval_returns[0, -20:].mean()) > 8.0
    # one batch of the trained policy: the actions the environment got lie in [−1, 1]
    state = algo.init(jax.random.key(1))
    traj = algo.episodes.rollout(lambda: algo.env, algo.task.agents_params(
        jax.random.key(2), jnp.arange(4)), algo.act, state.theta, jax.random.key(3), 4,
        jnp.ones(4, bool), None)
    assert traj.actions.shape == (10, 4, 1) and float(jnp.abs(traj.actions).max()) <= 1.0
    # the saved policy (policy.npz) acts with the same head: its mean, float32, in the Box
    save(out, tmp_path / "run")
    policy = load_policy(tmp_path / "run")
    assert policy.action_head == Gaussian((-1.0,), (1.0,)) and policy.num_actions is None
    greedy = policy.act(np.ones(1, np.float32))
    assert greedy.dtype == np.float32 and greedy.shape == (1,)
    assert 10 * (1 - (float(greedy[0]) - 0.5) ** 2) > 8.0  # the greedy return the run had
    sampled = policy.act(np.ones((64, 1), np.float32), key=0)
    assert sampled.shape == (64, 1) and float(np.abs(sampled).max()) <= 1.0
