"""Several settings of one system as one jitted program: built here, once, for every system.

`settings_program` builds each setting's own algorithm, refuses settings that differ in more
than the system allows, and returns one algorithm for all of them whose `settings` are the
settings' own algorithms (their configs, mechanisms and privacy records). A system supplies
only its facts: which config field keeps settings apart (`refusal`, and `allowed`, what they
may differ in), and how its algorithm takes the settings as per-trial data (`as_data`).
`alone_or_program` is what every runner calls: one setting computes through the program's
path even alone, so it gets the same floats alone and in any program. `program_groups` is what
every reproduction calls: its sweep's settings in the groups that run as one program.
`per_process` shares what a build made (programs, optimizers) among its callers in a process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from privrl.config import ConfigError

# The config field that keeps resolved configs from running as one program, or None.
Refusal = Callable[[list[Any]], "str | None"]
T = TypeVar("T")
# Makes `algo` (the first setting's config) run settings `each` as per-trial data.
AsData = Callable[[Any, list[Any]], None]


def settings_program(cls: Any, configs: Sequence[Any], task: Any, model: Any,
                     refusal: Refusal, allowed: str, as_data: AsData) -> Any:
    """`cls` for resolved settings `configs` run as one program: an algorithm of the first
    setting's config whose `settings` are every setting's own `cls(config, task, model)`, made
    to carry them as per-trial data by `as_data(algo, settings)`. ConfigError names the field
    `refusal` finds (`allowed`: what the settings may differ in, for the message), or the task
    if it plays its episodes on the host."""
    each = [cls(c, task, model) for c in configs]
    field = refusal([a.config for a in each])
    if field is not None:
        raise ConfigError(field, f"settings run as one program may differ only in {allowed}")
    if each[0].task.host:
        raise ConfigError("env", "settings run as one program need a gymnax task (a Gymnasium "
                                 "task plays its episodes on the host): run each on its own")
    algo = cls(each[0].config, task, model)
    algo.settings = each
    as_data(algo, each)
    return algo


def alone_or_program(cls: Any, configs: Sequence[Any], task: Any, model: Any,
                     refusal: Refusal) -> Any:
    """The algorithm that runs `configs` together: `cls.for_settings`, or for one setting that
    could not join a program (`refusal` names a field, or its task plays on the host), its own
    `cls`. A setting that could join one computes through the program's path even alone, so
    it gets the same floats alone and in any program."""
    if len(configs) == 1:
        own = cls(configs[0], task, model)
        if own.task.host or refusal([own.config]) is not None:
            return own
        configs = [own.config]
    return cls.for_settings(configs, task, model)


def program_groups(items: Sequence[T], refusal: Callable[[list[T]], str | None],
                   together: bool = True) -> list[list[T]]:
    """A sweep's `items` (its settings) in the groups that run as one program, in order: each
    joins the first group it can run with (`refusal` of the group with it is None), or starts
    its own; each alone if not `together`. A group of one runs as its own run."""
    groups: list[list[T]] = []
    for item in items:
        home = next((g for g in groups if together and refusal([*g, item]) is None), None)
        if home is None:
            groups.append([item])
        else:
            home.append(item)
    return groups


def per_process(build: Callable[..., T]) -> Callable[..., T]:
    """`build(...)` made once per arguments in a process and reused (a FedPG node's algorithm
    and jitted programs: the nodes of one config that a process hosts, a restarted node or an
    in-process run's nodes, trace and compile each program once, not once a node; an optax
    optimizer: aggregators built alike share `submit`'s program). Whatever is specific to one
    caller stays an argument of those programs. Arguments that cannot be hashed
    (a list where the config holds a tuple, given through the API) are built anew each time.
    What a program closes over is fixed when it is first built: code patched later (a test's
    spy on a release function) reaches only what is built after `made.cache_clear()`."""
    cached = functools.lru_cache(maxsize=8)(build)

    @functools.wraps(build)
    def made(*args: Any) -> T:
        try:
            hash(args)
        except TypeError:
            return build(*args)
        return cached(*args)

    made.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return made
