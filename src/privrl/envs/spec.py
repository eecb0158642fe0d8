"""The task a config names (`env`, `private_params`), checked before JAX: the forms, the
numbers, a file's presence, and a registry id. It imports no JAX or gymnax, so the command line
refuses a mistake there in well under a second (issue 53, item 10):
- a gymnax id is looked up in gymnax's registry as its installed source states it (read with
  `ast`, never executed: importing gymnax imports JAX), or in `gymnax.registered_envs` once
  gymnax is imported (ids a program registered at run time);
- a Gymnasium id is looked up by `gymnasium.spec` (importing Gymnasium imports NumPy, not JAX),
  and a `--private` field on it by making the environment with Gymnasium.
What needs JAX or the user's code (a gymnax parameter field: a flax dataclass; the user's
environment) is checked when the task is made (privrl.envs.task.make_task).
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import importlib.util
import math
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from privrl.config import ConfigError
from privrl.plugins import split_callable

__all__ = ["REGISTRIES", "check_env", "check_gymnasium_fields", "check_gymnasium_id",
           "check_gymnax_id", "check_task_fields", "gymnax_ids", "parse_private_text",
           "unknown_gymnax"]

REGISTRIES = ("gymnax:", "gymnasium:")


def check_env(spec: object, option: str = "env") -> str:
    """`gymnax:<id>`, `gymnasium:<id>` or `<module>:<callable>` / `path/file.py:callable` (the
    file there); ConfigError(option) otherwise."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(option, "expected gymnax:<id>, gymnasium:<id> or <module>:<callable>, "
                          f"got {spec!r}")
    for prefix in REGISTRIES:
        if spec.startswith(prefix):
            env_id = spec.removeprefix(prefix)
            if not env_id.strip():
                raise ConfigError(option, f"{prefix}<id> needs an id (e.g. {prefix}"
                                  f"CartPole-v1), got {spec!r}")
            if prefix == "gymnax:":
                check_gymnax_id(env_id, option)
            else:
                check_gymnasium_id(env_id, option)
            return spec
    split_callable(spec, option, exists=True)
    return spec


@cache
def _gymnax_source_ids() -> tuple[str, ...] | None:
    """The ids gymnax's installed `registration.py` registers (its `_registry`'s keys: the
    `_BUILTIN_ENV_IDS` list of string literals), read with `ast`; None where gymnax is not
    installed or its source no longer says it that way (then the id is checked at make_task)."""
    try:
        found = importlib.util.find_spec("gymnax")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(next(iter(found.submodule_search_locations))) / "registration.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if (isinstance(target, ast.Name) and target.id == "_BUILTIN_ENV_IDS"
                and isinstance(node.value, (ast.List, ast.Tuple))):
            ids = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            if ids and len(ids) == len(node.value.elts) and all(isinstance(i, str) for i in ids):
                return tuple(ids)
    return None


def gymnax_ids() -> tuple[str, ...] | None:
    """gymnax's registered ids: `gymnax.registered_envs` once gymnax is imported (a program may
    have registered more), else its source's (`_gymnax_source_ids`); None: unknown here."""
    live = sys.modules.get("gymnax")
    if live is not None and hasattr(live, "registered_envs"):
        return tuple(live.registered_envs)
    return _gymnax_source_ids()


def unknown_gymnax(env_id: str, known: Sequence[str], option: str = "env") -> ConfigError:
    """The one line for an id gymnax does not register: the ids it does, and the closest."""
    close = difflib.get_close_matches(env_id, list(known), n=1, cutoff=0.6)
    hint = f". Did you mean {close[0]!r}?" if close else ""
    return ConfigError(option, f"unknown gymnax environment {env_id!r}; known: "
                       f"{', '.join(known)}{hint}")


def check_gymnax_id(env_id: str, option: str = "env") -> None:
    """An id gymnax registers (`gymnax_ids`); where they cannot be known without importing
    gymnax, nothing (make_task checks)."""
    known = gymnax_ids()
    if known is not None and env_id not in known:
        raise unknown_gymnax(env_id, known, option)


def check_gymnasium_id(env_id: str, option: str = "env") -> None:
    """An id Gymnasium's registry has (`gymnasium.spec`: its own message, with its "Did you
    mean"). An id naming a module (`module:Env-v0`) is left to make_task, which imports it.
    Where Gymnasium is not installed, nothing here (make_task says so)."""
    if ":" in env_id:
        return
    try:
        import gymnasium
    except ImportError:
        return
    try:
        gymnasium.spec(env_id)
    except Exception as e:  # NameNotFound, VersionNotFound, a malformed id
        raise ConfigError(option, f"cannot make Gymnasium environment {env_id!r}: "
                          + " ".join(str(e).split())) from None


def _text(v: float) -> str:
    return f"{v:g}"


def parse_private_text(text: object, option: str = "private"
                       ) -> tuple[str, tuple[float, float] | None, tuple[float, ...] | None]:
    """`field=low:high` as (field, (low, high), None), `field=v1,v2,...` as (field, None,
    values): numbers, finite, low <= high; ConfigError(option) otherwise. Whether the field
    exists and takes that shape is the environment's to say (privrl.envs.task)."""
    if not isinstance(text, str):
        raise ConfigError(option, f"expected field=low:high or field=v1,v2,..., got {text!r}")
    name, eq, rhs = text.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier() or not rhs:
        raise ConfigError(option, f"expected field=low:high or field=v1,v2,..., got {text!r}")
    try:
        if ":" in rhs:
            low, _, high = rhs.partition(":")
            numbers = (float(low), float(high))
        else:
            numbers = tuple(float(v) for v in rhs.split(","))
    except ValueError:
        raise ConfigError(option, f"{text!r}: the values must be numbers") from None
    for v in numbers:
        if not math.isfinite(v):
            raise ConfigError(option, f"{name}: values must be finite, got {_text(v)}")
    if ":" not in rhs:
        return name, None, numbers
    if numbers[0] > numbers[1]:
        raise ConfigError(option, f"{name}: low {_text(numbers[0])} > high {_text(numbers[1])}")
    return name, (numbers[0], numbers[1]), None


def check_gymnasium_fields(env_id: str, fields: Sequence[str], option: str = "private_params"
                           ) -> None:
    """Each of `fields` an attribute of Gymnasium's `env_id` (privrl.envs.attributes, the rule
    the task applies), the environment made by Gymnasium (no JAX) and closed; where it cannot
    be made here (an id naming a module, an extra not installed), nothing (make_task says)."""
    if ":" in env_id:
        return
    try:
        import gymnasium

        made = gymnasium.make(env_id)
    except Exception:
        return
    from privrl.envs.attributes import attribute_name

    try:
        for field in fields:
            attribute_name(made, field, f"gymnasium:{env_id}")
    except ConfigError as e:
        raise ConfigError(option, e.message) from None
    finally:
        with contextlib.suppress(Exception):
            made.close()


def check_task_fields(env: str | None, private_params: Sequence[str]) -> None:
    """A config's `env` and `private_params`, before JAX (module doc)."""
    if env is not None:
        check_env(env, "env")
    fields = [parse_private_text(text, "private_params")[0] for text in private_params]
    if fields and env is not None and env.startswith("gymnasium:"):
        check_gymnasium_fields(env.removeprefix("gymnasium:"), fields)
