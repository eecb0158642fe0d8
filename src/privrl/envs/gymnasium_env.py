"""Gymnasium environments on the host: their private attributes and their making.

A Gymnasium `Env` is a Python object, so it cannot step inside a jitted program. A Gymnasium
task (`envs.task.GymnasiumTask`) steps its environments on the host (`envs.rollout.rollout_host`),
each action chosen by the jitted network on the host's observations, and hands the learner the
padded arrays the jitted gymnax rollout makes: the loss, the gradient, the mechanism and the
`Report` are the jitted path's. The gymnax path stays the fast default.

Private dynamics are attributes of the unwrapped environment (`env.unwrapped.gravity` for
CartPole), set per agent before its episode's reset. An attribute must exist, on the instance
or its class (Acrobot's `LINK_MASS_1` and `dt` are class attributes; a name is matched without
regard to case when one attribute fits, so gymnax's `link_mass_1` names it), and be numeric
(an int, a float or a numeric array). It is set on the instance (shadowing the class's) as it
is, so quantities the environment derives from it once in `__init__` are not recomputed
(Gymnasium's CartPole computes `total_mass` from `masspole` there: a private `masspole` would
not change it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from privrl.config import ConfigError
from privrl.envs.attributes import _numeric, attribute_name


@jax.tree_util.register_pytree_node_class
class AttrParams:
    """The private attributes' values (one per field): a pytree with attribute access and
    `replace`, so `Task.agent_params` draws them like gymnax parameters (and vmaps over agents)."""

    def __init__(self, values: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"AttrParams({self._values!r})"

    def replace(self, **updates: Any) -> AttrParams:
        return AttrParams({**self._values, **updates})

    def items(self) -> Any:
        return self._values.items()

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        return tuple(self._values.values()), tuple(self._values)

    @classmethod
    def tree_unflatten(cls, names: tuple[str, ...], leaves: Any) -> AttrParams:
        return cls(dict(zip(names, leaves, strict=True)))


def attribute_defaults(env: Any, fields: Sequence[str], name: str) -> AttrParams:
    """Each field's value on the unwrapped environment (`attribute_name`'s attribute): it must
    be numeric (a ConfigError naming `private` otherwise)."""
    base = env.unwrapped
    values = {}
    for f in fields:
        value = getattr(base, attribute_name(env, f, name))
        if not _numeric(value):
            raise ConfigError("private", f"{name}: attribute {f!r} is {type(value).__name__}, "
                              "not a number or numeric array")
        values[f] = np.asarray(value)
    return AttrParams(values)


def set_attributes(envs: Sequence[Any], params: AttrParams) -> None:
    """Environment i gets each attribute's i-th value (leaves have a leading axis of size
    len(envs)), in the type the attribute has (a Python float stays a float)."""
    for name, values in params.items():
        values = np.asarray(values)
        for i, env in enumerate(envs):
            base = env.unwrapped
            current = getattr(base, name)
            setattr(base, name, np.asarray(values[i], current.dtype).copy()
                    if isinstance(current, np.ndarray) else type(current)(values[i].item()))


def make_registered(env_id: str, max_steps: int | None = None, option: str = "env") -> Any:
    """`gymnasium.make(env_id)`, its time limit set to `max_steps` if given; an unknown id (or
    an environment whose extras are not installed) is a one-line ConfigError naming `option`."""
    import gymnasium

    kwargs = {} if max_steps is None else {"max_episode_steps": max_steps}
    try:
        return gymnasium.make(env_id, **kwargs)
    except Exception as e:  # unknown ids, missing extras (Box2D, MuJoCo), bad kwargs
        raise ConfigError(option, f"cannot make Gymnasium environment {env_id!r}: "
                          + " ".join(str(e).split())) from None


def time_limit(env: Any) -> int | None:
    """The environment's own step limit: its spec's `max_episode_steps`, else a `TimeLimit`
    wrapper's; None where it states none."""
    import gymnasium

    spec = getattr(env, "spec", None)
    if spec is not None and spec.max_episode_steps is not None:
        return int(spec.max_episode_steps)
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, gymnasium.wrappers.TimeLimit):
            return int(env._max_episode_steps)
        env = env.env
    return None


def reward_threshold(env: Any) -> float | None:
    """The return at which the environment counts as solved (its spec's `reward_threshold`);
    None where it states none."""
    spec = getattr(env, "spec", None)
    threshold = None if spec is None else spec.reward_threshold
    return None if threshold is None else float(threshold)


def registry_episode(env_id: str) -> tuple[int | None, float | None]:
    """(step limit, reward threshold) of Gymnasium's registered `env_id`; (None, None) for an
    id it does not know. gymnax ports classic-control tasks under Gymnasium's ids."""
    import gymnasium

    try:
        spec = gymnasium.spec(env_id)
    except Exception:  # an id Gymnasium does not register
        return None, None
    threshold = None if spec.reward_threshold is None else float(spec.reward_threshold)
    return spec.max_episode_steps, threshold


def is_gymnasium_env(obj: Any) -> bool:
    import gymnasium

    return isinstance(obj, gymnasium.Env)
