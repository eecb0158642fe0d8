"""The task owns its episode (issue 39): a goal-terminating chain with its own 40-step limit
trains under that limit and its true reward with PGC-A3C's tuned preset, FedPG-Cen and
DP-REINFORCE, and each learns it (a clear margin over a random policy). CartPole's shaping and
targets stay the CartPole task's."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from privrl.envs.rollout import rollout_episodes
from privrl.envs.task import Task

LENGTH = 8  # positions 0..7, the goal the last: 7 steps at best
STEP, GOAL, LIMIT = -0.02, 1.0, 40
BEST = GOAL + STEP * (LENGTH - 2)  # 0.88: six steps of −0.02, then the goal's +1


@struct.dataclass
class ChainState(environment.EnvState):
    pos: jax.Array
    time: int


@struct.dataclass
class ChainParams(environment.EnvParams):
    max_steps_in_episode: int = LIMIT


class Chain(environment.Environment[ChainState, ChainParams]):
    """Start at 0; action 1 moves right, 0 left; +1 on reaching the goal, which ends the
    episode, −0.02 on every other step; the task's own limit: 40 steps."""

    @property
    def default_params(self) -> ChainParams:
        return ChainParams()

    def step_env(self, key: Any, state: ChainState, action: Any, params: ChainParams) -> Any:
        pos = jnp.clip(state.pos + jnp.where(action == 1, 1, -1), 0, LENGTH - 1)
        state = ChainState(pos=pos, time=state.time + 1)
        reward = jnp.where(pos == LENGTH - 1, GOAL, STEP)
        return self.get_obs(state), state, reward, self.is_terminated(state, params), {}

    def reset_env(self, key: Any, params: ChainParams) -> Any:
        state = ChainState(pos=jnp.int32(0), time=0)
        return self.get_obs(state), state

    def get_obs(self, state: ChainState, params: Any = None, key: Any = None) -> jax.Array:
        return jax.nn.one_hot(state.pos, LENGTH)

    def is_terminated(self, state: ChainState, params: ChainParams) -> jax.Array:
        return state.pos == LENGTH - 1

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (LENGTH,), jnp.float32)


@pytest.fixture(scope="module")
def chain() -> Task:
    env = Chain()
    return Task(env, env.default_params, "chain")


@pytest.fixture(scope="module")
def random_return(chain: Task) -> float:
    """A uniformly random policy's mean true return in the task's own 40-step episodes
    (about −0.16: it reaches the goal in under half of them). One jitted program: op by op,
    each primitive would compile a program of its own."""
    @jax.jit
    def mean_return(key_params: jax.Array, key_roll: jax.Array) -> jax.Array:
        params = chain.agents_params(key_params, jnp.arange(4000))
        traj = rollout_episodes(chain.env, params,
                                lambda k, o: jax.random.randint(k, o.shape[:1], 0, 2),
                                key_roll, 4000, LIMIT)
        return jnp.mean(jnp.sum(traj.rewards, 0))

    return float(mean_return(jax.random.key(0), jax.random.key(1)))


def test_the_task_states_its_episode(chain: Task, random_return: float) -> None:
    assert chain.episode_steps == LIMIT and chain.target is None and chain.shaping is None
    assert chain.with_max_steps(12).episode_steps == 12
    assert -0.3 < random_return < 0.0  # the margin the learning tests are read against


@pytest.mark.learning(xla_optimize=False)
def test_pgc_a3c_tuned_learns_the_task_under_its_own_episode(chain: Task, random_return: float,
                                                              tmp_path) -> None:
    """The tuned preset's "shaped" reward is the task's own here (CartPole's failure shaping
    taught it to avoid the goal); episodes are the task's 40 steps; no target, no FST."""
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
    from privrl.systems.pgc_a3c.local import run_pgc_a3c, save

    cfg = PGCA3CConfig.from_preset("tuned", mechanism="none", submissions=900, seed=0)
    out = run_pgc_a3c(cfg, task=chain)
    assert (out.config.reward, out.config.max_episode_steps) == ("env", LIMIT)
    assert out.config.target_score is None
    assert out.scores.min() >= STEP * LIMIT - 1e-6  # true returns of ≤ 40-step episodes
    final = float(out.scores[:, -200:].mean())
    assert final > random_return + 0.6 and final <= BEST + 1e-6
    summary = save(out, tmp_path / "run")  # no target: no FST, no target line on the plot
    assert summary["success_ratio"] is None and summary["median_fst"] is None
    assert (tmp_path / "run" / "plots" / "scores.png").exists()


@pytest.mark.learning(xla_optimize=False)
def test_fedpg_cen_learns_the_task_under_its_own_episode(chain: Task, random_return: float,
                                                         tmp_path) -> None:
    from privrl.systems.fedpg.config import FedPGConfig
    from privrl.systems.fedpg.local import run_fedpg, save

    cfg = FedPGConfig.from_preset("paper", algorithm="cen", agents=4, budget=100,
                                  learning_rate=0.03, seed=0)
    run = run_fedpg(cfg, task=chain)
    assert run.config.max_episode_steps == LIMIT and run.config.target_return is None
    final = float(np.mean(run.mean_return[0, -2:]))
    assert final > random_return + 0.6
    assert save(run, tmp_path / "run")["reached_target"] is None
    assert (tmp_path / "run" / "plots" / "returns.png").exists()


@pytest.mark.learning(xla_optimize=False)
def test_dp_reinforce_learns_and_evaluates_under_the_tasks_own_episode(
        chain: Task, random_return: float, tmp_path) -> None:
    """Greedy evaluation plays the task's 40-step episodes (it played 500 on main, returning
    −10, impossible in this task); no target: nothing is "solved", the run never stops early."""
    from privrl.systems.dpsgd_rl.local import run_episodic, save
    from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

    cfg = ReinforceConfig(episodes=100, seed=0)
    out = run_episodic(Reinforce.settings_algorithm([cfg], chain), "dp-reinforce")
    assert out.config.max_episode_steps == LIMIT and out.config.solve_threshold is None
    assert out.eval_returns.min() >= STEP * LIMIT - 1e-6
    assert np.isfinite(out.train_returns).sum() == 100  # no target: it ran every episode
    assert out.eval_returns[0, 0] < random_return  # the untrained greedy policy fails
    assert float(out.eval_returns[0, -20:].mean()) > random_return + 0.6
    assert save(out, tmp_path / "run")["solved_seeds"] is None
    assert (tmp_path / "run" / "plots" / "eval_returns.png").exists()
