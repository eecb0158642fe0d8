"""Issue 53, item 1: a user's environment is checked before anything compiles; each mistake
is one line naming the method and what was expected (they were 70-80-line tracebacks, exit 1).
"""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path

import pytest

from privrl.config import ConfigError
from privrl.envs.task import make_task

_ENVS = textwrap.dedent('''
    import numpy as np
    import gymnasium
    from gymnasium import spaces
    from gymnax.environments.classic_control.cartpole import CartPole


    class Good(gymnasium.Env):
        def __init__(self, obs_shape=(3,), reward=1.0, old_step=False, no_actions=False,
                     done=False):
            self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
            if not no_actions:
                self.action_space = spaces.Discrete(2)
            self.obs_shape, self.reward, self.old_step, self.done = (
                obs_shape, reward, old_step, done)

        def obs(self):
            return np.zeros(self.obs_shape, np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.obs(), {}

        def step(self, action):
            if self.old_step:
                return self.obs(), self.reward, False, {}
            return self.obs(), self.reward, self.done, False, {}


    def good(): return Good()
    def old_step(): return Good(old_step=True)
    def no_action_space(): return Good(no_actions=True)
    def wrong_shape(): return Good(obs_shape=(4,))
    def array_reward(): return Good(reward=np.ones(2))
    def nan_reward(): return Good(reward=float("nan"))
    def array_done(): return Good(done=np.zeros(3, bool))


    class NoSeed(Good):
        def reset(self):
            return self.obs(), {}


    def no_seed(): return NoSeed()


    class Gymnax5(CartPole):
        def step_env(self, key, state, action, params):
            obs, state, reward, done, info = super().step_env(key, state, action, params)
            return obs, state, reward * np.ones(2), done, info


    class GymnaxObs(CartPole):
        def reset_env(self, key, params):
            obs, state = super().reset_env(key, params)
            return obs[:3], state


    class GymnaxArgs(CartPole):
        def step_env(self, state, action):
            return None


    def gymnax_good(): e = CartPole(); return e, e.default_params
    def gymnax_reward(): e = Gymnax5(); return e, e.default_params
    def gymnax_obs(): e = GymnaxObs(); return e, e.default_params
    def gymnax_args(): e = GymnaxArgs(); return e, e.default_params
''')


@pytest.fixture(scope="module")
def envs() -> types.ModuleType:
    module = types.ModuleType("privrl_test_envs53")
    exec(compile(_ENVS, "privrl_test_envs53.py", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


@pytest.mark.parametrize(("name", "says"), [
    ("old_step", "step(): returned 4 values; expected 5 values (obs, reward, terminated, "
                 "truncated, info) (a 4-tuple (obs, reward, done, info) is the old Gym API"),
    ("no_action_space", "action_space: missing; set self.action_space"),
    ("wrong_shape", "reset(): returned an observation of shape (4,); its observation_space "
                    "has shape (3,)"),
    ("array_reward", "step(): returned a reward of shape (2,); expected one real number"),
    ("nan_reward", "step(): returned the reward nan; expected a finite number"),
    ("array_done", "step(): returned terminated = array("),
    ("no_seed", "reset(): takes no seed; expected reset(self, *, seed=None, options=None)"),
    ("gymnax_reward", "step_env(): returned a reward of shape (2,)"),
    ("gymnax_obs", "reset_env(): returned an observation of shape (3,); its "
                   "observation_space has shape (4,)"),
    ("gymnax_args", "step_env(): cannot be called as step_env(key, state, action, params)"),
])
def test_each_mistake_is_one_line_naming_the_method(envs: types.ModuleType, name: str,
                                                     says: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_task(f"{envs.__name__}:{name}")
    assert e.value.field == "env"
    assert f"{envs.__name__}:{name}: {says}" in e.value.message, e.value.message
    assert "\n" not in str(e.value)


def test_correct_environments_pass(envs: types.ModuleType) -> None:
    assert make_task(f"{envs.__name__}:good").obs_dim == 3
    assert make_task(f"{envs.__name__}:gymnax_good").obs_dim == 4


def test_the_cli_says_it_in_one_line_exit_2(tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    from privrl.main import main

    (tmp_path / "bad_env.py").write_text(_ENVS)
    out = tmp_path / "out"
    assert main(["run", "dp-reinforce", "--env", f"{tmp_path}/bad_env.py:old_step",
                 "--episodes", "1", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("privrl: error: --env:") and "old Gym API" in err, err
    assert len(err.splitlines()) == 1 and not out.exists()
