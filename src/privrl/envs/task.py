"""A task: the environment an algorithm learns on, its rewards and each agent's private dynamics.

A `Task` wraps a gymnax environment (its `reset_env`/`step_env`/`is_terminated`, no auto-reset)
and default parameters. The observation size and the number of actions come from the
environment's spaces, so networks are sized from them. Rewards are the environment's own
(`envs.rollout` records them); an optional, explicit `reward_transform` maps them (default:
none). Private dynamics generalise paper 000's per-agent gravity: each `PrivateParam` draws one
environment-parameter field per agent, fixed for that agent (a uniform range, a list of values or
a user function of (key, agent id)); `agent_params(key, agent_id)` is that agent's parameters.

The task owns its episode: its step limit (`episode_steps`: gymnax's `max_steps_in_episode`,
Gymnasium's `spec.max_episode_steps`), the return that counts as success (`target`: Gymnasium's
`reward_threshold`, None where the task states none) and a shaped reward it recommends to
learners that want one (`shaping`: "failure" for CartPole's survival task, None elsewhere).
A run's config leaves them None to take the task's (`resolve_task`); the user overrides them.

Build one with `make_task("gymnax:Acrobot-v1")`, `make_task("gymnasium:CartPole-v1")`,
`make_task("mypkg.envs:make")` (a callable returning `(env, params)` or a Gymnasium `Env`), or
`Task(env, params, name)` directly. A `GymnasiumTask` (`host` True) rolls out on the host
(privrl.envs.gymnasium_env) and feeds the same agent-side code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.config import HOST_EPISODE_CAP, ConfigError
from privrl.envs.check import check_gymnasium_env, check_gymnax_env
from privrl.envs.gymnasium_env import (
    VectorLanes,
    attribute_defaults,
    attribute_name,
    is_gymnasium_env,
    make_registered,
    registry_episode,
    reward_threshold,
    set_attributes,
    time_limit,
    vector_lanes,
)
from privrl.envs.rollout import Trajectory, rollout_host, rollout_host_trials
from privrl.envs.spec import check_env, parse_private_text, unknown_gymnax
from privrl.nets.heads import Categorical, Head, head_for
from privrl.plugins import call_user, load_callable

# (key, agent_id) -> the agent's value of one parameter field
ParamFn = Callable[[Array, Array], Any]


@dataclass(frozen=True)
class PrivateParam:
    """One environment-parameter field that differs per agent (fixed for each agent).

    Exactly one of: `low`/`high` (uniform in [low, high], drawn elementwise for a vector field;
    low and high may be scalars or arrays of the field's shape), `values` (one of them, uniform;
    each a scalar or an array of the field's shape) or `fn` (your function of (key, agent id)).
    """

    field: str
    low: Any = None
    high: Any = None
    values: tuple[Any, ...] | None = None
    fn: ParamFn | None = None

    def describe(self) -> str:
        """The spec as the command line writes it (`--private`), for config.json."""
        if self.fn is not None:
            return f"{self.field}=<function {getattr(self.fn, '__qualname__', self.fn)!s}>"
        if self.values is not None:
            return f"{self.field}=" + ",".join(_fmt(v) for v in self.values)
        return f"{self.field}={_fmt(self.low)}:{_fmt(self.high)}"

    def sample(self, key: Array, agent_id: Array, default: Any) -> Array:
        """This agent's value, shaped and typed like the field's `default`."""
        ref = jnp.asarray(default)
        if self.fn is not None:
            return jnp.asarray(self.fn(key, agent_id), ref.dtype)
        if self.values is not None:
            table = jnp.asarray(np.stack([np.broadcast_to(np.asarray(v), ref.shape)
                                          for v in self.values]), _value_dtype(ref))
            return table[jax.random.randint(key, (), 0, len(self.values))]
        low = jnp.broadcast_to(jnp.asarray(self.low, jnp.float32), ref.shape)
        high = jnp.broadcast_to(jnp.asarray(self.high, jnp.float32), ref.shape)
        return jax.random.uniform(key, ref.shape, jnp.float32, low, high)


def _value_dtype(ref: Array) -> Any:
    return jnp.float32 if jnp.issubdtype(ref.dtype, jnp.floating) else ref.dtype


def _fmt(v: Any) -> str:
    a = np.asarray(v)
    return f"{a.item():g}" if a.ndim == 0 else "[" + " ".join(f"{x:g}" for x in a.ravel()) + "]"


def agent_params(private: Sequence[PrivateParam], params: Any, key: Array, agent_id: Array
                 ) -> Any:
    """`Task.agent_params` of a task's `private` fields and default `params` (which may be
    traced: only their shapes and dtypes reach the draws, the rest passes through)."""
    k_agent = jax.random.fold_in(key, agent_id)
    updates = {}
    for i, p in enumerate(private):
        k = k_agent if i == 0 else jax.random.fold_in(k_agent, i)
        updates[p.field] = p.sample(k, agent_id, getattr(params, p.field))
    return params.replace(**updates) if updates else params


def agents_params(private: Sequence[PrivateParam], params: Any, key: Array, agent_ids: Array
                  ) -> Any:
    """`agent_params` for a vector of ids: every leaf gets a leading agent axis."""
    if not private:
        n = agent_ids.shape[0]
        return jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(jnp.asarray(x), (n, *jnp.shape(x))), params)
    return jax.vmap(partial(agent_params, private), (None, None, 0))(params, key, agent_ids)


@dataclass(frozen=True)
class Task:
    """An environment (gymnax API, no auto-reset), its default parameters and private dynamics.

    `reward_transform` (rewards (T, ...) -> rewards) is applied to the environment's rewards
    before the learner sees them; None (default) is the environment's own reward.
    `max_steps` caps episodes where the parameters hold no cap (`with_max_steps`); `target` is
    the return that counts as success (None: the task states none, so runs report returns and
    no success ratio); `shaping` the shaped reward the task recommends (module docstring).
    """

    env: Any
    params: Any
    name: str
    private: tuple[PrivateParam, ...] = ()
    reward_transform: Callable[[Array], Array] | None = None
    option: str = field(default="env", compare=False)  # the option errors name (CLI: --env)
    max_steps: int | None = None
    target: float | None = None
    shaping: str | None = None
    # Rollouts run on the host (a Gymnasium environment: `rollout(...)`), not inside jit.
    host: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for attr in ("reset_env", "step_env", "is_terminated", "observation_space",
                     "action_space"):
            if not callable(getattr(self.env, attr, None)):
                raise ConfigError(self.option, f"{self.name}: the environment has no "
                                  f"{attr}(); a task needs a gymnax Environment")
        self.obs_dim  # noqa: B018 - validate the spaces now, before any computation
        self.head  # noqa: B018
        for p in self.private:
            self._check_private(p)

    # --- spaces ------------------------------------------------------------------------------
    def _spaces(self) -> tuple[Any, Any]:
        """(observation space, action space); gymnax's depend on the parameters."""
        return self.env.observation_space(self.params), self.env.action_space(self.params)

    @property
    def obs_dim(self) -> int:
        shape = tuple(self._spaces()[0].shape)
        if len(shape) != 1:
            raise ConfigError(self.option, f"{self.name}: observations of shape {shape}; the "
                              "networks here take a vector (flatten them in your environment)")
        return int(shape[0])

    @property
    def head(self) -> Head:
        """The policy head the action space takes (privrl.nets.heads): Discrete → categorical,
        a 1-D bounded Box → Gaussian; anything else is a ConfigError."""
        space = self._spaces()[1]
        head = head_for(space)
        if head is None:
            raise ConfigError(self.option, f"{self.name}: {type(space).__name__} actions of "
                              f"shape {tuple(getattr(space, 'shape', ()) or ())} are not "
                              "supported: a Discrete space or a one-dimensional Box with "
                              "finite bounds")
        return head

    @property
    def num_actions(self) -> int:
        """The number of discrete actions (the categorical learners' networks are sized by
        it); continuous actions are a ConfigError naming the task's option."""
        head = self.head
        if not isinstance(head, Categorical):
            raise ConfigError(self.option, f"{self.name}: continuous actions (a Box of "
                              f"{head.dim}) are not supported here (it needs a discrete "
                              "action space); DP-REINFORCE, PGC-A3C and FedPG take them (a "
                              "Gaussian policy head, docs/environments.md)")
        return head.n

    # --- rewards -----------------------------------------------------------------------------
    def rewards(self, rewards: Array, mask: Array) -> Array:
        """The rewards the learner uses: the environment's, through `reward_transform`, zero on
        steps that did not happen."""
        if self.reward_transform is not None:
            rewards = self.reward_transform(rewards)
        return rewards * mask

    # --- private dynamics --------------------------------------------------------------------
    def with_private(self, *private: PrivateParam) -> Task:
        return replace(self, private=tuple(private))

    def with_max_steps(self, max_steps: int) -> Task:
        """The same task with episodes capped at `max_steps` (the parameters' cap too, if they
        have one)."""
        if hasattr(self.params, "max_steps_in_episode"):
            return replace(self, params=self.params.replace(max_steps_in_episode=max_steps),
                           max_steps=max_steps)
        return replace(self, max_steps=max_steps)

    @property
    def episode_steps(self) -> int | None:
        """The task's step limit: `max_steps` if set, else the parameters'
        `max_steps_in_episode` (gymnax's), else None (the task states none)."""
        if self.max_steps is not None:
            return self.max_steps
        cap = getattr(self.params, "max_steps_in_episode", None)
        return None if cap is None else int(cap)

    def agent_params(self, key: Array, agent_id: Array) -> Any:
        """Agent `agent_id`'s environment parameters: each private field drawn from
        fold_in(key, agent_id) (the first field; later ones fold in their index too)."""
        return agent_params(self.private, self.params, key, agent_id)

    def agents_params(self, key: Array, agent_ids: Array) -> Any:
        """`agent_params` for a vector of ids: every leaf gets a leading agent axis."""
        return agents_params(self.private, self.params, key, agent_ids)

    def private_spec(self) -> list[str]:
        return [p.describe() for p in self.private]

    def _check_private(self, p: PrivateParam) -> None:
        opt = "private"
        if not hasattr(self.params, p.field):
            fields = ", ".join(getattr(self.params, "__dataclass_fields__", {}))
            raise ConfigError(opt, f"{self.name} has no parameter {p.field!r} (it has: "
                              f"{fields})")
        ref = np.asarray(getattr(self.params, p.field))
        given = [x is not None for x in (p.low, p.values, p.fn)]
        if sum(given) != 1 or ((p.low is None) != (p.high is None)):
            raise ConfigError(opt, f"{p.field}: give exactly one of low:high, a list of "
                              "values, or a function")
        if p.fn is not None:
            out = jax.eval_shape(p.fn, jax.random.key(0), jnp.int32(0))
            if tuple(out.shape) != ref.shape:
                raise ConfigError(opt, f"{p.field}: your function returns shape "
                                  f"{tuple(out.shape)}, the field has shape {ref.shape}")
            return
        if p.values is not None:
            if not p.values:
                raise ConfigError(opt, f"{p.field}: an empty list of values")
            given_values = p.values
        else:
            if not np.issubdtype(ref.dtype, np.floating):
                raise ConfigError(opt, f"{p.field} is an integer/boolean field: give a list "
                                  "of values, not a range")
            given_values = (p.low, p.high)
        # Shape, finiteness and order are all we check: a field's domain is the environment's
        # (a default's sign says nothing of it: a drift of 0 is a valid probability), so the
        # user's range is respected as given.
        candidates = []
        for v in given_values:
            try:
                c = np.asarray(v, float)
            except (TypeError, ValueError):
                raise ConfigError(opt, f"{p.field}: {v!r} is not a number or numeric "
                                  "array") from None
            try:
                np.broadcast_to(c, ref.shape)
            except ValueError:
                raise ConfigError(opt, f"{p.field} has shape {ref.shape}; {_fmt(c)} does not "
                                  "broadcast to it") from None
            if not np.all(np.isfinite(c)):
                raise ConfigError(opt, f"{p.field}: values must be finite, got {_fmt(c)}")
            candidates.append(c)
        if p.values is None and np.any(candidates[0] > candidates[1]):
            raise ConfigError(opt, f"{p.field}: low {_fmt(p.low)} > high {_fmt(p.high)}")


@dataclass(frozen=True)
class GymnasiumTask(Task):
    """A Gymnasium environment (a `Discrete` action space, vector observations), rolled out on
    the host (`rollout`) into the jitted rollout's arrays (privrl.envs.gymnasium_env).

    `env` is one instance (its spaces and attribute defaults); `make_env()` makes each rollout
    environment (a registry id's `env_id` is made with its time limit set to `max_steps`).
    `params` is derived: the private attributes' defaults, drawn per agent like gymnax fields.
    """

    make_env: Callable[[], Any] | None = None
    env_id: str | None = None  # a Gymnasium registry id (None: a user callable's environment)
    _pool: list = field(default_factory=list, init=False, compare=False, repr=False)
    # lanes -> the id's vector environment's lanes (None: it has none that fits, `lanes`)
    _vectors: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    host: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "private", tuple(  # each field as the environment spells it
            replace(p, field=attribute_name(self.env, p.field, self.name)) for p in self.private))
        object.__setattr__(self, "params", attribute_defaults(
            self.env, [p.field for p in self.private], self.name))
        self.obs_dim  # noqa: B018 - validate the spaces now, before any computation
        self.head  # noqa: B018
        for p in self.private:
            self._check_private(p)

    def _spaces(self) -> tuple[Any, Any]:
        return self.env.observation_space, self.env.action_space

    def with_max_steps(self, max_steps: int) -> GymnasiumTask:
        """Episodes capped at `max_steps` (a registry id's time limit is set to it; a user's
        environment keeps its own, and the rollout stops at the cap)."""
        return replace(self, max_steps=max_steps)

    @property
    def episode_steps(self) -> int | None:
        """`max_steps` if set, else the environment's own time limit (None: it states none)."""
        return self.max_steps if self.max_steps is not None else time_limit(self.env)

    @property
    def grows(self) -> bool:
        """Whether the environment ends its own episodes (it states no step limit): then the
        cap is a safety cap and the rollout's arrays grow with the episodes
        (`rollout_host`'s `grow`)."""
        return time_limit(self.env) is None

    def envs(self, n: int) -> list[Any]:
        """`n` rollout environments, made once and reused (each rollout resets them)."""
        while len(self._pool) < n:
            self._pool.append(self.make_env() if self.env_id is None
                              else make_registered(self.env_id, self.max_steps, self.option))
        return self._pool[:n]

    def lanes(self, n: int, params: Any) -> VectorLanes | list[Any]:
        """The n lanes a rollout steps, lane i with its private attributes from `params`
        (leaves with a leading axis of size n): the registry id's own vector environment, all
        lanes in one call, where it has one that plays the same episodes
        (`gymnasium_env.vector_lanes`: CartPole), else `envs(n)`, one call each."""
        if n not in self._vectors:
            self._vectors[n] = None if self.env_id is None else vector_lanes(
                self.env_id, n, self.max_steps, [p.field for p in self.private],
                make_registered(self.env_id, self.max_steps, self.option))
        lanes = self._vectors[n]
        if lanes is None:
            set_attributes(self.envs(n), params)
            return self.envs(n)
        lanes.set_attributes(params)
        return lanes

    def rollout(self, params: Any, policy: Callable[[Array, Any], Any], key: Array,
                num_envs: int, max_steps: int, active: Any = None,
                observe: Callable[[Array, Any], Any] | None = None) -> Trajectory:
        """`rollout_episodes` on the host: environment i gets its private attributes from
        `params` (leaves with a leading axis of size num_envs, as `agents_params` gives) before
        its reset, then plays one episode; returns a Trajectory of numpy arrays. `observe`:
        what the learner sees of the observations (`rollout_host`)."""
        return rollout_host(self.lanes(num_envs, params), policy, key, max_steps, active,
                            observe, self.grows)

    def rollout_trials(self, params: Any, policy: Callable[[Any, Any], Any], keys: Any,
                       num_envs: int, max_steps: int, active: Any = None) -> Trajectory:
        """`rollout` for T trials at once, one policy call per step for all of them
        (`rollout_host_trials`: policy(step keys (T, 2), obs (T, num_envs, obs_dim)) -> (T,
        num_envs)): `params` leaves (T, num_envs, ...), `keys` the T rollout keys, `active` (T,
        num_envs). Trial k's episodes are `rollout`'s from keys[k]; arrays (T, ...)."""
        keys = list(keys)
        n = len(keys) * num_envs
        params = jax.tree_util.tree_map(  # trial-major lanes: trial k's agents k·P .. k·P + P
            lambda x: np.asarray(x).reshape(n, *np.shape(x)[2:]), jax.device_get(params))
        return rollout_host_trials(self.lanes(n, params), policy, keys, max_steps, active,
                                   self.grows)

    def start(self, params: Any, key: Array) -> tuple[Any, np.ndarray]:
        """One agent's environment for a learner that steps it itself (`env.step(action)`):
        the private attributes of `params` (one agent's, as `agent_params` gives) set, reset
        with a seed drawn from `key`; returns (environment, first observation as float32)."""
        env = self.envs(1)[0]
        set_attributes([env], jax.tree_util.tree_map(lambda x: np.asarray(x)[None], params))
        seed = int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))
        return env, np.asarray(env.reset(seed=seed)[0], np.float32)


# --- making tasks ----------------------------------------------------------------------------
# Survival tasks: +1 per step until the episode ends in failure (CartPole's pole falls), so the
# end is the only news. Their shaped reward, "failure" (−1 on the fall, 0 otherwise), has the
# same best policy and is what a critic without bias can fit (docs/pgc-a3c-fidelity.md).
SURVIVAL_TASKS = ("CartPole-v0", "CartPole-v1")


def _shaping(env_id: str) -> str | None:
    return "failure" if env_id in SURVIVAL_TASKS else None


def gymnax_task(env_id: str, option: str = "env") -> Task:
    """A task from the gymnax registry (`gymnax.registered_envs`). A port of a Gymnasium task
    (the same id and step limit: CartPole, Acrobot, MountainCar, ...) takes Gymnasium's
    reward threshold as its target."""
    import gymnax

    if env_id not in gymnax.registered_envs:
        raise unknown_gymnax(env_id, gymnax.registered_envs, option)
    env, params = gymnax.make(env_id)
    steps, threshold = registry_episode(env_id)
    own = getattr(params, "max_steps_in_episode", None)
    target = threshold if steps is not None and own is not None and int(own) == steps else None
    return Task(env, params, f"gymnax:{env_id}", option=option, target=target,
                shaping=_shaping(env_id))


def gymnasium_task(env_id: str, option: str = "env") -> GymnasiumTask:
    """A task from the Gymnasium registry (`gymnasium:<id>`): its time limit and reward
    threshold are the spec's."""
    env = make_registered(env_id, option=option)
    return GymnasiumTask(env, None, f"gymnasium:{env_id}", env_id=env_id, option=option,
                         target=reward_threshold(env), shaping=_shaping(env_id))


def callable_task(spec: str, option: str = "env") -> Task:
    """A task from `module:callable`, a callable returning `(gymnax env, env params)`, a Task or
    a Gymnasium Env (called again for each rollout environment)."""
    fn = load_callable(spec, option)
    out = call_user(fn, spec, option)
    if isinstance(out, Task):
        if not out.host:
            check_gymnax_env(out.env, out.params, spec, option)
        return replace(out, option=option)
    if not (isinstance(out, tuple) and len(out) == 2):
        if not is_gymnasium_env(out):
            raise ConfigError(option, f"{spec}() must return (gymnax_env, env_params), a "
                              f"Gymnasium Env or a Task, got {type(out).__name__}")
        if call_user(fn, spec, option) is out:  # called again for every rollout environment
            raise ConfigError(option, f"{spec}() returned the same Gymnasium environment twice: "
                              "it must make a new one on each call (one per parallel agent)")
        check_gymnasium_env(out, spec, option)
        return GymnasiumTask(out, None, spec, make_env=fn, option=option,
                             target=reward_threshold(out))
    check_gymnax_env(out[0], out[1], spec, option)
    return Task(out[0], out[1], spec, option=option)


def make_task(spec: str, private: Sequence[PrivateParam] = (), option: str = "env") -> Task:
    """`gymnax:<id>`, `gymnasium:<id>` or `<module>:<callable>`; `private` per-agent
    parameters (Gymnasium: attributes of the unwrapped environment)."""
    check_env(spec, option)
    if spec.startswith("gymnasium:"):
        task: Task = gymnasium_task(spec.removeprefix("gymnasium:"), option)
    elif spec.startswith("gymnax:"):
        task = gymnax_task(spec.removeprefix("gymnax:"), option)
    else:
        task = callable_task(spec, option)
    return task.with_private(*private) if private else task


def parse_private(text: str, option: str = "private") -> PrivateParam:
    """`field=low:high` (uniform) or `field=v1,v2,...` (one of the values) as a PrivateParam
    (the text's checks: privrl.envs.spec.parse_private_text)."""
    name, bounds, values = parse_private_text(text, option)
    if bounds is not None:
        return PrivateParam(name, *bounds)
    return PrivateParam(name, values=values)


def cartpole_task(version: str = "v1", gravities: tuple[float, ...] | None = None) -> Task:
    """The CartPole task of the paper systems: gymnax CartPole with Gymnasium's CartPole-`version`
    episode (v0: 200 steps, solved at 195, paper 000's; v1: 500 steps, solved at 475) and
    CartPole's shaping; with `gravities`, each agent's gravity is one of them (the exact draw
    of `envs.cartpole.agent_gravity`), without, gymnax's default gravity for everyone."""
    from privrl.envs.cartpole import PAPER_GRAVITIES, CartPoleSpec, make_cartpole

    steps, target = registry_episode(f"CartPole-{version}")
    if steps is None:
        raise ValueError(f"unknown CartPole version {version!r} (v0 or v1)")
    env, params = make_cartpole(CartPoleSpec(steps, tuple(gravities or PAPER_GRAVITIES)))
    private = () if gravities is None else (PrivateParam("gravity", values=tuple(gravities)),)
    return Task(env, params, "gymnax:CartPole-v1", private, target=target,
                shaping=_shaping(f"CartPole-{version}"))


def configured_task(env: str | None, private: Sequence[str], default: Callable[[], Task]
                    ) -> Task:
    """The task a config names: `default()` (the system's paper task) when `env` is None and no
    `private` spec is given, else `make_task(env or "gymnax:CartPole-v1")` with the parsed
    `private` specs."""
    if env is None and not private:
        return default()
    specs = tuple(parse_private(p) for p in private)
    return make_task(env or "gymnax:CartPole-v1", specs)


def resolve_task(config: Any, task: Task | None, default: Callable[[], Task],
                 target: str = "target_return") -> tuple[Any, Task]:
    """The task a run uses and its config as config.json records it. With `task` (Python API)
    the config is made to name it (`env`, `private_params`); without, the task is the one
    `config.env`/`config.private_params` name (`configured_task`), `default()` when neither is
    set. The task owns its episode: `config.max_episode_steps` None takes the task's step
    limit (set, the task is capped at it; a Gymnasium environment that states none ends its
    own episodes, under `HOST_EPISODE_CAP`), and the config field `target` None the task's
    success target (None where the task has none: the run reports returns only)."""
    if task is None:
        task = configured_task(config.env, config.private_params, default)
    else:
        config = replace(config, env=task.name, private_params=tuple(task.private_spec()))
    if config.max_episode_steps is not None:
        task = task.with_max_steps(config.max_episode_steps)
    elif task.episode_steps is None and task.host:  # it ends its own episodes (Gymnasium's way)
        task = task.with_max_steps(HOST_EPISODE_CAP)
    elif task.episode_steps is None:
        raise ConfigError("max_episode_steps", f"{task.name} states no step limit (no "
                          "max_steps_in_episode parameter): set the episode cap (a gymnax "
                          "rollout is compiled for a fixed length)")
    updates = {"max_episode_steps": task.episode_steps}
    if getattr(config, target) is None:
        updates[target] = task.target
    return replace(config, **updates), task


def check_module(module: Any, task: Task, outputs: str, option: str = "model") -> Any:
    """Check that a flax module maps one observation to `outputs`: "logits" or "policy" (the
    task's policy head's outputs: (num_actions,) logits, or on a Box a Gaussian's (μ, log σ),
    2d), "logits,value" (a pair: those and ()) or "q" ((num_actions,) Q-values); a
    ConfigError naming `option` otherwise. Returns the module."""
    x = jnp.zeros((task.obs_dim,), jnp.float32)
    try:
        variables = jax.eval_shape(module.init, jax.random.key(0), x)
        out = jax.eval_shape(module.apply, variables, x)
    except Exception as e:
        raise ConfigError(option, f"{type(module).__name__} fails on one observation of shape "
                          f"({task.obs_dim},): {type(e).__name__}: {e}") from None
    # a policy's outputs: logits, or on a Box task a Gaussian's (μ, log σ)
    a = (task.num_actions,) if outputs == "q" else (task.head.outputs,)
    if outputs == "logits,value":
        ok = (isinstance(out, tuple) and len(out) == 2 and tuple(out[0].shape) == a
              and tuple(out[1].shape) == ())
        want = f"a pair (logits of shape {a}, a scalar value)"
    else:
        ok = hasattr(out, "shape") and tuple(out.shape) == a
        kind = ("Q-values" if outputs == "q" else "policy outputs (μ, log σ)"
                if task.head.continuous else "logits")
        want = f"{kind} of shape {a}"
    if not ok:
        got = jax.tree_util.tree_map(lambda s: tuple(s.shape), out)
        raise ConfigError(option, f"{type(module).__name__} must return {want} for one "
                          f"observation, got {got}")
    if "params" not in variables or len(variables) != 1:
        raise ConfigError(option, f"{type(module).__name__} must have parameters only (no "
                          f"state collections), got {list(variables)}")
    return module
