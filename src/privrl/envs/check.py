"""A user's environment checked before anything compiles: each mistake one line.

What `gymnasium.utils.env_checker.check_env` checks, as errors instead of warnings (a wrong
return here became a 70-line traceback deep in a compiled rollout): the spaces (Gymnasium's
own `check_observation_space` / `check_action_space`), `reset`'s and `step`'s signatures and
return tuples, the observation's shape and dtype against its space, and a scalar, finite
reward; and the same of a gymnax environment's `reset_env` / `step_env` (one call each, on the
default parameters). docs/environments.md, "Your environment's mistakes", lists the checks.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from privrl.config import ConfigError

__all__ = ["check_gymnasium_env", "check_gymnax_env"]

_STEP5 = "(obs, reward, terminated, truncated, info)"


class _Check:
    """The one-line errors of one environment: `fail(method, what)` names the method."""

    def __init__(self, name: str, option: str) -> None:
        self.name, self.option = name, option

    def fail(self, method: str, what: str) -> ConfigError:
        return ConfigError(self.option, f"{self.name}: {method}: {what}")

    def call(self, method: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, a failure of the user's code one line naming the method."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise self.fail(method, f"raised {type(e).__name__}: "
                            + " ".join(str(e).split())[:300]) from None
        except SystemExit as e:
            raise self.fail(method, f"tried to exit ({e.code!r})") from None

    def observation(self, method: str, obs: Any, space: Any) -> None:
        """An observation of the space's shape, of numbers."""
        try:
            arr = np.asarray(obs)
        except Exception as e:
            raise self.fail(method, f"its observation is no array ({type(e).__name__})") \
                from None
        shape = tuple(getattr(space, "shape", None) or ())
        if arr.shape != shape:
            raise self.fail(method, f"returned an observation of shape {arr.shape}; its "
                            f"observation_space has shape {shape}")
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise self.fail(method, f"returned an observation of dtype {arr.dtype}; expected "
                            f"numbers (its observation_space's dtype is "
                            f"{getattr(space, 'dtype', '?')})")

    def reward(self, method: str, reward: Any) -> None:
        """A reward that is one finite real number."""
        arr = np.asarray(reward) if isinstance(reward, (int, float, np.generic, np.ndarray)) \
            or hasattr(reward, "__array__") else None
        if arr is None or arr.shape != () or not (
                np.issubdtype(arr.dtype, np.number) and not np.iscomplexobj(arr)):
            shown = f"of shape {arr.shape}" if arr is not None and arr.shape != () else (
                f"a {type(reward).__name__}")
            raise self.fail(method, f"returned a reward {shown}; expected one real number "
                            "(a float)")
        if not np.isfinite(arr):
            raise self.fail(method, f"returned the reward {float(arr)}; expected a finite "
                            "number")

    def flag(self, method: str, label: str, value: Any) -> None:
        if np.asarray(value).shape != () or not isinstance(
                np.asarray(value).item(), (bool, int)):
            raise self.fail(method, f"returned {label} = {value!r}; expected a bool")


def _takes(fn: Any, *names: str) -> bool:
    """Whether `fn` can be called with these keyword arguments."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True  # a builtin: let the call decide
    return all(n in params for n in names) or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _takes_positional(fn: Any, n: int) -> bool:
    """Whether `fn` can be called with `n` positional arguments."""
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): let the call decide
        return True
    return True


def _probe_action(space: Any) -> Any:
    """A valid action: Discrete's first, a Box's point nearest zero."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return int(space.start)
    if isinstance(space, spaces.Box):
        return np.clip(np.zeros(space.shape), space.low, space.high).astype(space.dtype)
    return space.sample()


def check_gymnasium_env(env: Any, name: str, option: str = "env") -> None:
    """Gymnasium's contract, checked on `env` (reset with seed 0, one step): a ConfigError
    naming `option`, the method and what it expected, at the first mistake."""
    from gymnasium.utils.passive_env_checker import check_action_space, check_observation_space

    c = _Check(name, option)
    for attr, check in (("observation_space", check_observation_space),
                        ("action_space", check_action_space)):
        space = getattr(env, attr, None)
        if space is None:
            raise c.fail(attr, f"missing; set self.{attr} (a gymnasium.spaces.Space) in "
                         "__init__")
        try:
            check(space)
        except (AssertionError, TypeError) as e:
            raise c.fail(attr, " ".join(str(e).split())) from None
    for method in ("reset", "step"):
        if not callable(getattr(env, method, None)):
            raise c.fail(f"{method}()", "missing")
    if not _takes(env.reset, "seed"):
        raise c.fail("reset()", "takes no seed; expected reset(self, *, seed=None, "
                     "options=None), Gymnasium's signature")
    out = c.call("reset(seed=0)", env.reset, seed=0)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise c.fail("reset()", f"returned {_shape_of(out)}; expected a tuple (obs, info)")
    c.observation("reset()", out[0], env.observation_space)
    if not isinstance(out[1], dict):
        raise c.fail("reset()", f"returned info of type {type(out[1]).__name__}; expected a "
                     "dict")
    step = c.call("step(action)", env.step, _probe_action(env.action_space))
    if not isinstance(step, tuple) or len(step) != 5:
        old = isinstance(step, tuple) and len(step) == 4
        raise c.fail("step()", f"returned {_shape_of(step)}; expected 5 values {_STEP5}"
                     + (" (a 4-tuple (obs, reward, done, info) is the old Gym API: split "
                        "done into terminated and truncated)" if old else ""))
    obs, reward, terminated, truncated, info = step
    c.observation("step()", obs, env.observation_space)
    c.reward("step()", reward)
    c.flag("step()", "terminated", terminated)
    c.flag("step()", "truncated", truncated)
    if not isinstance(info, dict):
        raise c.fail("step()", f"returned info of type {type(info).__name__}; expected a dict")


def _shape_of(value: Any) -> str:
    if isinstance(value, tuple):
        return f"{len(value)} values"
    return f"a {type(value).__name__}"


def check_gymnax_env(env: Any, params: Any, name: str, option: str = "env") -> None:
    """gymnax's interface, checked on `env` with `params` (one reset, one step, on the host):
    the methods a task calls, their arguments, their return tuples, the observation's shape
    against `observation_space(params)`, a scalar finite reward and a scalar `done`."""
    import jax

    c = _Check(name, option)
    arity = {"reset_env": 2, "step_env": 4, "is_terminated": 2, "observation_space": 1,
             "action_space": 1}
    signature = {"reset_env": "reset_env(key, params)",
                 "step_env": "step_env(key, state, action, params)",
                 "is_terminated": "is_terminated(state, params)",
                 "observation_space": "observation_space(params)",
                 "action_space": "action_space(params)"}
    for method, n in arity.items():
        fn = getattr(env, method, None)
        if not callable(fn):
            raise c.fail(f"{method}()", f"missing; a gymnax Environment has {signature[method]}")
        if not _takes_positional(fn, n):
            raise c.fail(f"{method}()", f"cannot be called as {signature[method]}")
    obs_space = c.call("observation_space(params)", env.observation_space, params)
    act_space = c.call("action_space(params)", env.action_space, params)
    k_reset, k_step = jax.random.split(jax.random.key(0))
    out = c.call("reset_env(key, params)", env.reset_env, k_reset, params)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise c.fail("reset_env()", f"returned {_shape_of(out)}; expected (obs, state)")
    c.observation("reset_env()", out[0], obs_space)
    action = c.call("action_space(params).sample(key)", act_space.sample, k_step)
    step = c.call("step_env(key, state, action, params)", env.step_env, k_step, out[1],
                  action, params)
    if not (isinstance(step, tuple) and len(step) == 5):
        raise c.fail("step_env()", f"returned {_shape_of(step)}; expected 5 values (obs, "
                     "state, reward, done, info)")
    c.observation("step_env()", step[0], obs_space)
    c.reward("step_env()", step[2])
    c.flag("step_env()", "done", step[3])
