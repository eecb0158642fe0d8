"""Gymnasium environments as tasks: host-side rollouts feeding the same agent-side code.

A Gymnasium `Env` is a Python object, so it cannot step inside a jitted program; a
`GymnasiumTask` steps its environments on the host (`envs.rollout.rollout_host`), computes each
action with the jitted network on the host's observations, and hands the learner the padded
arrays the jitted gymnax rollout makes (`Trajectory`): the loss, the gradient, the mechanism and
the `Report` are the jitted path's. The gymnax path stays the fast default.

Private dynamics are attributes of the unwrapped environment (`env.unwrapped.gravity` for
CartPole), set per agent before its episode's reset. An attribute must exist and be numeric
(an int, a float or a numeric array); it is set as it is, so quantities the environment derives
from it once in `__init__` are not recomputed (Gymnasium's CartPole computes `total_mass` from
`masspole` there: a private `masspole` would not change it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import jax
import numpy as np
from jax import Array

from privrl.config import ConfigError
from privrl.envs.rollout import PolicyFn, Trajectory, rollout_host
from privrl.envs.task import Task


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


def _numeric(value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return False
    if isinstance(value, int | float | np.integer | np.floating):
        return True
    return isinstance(value, np.ndarray) and (np.issubdtype(value.dtype, np.integer)
                                              or np.issubdtype(value.dtype, np.floating))


def _like(current: Any, value: np.ndarray) -> Any:
    """`value` in the type the environment's attribute has (a Python float stays a float)."""
    if isinstance(current, np.ndarray):
        return np.asarray(value, current.dtype).copy()
    return type(current)(value.item())


@dataclass(frozen=True)
class GymnasiumTask(Task):
    """A Gymnasium environment with a `Discrete` action space and vector observations.

    `env` is one instance (its spaces and attribute defaults); `make_env()` makes each rollout
    environment (a registry id's are made with `gymnasium.make(env_id, max_episode_steps=...)`).
    `params` is derived: the default values of the private attributes.
    """

    make_env: Callable[[], Any] | None = None
    env_id: str | None = None  # a Gymnasium registry id (None: a user callable's environment)
    max_steps: int | None = None
    _pool: list = field(default_factory=list, init=False, compare=False, repr=False)

    host: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", self._private_defaults())
        self.obs_dim  # noqa: B018 - validate the spaces now, before any computation
        self.num_actions  # noqa: B018
        for p in self.private:
            self._check_private(p)

    def _spaces(self) -> tuple[Any, Any]:
        return self.env.observation_space, self.env.action_space

    def _private_defaults(self) -> AttrParams:
        """Each private attribute's default value: it must exist on the unwrapped environment
        and be numeric (a ConfigError naming `private` otherwise)."""
        base = self.env.unwrapped
        values = {}
        for p in self.private:
            if not hasattr(base, p.field):
                numeric = sorted(k for k, v in vars(base).items()
                                 if not k.startswith("_") and _numeric(v))
                raise ConfigError("private", f"{self.name}'s environment "
                                  f"({type(base).__name__}) has no attribute {p.field!r} (its "
                                  f"numeric attributes: {', '.join(numeric) or 'none'})")
            value = getattr(base, p.field)
            if not _numeric(value):
                raise ConfigError("private", f"{self.name}: attribute {p.field!r} is "
                                  f"{type(value).__name__}, not a number or numeric array")
            values[p.field] = np.asarray(value)
        return AttrParams(values)

    def with_max_steps(self, max_steps: int) -> GymnasiumTask:
        """Episodes capped at `max_steps` (a registry id's time limit is set to it; a user's
        environment keeps its own, and the rollout stops at the cap)."""
        return replace(self, max_steps=max_steps)

    # --- rollouts (host side) ----------------------------------------------------------------
    def envs(self, n: int) -> list[Any]:
        """`n` rollout environments, made once and reused (each rollout resets them)."""
        while len(self._pool) < n:
            self._pool.append(self._make())
        return self._pool[:n]

    def _make(self) -> Any:
        if self.env_id is not None:
            import gymnasium

            kwargs = {} if self.max_steps is None else {"max_episode_steps": self.max_steps}
            return gymnasium.make(self.env_id, **kwargs)
        return self.make_env()

    def rollout(self, params: AttrParams, policy: PolicyFn, key: Array, num_envs: int,
                max_steps: int, active: Any = None) -> Trajectory:
        """`rollout_episodes` on the host: environment i gets the private attributes
        `params` (leaves with a leading axis of size num_envs, as `agents_params` gives) set
        before its reset, then plays one episode."""
        envs = self.envs(num_envs)
        for name, values in params.items():
            values = np.asarray(values)
            for i, env in enumerate(envs):
                base = env.unwrapped
                setattr(base, name, _like(getattr(base, name), values[i]))
        return rollout_host(envs, policy, key, max_steps, active)


def gymnasium_task(env_id: str, option: str = "env") -> GymnasiumTask:
    """A task from the Gymnasium registry (`gymnasium:<id>`)."""
    import gymnasium

    try:
        env = gymnasium.make(env_id)
    except Exception as e:  # unknown ids, missing extras (Box2D, MuJoCo), bad kwargs
        raise ConfigError(option, f"cannot make Gymnasium environment {env_id!r}: "
                          + " ".join(str(e).split())) from None
    return GymnasiumTask(env, None, f"gymnasium:{env_id}", env_id=env_id, option=option)


def from_callable(out: Any, fn: Callable[[], Any], spec: str, option: str = "env"
                  ) -> GymnasiumTask | None:
    """The task of a `module:callable` that returned `out`, if it is a Gymnasium Env (else
    None). The callable is called again for every rollout environment, so it must make a new
    environment on each call."""
    import gymnasium

    if not isinstance(out, gymnasium.Env):
        return None
    if fn() is out:
        raise ConfigError(option, f"{spec}() returned the same Gymnasium environment twice: it "
                          "must make a new one on each call (one per parallel agent)")
    return GymnasiumTask(out, None, spec, make_env=fn, option=option)
