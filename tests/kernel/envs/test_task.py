"""The task abstraction: spaces, the env's own rewards, per-agent private dynamics, errors."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from privrl.config import ConfigError
from privrl.envs.cartpole import agent_gravity
from privrl.envs.rollout import rollout_episodes
from privrl.envs.task import (
    HOST_EPISODE_CAP,
    PrivateParam,
    Task,
    cartpole_task,
    check_module,
    make_task,
    parse_private,
    resolve_task,
)


def test_default_cartpole_task_draws_todays_gravities_exactly() -> None:
    key, ids = jax.random.key(7), jnp.arange(64)
    task = cartpole_task("v0", (9.7, 9.8, 9.9))
    old = jax.vmap(agent_gravity, (None, 0, None))(key, ids, (9.7, 9.8, 9.9))
    new = task.agents_params(key, ids).gravity
    np.testing.assert_array_equal(np.asarray(new), np.asarray(old))
    assert task.obs_dim == 4 and task.num_actions == 2


def test_acrobot_private_scalar_and_vector_fields() -> None:
    task = make_task("gymnax:Acrobot-v1", [parse_private("link_mass_1=0.8:1.2"),
                                            PrivateParam("available_torque", -2.0, 2.0)])
    assert (task.obs_dim, task.num_actions) == (6, 3)
    p = task.agents_params(jax.random.key(0), jnp.arange(50))
    mass, torque = np.asarray(p.link_mass_1), np.asarray(p.available_torque)
    assert mass.shape == (50,) and torque.shape == (50, 3)  # a vector field keeps its shape
    assert mass.min() >= 0.8 and mass.max() <= 1.2 and mass.std() > 0.05
    assert np.abs(torque).max() <= 2.0
    # fixed per agent: the same agent gets the same dynamics again
    again = task.agent_params(jax.random.key(0), jnp.int32(3))
    assert float(again.link_mass_1) == mass[3]
    # a function of (key, agent id), and a list of values
    fn = task.with_private(PrivateParam("link_mass_2", fn=lambda k, i: 1.0 + 0.1 * i))
    assert float(fn.agent_params(jax.random.key(0), jnp.int32(2)).link_mass_2) == pytest.approx(1.2)
    lst = task.with_private(parse_private("link_length_1=0.5,2"))
    vals = np.asarray(lst.agents_params(jax.random.key(1), jnp.arange(40)).link_length_1)
    assert set(vals.tolist()) == {0.5, 2.0}


def test_rollout_records_the_environments_negative_rewards() -> None:
    task = make_task("gymnax:MountainCar-v0").with_max_steps(7)
    params = task.agents_params(jax.random.key(0), jnp.arange(2))
    traj = rollout_episodes(task.env, params, lambda k, o: jnp.zeros(o.shape[0], jnp.int32),
                            jax.random.key(1), 2, 7)
    np.testing.assert_array_equal(np.asarray(traj.rewards), -np.asarray(traj.mask))
    assert float(jnp.sum(traj.rewards)) == -14.0
    np.testing.assert_array_equal(np.asarray(task.rewards(traj.rewards, traj.mask)),
                                  np.asarray(traj.rewards))
    scaled = Task(task.env, task.params, "x", reward_transform=lambda r: 0.5 * r)
    assert float(jnp.sum(scaled.rewards(traj.rewards, traj.mask))) == -7.0


@pytest.mark.parametrize("spec, private, option, words", [
    ("gymnax:Nope-v0", [], "env", "unknown gymnax environment"),
    ("gymnax:Breakout-MinAtar", [], "env", "vector"),
    ("nosuchmodule:make", [], "env", "cannot import nosuchmodule"),
    ("os:getcwd", [], "env", "must return (gymnax_env, env_params)"),
    ("gymnasium:Nope-v1", [], "env", "cannot make Gymnasium environment 'Nope-v1'"),
    ("gymnasium:CartPole-v1", [PrivateParam("gravty", 1.0, 2.0)], "private",
     "no attribute 'gravty'"),
    ("gymnasium:CartPole-v1", [PrivateParam("kinematics_integrator", values=(1.0,))],
     "private", "not a number"),
    ("gymnasium:CartPole-v1", [PrivateParam("gravity", float("nan"), 2.0)], "private",
     "finite"),
    ("CartPole", [], "env", "gymnax:<id>"),
    ("gymnax:Acrobot-v1", [PrivateParam("gravity", 1.0, 2.0)], "private", "no parameter"),
    ("gymnax:Acrobot-v1", [PrivateParam("link_mass_1", 1.0, float("inf"))], "private",
     "finite"),
    ("gymnax:Acrobot-v1", [PrivateParam("link_mass_1", values=(1.0, float("nan")))],
     "private", "finite"),
    ("gymnax:Acrobot-v1", [PrivateParam("link_mass_1", "heavy", 2.0)], "private",
     "not a number"),
    ("gymnax:Acrobot-v1", [PrivateParam("link_mass_1", 2.0, 1.0)], "private", "low 2 > high"),
    ("gymnax:Acrobot-v1", [PrivateParam("available_torque", values=((1.0, 2.0),))], "private",
     "does not broadcast"),
    ("gymnax:Acrobot-v1", [PrivateParam("max_steps_in_episode", 10.0, 20.0)], "private",
     "integer"),
    ("gymnax:Acrobot-v1", [PrivateParam("dt", fn=lambda k, i: jnp.ones(2))], "private",
     "shape"),
])
def test_bad_specs_are_config_errors(spec, private, option, words) -> None:
    with pytest.raises(ConfigError) as e:
        make_task(spec, private)
    assert e.value.field == option and words in str(e.value)


def test_parse_private_rejects_malformed_specs() -> None:
    for text in ("gravity", "=1:2", "gravity=a:b", "gravity="):
        with pytest.raises(ConfigError):
            parse_private(text)


class _ActorCritic(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x), nn.Dense(1)(x)[..., 0]


class _Logits(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x)


def test_model_output_contract_is_checked() -> None:
    task = make_task("gymnax:Acrobot-v1")
    check_module(_ActorCritic(), task, "logits,value")
    check_module(_Logits(), task, "logits")
    with pytest.raises(ConfigError, match="must return a pair"):
        check_module(_Logits(), task, "logits,value")
    with pytest.raises(ConfigError, match="logits of shape"):
        check_module(_ActorCritic(), task, "logits")


@pytest.mark.parametrize("cmd, args, option", [
    ("dp-reinforce", ["--env", "gymnax:Nope"], "--env"),
    ("dp-reinforce", ["--env", "gymnax:Acrobot-v1", "--private", "nope=1:2"], "--private"),
    ("dp-reinforce", ["--private", "gravity=nan:2"], "--private"),
    ("dp-reinforce", ["--private", "gravity=2:1"], "--private"),
    ("dp-dqn", ["--env", "gymnax:MountainCarContinuous-v0"], "--env"),  # Q needs Discrete
    ("pgc-a3c", ["--env", "gymnax:Acrobot-v1", "--private", "link_mass_1=x"], "--private"),
])
def test_cli_env_errors_are_one_line(cmd, args, option, fails_in_one_line) -> None:
    fails_in_one_line(cmd, args, option)


# --- the task owns its episode (issue 39) -----------------------------------------------------
@pytest.mark.parametrize("spec, steps, target, shaping", [
    ("gymnax:CartPole-v1", 500, 475.0, "failure"),
    ("gymnax:Acrobot-v1", 500, -100.0, None),  # a port of Gymnasium's: its reward_threshold
    ("gymnax:MountainCar-v0", 200, -110.0, None),
    ("gymnax:FourRooms-misc", 500, None, None),  # no Gymnasium twin: no target
    ("gymnasium:CartPole-v1", 500, 475.0, "failure"),
    ("gymnasium:Acrobot-v1", 500, -100.0, None),
])
def test_tasks_state_their_episode_limit_target_and_shaping(spec, steps, target,
                                                             shaping) -> None:
    task = make_task(spec)
    assert (task.episode_steps, task.target, task.shaping) == (steps, target, shaping)
    assert task.with_max_steps(31).episode_steps == 31


def test_the_paper_cartpole_tasks_are_gymnasiums_v0_and_v1() -> None:
    v0, v1 = cartpole_task("v0"), cartpole_task("v1", (9.8,))
    assert (v0.episode_steps, v0.target, v0.shaping) == (200, 195.0, "failure")
    assert (v1.episode_steps, v1.target) == (500, 475.0)


@dataclass(frozen=True)
class _EpisodeConfig:
    env: str | None = None
    private_params: tuple[str, ...] = ()
    max_episode_steps: int | None = None
    target_return: float | None = None


def test_resolve_task_takes_the_tasks_episode_unless_the_config_sets_it(load_example) -> None:
    cfg, task = resolve_task(_EpisodeConfig("gymnax:Acrobot-v1"), None, cartpole_task)
    assert (cfg.max_episode_steps, cfg.target_return) == (500, -100.0)
    cfg, task = resolve_task(_EpisodeConfig("gymnax:Acrobot-v1", (), 50, -300.0), None,
                             cartpole_task)
    assert (cfg.max_episode_steps, cfg.target_return, task.episode_steps) == (50, -300.0, 50)
    assert int(task.params.max_steps_in_episode) == 50
    # the default task: the system's CartPole
    cfg, _ = resolve_task(_EpisodeConfig(), None, partial(cartpole_task, "v0"))
    assert (cfg.max_episode_steps, cfg.target_return) == (200, 195.0)
    # a Gymnasium environment that states no limit (no spec, no TimeLimit) ends its own
    # episodes, under the safety cap (issue 53, item 3)
    load_example("byo_gymnasium")
    cfg, task = resolve_task(_EpisodeConfig("byo_gymnasium:Walk"), None, cartpole_task)
    assert cfg.max_episode_steps == HOST_EPISODE_CAP and task.grows
    cfg, task = resolve_task(_EpisodeConfig("byo_gymnasium:Walk", (), 30), None, cartpole_task)
    assert cfg.max_episode_steps == 30 and cfg.target_return is None


# --- --private takes any finite range (issue 39) ----------------------------------------------
@pytest.mark.parametrize("spec, private", [
    ("gymnax:Acrobot-v1", "link_mass_1=0.0:0.2"),  # 0 and below a positive default: the user's
    ("gymnax:Acrobot-v1", "link_mass_1=-1:2"),
    ("gymnasium:CartPole-v1", "gravity=-9.8:0"),
    ("gymnax:Acrobot-v1", "dt=0.1,0.2"),
])
def test_private_respects_any_finite_range(spec, private) -> None:
    p = parse_private(private)
    task = make_task(spec, [p])
    assert task.private_spec() == [p.describe()]
    values = np.asarray(getattr(task.agents_params(jax.random.key(0), jnp.arange(64)), p.field))
    lo, hi = (p.low, p.high) if p.values is None else (min(p.values), max(p.values))
    assert values.min() >= lo and values.max() <= hi


def test_gymnasium_private_attributes_include_class_attributes() -> None:
    """Acrobot's LINK_MASS_1 and dt are class attributes; gymnax's name (link_mass_1) names
    the one attribute it matches without regard to case. Each environment gets its own value
    and the class keeps its default."""
    from privrl.envs.gymnasium_env import set_attributes

    task = make_task("gymnasium:Acrobot-v1", [parse_private("link_mass_1=0.8:1.2"),
                                              parse_private("dt=0.1:0.3")])
    assert task.private_spec() == ["LINK_MASS_1=0.8:1.2", "dt=0.1:0.3"]
    params = task.agents_params(jax.random.key(0), jnp.arange(3))
    envs = task.envs(3)
    set_attributes(envs, params)
    got = np.array([[e.unwrapped.LINK_MASS_1, e.unwrapped.dt] for e in envs])
    np.testing.assert_allclose(got, np.stack([params.LINK_MASS_1, params.dt], 1), rtol=1e-6)
    assert type(envs[0].unwrapped).LINK_MASS_1 == 1.0 and len(set(got[:, 0])) == 3
    with pytest.raises(ConfigError, match=r"LINK_MASS_1, LINK_MASS_2.*dt"):
        make_task("gymnasium:Acrobot-v1", [parse_private("nope=1:2")])


@pytest.mark.parametrize("cmd, args, option", [
    # systems bound to their paper's task refuse --env/--private with the reason (exit 2, one
    # line), not the parser's "No such option"
    ("dp-qlearning", ["--env", "gymnax:Acrobot-v1"], "Gaussian process over paper 001's 1-D"),
    ("fedrl", ["--episodes", "3", "--env=gymnax:CartPole-v1"], "two parties"),
    ("fedrl", ["--private", "gravity=1:2"], "--private: fedrl"),
    # the episode's overrides exist and name their flags ("--flag: " is the option's own
    # error, not the parser's "No such option: --flag")
    ("dp-reinforce", ["--env", "gymnax:Acrobot-v1", "--max-steps", "0"], "--max-steps: "),
    ("dp-dqn", ["--target-return", "nan"], "--target-return: "),
    ("fedpg-cen", ["--max-steps", "-3"], "--max-steps: "),
    ("pgc-a3c", ["--max-steps", "0"], "--max-steps: "),
    ("pgc-a3c", ["--env", "gymnax:FourRooms-misc", "--reward", "goal"], "--reward: goal"),
])
def test_cli_episode_options_and_refusals_are_one_line(cmd, args, option,
                                                       fails_in_one_line) -> None:
    fails_in_one_line(cmd, args, option)


def test_gymnax_ids_read_before_jax_are_gymnaxs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53, item 10: the ids read from gymnax's installed source (privrl.envs.spec, before
    JAX) are exactly the registry gymnax builds on import; once gymnax is imported its live
    registry is the one asked (an id a program registered is known), and the one line for an
    unknown id suggests the close one, once."""
    import gymnax

    from privrl.envs import spec

    assert spec._gymnax_source_ids() == tuple(gymnax.registered_envs)
    monkeypatch.setattr(gymnax, "registered_envs", [*gymnax.registered_envs, "Mine-v0"])
    spec.check_gymnax_id("Mine-v0")
    with pytest.raises(ConfigError, match=r"Did you mean 'Acrobot-v1'\?$") as e:
        make_task("gymnax:Acrobt-v1")
    assert str(e.value).count("Did you mean") == 1


def test_gymnax_fields_read_before_jax_are_gymnaxs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53, item 10: the parameter fields read from gymnax's installed source (before JAX)
    are, for every registered id, exactly those of `gymnax.make(id)`'s parameters, in their
    order; every public name those parameters have passes the check before JAX, and a bogus
    field gets the task's own one line (the check before JAX stands aside once gymnax is
    imported, so it is called here with gymnax hidden)."""
    import gymnax
    from gymnax import registration

    from privrl.envs import spec

    ids = spec._gymnax_source_ids()
    assert ids
    for env_id in ids:
        read = spec._gymnax_source_fields(env_id)
        assert read is not None, env_id
        if env_id == "MNISTBandit-bsuite":  # its __init__ downloads MNIST; default_params not
            cls = registration._registry[env_id]
            params = cls.__new__(cls).default_params
        else:
            params = gymnax.make(env_id)[1]
        real = tuple(params.__dataclass_fields__)
        assert read[0] == real, env_id
        public = [n for n in dir(params) if not n.startswith("_")]
        with monkeypatch.context() as m:
            m.delitem(sys.modules, "gymnax")
            spec.check_gymnax_fields(env_id, public)  # none refused
            if env_id in ("CartPole-v1", "Pendulum-v1", "Acrobot-v1"):
                with pytest.raises(ConfigError) as before:
                    spec.check_gymnax_fields(env_id, ["nosuch"])
        if env_id in ("CartPole-v1", "Pendulum-v1", "Acrobot-v1"):
            with pytest.raises(ConfigError) as after:
                make_task(f"gymnax:{env_id}", [PrivateParam("nosuch", 1.0, 2.0)])
            assert before.value.message == after.value.message, env_id
    # gymnax imported: the live registry may differ from the source, the task decides
    spec.check_gymnax_fields("CartPole-v1", ["nosuch"])
