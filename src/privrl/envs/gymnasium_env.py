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


class VectorLanes:
    """n lanes of a registry id stepped by its own Gymnasium vector environment, in one call
    for all lanes (`gymnasium.make_vec(..., vectorization_mode="vector_entry_point")`, e.g.
    `CartPoleVectorEnv`): `rollout_host`'s lanes (privrl.envs.rollout.HostLanes), the episodes
    one environment per lane plays (`vector_lanes` says when it applies).

    Resets: lane i starts where `env.reset(seed=seeds[i])` of the id's own environment starts
    (the vector env's `reset` draws every lane from one generator), its state copied into the
    vector env's lane. Ends: the vector env resets an ended lane on its next step
    (`AutoresetMode.NEXT_STEP`); the rollout no longer reads that lane, so what it plays after
    its end is never used. Private attributes: each lane's value, as an array over the lanes
    (the vector env's physics is elementwise).
    """

    def __init__(self, vec: Any, one: Any, n: int) -> None:
        self.vec, self.one, self.size = vec, one, n
        self.obs_shape = tuple(vec.single_observation_space.shape)
        self._attrs: dict[str, np.ndarray] = {}  # each private attribute's per-lane values

    def set_attributes(self, params: AttrParams) -> None:
        """Lane i gets each attribute's i-th value (as `set_attributes` gives environment i),
        as float64: the type the scalar path's Python float has."""
        for name, values in params.items():
            self._attrs[name] = np.asarray(values, np.float64).reshape(self.size)
            setattr(self.vec, name, self._attrs[name])

    def reset(self, rows: np.ndarray, seeds: np.ndarray, obs: np.ndarray) -> None:
        self.vec.reset(seed=0)  # every lane's step count and end flag cleared
        state, base = self.vec.state, self.one.unwrapped
        for i in rows.tolist():
            for name, values in self._attrs.items():  # a reset may read them
                setattr(base, name, float(values[i]))
            obs[i] = self.one.reset(seed=int(seeds[i]))[0]
            state[:, i] = base.state

    def step(self, rows: np.ndarray, actions: np.ndarray, obs: np.ndarray,
             reward: np.ndarray, fell: np.ndarray, cut: np.ndarray) -> None:
        o, r, te, tr, _ = self.vec.step(actions)
        obs[rows], reward[rows], fell[rows], cut[rows] = o[rows], r[rows], te[rows], tr[rows]


def vector_lanes(env_id: str, n: int, max_steps: int | None, private: Sequence[str],
                 one: Any) -> VectorLanes | None:
    """`VectorLanes` of n lanes for the registry id, or None where they would not play the
    episodes `one` (an environment of the id, made with the same time limit) plays, one per
    lane: the id has no vector entry point, its vector env does not reset on the next step
    (`AutoresetMode.NEXT_STEP`), keeps no numpy `state` with the lanes last and the single
    environment's state first (that a lane's reset can be copied into), or either lacks a
    private attribute as a float (`set_attributes` gives an environment's int attribute an
    int, the lanes would get a float)."""
    import gymnasium
    from gymnasium.vector import AutoresetMode

    try:
        if gymnasium.spec(env_id).vector_entry_point is None:
            return None
        kwargs = {} if max_steps is None else {"max_episode_steps": max_steps}
        vec = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point",
                                 **kwargs)
        vec.reset(seed=0)
        one.reset(seed=0)
    except Exception:  # no vector env to be had: each lane steps its own environment
        return None
    state, single = getattr(vec, "state", None), getattr(one.unwrapped, "state", None)
    if (vec.metadata.get("autoreset_mode") != AutoresetMode.NEXT_STEP
            or not isinstance(state, np.ndarray) or not isinstance(single, np.ndarray)
            or state.shape != (*single.shape, n) or state.dtype != single.dtype
            or getattr(vec, "max_episode_steps", None) != time_limit(one)
            or not all(isinstance(getattr(env, f, None), float)
                       for f in private for env in (vec, one.unwrapped))):
        vec.close()
        return None
    return VectorLanes(vec, one, n)
