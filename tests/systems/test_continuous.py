"""Continuous actions (issue 39) in PGC-A3C and FedPG-Cen/Dec: a Box task runs through the
Gaussian head (gymnax and Gymnasium), and its run directory's policy loads, acts in the Box and
evaluates."""

from __future__ import annotations

import numpy as np
import pytest

import privrl
from privrl.nets.heads import Gaussian
from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig


def _config(system: str, env: str) -> object:
    if system == "pgc-a3c":
        return PGCA3CConfig.from_preset("continuous", env=env, mechanism="none",
                                        submissions=18, max_episode_steps=12)
    # FedPG-Cen: the run of tests/systems/fedpg/test_cli.py's continuous preset test (Pendulum,
    # 2 agents, 16 episodes of 20 steps), whose program one of the two finds in the persistent
    # compilation cache
    return FedPGConfig.from_preset("continuous", algorithm=system.removeprefix("fedpg-"),
                                   env=env, budget=16, agents=2, max_episode_steps=20)


# Two Box tasks of other bounds ([-1, 1] and [-2, 2]), one for each system's head.
@pytest.mark.parametrize("system,env", [
    ("pgc-a3c", "gymnax:MountainCarContinuous-v0"), ("fedpg-cen", "gymnax:Pendulum-v1")])
def test_a_continuous_run_writes_a_policy_that_loads_acts_and_evaluates(system, env, tmp_path):
    out = tmp_path / "run"
    cfg = _config(system, env)
    run = (privrl.run_pgc_a3c if system == "pgc-a3c" else privrl.run_fedpg)(cfg, out=out)
    returns = run.scores if system == "pgc-a3c" else run.mean_return
    assert np.isfinite(returns[0]).any()
    policy = privrl.load_policy(out)
    box = (-2.0, 2.0) if "Pendulum" in env else (-1.0, 1.0)
    assert policy.action_head == Gaussian((box[0],), (box[1],)) and policy.num_actions is None
    assert policy.description["head"] == ("gaussian,value" if system == "pgc-a3c"
                                          else "gaussian")
    assert policy.description["model"]["log_std"] == "parameter"
    greedy = policy.act(np.zeros(policy.obs_dim, np.float32))
    assert greedy.dtype == np.float32 and greedy.shape == (1,)
    sampled = policy.act(np.zeros((200, policy.obs_dim), np.float32), key=0)
    assert sampled.shape == (200, 1) and box[0] <= sampled.min() and sampled.max() <= box[1]
    # σ: the uniform's (the Box's width / √12): samples spread over the Box
    assert len(np.unique(sampled)) > 100
    summary = privrl.evaluate_run(out, episodes=2).summary()
    assert np.isfinite(summary["mean_return"])


def test_gymnasium_host_rollouts_step_box_actions() -> None:
    """A Gymnasium Box task's host rollout records the clipped float actions the environment
    got, (T, n, d), and the policy's unclipped samples beside them (what the loss uses)."""
    import jax
    import jax.numpy as jnp

    from privrl.envs.task import make_task

    task = make_task("gymnasium:Pendulum-v1").with_max_steps(5)
    head = task.head

    def policy(key, obs):  # σ = e² = 7.4: most samples leave [−2, 2]
        out = jnp.concatenate([jnp.zeros((obs.shape[0], 1)), jnp.full((obs.shape[0], 1), 2.0)],
                              axis=-1)
        return head.sample(key, out)

    traj = task.rollout(task.agents_params(jax.random.key(0), jnp.arange(3)), jax.jit(policy),
                        jax.random.key(1), 3, 5)
    assert traj.actions.dtype == np.float32 and traj.actions.shape == (5, 3, 1)
    assert traj.aux.shape == (5, 3, 1) and np.abs(traj.aux).max() > 2.0
    np.testing.assert_array_equal(traj.actions, np.clip(traj.aux, -2.0, 2.0))
    assert traj.mask.sum() == 15 and np.all(traj.rewards <= 0.0)


def test_a_gymnasium_box_run_survives_a_round_where_no_agent_plays(tmp_path) -> None:
    """A Gymnasium Box task's run whose last chunk runs past the cap (rounds where no agent
    plays: 27 submissions of P = 9 agents are 3 rounds, run 2 per chunk) trains and writes its
    directory. Such a round's host rollout took no step and once returned no unclipped samples,
    so the Gaussian head's log-probability failed (issue 50: `privrl run pgc-a3c --env
    gymnasium:Pendulum-v1 --preset continuous` crashed after training)."""
    cfg = PGCA3CConfig.from_preset("continuous", env="gymnasium:Pendulum-v1", mechanism="none",
                                   submissions=27, max_episode_steps=4)
    assert cfg.parallel_agents == 9
    run = privrl.run_pgc_a3c(cfg, chunk_rounds=2, out=tmp_path / "run")
    assert run.scores.shape == (1, 27) and np.isfinite(run.scores).all()
    assert (tmp_path / "run" / "policy.npz").is_file()


def test_a_host_rollout_where_no_environment_steps_has_a_steps_shapes() -> None:
    """Every environment inactive: the actions and aux buffers (zeros) still have the shapes a
    step gives them, for one trial and for trials together."""
    import jax
    import jax.numpy as jnp

    from privrl.envs.task import make_task

    task = make_task("gymnasium:Pendulum-v1").with_max_steps(3)

    def policy(key, obs):
        return jnp.zeros((*obs.shape[:-1], 1)), jnp.ones((*obs.shape[:-1], 1))

    one = task.rollout(task.agents_params(jax.random.key(0), jnp.arange(2)), policy,
                       jax.random.key(1), 2, 3, active=np.zeros(2, bool))
    assert one.actions.shape == one.aux.shape == (3, 2, 1) and one.mask.sum() == 0
    params = jax.tree_util.tree_map(lambda x: x[None],
                                    task.agents_params(jax.random.key(0), jnp.arange(2)))
    trials = task.rollout_trials(params, policy, [jax.random.key(1)], 2, 3,
                                 active=np.zeros((1, 2), bool))
    assert trials.actions.shape == trials.aux.shape == (1, 3, 2, 1)
    assert trials.actions.dtype == np.float32 and not trials.aux.any()


def test_dp_reinforce_continuous_preset_starts_uniform_and_its_policy_loads(tmp_path) -> None:
    """DP-REINFORCE's `continuous` preset starts at the Box's centre with the uniform's σ in
    every state (the paper's Glorot start does not: its greedy actions sit near a bound in
    many states, below random on Pendulum); its state-free log-std round-trips policy.npz."""
    from functools import partial

    import jax

    from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

    obs = np.random.default_rng(0).uniform(-8, 8, (64, 3)).astype(np.float32)
    fields = dict(env="gymnax:Pendulum-v1", episodes=2, batch_episodes=2, max_episode_steps=12)
    algo = Reinforce(ReinforceConfig.from_preset("continuous", **fields))

    @partial(jax.jit, static_argnums=0)  # jitted whole, not op by op
    def start(model):  # the start θ and its outputs on `obs`
        theta = model.init(jax.random.key(0))
        return theta, model.apply(theta, obs)

    theta, out = map(np.asarray, start(algo.model))
    np.testing.assert_array_equal(out[:, 0], 0.0)  # the mean: the Box's centre
    np.testing.assert_allclose(out[:, 1], np.log(4 / np.sqrt(12)), rtol=1e-6)
    paper = Reinforce(ReinforceConfig(**fields))
    assert np.abs(np.asarray(start(paper.model)[1])[:, 0]).max() > 0.5
    moved = theta + np.random.default_rng(1).normal(0, 0.1, theta.shape).astype(np.float32)
    algo.saved_policy("dp-reinforce", moved[None]).write(tmp_path / "policy.npz")
    policy = privrl.load_policy(tmp_path)
    assert policy.description["model"]["log_std"] == "parameter"
    assert policy.action_head == Gaussian((-2.0,), (2.0,))
    np.testing.assert_allclose(policy.act(obs[:4]), np.asarray(algo.greedy(moved, None,
                                                                            obs[:4])),
                               rtol=1e-5)
