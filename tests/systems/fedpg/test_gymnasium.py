"""FedPG-Cen and FedPG-Dec on Gymnasium tasks: the host round is the jitted round with its
episodes played on the host (same keys, same agent-side code), the host sampler gives the jitted
sampler's arrays on the twin walkers (examples/byo_env.py, examples/byo_gymnasium.py), true
(negative) rewards reach the gradient and the returns, and the command line runs or refuses in
one line (fedpg-dec on Ray, a node's host round: tests/systems/fedpg/test_ray.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from privrl import main as cli
from privrl.envs.task import PrivateParam, Task, make_task
from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig
from privrl.systems.fedpg.local import run_fedpg

DRIFT = PrivateParam("drift", 0.6, 1.4)


def _cfg(**kw) -> FedPGConfig:
    base = dict(agents=3, budget=10, batch_min=2, batch_max=3, minibatch=1, hidden=(4,),
                max_episode_steps=12)
    return FedPGConfig(**{**base, **kw})


def _raw(a: jax.Array) -> np.ndarray:
    return np.asarray(jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key)
                      else a)


class Forced(nn.Module):
    """Two steps right, one back (by the step count in obs[1]) whatever θ: a margin of 50 in
    the logits, which Gumbel noise (spread < 20 in float32) never overturns, so the jitted and
    the host rollout (different action keys) play the same episodes."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        t = jnp.round(obs[1] * 30.0).astype(jnp.int32)
        return nn.Dense(2)(obs) + 50.0 * jax.nn.one_hot((t % 3 != 2).astype(jnp.int32), 2)


@pytest.fixture()
def walkers(load_example) -> tuple[Task, Task]:
    gx = load_example("byo_env")
    load_example("byo_gymnasium")
    env = gx.Walk()
    return (Task(env, env.default_params, "byo_env:Walk", (DRIFT,)),
            make_task("byo_gymnasium:Walk", [DRIFT]))


def test_host_sample_plays_the_jitted_samplers_episodes(walkers) -> None:
    """The same walker in gymnax and Gymnasium, the same private drifts and policy: `sample`
    and `host_sample` give the same Episodes (M learners × n episodes, padded to T)."""
    jx = FedPG(_cfg(), task=walkers[0], model=Forced())
    gym = FedPG(_cfg(), task=walkers[1], model=Forced())
    thetas = jnp.stack([jx.model.init(jax.random.key(0))] * 4)
    live = jnp.array([[True, True], [True, False], [True, True], [False, True]])
    key, k_env = jax.random.key(5), jax.random.key(7)  # drifts 1.10, 0.89, 0.63, 1.14
    ids = jnp.arange(4)
    a = jx.sample(thetas, jx.env_params_of(k_env, ids), live, key)
    b = gym.host_sample(thetas, gym.env_params_of(k_env, ids), live, key)
    for name in ("actions", "mask", "live", "length", "rewards"):
        np.testing.assert_array_equal(np.asarray(getattr(b, name)),
                                      np.asarray(getattr(a, name)), err_msg=name)
    # Gymnasium moves x in float64, gymnax in float32: observations agree to float32 rounding.
    np.testing.assert_allclose(np.asarray(b.obs), np.asarray(a.obs), atol=1e-6)
    length = np.asarray(a.length)[np.asarray(live)]
    assert (length < 12).any() and (length == 12).any()  # goal reached and step cap, both
    assert np.asarray(a.length)[1, 1] == 0 == np.asarray(a.length)[3, 0]  # not played


def test_host_round_is_the_jitted_round(walkers) -> None:
    """On a gymnax task, `host_round` with the jitted sampler in place of the host one runs
    the jitted round's computation step by step (plan, the agents' Gaussian reports, N_t
    SCSG steps each sampling with the current θ, finish): the same state to float32
    rounding. A finished trial (live False) is left unchanged."""
    cfg = _cfg(mechanism="gaussian", noise_multiplier=1.0, clip=1.0, inner_steps=3)
    algo = FedPG(cfg, task=walkers[0])
    algo.host_sample = jax.jit(algo.sample)  # the host path's only host part, jitted here
    state = algo.init(jax.random.key(1))
    mixing = jnp.eye(1)
    live = jnp.asarray(True)
    want, want_info = jax.jit(algo.round)(state, mixing, live)
    got, info = algo.host_round(state, mixing, live)
    assert int(got.rounds) == 1 and np.all(np.asarray(got.used) == np.asarray(want.used))
    assert float(info.inner_steps) == 3.0 and float(info.batch) == float(want_info.batch)
    np.testing.assert_allclose(float(info.mean_return), float(want_info.mean_return))
    moved = np.abs(np.asarray(want.gossip.x - state.gossip.x)).max()
    assert moved > 1e-4  # three Adam steps of 1e-3
    np.testing.assert_allclose(np.asarray(got.gossip.x), np.asarray(want.gossip.x),
                               rtol=1e-5, atol=1e-6)
    same, _ = algo.host_round(got, mixing, jnp.asarray(False))
    for a, b in zip(jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(got),
                    strict=True):
        np.testing.assert_array_equal(_raw(a), _raw(b))


def test_host_dec_round_is_the_jitted_dec_round(walkers) -> None:
    """FedPG-Dec on the Gymnasium walker: `host_round` with each node's jitted `sample` (its
    own key, on the gymnax twin) in place of the host sampler runs the jitted round on the
    gymnax walker step by step (every node's draws, B_t episodes, μ_tᵏ, its own N_t SCSG
    steps, Gaussian release, push-sum step and mixing): the same state to float32 rounding.
    A finished trial (live False) is left unchanged; with the host sampler itself, the
    walker's true (negative) rewards are the round's returns."""
    cfg = _cfg(algorithm="dec", mechanism="gaussian", noise_multiplier=1.0, clip=1.0)
    jx, gym = FedPG(cfg, task=walkers[0]), FedPG(cfg, task=walkers[1])
    state = jx.init(jax.random.key(1))
    env = jx.env_params_of(state.key, jnp.arange(cfg.agents))  # the same drifts as gym's

    def sample_nodes(thetas, _, live, keys):  # each node's own `sample`, as dec_node_update
        one = lambda t: jax.tree_util.tree_map(lambda a: a[None], t)  # noqa: E731
        ep = jax.vmap(lambda th, e, lv, k: jx.sample(th[None], one(e), lv[None], k))(
            thetas, env, live, keys)
        return jax.tree_util.tree_map(lambda a: a[:, 0], ep)

    gym.host_sample_nodes = jax.jit(sample_nodes)  # the host path's only host part, jitted
    mixing = jnp.asarray(jx.topology.matrix(0), jnp.float32)
    live = jnp.asarray(True)
    want, want_info = jax.jit(jx.round)(state, mixing, live)
    got, info = gym.host_round(state, mixing, live)
    steps = np.asarray(want.used) - np.asarray(state.used)
    assert len(set(steps.tolist())) > 1  # the nodes' rounds differ in length (B_t + N_t)
    np.testing.assert_array_equal(np.asarray(got.used), np.asarray(want.used))
    for name in ("batch", "inner_steps", "participants", "mean_return"):
        np.testing.assert_allclose(float(getattr(info, name)),
                                   float(getattr(want_info, name)), err_msg=name)
    assert np.abs(np.asarray(want.gossip.x - state.gossip.x)).max() > 1e-3  # noise and steps
    for a, b in zip(jax.tree_util.tree_leaves((got.gossip, got.opt_state)),
                    jax.tree_util.tree_leaves((want.gossip, want.opt_state)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    same, _ = gym.host_round(got, mixing, jnp.asarray(False))
    for a, b in zip(jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(got),
                    strict=True):
        np.testing.assert_array_equal(_raw(a), _raw(b))
    del gym.host_sample_nodes  # the Gymnasium walker itself: -1 a step, -2 a step back
    new, info = gym.host_round(got, mixing, live)
    # Every step costs 1 or 2 and at most 12 are played: a mean return is in [−24, −1].
    assert -24.0 <= float(info.mean_return) <= -1.0 and int(new.rounds) == 2
    assert np.all(np.asarray(new.used) > np.asarray(got.used))
    assert np.abs(np.asarray(new.gossip.x - got.gossip.x)).max() > 1e-3


def test_host_dec_node_update_is_the_jitted_node_update(walkers) -> None:
    """A Ray node's round on a Gymnasium task (`host_dec_node_update`: one node, its episodes
    on the host) with its jitted `sample` on the gymnax twin in place of the host sampler is
    `dec_node_update` on the gymnax walker (the Ray node's round on a gymnax task): the same
    draws, B_t episodes, μ_tᵏ, N_t SCSG steps and Gaussian release, for each node, with and
    without a secret noise key. With the host sampler itself the walker's rewards come back."""
    cfg = _cfg(algorithm="dec", mechanism="gaussian", noise_multiplier=1.0, clip=1.0)
    jx, gym = FedPG(cfg, task=walkers[0]), FedPG(cfg, task=walkers[1])
    state = jx.init(jax.random.key(1))
    z, env, keys, _ = jx.dec_inputs(state, jax.random.key(2))
    at = lambda tree, i: jax.tree_util.tree_map(lambda a: a[i], tree)  # noqa: E731

    def sample_nodes(thetas, env_one, live, keys):  # the one node's own jitted `sample`
        return jx.sample(thetas, env_one, live, keys[0])

    gym.host_sample_nodes = jax.jit(sample_nodes)
    update = jax.jit(jx.dec_node_update)
    live = jnp.asarray(True)
    steps = set()
    for i in range(cfg.agents):
        noise = None if i == 0 else jax.random.key(10 + i)
        args = (z[i], at(state.opt_state, i), at(env, i), keys[i], live, noise)
        want, got = update(*args), gym.host_dec_node_update(*args)
        steps.add(int(want.steps))
        assert int(got.batch) == int(want.batch) and int(got.steps) == int(want.steps)
        np.testing.assert_allclose(float(got.mean_return), float(want.mean_return))
        assert np.abs(np.asarray(want.report.value)).max() > 1e-3  # noise and steps
        for a, b in zip(jax.tree_util.tree_leaves((got.report.value, got.opt_state)),
                        jax.tree_util.tree_leaves((want.report.value, want.opt_state)),
                        strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert len(steps) > 1  # the nodes' rounds differ in length
    del gym.host_sample_nodes  # the Gymnasium walker itself: -1 a step, -2 a step back
    gym_env = gym.env_params_of(state.key, jnp.arange(cfg.agents))  # the same drifts
    upd = gym.host_dec_node_update(*args[:2], at(gym_env, i), *args[3:])
    assert -24.0 <= float(upd.mean_return) <= -1.0


def test_gymnasium_true_rewards_reach_the_gradient_and_the_returns(walkers) -> None:
    """The Gymnasium walker's rewards (−1 a step, −2 a step back) are FedPG's: negating them
    negates the gradient (whitening is odd), and a run's mean returns are the walker's."""
    gym = FedPG(_cfg(), task=walkers[1])
    neg = FedPG(_cfg(), task=replace(walkers[1], reward_transform=lambda r: -r))
    theta = gym.model.init(jax.random.key(0))
    thetas = jnp.stack([theta, theta])
    ep = gym.host_sample(thetas, gym.env_params_of(jax.random.key(1), jnp.arange(2)),
                         jnp.ones((2, 3), bool), jax.random.key(2))
    want = np.where(np.asarray(ep.actions) == 1, -1.0, -2.0) * np.asarray(ep.mask)
    np.testing.assert_array_equal(np.asarray(ep.rewards), want)
    g, g_neg = gym.gradients(thetas, ep), neg.gradients(thetas, ep)
    assert float(jnp.linalg.norm(g)) > 1e-3
    np.testing.assert_allclose(np.asarray(g_neg), -np.asarray(g), rtol=1e-5, atol=1e-7)
    run = run_fedpg(_cfg(trials=2), task=walkers[1])
    ret = run.mean_return[np.isfinite(run.mean_return)]
    # Every step costs 1 or 2 and at most 12 are played: a return is in [−24, −1].
    assert run.rounds_run >= 2 and np.all((ret <= -1.0) & (ret >= -24.0)), ret
    assert np.all(run.used.mean(axis=1) >= 10)  # every trial spent its budget


@pytest.mark.parametrize("cmd", ["fedpg-cen", "fedpg-dec"])
def test_gymnasium_cartpole_from_the_command_line(cmd, tmp_path) -> None:
    out = tmp_path / "run"
    assert cli.main(["run", cmd, "--env", "gymnasium:CartPole-v1", "--private",
                     "gravity=9.7,9.9", "--agents", "2", "--episodes", "2", "--batch-min", "1",
                     "--batch-max", "1", "--minibatch", "1", "--out", str(out),
                     "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["algorithm"] == cmd[-3:] and cfg["env"] == "gymnasium:CartPole-v1"
    assert cfg["private_params"] == ["gravity=9.7,9.9"]
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert rows and all(float(r.split(",")[-1]) >= 1 for r in rows)  # CartPole: +1 a step


@pytest.mark.parametrize("cmd, args, option", [
    ("fedpg-cen", ["--env", "gymnasium:Nope-v9"], "--env"),
    ("fedpg-cen", ["--env", "gymnasium:Pendulum-v1"], "--env"),  # continuous actions
    ("fedpg-cen", ["--env", "gymnasium:CartPole-v1", "--private", "nope=1:2"], "--private"),
])
def test_gymnasium_cli_errors_are_one_line(cmd, args, option, fails_in_one_line) -> None:
    fails_in_one_line(cmd, args, option)
