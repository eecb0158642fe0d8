"""DQN, REINFORCE and LDP observations on Gymnasium tasks (host-side episodes): each learner's
one episode, run on the host source, is the jitted one step for step on the twin walkers
(examples/byo_env.py, examples/byo_gymnasium.py), LDP observations included for DQN; the
learner (DQN, REINFORCE) never sees a raw observation of a host task; the command line runs
dp-dqn on gymnasium:CartPole-v1."""

from __future__ import annotations

import json
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from gymnasium import spaces

from privrl import main as cli
from privrl.envs.task import GymnasiumTask, PrivateParam, Task, make_task
from privrl.systems.dpsgd_rl.config import ObservationPrivacy
from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

DRIFT = PrivateParam("drift", 0.6, 1.4)
# The walker's observation (x/5, t/30) in a box, with little noise: LDP's noise is added with
# the same keys on both paths, so their observations agree to float32 rounding.
WALK_BOX = ObservationPrivacy(mode="box", box_low=(-1.5, -0.1), box_high=(1.5, 0.5),
                              noise_multiplier=0.02)


def _cfg(**kw: Any) -> DQNConfig:
    base = dict(hidden=(8,), batch_size=4, buffer_size=64, episodes=3, max_episode_steps=12,
                stop_when_solved=False, dp=True, noise_multiplier=1.0, explore_start=0.5,
                explore_decay=20.0)
    return DQNConfig(**{**base, **kw})


def _watch(algo: Any, names: tuple[str, ...], at: int, seen: list) -> None:
    """Record the observation argument `at` (of the jitted host pieces `algo.<name>`, e.g.
    the acting and greedy policies) on each call, as the host episode source runs them."""
    source = algo.episodes
    assert source.host
    watch = [getattr(algo, name) for name in names]
    piece = source.piece

    def watching(fn: Any) -> Any:
        jitted = piece(fn)
        if fn not in watch:
            return jitted

        def watched(*args: Any) -> Any:
            if not isinstance(args[at], jax.core.Tracer):  # (the rollout's shape probe)
                seen.append(np.asarray(args[at]))
            return jitted(*args)

        return watched

    source.piece = watching


@pytest.fixture()
def walkers(load_example) -> tuple[Task, Task]:
    """The gymnax walker ending at the goal only (Gymnasium's walker is cut, not terminated,
    at its time limit; the jitted loop stops at the step cap without a terminal flag too), and
    the Gymnasium walker, both with private drifts."""
    gx = load_example("byo_env")
    load_example("byo_gymnasium")
    goal_only = type("GoalOnly", (gx.Walk,), {
        "is_terminated": lambda self, state, params: state.x >= params.goal})()
    return (Task(goal_only, goal_only.default_params, "byo_env:Walk", (DRIFT,)),
            make_task("byo_gymnasium:Walk", [DRIFT]))


def test_host_dqn_episode_is_the_jitted_one_with_ldp_observations(walkers) -> None:
    """Same seed, same twin walker: the host episodes (Gymnasium stepped in Python, the jitted
    act/learn/finish and LDP release) store the jitted episodes' transitions, make the same
    DP-SGD updates and reach the same θ. (The evaluation rollouts draw their observation
    noise from other keys on the host, so only their range is compared.)"""
    cfg = _cfg(obs=WALK_BOX)
    jx, gym = DQN(cfg, task=walkers[0]), DQN(cfg, task=walkers[1])
    seen: list = []  # what the host learner's network is given: acting and evaluating
    _watch(gym, ("act",), 1, seen)
    _watch(gym, ("greedy",), 2, seen)
    init = jax.jit(jx.init)  # one program, not one per op
    a = b = start = init(jax.random.key(5))
    episode = jax.jit(jx.episode)
    for _ in range(cfg.episodes):
        a, ma = episode(a)
        b, mb = gym.episode(b)
        assert float(mb.train_return) == float(ma.train_return)
        assert int(mb.updates) == int(ma.updates)
        assert -24.0 <= float(mb.eval_return) <= -5.0
    ra, rb = a.replay, b.replay
    n = int(ra.size)
    assert int(rb.size) == n and int(b.steps) == int(a.steps) == n
    for name in ("action", "reward", "terminal"):
        np.testing.assert_array_equal(np.asarray(getattr(rb, name)),
                                      np.asarray(getattr(ra, name)), err_msg=name)
    terminal = np.asarray(ra.terminal)[:n]
    assert terminal.any() and n > terminal.sum() * 5  # the goal reached, and a cut episode
    assert int(a.updates) > 10
    # Gymnasium moves x in float64, gymnax in float32: observations agree to float32 rounding.
    np.testing.assert_allclose(np.asarray(rb.obs), np.asarray(ra.obs), atol=1e-5)
    np.testing.assert_allclose(np.asarray(rb.next_obs), np.asarray(ra.next_obs), atol=1e-5)
    # The learner never sees a raw observation: the walker's raw t/30 is on a grid of 1/30,
    # every observation acted or evaluated on, or stored, is off it.
    stored = np.asarray(rb.obs)[:n], np.asarray(rb.next_obs)[:n]
    t30 = np.concatenate([v.reshape(-1, 2) for v in (*seen, *stored)])[:, 1] * 30
    assert len(t30) >= 3 * n + 3 * 5 and np.abs(t30 - np.round(t30)).min() > 1e-4
    assert np.abs(np.asarray(a.theta) - np.asarray(start.theta)).max() > 1e-4
    np.testing.assert_allclose(np.asarray(b.theta), np.asarray(a.theta), rtol=1e-4,
                               atol=1e-5)


class Sentinel(gymnasium.Env):
    """Observes (7, −7) at every step, far outside the box: any raw observation is
    recognizable. Four steps of reward 1, then terminated."""

    observation_space = spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    RAW = np.array([7.0, -7.0], np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple:
        super().reset(seed=seed)
        self.t = 0
        return self.RAW.copy(), {}

    def step(self, action: int) -> tuple:
        self.t += 1
        return self.RAW.copy(), 1.0, self.t >= 4, False, {}


def test_ldp_reinforce_on_a_host_task_never_sees_a_raw_observation() -> None:
    """LDP-REINFORCE on a Gymnasium task: every observation its policy acts or is evaluated
    on went through the box mechanism (DQN's: the twin test above)."""
    task = GymnasiumTask(Sentinel(), None, "sentinel", make_env=Sentinel)
    obs = ObservationPrivacy(mode="box", box_low=(-1.0, -1.0), box_high=(1.0, 1.0),
                             noise_multiplier=0.1)  # std 0.28: released values within ±2.7
    seen: list = []
    algo = Reinforce(ReinforceConfig(obs=obs, hidden=4, max_episode_steps=6, episodes=2,
                                     batch_episodes=2, stop_when_solved=False), task=task)
    _watch(algo, ("act", "greedy"), 2, seen)
    s = algo.init(jax.random.key(0))
    for _ in range(2):
        s, m = algo.episode(s)
        assert float(m.train_return) == 4.0 == float(m.eval_return)
    values = np.concatenate([v.reshape(-1, 2) for v in seen])
    assert len(values) == 2 * (2 * 4 + 4)  # two episodes: 2 × 4 steps acting, 4 evaluating
    assert np.abs(values).max() < 2.7  # never 7: every observation went through the box
    assert np.unique(values).size > 10  # noisy, not merely clipped to ±1


def test_dp_dqn_on_gymnasium_cartpole_from_the_command_line(tmp_path) -> None:
    out = tmp_path / "run"
    assert cli.main(["run", "dp-dqn", "--env", "gymnasium:CartPole-v1", "--episodes", "1",
                     "--noise-multiplier", "1.0", "--out", str(out), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["env"] == "gymnasium:CartPole-v1"
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert len(rows) == 1 and float(rows[0].split(",")[2]) >= 8  # CartPole: +1 a step
    privacy = json.loads((out / "privacy.json").read_text())["dpsgd"]
    assert privacy["unit"] == "one transition (s, a, r, s′)" and privacy["updates"] == 0


class Sharp(nn.Module):
    """Logits so steep that sampling is the argmax: the two rollouts draw their actions with
    their own keys, so only a policy that ignores them plays the same episodes on both (the
    offset breaks the tie at the walker's first observation, 0)."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return 1e3 * (nn.Dense(2)(obs) + jnp.array([0.0, 0.1]))


def test_host_reinforce_step_is_the_jitted_one(walkers) -> None:
    """Same seed, same twin walker, `Reinforce.step` on either source: the host episodes
    (Gymnasium stepped in Python, the jitted plan/act/update/finish) are the jitted ones, with
    each episode's private drift, and the same DP-SGD release, so both reach the same θ."""
    cfg = ReinforceConfig(batch_episodes=3, episodes=4, max_episode_steps=12,
                          stop_when_solved=False, dp=True, noise_multiplier=0.5)
    jx, gym = (Reinforce(cfg, task=t, model=Sharp()) for t in walkers)
    assert not jx.episodes.host and gym.episodes.host
    a = b = start = jax.jit(jx.init)(jax.random.key(3))  # one program, not one per op
    step = jax.jit(jx.step)
    returns = []
    for _ in range(cfg.episodes):
        a, ma, ga = step(a)
        b, mb, gb = gym.step(b)
        assert float(mb.train_return) == float(ma.train_return)
        assert float(mb.eval_return) == float(ma.eval_return)
        assert int(mb.updates) == int(ma.updates)
        np.testing.assert_allclose(np.asarray(gb), np.asarray(ga), rtol=1e-4, atol=1e-5)
        returns.append(float(ma.train_return))
    assert len(set(returns)) > 1  # the drifts and θ differ from episode to episode
    assert np.abs(np.asarray(a.theta) - np.asarray(start.theta)).max() > 1e-3
    np.testing.assert_allclose(np.asarray(b.theta), np.asarray(a.theta), rtol=1e-4, atol=1e-5)
