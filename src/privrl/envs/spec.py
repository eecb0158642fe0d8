"""The task a config names (`env`, `private_params`), checked before JAX: the forms, the
numbers, a file's presence, and a registry id. It imports no JAX or gymnax, so the command line
refuses a mistake there in well under a second (issue 53, item 10):
- a gymnax id is looked up in gymnax's registry as its installed source states it (read with
  `ast`, never executed: importing gymnax imports JAX), or in `gymnax.registered_envs` once
  gymnax is imported (ids a program registered at run time);
- a `--private` field on a gymnax id is looked up in the fields of the `EnvParams` dataclass
  its environment's `default_params` returns, read the same way (`_gymnax_source_fields`); it
  refuses only where that reading is complete, else the task decides (after JAX);
- a Gymnasium id is looked up by `gymnasium.spec` (importing Gymnasium imports NumPy, not JAX),
  and a `--private` field on it by making the environment with Gymnasium.
What needs JAX or the user's code (the user's environment, a field gymnax's source does not
state plainly) is checked when the task is made (privrl.envs.task.make_task).
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
           "check_gymnax_fields", "check_gymnax_id", "check_task_fields", "gymnax_ids",
           "parse_private_text", "unknown_gymnax"]

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


def _gymnax_root() -> Path | None:
    """The installed gymnax package's directory (found, not imported); None: not installed."""
    try:
        found = importlib.util.find_spec("gymnax")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))


@cache
def _gymnax_tree(module: str) -> ast.Module | None:
    """gymnax's module `module` (`gymnax.a.b`) parsed, never executed; None: not a plain file."""
    root = _gymnax_root()
    parts = module.split(".")
    if root is None or parts[0] != "gymnax" or not all(p.isidentifier() for p in parts):
        return None
    try:
        return ast.parse(root.parent.joinpath(*parts[:-1], parts[-1] + ".py").read_text())
    except (OSError, SyntaxError, ValueError):
        return None


def _bound(tree: ast.Module, name: str) -> list[ast.stmt]:
    """The module's top-level statements that bind `name`."""
    found: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        else:  # a binding inside if/try/for/with: not followed here
            names = [n.id for n in ast.walk(node)
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        if name in names:
            found.append(node)
    return found


def _imported_module(tree: ast.Module, alias: str) -> str | None:
    """The gymnax module `alias` names, where its one binding is `from gymnax.x import alias`."""
    bound = _bound(tree, alias)
    if len(bound) != 1 or not isinstance(bound[0], ast.ImportFrom):
        return None
    node = bound[0]
    if node.level != 0 or not node.module or not node.module.startswith("gymnax."):
        return None
    names = [a.name for a in node.names if (a.asname or a.name) == alias]
    return f"{node.module}.{names[0]}" if len(names) == 1 else None


def _class_in(tree: ast.Module, name: str) -> ast.ClassDef | None:
    """The module's class `name`, where a top-level `class` statement is its one binding."""
    bound = _bound(tree, name)
    return bound[0] if len(bound) == 1 and isinstance(bound[0], ast.ClassDef) else None


_NOT_PLAIN = ("ClassVar", "InitVar", "KW_ONLY")


def _dataclass_names(tree: ast.Module, cls: ast.ClassDef, depth: int = 0
                     ) -> tuple[list[str], set[str]] | None:
    """A dataclass's fields in dataclass order (its bases' first) and the other names its
    class bodies bind; None where any of it is not plain: a decorator other than one
    `...dataclass`, a metaclass, a base not a class of gymnax's source, a field annotation that is
    not a plain field, a statement that is not a field, method or assignment."""
    if depth > 8 or cls.keywords or len(cls.decorator_list) != 1:
        return None
    deco = cls.decorator_list[0]
    if not ((isinstance(deco, ast.Attribute) and deco.attr == "dataclass")
            or (isinstance(deco, ast.Name) and deco.id == "dataclass")):
        return None
    fields: list[str] = []
    others: set[str] = set()
    for base in cls.bases:
        if isinstance(base, ast.Name):
            base_tree, base_cls = tree, _class_in(tree, base.id)
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            module = _imported_module(tree, base.value.id)
            base_tree = _gymnax_tree(module) if module else None
            base_cls = _class_in(base_tree, base.attr) if base_tree else None
        else:
            return None
        read = _dataclass_names(base_tree, base_cls, depth + 1) if base_cls and base_tree else None
        if read is None:
            return None
        fields += [f for f in read[0] if f not in fields]
        others |= read[1]
    for i, node in enumerate(cls.body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if any(w in ast.unparse(node.annotation) for w in _NOT_PLAIN):
                return None
            if node.target.id not in fields:
                fields.append(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            others.add(node.name)
        elif isinstance(node, ast.Assign):
            others |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif not (i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            return None
    return fields, others - set(fields)


def _returned_call(fn: ast.FunctionDef) -> str | None:
    """The name `fn` calls in its one `return Name(...)` (after a docstring), else None."""
    body = [n for n in fn.body
            if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if not body or len(returns) != 1 or returns[0] is not body[-1]:
        return None
    value = returns[0].value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id
    return None


@cache
def _gymnax_source_fields(env_id: str) -> tuple[tuple[str, ...], frozenset[str]] | None:
    """The parameter fields gymnax's `make(env_id)` gives (its params' dataclass fields, the
    base classes' included) and the other names that class binds, read from gymnax's installed
    source with `ast`, never executed: registration.py's `make` returns
    `env.default_params`, `_builtins[env_id]` is `module.Class` imported `from gymnax.x import
    module`, the class's `default_params` returns `Params(...)`, a dataclass of that module.
    None where any step is not stated that plainly (then the task checks, after JAX)."""
    reg = _gymnax_tree("gymnax.registration")
    if reg is None:
        return None
    make = [n for n in reg.body if isinstance(n, ast.FunctionDef) and n.name == "make"]
    if len(make) != 1 or len(_bound(reg, "make")) != 1:
        return None
    last = make[0].body[-1]
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple)
            and len(last.value.elts) == 2 and isinstance(last.value.elts[1], ast.Attribute)
            and last.value.elts[1].attr == "default_params"):
        return None
    builtins = _bound(reg, "_builtins")
    if len(builtins) != 1 or not isinstance(builtins[0], (ast.Assign, ast.AnnAssign)) \
            or not isinstance(builtins[0].value, ast.Dict):
        return None
    table = builtins[0].value
    entries = [v for k, v in zip(table.keys, table.values, strict=True)
               if isinstance(k, ast.Constant) and k.value == env_id]
    if len(entries) != 1 or not all(isinstance(k, ast.Constant) for k in table.keys):
        return None
    entry = entries[0]
    if not (isinstance(entry, ast.Attribute) and isinstance(entry.value, ast.Name)):
        return None
    module = _imported_module(reg, entry.value.id)
    tree = _gymnax_tree(module) if module else None
    env_cls = _class_in(tree, entry.attr) if tree else None
    if tree is None or env_cls is None:
        return None
    methods = [n for n in env_cls.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign, ast.AnnAssign))
               and "default_params" in ([n.name] if hasattr(n, "name") else
                                        [t.id for t in ast.walk(n) if isinstance(t, ast.Name)])]
    if len(methods) != 1 or not isinstance(methods[0], ast.FunctionDef):
        return None
    decorators = methods[0].decorator_list
    if not (len(decorators) == 1 and isinstance(decorators[0], ast.Name)
            and decorators[0].id == "property"):
        return None
    params_name = _returned_call(methods[0])
    params_cls = _class_in(tree, params_name) if params_name else None
    read = _dataclass_names(tree, params_cls) if params_cls else None
    if read is None or not read[0]:
        return None
    return tuple(read[0]), frozenset(read[1])


@cache
def _gymnax_source_ids() -> tuple[str, ...] | None:
    """The ids gymnax's installed `registration.py` registers (its `_registry`'s keys: the
    `_BUILTIN_ENV_IDS` list of string literals), read with `ast`; None where gymnax is not
    installed or its source no longer says it that way (then the id is checked at make_task)."""
    tree = _gymnax_tree("gymnax.registration")
    if tree is None:
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


def check_gymnax_fields(env_id: str, fields: Sequence[str], option: str = "private_params"
                        ) -> None:
    """Each of `fields` a parameter field of gymnax's `env_id` as its source states them
    (`_gymnax_source_fields`), with the task's message; a name that is not a field but that the
    parameters have (a method, `replace`, a `_` name) or a reading that is not complete and
    certain (gymnax imported: a program may have changed it), nothing here (make_task says)."""
    if "gymnax" in sys.modules:
        return
    read = _gymnax_source_fields(env_id)
    if read is None:
        return
    known, others = read
    for field in fields:
        if field not in known and field not in others and field != "replace" \
                and not field.startswith("_"):
            raise ConfigError(option, f"gymnax:{env_id} has no parameter {field!r} (it has: "
                              f"{', '.join(known)})")


def check_task_fields(env: str | None, private_params: Sequence[str]) -> None:
    """A config's `env` and `private_params`, before JAX (module doc)."""
    if env is not None:
        check_env(env, "env")
    fields = [parse_private_text(text, "private_params")[0] for text in private_params]
    if fields and env is not None and env.startswith("gymnasium:"):
        check_gymnasium_fields(env.removeprefix("gymnasium:"), fields)
    elif fields and (env is None or env.startswith("gymnax:")):  # None: gymnax's CartPole-v1
        check_gymnax_fields((env or "gymnax:CartPole-v1").removeprefix("gymnax:"), fields)
