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
    actions: int = 3

    @nn.compact
    def __call__(self, x):
        h = nn.tanh(nn.Dense(4)(x))
        return nn.Dense(self.actions)(h), nn.Dense(1)(h)[..., 0]


def _cfg(**kw):
    return PGCA3CConfig(parallel_agents=3, submissions=6, max_episode_steps=12, **kw)


def test_acrobot_task_with_private_masses_and_user_model() -> None:
    task = make_task("gymnax:Acrobot-v1", [PrivateParam("link_mass_1", 0.8, 1.2)])
    algo = PGCA3C(_cfg(), task=task.with_max_steps(12), model=TinyAC())
    assert algo.dim == 6 * 4 + 4 + 4 * 3 + 3 + 4 + 1  # sized from Acrobot's spaces
    assert algo.config.env == "gymnax:Acrobot-v1"
    assert algo.config.private_params == ("link_mass_1=0.8:1.2",)
    # one trial (init jitted: one program, not one per operation)
    state = jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(0), 1))
    state, scores = jax.jit(lambda s: algo.run_rounds(s, 2))(state)
    # never swung up: 12 steps at -1 each, the true return (not the length)
    assert int(state.submitted[0]) == 6 and np.all(np.asarray(scores) == -12)
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

    @jax.jit  # one program, not one per operation
    def play():
        params = algo.task.agents_params(jax.random.key(0), jnp.arange(2))
        return rollout_episodes(algo.env, params, lambda k, o: jnp.zeros(2, jnp.int32),
                                jax.random.key(1), 2, 12)

    traj = play()
    np.testing.assert_array_equal(np.asarray(algo.rewards(traj)), -np.asarray(traj.mask))
    np.testing.assert_array_equal(np.asarray(step.rewards(traj)), np.asarray(traj.mask))


def test_gymnasium_task_reports_and_scores_true_returns(load_example) -> None:
    """A user's Gymnasium environment (examples/byo_gymnasium.py: -1 a step, -2 a step back)
    with private drifts: agents play on the host, the ledger counts every report, and each
    score is the episode's true (negative) return."""
    from privrl.systems.pgc_a3c.local import run_pgc_a3c

    load_example("byo_gymnasium")
    task = make_task("byo_gymnasium:Walk", [PrivateParam("drift", 0.6, 1.4)])
    cfg = PGCA3CConfig(parallel_agents=3, submissions=7, max_episode_steps=12, trials=2,
                       mechanism="laplace", epsilon=5.0)
    out = run_pgc_a3c(cfg, task=task, model=TinyAC(actions=2))
    assert out.config.env == "byo_gymnasium:Walk"
    assert out.config.private_params == ("drift=0.6:1.4",)
    assert out.scores.shape == (2, 7) and np.all(out.submitted == 7)
    assert out.ledger.num_reports == 14
    # Reaching x >= 5 takes at least 4 steps (drift <= 1.4): a return in [-24, -4], never a
    # length (positive) and never the NaN of "no submission".
    assert np.all((out.scores >= -24) & (out.scores <= -4)), out.scores
    assert np.all(np.isfinite(out.theta))


def test_gymnasium_cartpole_from_the_command_line(tmp_path) -> None:
    import json

    from privrl import main as cli

    out = tmp_path / "run"
    assert cli.main(["run", "pgc-a3c", "--env", "gymnasium:CartPole-v1", "--private",
                     "gravity=9.7,9.9", "--preset", "tuned", "--trials", "1", "--submissions",
                     "18", "--out", str(out), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["env"] == "gymnasium:CartPole-v1" and cfg["private_params"] == ["gravity=9.7,9.9"]
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    scores = [float(r.split(",")[2]) for r in rows]
    # CartPole: +1 a step, so a return is a whole number of steps (no fall takes < 5)
    assert len(scores) == 18 and all(s >= 5 and s == int(s) for s in scores)


def test_ray_agent_plays_a_gymnasium_episode_on_the_host() -> None:
    """The Ray runtime's agent (a plain class here, no cluster) on a Gymnasium task: the
    episode on the host, the report from the same jitted code; seeded noise replays exactly."""
    from privrl.systems.pgc_a3c.ray import AgentActor

    cfg = PGCA3CConfig(env="gymnasium:CartPole-v1", private_params=("gravity=9.7,9.9",),
                       submissions=4, noise="seeded")
    agent = AgentActor(cfg)
    assert agent.step.algo.task.host
    theta = np.asarray(agent.step.algo.init(jax.random.key(0)).agg.theta)
    sub, score = agent.run(theta, 1, 0)
    again, score_again = agent.run(theta, 1, 0)
    assert (sub.agent_id, sub.index) == (1, 0) and score == score_again
    assert score >= 5 and score == int(score)  # CartPole: the return is the length
    np.testing.assert_array_equal(np.asarray(sub.report.value), np.asarray(again.report.value))
    other, _ = agent.run(theta, 2, 0)  # another agent: another episode and report
    assert not np.array_equal(np.asarray(other.report.value), np.asarray(sub.report.value))


def test_a_round_with_its_episodes_played_outside_the_program_is_the_same_round() -> None:
    """`round` with a host source (its plan and settle jitted apart, the episodes played in
    between, as on a Gymnasium task) computes what the one-program round computes: here the
    source plays the gymnax episodes, jitted on their own, so both rounds see the same ones."""
    from privrl.systems.pgc_a3c.algorithm import JITTED_EPISODES

    class Outside:
        host = True
        play = staticmethod(jax.jit(JITTED_EPISODES.__call__, static_argnums=(0, 3)))

        def __call__(self, algo, theta, plans, group):
            return self.play(algo, theta, plans, group)

    algo = PGCA3C(PGCA3CConfig(mechanism="laplace", epsilon=5.0, parallel_agents=3,
                               submissions=9, max_episode_steps=12, hidden=4, trials=2))
    state = jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(0), 2))
    inside, s_in = jax.jit(lambda s: algo.run_rounds(s, 3))(state)
    outside, s_out = algo.run_rounds(state, 3, episodes=Outside())
    np.testing.assert_array_equal(np.asarray(s_out), np.asarray(s_in))
    np.testing.assert_array_equal(np.asarray(outside.submitted), [9, 9])
    np.testing.assert_allclose(np.asarray(outside.agg.theta), np.asarray(inside.agg.theta),
                               rtol=1e-5, atol=1e-7)
    assert not np.allclose(np.asarray(outside.agg.theta), np.asarray(state.agg.theta))
