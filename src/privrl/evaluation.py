"""Evaluating a run's saved policy (`privrl evaluate`, `evaluate_run`): returns on a task.

The policy (privrl.policy) plays `episodes` episodes per trial, greedy by default, on the
environment it was trained on or on the one the caller names. The recorded environment is used
only when it is a registry id (gymnax or Gymnasium, no module in it) or privrl's own: a
`module:callable` written in a run file is never imported, since a tampered file would choose
what code runs; the caller names such a task with `env`. Results are written beside the run's
own files under fresh names (evaluate-N.json, evaluate-N.csv); nothing is ever overwritten.

A Grid-World run of FedRL or a baseline (its networks acting together) is played by its system
(privrl.policy.player: privrl.systems.fedrl.played): greedily, without noise, one episode per
test map of the run's own maps, its success and return per map; what its summary.json reports
for that variant. A Text2Action run's (privrl.systems.fedrl_text.played) tags each trial's
fold's test texts, from the corpus the caller names (`data`): its F1 and average reward per
step, what the run reports for test-clean (greedy).
"""

from __future__ import annotations

import csv
import io
import math
import os
import struct
import time
import types
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.config import ConfigError
from privrl.policy import FILE, Policy, data_argument, load_policy, one_network, player, read_saved

if TYPE_CHECKING:
    from privrl.envs.task import Task

# privrl's own environments a run file may name (their modules are privrl's).
BUILTIN_ENVS = ("privrl.envs.line1d:make_line1d",)
MAX_EPISODES = 100_000
EPISODES = 10  # per trial, by default
BATCH = 256  # episodes rolled out at once


@dataclass
class Evaluation:
    """Returns of each evaluated policy: rows (trial, learner) and their (episodes,) returns."""

    run_dir: Path
    env: str
    episodes: int
    seed: int
    max_steps: int
    sample: bool
    rows: list[tuple[int, int]]
    returns: np.ndarray  # (len(rows), episodes) float64
    success: np.ndarray | None = None  # (len(rows), episodes) bool: Grid-World's goal met
    # Text2Action: per row, its fold's test-text scores (t2a.scores: F1, AvgRwd, fold, run);
    # returns is then (len(rows), 1), each row's average reward per step
    scores: list[dict[str, Any]] | None = None
    head: str = "logits"  # the policy's head (privrl.policy.HEADS): how its actions are played

    @property
    def policy_label(self) -> str:
        """How the actions were chosen: a continuous (Gaussian) policy's greedy action is
        its mean action, a discrete one's the argmax; sampled, a Q-network's is ε-greedy."""
        if self.sample:
            return ("sampled (ε-greedy)" if self.head == "q" else
                    "sampled (Gaussian)" if self.head.startswith("gaussian") else "sampled")
        return "mean action" if self.head.startswith("gaussian") else "greedy (argmax)"

    @property
    def policy_note(self) -> str:
        """Which actions were played and why the other choice can give other returns."""
        if self.scores is not None or self.success is not None:  # a system's own players
            return "Played greedily, as the run's own test evaluation does."
        other = "--sample (sample=True) plays sampled actions" if not self.sample else (
            "without --sample the policy plays its "
            + ("mean action" if self.head.startswith("gaussian") else "argmax action"))
        return (f"Actions played: {self.policy_label}; {other}. The two can differ: "
                "training played sampled actions, so a policy can rely on its randomness "
                "(its returns then drop when it plays greedily) or be hurt by it.")

    def write(self) -> tuple[Path, Path]:
        """evaluate-N.json and evaluate-N.csv in the run directory (`write_evaluation`)."""
        return write_evaluation(self)

    def summary(self) -> dict[str, Any]:
        per = [{"trial": t, "learner": m, "mean": float(r.mean()), "std": float(r.std()),
                "min": float(r.min()), "max": float(r.max())}
               for (t, m), r in zip(self.rows, self.returns, strict=True)]
        success = {}
        if self.success is not None:
            for row, s in zip(per, self.success, strict=True):
                row["success_rate"] = float(s.mean())
            success = {"success_rate": float(self.success.mean())}
        if self.scores is not None:
            for row, sc in zip(per, self.scores, strict=True):
                row.update(sc)
            success = {"f1": float(np.mean([sc["f1"] for sc in self.scores]))}
        means = self.returns.mean(1)
        return {"run": str(self.run_dir), "env": self.env, "episodes": self.episodes,
                "seed": self.seed, "max_steps": self.max_steps,
                "policy": self.policy_label, "policy_note": self.policy_note,
                "mean_return": float(self.returns.mean()), **success,
                "std_over_trials": float(means.std(ddof=1)) if means.size > 1 else 0.0,
                "per_trial": per}


def evaluate_run(run_dir: str | os.PathLike, env: str | Task | None = None,
                 episodes: int | None = None, trial: int | None = None, seed: int = 0,
                 max_steps: int | None = None, sample: bool = False, model: Any = None,
                 data: str | os.PathLike | None = None) -> Evaluation:
    """Returns of a run's saved policy: every trial (or `trial`), every learner of it, over
    `episodes` episodes (default EPISODES; a Grid-World run: each of its test maps once) from
    `seed`. `env`: the task to play, a spec or a Task (default: the one trained on);
    `max_steps`: the episode cap (default: the training cap, else the
    task's own); `model`: your flax module, or `module:callable` naming it (imported only
    after the other arguments and the policy file are checked), for a policy trained with
    one, and only then; `data`: the corpus directory a Text2Action run was trained on (its
    networks tag that corpus's texts), required for such a run and refused for any other.
    ConfigError names a bad argument; RunFileError a missing or tampered
    policy file."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError("run_dir", f"{run_dir} is not a run directory")
    if episodes is not None and (isinstance(episodes, bool) or not isinstance(episodes, int)
                                 or not 1 <= episodes <= MAX_EPISODES):
        raise ConfigError("episodes", f"must be an integer in [1, {MAX_EPISODES:,}], "
                          f"got {episodes!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError("seed", f"must be an integer in [0, 2^32), got {seed!r}")
    description, theta, path = read_saved(run_dir)
    played = player(description)
    more = data_argument(played, description, data)
    if played is not None:
        return _evaluate_networks(played, run_dir, description, theta, path, env, episodes,
                                  trial, seed, max_steps, sample, model, more)
    one_network(description, path)
    episodes = EPISODES if episodes is None else episodes
    desc = description["model"]
    if model is not None and desc["architecture"] != "module":
        raise ConfigError("model", f"the policy's network is privrl's own ({desc['architecture']}"
                          "), rebuilt from the file; a model is only for a run trained with "
                          "your own")
    if isinstance(model, str):
        from privrl.plugins import load_module

        model = load_module(model, "model")
    first = _load(run_dir, 0, 0, model)
    d = first.description
    trials = _trials(trial, d["trials"])
    task = _task(env, first)
    cap = _cap(task, max_steps, first)
    task = task.with_max_steps(cap)
    rows = [(t, m) for t in trials for m in range(d["learners"])]
    policies = [_load(run_dir, t, m, model) for t, m in rows]
    returns = play(policies, task, episodes, seed, cap, sample)
    return Evaluation(run_dir, task.name, episodes, seed, cap, sample, rows, returns,
                      head=first.description["head"])


def _trials(trial: int | None, n: int) -> list[int]:
    """The trials to evaluate: all `n`, or `trial` (ConfigError if the run lacks it)."""
    if trial is None:
        return list(range(n))
    if isinstance(trial, bool) or not isinstance(trial, int) or not 0 <= trial < n:
        raise ConfigError("trial", f"the run has trials 0..{n - 1}, got {trial!r}")
    return [trial]


def _evaluate_networks(played: Any, run_dir: Path, description: dict[str, Any],
                       theta: np.ndarray, path: Path, env: Any, episodes: int | None,
                       trial: int | None, seed: int, max_steps: int | None, sample: bool,
                       model: Any, more: dict[str, Any]) -> Evaluation:
    """A run's networks acting together, played by their system (`played`: Grid-World's,
    privrl.systems.fedrl.played, on the run's own test maps; Text2Action's,
    privrl.systems.fedrl_text.played, on each fold's test texts of the corpus `more["data"]`)."""
    own = f"{description['system']}'s networks play the run's own test episodes"
    for name, value, why in (("env", env, "on its own maps or texts"),
                             ("max_steps", max_steps, "for their own lengths"),
                             ("model", model, "with privrl's own networks")):
        if value is not None:
            raise ConfigError(name, f"{own} {why}; leave it out")
    if sample:
        raise ConfigError("sample", f"{own} greedily (the run's noise-free test evaluation); "
                          "leave it out")
    trials = _trials(trial, theta.shape[0])
    what, cap, returns, extra = played.evaluate(run_dir, description, theta, path, trials,
                                                episodes, seed, **more)
    return Evaluation(run_dir, what, returns.shape[1], seed, cap, False,
                      [(t, 0) for t in trials], returns, **extra)


def play(policies: list[Policy], task: Task, episodes: int, seed: int, max_steps: int,
         sample: bool = False) -> np.ndarray:
    """(len(policies), episodes): the returns (the environment's own rewards, summed) of
    each policy (one run's: one network, each its θ) on `task`, episodes capped at
    `max_steps`, played in batches of at most BATCH; every policy sees the same episodes'
    keys (and, with private parameters, the same agents)."""
    import jax

    act = policies[0].with_theta(sample)
    return _returns(task, [p.theta for p in policies], act, episodes, jax.random.key(seed),
                    max_steps, BATCH)


def _returns(task: Task, thetas: list[Any], act: Any, episodes: int, root: Any,
             max_steps: int, batch: int, compiler_options: dict[str, Any] | None = None,
             act_key: Any = None) -> np.ndarray:
    """(len(thetas), episodes): the returns of `act(θ, key, obs)` for each θ on `task`
    (`play`), in batches of at most `batch` episodes, keys from the JAX key `root`; the
    rollout compiled with XLA's `compiler_options` (None: JAX's defaults).

    `act_key`: what determines `act`'s program (`_program_key`), None if unknown. With it, and
    with a key for the environment and the private parameters, the programs are the stable
    jitted functions of `_jitted` with those as static arguments: a run, a sweep's group or a
    test on an equal task (built afresh) finds them again in JAX's cache. Without, they are
    compiled for this call alone."""
    import jax

    stable_draws, stable_rollout = _jitted(tuple(sorted((compiler_options or {}).items())))
    private = _Static.of(task.private)
    if private is not None:
        draws = partial(stable_draws, private)
    else:  # no key: compiled for this call alone, as a closure of the task's private fields
        draws = jax.jit(partial(_draws, _Static(None, task.private)), static_argnums=3,
                        compiler_options=compiler_options)
    env = None if task.host else _Static.of(task.env)
    if env is not None and act_key is not None:
        rollout = partial(stable_rollout, env, _Static(("act", act_key), act))
    else:  # no key (or a host task, whose rollout is not jitted): as above
        rollout = jax.jit(partial(_rollout, _Static(None, task.env), _Static(None, act)),
                          static_argnums=(0, 1), compiler_options=compiler_options)

    out = np.zeros((len(thetas), episodes))
    for start in range(0, episodes, batch):
        n = min(batch, episodes - start)
        params, k_roll = draws(task.params, root, start, n)
        for i, theta in enumerate(thetas):
            if task.host:
                traj = task.rollout(params, partial(act, theta), k_roll, n, max_steps)
            else:
                traj = rollout(n, max_steps, theta, params, k_roll)
            # float32 products (numpy's are IEEE's, as XLA's), summed in float64
            rewards = np.asarray(traj.rewards) * np.asarray(traj.mask)
            out[i, start:start + n] = rewards.astype(np.float64).sum(0)
    return out


def _rollout(env: _Static, act: _Static, n: int, max_steps: int, theta: Any, params: Any,
             key: Any) -> Any:
    """`n` episodes of `act.value(θ, key, obs)` on `env.value`, one per agent's `params`."""
    from privrl.envs.rollout import rollout_episodes

    return rollout_episodes(env.value, params, lambda k, obs: act.value(theta, k, obs), key, n,
                            max_steps)


def _draws(private: _Static, params: Any, root: Any, start: Any, n: int) -> tuple[Any, Any]:
    """A batch's agents' dynamics (the task's `private` fields drawn over its default `params`)
    and its rollout key, in one program (op by op, JAX compiled each of their ~20 operations
    as a program of its own)."""
    import jax
    import jax.numpy as jnp

    from privrl.envs.task import agents_params

    k_params, k_roll = jax.random.split(jax.random.fold_in(root, start))
    return agents_params(private.value, params, k_params, start + jnp.arange(n)), k_roll


@cache
def _jitted(options: tuple[tuple[str, Any], ...]) -> tuple[Any, Any]:
    """(draws, rollout) jitted once per process for XLA's `options`: JAX keeps their compiled
    programs under their static arguments (`_Static`), their arguments' shapes and types."""
    import jax

    kw = {"compiler_options": dict(options) if options else None}
    return (jax.jit(_draws, static_argnums=(0, 4), **kw),
            jax.jit(_rollout, static_argnums=(0, 1, 2, 3), **kw))


def _plain_class(c: type) -> bool:
    """Whether instances of `c` keep their state in their `__dict__` alone: `object`,
    `Generic`, or a class written in Python (its own namespace holds no C-level members,
    methods or slots). Not a C type such as a bound method or a `functools.partial`, whose
    `__dict__` holds none of what they call."""
    import typing

    if c is object or c is typing.Generic:
        return True
    return not c.__dict__.get("__slots__") and not any(
        isinstance(v, _C_MEMBERS) or (isinstance(v, types.GetSetDescriptorType)
                                      and k not in ("__dict__", "__weakref__"))
        for k, v in c.__dict__.items())


_C_MEMBERS = (types.MemberDescriptorType, types.MethodDescriptorType,
              types.WrapperDescriptorType, types.BuiltinFunctionType)


class _Static:
    """A static argument of the jitted rollout and draws: `value` (an environment, a policy's
    action function, a task's private fields), equal to another `_Static` exactly when their
    `key`s are (`_program_key`: what determines the program `value` traces to). JAX's cache
    holds the first one it compiled for: an equal key must mean the same program."""

    __slots__ = ("key", "value")

    def __init__(self, key: Any, value: Any) -> None:
        self.key, self.value = key, value

    @classmethod
    def of(cls, value: Any) -> _Static | None:
        """`value` under its `_program_key`, None when it has none."""
        key = _program_key(value)
        return None if key is None else cls(key, value)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is _Static and self.key is not None
                                 and self.key == other.key)


_KEY_DEPTH = 8  # nested objects keyed at most this deep (deeper: no key)


def _program_key(value: Any, depth: int = 0) -> Any:
    """A hashable key equal for two values exactly when the same code traces them to the same
    program: the value's type with its contents, recursively. Numbers by type and bits (1,
    1.0 and True, 0.0 and -0.0 differ), arrays by dtype, shape and bytes, plain objects (an
    environment, a frozen dataclass: a head, a private field) by type and attributes,
    functions without closures by identity (a module's function: the same object in every
    task); None for anything else (a closure, an object with slots, a tracer...), whose
    programs are then compiled afresh, as a wrong match would be a wrong result."""
    import jax

    if depth > _KEY_DEPTH:
        return None
    t = type(value)
    if value is None or t in (bool, int, str, bytes):
        return (t, value)
    if t is float:
        return (t, struct.pack("<d", value))
    if t is complex:
        return (t, struct.pack("<dd", value.real, value.imag))
    if t in (tuple, list):
        items = tuple(_program_key(v, depth + 1) for v in value)
        return None if any(k is None for k in items) else (t, items)
    if t is dict:
        if not all(type(k) is str for k in value):
            return None
        items = tuple((k, _program_key(v, depth + 1)) for k, v in sorted(value.items()))
        return None if any(k is None for _, k in items) else (t, items)
    if isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, np.ndarray | np.generic | jax.Array):
        a = np.asarray(value)
        if a.dtype.hasobject:
            return None
        return ("array", t, a.dtype.str, a.shape, getattr(value, "weak_type", False),
                a.tobytes())
    if isinstance(value, types.FunctionType):
        return ("function", value) if value.__closure__ is None else None
    if isinstance(value, type | types.ModuleType):
        return ("object", value)
    attrs = getattr(value, "__dict__", None)
    if type(attrs) is not dict or not all(_plain_class(c) for c in t.__mro__):
        return None
    items = _program_key(attrs, depth + 1)
    return None if items is None else ("instance", t, items)


def write_evaluation(ev: Evaluation) -> tuple[Path, Path]:
    """evaluate-N.json (the summary) and evaluate-N.csv (trial, learner, episode, return) in
    the run directory, N the first number for which neither exists (each file created
    exclusively, never through a link: nothing is overwritten)."""
    from privrl.runfile import json_text, versions

    summary = json_text({**ev.summary(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                         "versions": versions()}).encode()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if ev.scores is not None:  # Text2Action: a trial's fold's test texts scored together
        keys = ("fold", "run", "texts", "f1", "precision", "recall", "avg_reward")
        w.writerow(["trial", "learner", *keys])
        for (t, m), sc in zip(ev.rows, ev.scores, strict=True):
            w.writerow([t, m, *(f"{sc[k]:.6g}" for k in keys)])
    elif ev.success is None:
        w.writerow(["trial", "learner", "episode", "return"])
        for (t, m), r in zip(ev.rows, ev.returns, strict=True):
            w.writerows([t, m, e, f"{x:.6g}"] for e, x in enumerate(r))
    else:  # Grid-World: an episode per test map, and whether it met
        w.writerow(["trial", "learner", "episode", "return", "success"])
        for (t, m), r, ok in zip(ev.rows, ev.returns, ev.success, strict=True):
            w.writerows([t, m, e, f"{x:.6g}", int(o)] for e, (x, o) in enumerate(zip(r, ok,
                                                                                  strict=True)))
    n = 0
    while True:
        n += 1
        paths = (ev.run_dir / f"evaluate-{n}.json", ev.run_dir / f"evaluate-{n}.csv")
        if any(p.exists() or p.is_symlink() for p in paths):
            continue
        try:
            _exclusive(paths[0], summary)
        except FileExistsError:
            continue
        try:
            _exclusive(paths[1], buf.getvalue().encode())
        except FileExistsError:
            paths[0].unlink()
            continue
        return paths


def _exclusive(path: Path, data: bytes) -> None:
    """Create `path` (never through a link, never over a file) and write `data`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _load(run_dir: Path, trial: int, learner: int, model: Any) -> Policy:
    try:
        return load_policy(run_dir, trial, learner, model)
    except ConfigError:
        raise
    except ValueError as e:
        if type(e) is ValueError:  # a trial the run lacks; RunFileError passes through
            raise ConfigError("trial", str(e)) from None
        raise


def _task(env: str | Task | None, policy: Policy) -> Task:
    """The task to evaluate on, checked against the policy's spaces."""
    from privrl.envs.task import Task, make_task

    if env is None:
        env = policy.env
        if not _registry_id(env):
            raise ConfigError("env", f"the policy was trained on {env!r}, which is not a "
                              "registry id; name the task to evaluate on (a module:callable "
                              f"in {FILE} is never imported)")
    task = env if isinstance(env, Task) else make_task(env)
    if task.obs_dim != policy.obs_dim or task.head != policy.action_head:
        raise ConfigError("env", f"{task.name} has {task.obs_dim}-dimensional observations "
                          f"and actions {task.head}; the policy takes {policy.obs_dim} and "
                          f"acts with {policy.action_head}")
    return task


def _registry_id(env: str) -> bool:
    """A gymnax or Gymnasium registry id (making it imports no module the id names), or one
    of privrl's own environments."""
    if env in BUILTIN_ENVS:
        return True
    kind, _, name = env.partition(":")
    if kind == "gymnax":
        import gymnax

        return name in gymnax.registered_envs
    if kind == "gymnasium" and ":" not in name:  # "module:Env-v0" would import module
        import gymnasium

        return name in gymnasium.registry
    return False


def _cap(task: Task, max_steps: int | None, policy: Policy) -> int:
    """The episode cap: `max_steps`, else the training run's, else the task's own."""
    if max_steps is not None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not (
                1 <= max_steps <= 10**6):
            raise ConfigError("max_steps", f"must be an integer in [1, 10^6], got {max_steps!r}")
        return max_steps
    if policy.max_episode_steps is not None:
        return policy.max_episode_steps
    own = getattr(task.params, "max_steps_in_episode", None)
    if own is None and task.host:
        spec = getattr(task.env, "spec", None)
        own = getattr(spec, "max_episode_steps", None)
    if own is None:
        raise ConfigError("max_steps", f"{task.name} has no episode cap of its own; give one")
    return int(own)


# --- did it learn? the random baseline and the verdict of every run ---------------------------
# A run's final returns are compared with a uniform-random policy's on the same task: same
# environment, episode cap and per-agent dynamics, about as many episodes as the final window
# holds, from a key of its own (the run's seed folded with RANDOM_STREAM: the run's own random
# stream is never touched, so its metrics do not change).
LEVEL = 0.95  # the verdict's confidence level
RANDOM_STREAM = 0x52414E44  # "RAND": the baseline's key, folded into the run's seed
RANDOM_EPISODES = 1000  # a run's baseline at most, on a task rolled out inside jit
RANDOM_EPISODES_HOST = 32  # at most on a task stepped on the host (Gymnasium); its batch
_RANDOM_FLOATS = 4_000_000  # a jitted batch's padded buffers stay under ~16 MB
# The random rollout runs for milliseconds and compiles for seconds: compiled with XLA's
# optimizations off it compiles ~6x faster (benchmarks/log/23-verdict.md).
_RANDOM_COMPILE = {"xla_backend_optimization_level": 0,
                   "xla_llvm_disable_expensive_passes": True}


def random_returns(task: Task, episodes: int, seed: int, max_steps: int | None = None
                   ) -> np.ndarray:
    """(episodes,) returns (the environment's own rewards, summed) of a uniform-random policy
    on `task`: each step's action drawn uniformly from the action space (a Box: uniform within
    its bounds), the agents' private dynamics drawn as the task draws them, episodes capped at
    `max_steps` (default: the task's own), played in batches that bound memory. Keys come from
    `seed` folded with RANDOM_STREAM: the same seed gives the same returns, and a run's own
    keys are untouched. The one function every random baseline comes from (`random_baseline`,
    benchmarks/random_return.py)."""
    import jax

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError("episodes", f"must be a positive integer, got {episodes!r}")
    cap = task.episode_steps if max_steps is None else max_steps
    if cap is None:
        raise ConfigError("max_steps", f"{task.name} has no episode cap of its own; give one")
    task = task.with_max_steps(int(cap))
    head = task.head
    batch = min(episodes, RANDOM_EPISODES_HOST if task.host else _random_batch(task, int(cap)))

    root = jax.random.fold_in(jax.random.key(seed), RANDOM_STREAM)
    head_key = _program_key(head)  # a head without a key leaves the rollout without one
    return _returns(task, [None], partial(_uniform, head), episodes, root, int(cap), batch,
                    _RANDOM_COMPILE, None if head_key is None else ("uniform", head_key))[0]


def _uniform(head: Any, _: Any, key: Any, obs: Any) -> Any:
    """The uniform-random policy's actions for the observations `obs` (P, obs_dim)."""
    return head.uniform(key, obs.shape[0])


def random_baseline(task: Task, episodes: int, seed: int) -> np.ndarray:
    """A run's random baseline (`random_returns` at the run's episode cap, the task's): as many
    episodes as its final window holds (`episodes`, at least 2), at most RANDOM_EPISODES
    (fewer on long episodes: one batch) or, on a host-stepped task, RANDOM_EPISODES_HOST."""
    cap = task.episode_steps or 1
    limit = RANDOM_EPISODES_HOST if task.host else min(RANDOM_EPISODES,
                                                       _random_batch(task, cap))
    return random_returns(task, max(2, min(int(episodes), limit)), seed)


def _random_batch(task: Task, cap: int) -> int:
    """Episodes per jitted random batch: its padded buffers under _RANDOM_FLOATS floats."""
    return max(RANDOM_EPISODES_HOST, _RANDOM_FLOATS // (cap * (task.obs_dim + 4)))


@dataclass(frozen=True)
class Verdict:
    """Whether a run learned: its final returns against a random policy's on the same task, by
    a one-sided Welch t-test at `level` (`verdict`).

    `final` and `random` are the two samples' means (n_final, n_random values); `random_ci`
    the random mean's two-sided `level` interval; `lower` the one-sided `level` lower bound
    of final − random and `upper` the matching upper bound (NaN: too few final values to
    test); `learned`: lower > 0; `below`: upper < 0 (the run ended worse than random)."""

    final: float
    n_final: int
    random: float
    random_ci: tuple[float, float]
    n_random: int
    lower: float
    upper: float
    level: float = LEVEL

    @property
    def learned(self) -> bool:
        return bool(self.lower > 0)

    @property
    def below(self) -> bool:
        return bool(self.upper < 0)

    def test(self) -> str:
        """The test used, in words."""
        pct = f"{100 * self.level:g}%"
        return (f"one-sided Welch t-test at {pct}: the mean of the run's {self.n_final} final "
                f"returns minus the mean of {self.n_random} episodes of a uniform-random policy "
                f"(same task, episode cap and agents' dynamics; episodes counted as "
                f"independent); learned when its {pct} lower bound is above 0")

    def fields(self) -> dict[str, Any]:
        """summary.json's fields: random_return, random_return_ci, random_episodes,
        learned, learned_test (the test, its level and bounds)."""
        return {"random_return": _r(self.random),
                "random_return_ci": [_r(self.random_ci[0]), _r(self.random_ci[1])],
                "random_episodes": self.n_random,
                "learned": self.learned,
                "learned_test": {"test": self.test(), "level": self.level,
                                 "final_return": _r(self.final), "final_values": self.n_final,
                                 "difference": _r(self.final - self.random),
                                 "difference_lower": _r(self.lower),
                                 "difference_upper": _r(self.upper),
                                 "below_random": self.below}}


def _r(x: float) -> float | None:
    """A float for JSON at 6 significant digits (None for NaN)."""
    return None if not np.isfinite(x) else float(f"{x:.6g}")


def mean_interval(returns: Any, level: float = LEVEL) -> tuple[float, tuple[float, float]]:
    """The mean of a random baseline's `returns` and its two-sided `level` t-interval
    (episodes counted as independent draws): what a run's verdict and a plan's pilot state."""
    from scipy import stats

    r = np.asarray(returns, np.float64).reshape(-1)
    if r.size < 2 or not np.all(np.isfinite(r)):
        raise ValueError(f"the random baseline needs two or more finite returns, got {r}")
    mean, var = float(r.mean()), float(r.var(ddof=1)) / r.size
    half = float(stats.t.ppf(0.5 + level / 2, r.size - 1)) * math.sqrt(var) if var > 0 else 0.0
    return mean, (mean - half, mean + half)


def verdict(final: Any, random: Any, level: float = LEVEL) -> Verdict:
    """The verdict on a run's `final` returns (its last window's: episodes' returns or batch
    means; NaNs dropped) against `random` (`random_returns`): a one-sided Welch t-test of
    mean(final) − mean(random) at `level`. With fewer than two final values there is no
    variance to test with: the bounds are NaN and the run is not counted as learned."""
    from scipy import stats

    f = np.asarray(final, np.float64).reshape(-1)
    f = f[np.isfinite(f)]
    r = np.asarray(random, np.float64).reshape(-1)
    r_mean, ci = mean_interval(r, level)
    r_var = float(r.var(ddof=1)) / r.size
    if f.size < 2:
        mean = float(f.mean()) if f.size else math.nan
        return Verdict(mean, int(f.size), r_mean, ci, int(r.size), math.nan, math.nan, level)
    f_var = float(f.var(ddof=1)) / f.size
    diff, se = float(f.mean()) - r_mean, math.sqrt(f_var + r_var)
    if se == 0:  # both samples constant: the difference is exact
        return Verdict(float(f.mean()), int(f.size), r_mean, ci, int(r.size), diff, diff, level)
    df = se**4 / (f_var**2 / (f.size - 1) + r_var**2 / (r.size - 1))
    t = float(stats.t.ppf(level, df))
    return Verdict(float(f.mean()), int(f.size), r_mean, ci, int(r.size), diff - t * se,
                   diff + t * se, level)


def verdict_line(summary: dict[str, Any]) -> str:
    """The last line a run prints: whether it learned, from summary.json's verdict fields."""
    test = summary["learned_test"]
    pct = f"{100 * test['level']:g}%"
    final, rnd = test["final_return"], summary["random_return"]
    if final is None:
        return ("Did it learn? Unknown: the run has no final returns to compare with a random "
                f"policy's {rnd:.4g}.")
    if test["difference_lower"] is None:
        return (f"Did it learn? Not shown: {test['final_values']} final return(s) ({final:.4g}) "
                f"are too few to compare with a random policy's {rnd:.4g} at {pct}.")
    if summary["learned"]:
        return (f"Learned: the final return {final:.4g} is above a random policy's {rnd:.4g} "
                f"(by at least {test['difference_lower']:.4g} at {pct} confidence).")
    if test["below_random"]:
        return (f"Did not learn: the final return {final:.4g} is below a random policy's "
                f"{rnd:.4g} (by at least {-test['difference_upper']:.4g} at {pct} confidence).")
    return (f"Did not learn: the final return {final:.4g} is not above a random policy's "
            f"{rnd:.4g} by its {pct} confidence bound.")


def verdict_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The results table's rows for the random baseline and the verdict."""
    lo, hi = summary["random_return_ci"]
    test = summary["learned_test"]
    pct = f"{100 * test['level']:g}%"
    low = test["difference_lower"]
    said = ("yes" if summary["learned"] else "below random" if test["below_random"] else "no")
    return [(f"random policy's return ({pct} CI, {summary['random_episodes']} episodes)",
             f"{summary['random_return']:.4g} [{lo:.4g}, {hi:.4g}]"),
            (f"learned? (final − random > 0, one-sided {pct})",
             said + ("" if low is None else f" (lower bound {low:.4g})"))]
