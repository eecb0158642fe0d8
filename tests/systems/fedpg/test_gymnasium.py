"""FedPG-Cen and FedPG-Dec on Gymnasium tasks: the round composed on the host (its episode
source a `HostSource`) computes what the jitted round does (same keys, same pieces), the host
sampler gives the jitted sampler's arrays on the twin walkers (examples/byo_env.py,
examples/byo_gymnasium.py), true (negative) rewards reach the gradient and the returns, and
the command line runs or refuses in one line (fedpg-dec on Ray, a node's host round:
tests/systems/fedpg/test_ray.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from privrl import main as cli
from privrl.envs.task import PrivateParam, Task, make_task
from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig
from privrl.systems.fedpg.local import run_fedpg
from privrl.systems.fedpg.source import HostSource, JittedSource

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


@pytest.fixture(scope="module")
def walkers(walk) -> Iterator[tuple[Task, Task]]:
    """The twin walkers (conftest's `walk`, and examples/byo_gymnasium.py's, registered as its
    module while this module runs), shared by the module's tests (read only)."""
    spec = importlib.util.spec_from_file_location(
        "byo_gymnasium", Path(__file__).parents[3] / "examples" / "byo_gymnasium.py")
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "byo_gymnasium", module)
        spec.loader.exec_module(module)
        yield walk, make_task("byo_gymnasium:Walk", [DRIFT])


@pytest.fixture(scope="module")
def dec(walkers) -> tuple[FedPGConfig, FedPG, FedPG, HostSource]:
    """FedPG-Dec (Gaussian) on the gymnax and the Gymnasium walker, and the gymnax one's host
    twin: shared by the Dec tests (read only), so that the pieces each jits compile once."""
    cfg = _cfg(algorithm="dec", mechanism="gaussian", noise_multiplier=1.0, clip=1.0)
    jx, gym = FedPG(cfg, task=walkers[0]), FedPG(cfg, task=walkers[1])
    return cfg, jx, gym, _host_twin(jx)


def _host_twin(algo: FedPG) -> HostSource:
    """A host source for a gymnax task whose episodes are the jitted sampler's: the round
    composed on the host piece by piece (pieces jitted one by one, loops in Python), with the
    episodes the jitted round plays."""
    host = HostSource(algo.task, algo.act, algo.config.max_episode_steps)
    host.sample = jax.jit(algo.source.sample)  # the host path's only host part, jitted here
    return host


def _same(a, b, exact: bool = False) -> None:
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        if exact:
            np.testing.assert_array_equal(_raw(x), _raw(y))
        else:
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_host_source_plays_the_jitted_sources_episodes(walkers) -> None:
    """The same walker in gymnax and Gymnasium, the same private drifts and policy: the jitted
    source's and the host source's `sample` give the same Episodes (M learners × n episodes,
    padded to T)."""
    jx = FedPG(_cfg(), task=walkers[0], model=Forced())
    gym = FedPG(_cfg(), task=walkers[1], model=Forced())
    assert isinstance(jx.source, JittedSource) and isinstance(gym.source, HostSource)
    thetas = jnp.stack([jx.model.init(jax.random.key(0))] * 4)
    live = jnp.array([[True, True], [True, False], [True, True], [False, True]])
    key, k_env = jax.random.key(5), jax.random.key(7)  # drifts 1.10, 0.89, 0.63, 1.14
    ids = jnp.arange(4)
    a = jax.jit(jx.sample)(thetas, jx.env_params_of(k_env, ids), live, key)
    b = gym.sample(thetas, gym.env_params_of(k_env, ids), live, key)
    for name in ("actions", "mask", "live", "length", "rewards"):
        np.testing.assert_array_equal(np.asarray(getattr(b, name)),
                                      np.asarray(getattr(a, name)), err_msg=name)
    # Gymnasium moves x in float64, gymnax in float32: observations agree to float32 rounding.
    np.testing.assert_allclose(np.asarray(b.obs), np.asarray(a.obs), atol=1e-6)
    length = np.asarray(a.length)[np.asarray(live)]
    assert (length < 12).any() and (length == 12).any()  # goal reached and step cap, both
    assert np.asarray(a.length)[1, 1] == 0 == np.asarray(a.length)[3, 0]  # not played


def test_cen_round_on_the_host_is_the_jitted_round(walkers) -> None:
    """FedPG-Cen's one round composed on the host (`HostSource`, with the jitted sampler's
    episodes) is its jitted program (plan, the agents' Gaussian reports, N_t SCSG steps each
    sampling with the current θ, finish): the same state to float32 rounding. A finished
    trial (live False) is left unchanged."""
    cfg = _cfg(mechanism="gaussian", noise_multiplier=1.0, clip=1.0, inner_steps=3)
    algo = FedPG(cfg, task=walkers[0])
    host = _host_twin(algo)
    state = algo.init(jax.random.key(1))
    mixing = jnp.eye(1)
    live = jnp.asarray(True)
    want, want_info = jax.jit(algo.round)(state, mixing, live)
    got, info = algo.round(state, mixing, live, source=host)
    assert int(got.rounds) == 1 and np.all(np.asarray(got.used) == np.asarray(want.used))
    assert float(info.inner_steps) == 3.0 and float(info.batch) == float(want_info.batch)
    np.testing.assert_allclose(float(info.mean_return), float(want_info.mean_return))
    moved = np.abs(np.asarray(want.gossip.x - state.gossip.x)).max()
    assert moved > 1e-4  # three Adam steps of 1e-3
    _same((got.gossip, got.opt_state), (want.gossip, want.opt_state))
    same, _ = algo.round(got, mixing, jnp.asarray(False), source=host)
    _same(same, got, exact=True)


def test_dec_round_on_the_host_is_the_jitted_round(dec) -> None:
    """FedPG-Dec's one round composed on the host (every node in turn: its draws, B_t
    episodes, μ_tᵏ, its own N_t SCSG steps, Gaussian release; then the push-sum step and
    mixing), with the jitted sampler's episodes, is its jitted program: the same state to
    float32 rounding. A finished trial (live False) is left unchanged; on the Gymnasium
    walker itself, the walker's true (negative) rewards are the round's returns."""
    _, jx, gym, host = dec
    state = jx.init(jax.random.key(1))
    mixing = jnp.asarray(jx.topology.matrix(0), jnp.float32)
    live = jnp.asarray(True)
    want, want_info = jax.jit(jx.round)(state, mixing, live)
    got, info = jx.round(state, mixing, live, source=host)
    steps = np.asarray(want.used) - np.asarray(state.used)
    assert len(set(steps.tolist())) > 1  # the nodes' rounds differ in length (B_t + N_t)
    np.testing.assert_array_equal(np.asarray(got.used), np.asarray(want.used))
    for name in ("batch", "inner_steps", "participants", "mean_return"):
        np.testing.assert_allclose(float(getattr(info, name)),
                                   float(getattr(want_info, name)), err_msg=name)
    assert np.abs(np.asarray(want.gossip.x - state.gossip.x)).max() > 1e-3  # noise and steps
    _same((got.gossip, got.opt_state), (want.gossip, want.opt_state))
    same, _ = jx.round(got, mixing, jnp.asarray(False), source=host)
    _same(same, got, exact=True)
    new, info = gym.round(got, mixing, live)  # the Gymnasium walker: -1 a step, -2 back
    # Every step costs 1 or 2 and at most 12 are played: a mean return is in [−24, −1].
    assert -24.0 <= float(info.mean_return) <= -1.0 and int(new.rounds) == 2
    assert np.all(np.asarray(new.used) > np.asarray(got.used))
    assert np.abs(np.asarray(new.gossip.x - got.gossip.x)).max() > 1e-3


def test_dec_node_update_on_the_host_is_the_jitted_node_update(dec) -> None:
    """A Ray node's round (`DecRound.node_update`: one node) composed on the host, with the
    jitted sampler's episodes, is the jitted `dec_node_update` (a Ray node's round on a
    gymnax task): the same draws, B_t episodes, μ_tᵏ, N_t SCSG steps and Gaussian release,
    for each node, with and without a secret noise key. On the Gymnasium walker itself
    (`dec_node_update` with its host source) the walker's rewards come back."""
    cfg, jx, gym, host = dec
    state = jx.init(jax.random.key(1))
    z, env, keys, _ = jx.variant.inputs(state, jax.random.key(2))
    at = lambda tree, i: jax.tree_util.tree_map(lambda a: a[i], tree)  # noqa: E731
    update = jax.jit(jx.dec_node_update)
    live = jnp.asarray(True)
    steps = set()
    for i in range(cfg.agents):
        noise = None if i == 0 else jax.random.key(10 + i)
        args = (z[i], at(state.opt_state, i), at(env, i), keys[i], live, noise)
        want, got = update(*args), jx.variant.node_update(host, *args)
        steps.add(int(want.steps))
        assert int(got.batch) == int(want.batch) and int(got.steps) == int(want.steps)
        np.testing.assert_allclose(float(got.mean_return), float(want.mean_return))
        assert np.abs(np.asarray(want.report.value)).max() > 1e-3  # noise and steps
        _same((got.report.value, got.opt_state), (want.report.value, want.opt_state))
    assert len(steps) > 1  # the nodes' rounds differ in length
    gym_env = gym.env_params_of(state.key, jnp.arange(cfg.agents))  # the same drifts
    upd = gym.dec_node_update(*args[:2], at(gym_env, i), *args[3:])
    assert -24.0 <= float(upd.mean_return) <= -1.0


def test_a_ray_nodes_host_update_is_its_part_of_the_local_host_round(dec) -> None:
    """On the Gymnasium walker, what a Ray node computes for round t (`dec_node_update` from
    its own z_k, optimizer state, private environment and key fold_in(fold_in(trial key, t),
    k), as privrl.systems.fedpg.ray does) is node k's part of the local round: the local round
    is those updates, then the push-sum step and mixing."""
    cfg, _, gym, _ = dec
    state = gym.init(jax.random.key(1))
    mixing = jnp.asarray(gym.topology.matrix(0), jnp.float32)
    live = jnp.asarray(True)
    want, _ = gym.round(state, mixing, live)
    at = lambda tree, i: jax.tree_util.tree_map(lambda a: a[i], tree)  # noqa: E731
    z = np.asarray(state.gossip.x / state.gossip.w[:, None])
    updates = []
    for k in range(cfg.agents):
        env = at(gym.env_params_of(state.key, jnp.array([k])), 0)
        key = jax.random.fold_in(jax.random.fold_in(state.key, 0), k)
        updates.append(gym.dec_node_update(jnp.asarray(z[k]), at(state.opt_state, k), env,
                                           key, live))
    assert len({int(u.steps) for u in updates}) > 1  # the nodes' rounds differ in length
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *updates)
    got, _ = gym.variant.finish(state, stacked, mixing)
    _same((got.gossip, got.opt_state, got.used), (want.gossip, want.opt_state, want.used),
          exact=True)


def test_gymnasium_true_rewards_reach_the_gradient_and_the_returns(walkers, dec) -> None:
    """The Gymnasium walker's rewards (−1 a step, −2 a step back) are FedPG's: negating them
    negates the gradient (whitening is odd), and a run's mean returns are the walker's. The
    gradients are a Dec node's (the `dec` fixture's walker: one learner, B_t ≤ 3 episodes),
    through its source's pieces, which the Dec tests compiled at these shapes already; the
    gradient reads no mechanism or topology."""
    cfg, _, gym, _ = dec
    neg = FedPG(cfg, task=replace(walkers[1], reward_transform=lambda r: -r))
    thetas = gym.model.init(jax.random.key(0))[None]
    ep = gym.sample(thetas, gym.env_params_of(jax.random.key(1), jnp.arange(1)),
                    jnp.ones((1, cfg.batch_max), bool), jax.random.key(2))
    want = np.where(np.asarray(ep.actions) == 1, -1.0, -2.0) * np.asarray(ep.mask)
    np.testing.assert_array_equal(np.asarray(ep.rewards), want)
    g = gym.source.piece(gym.gradients)(thetas, ep)
    g_neg = neg.source.piece(neg.gradients)(thetas, ep)
    assert float(jnp.linalg.norm(g)) > 1e-3
    np.testing.assert_allclose(np.asarray(g_neg), -np.asarray(g), rtol=1e-5, atol=1e-7)
    run = run_fedpg(_cfg(trials=2), task=walkers[1])
    ret = run.mean_return[np.isfinite(run.mean_return)]
    # Every step costs 1 or 2 and at most 12 are played: a return is in [−24, −1].
    assert run.rounds_run >= 2 and np.all((ret <= -1.0) & (ret >= -24.0)), ret
    assert np.all(run.used.mean(axis=1) >= 10)  # every trial spent its budget


@pytest.mark.parametrize("cmd", ["fedpg-cen", "fedpg-dec"])
def test_gymnasium_cartpole_from_the_command_line(cmd, tmp_path) -> None:
    # a tiny network and 20-step episodes: the command's path to the host source is the test
    out = tmp_path / "run"
    assert cli.main(["run", cmd, "--env", "gymnasium:CartPole-v1", "--private",
                     "gravity=9.7,9.9", "--agents", "2", "--episodes", "2", "--batch-min", "1",
                     "--batch-max", "1", "--minibatch", "1", "--hidden", "4", "--max-steps",
                     "20", "--out", str(out), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["algorithm"] == cmd[-3:] and cfg["env"] == "gymnasium:CartPole-v1"
    assert cfg["private_params"] == ["gravity=9.7,9.9"]
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert rows and all(float(r.split(",")[-1]) >= 1 for r in rows)  # CartPole: +1 a step


@pytest.mark.parametrize("cmd, args, option", [
    ("fedpg-cen", ["--env", "gymnasium:Nope-v9"], "--env"),
    ("fedpg-cen", ["--env", "gymnasium:CartPole-v1", "--private", "nope=1:2"], "--private"),
])
def test_gymnasium_cli_errors_are_one_line(cmd, args, option, fails_in_one_line) -> None:
    fails_in_one_line(cmd, args, option)
