"""A user's code named on the command line or in a config: `module:callable` or
`path/to/file.py:callable` (`--env`, `--mechanism`, `privrl evaluate --model`). Importing it
runs that module's code, with the user's rights: it is loaded only after every other option
is checked, and any failure of the user's import or call is one ConfigError naming the option,
never a traceback."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from privrl.config import ConfigError


def is_user_mechanism(name: str) -> bool:
    """Whether a mechanism name is a user's `module:callable` (built-in names have no colon;
    privrl.privacy.user builds it): here, where a config's validation reads it before JAX."""
    return ":" in name

__all__ = ["call_user", "load_callable", "load_module", "split_callable"]


def split_callable(spec: str, option: str, exists: bool = False) -> tuple[str, str, bool]:
    """`spec`'s (module or file, callable name, whether it is a file), its form checked (and
    with `exists`, that a file is there) without importing anything: a command line's mistake
    is refused before JAX starts. ConfigError(option) otherwise."""
    where, _, attr = spec.rpartition(":")
    is_file = where.endswith(".py")
    if not where or not attr or (where.startswith(".") and not is_file):
        raise ConfigError(option, "expected module:callable or path/to/file.py:callable (e.g. "
                          f"./my_env.py:make), got {spec!r}")
    if exists and is_file and not Path(where).is_file():
        raise ConfigError(option, f"cannot import {where}: no such file")
    return where, attr, is_file


def load_callable(spec: str, option: str) -> Callable[..., Any]:
    """The callable `spec` names; ConfigError(option) if it cannot be imported or is not
    callable."""
    where, attr, is_file = split_callable(spec, option)
    try:
        module = _file_module(Path(where)) if is_file else importlib.import_module(where)
    except Exception as e:  # any failure of the user's import is one error
        raise ConfigError(option, f"cannot import {where}: {type(e).__name__}: {e}") from None
    except SystemExit as e:
        raise ConfigError(option, f"importing {where} tried to exit ({e.code!r})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(option, f"{where} has no callable {attr!r}")
    return fn


def load_module(spec: str, option: str) -> Any:
    """The flax module `spec` names: a module instance, or a callable (a Module class, a
    factory) called with no arguments that returns one; ConfigError(option) otherwise."""
    import flax.linen as nn

    obj = load_callable(spec, option)
    module = obj if isinstance(obj, nn.Module) else call_user(obj, spec, option)
    if not isinstance(module, nn.Module):
        raise ConfigError(option, f"{spec} must be a flax module, or a callable returning one "
                          f"with no arguments; got {type(module).__name__}")
    return module


def call_user(fn: Callable[..., Any], spec: str, option: str, *args: Any) -> Any:
    """`fn(*args)`, its failure (an exception, or an attempt to exit) one ConfigError."""
    try:
        return fn(*args)
    except Exception as e:
        raise ConfigError(option, f"{spec} failed: {type(e).__name__}: {e}") from None
    except SystemExit as e:
        raise ConfigError(option, f"{spec} tried to exit ({e.code!r})") from None


def _file_module(path: Path) -> Any:
    """The module of a .py file (`./x.py`, `../dir/x.py`, `/abs/x.py`: relative to the working
    directory), loaded once (as `path.stem`, so its dataclasses resolve their own names); later
    calls reuse it, so a program built twice holds the same classes. The file's own directory
    is importable while it loads (a sibling module it imports is found without PYTHONPATH), and
    only then: sys.path is as it was afterwards."""
    if not path.is_file():
        raise ImportError(f"no such file {path}")
    loaded = sys.modules.get(path.stem)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == (
            path.resolve()):
        return loaded
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    saved = list(sys.path)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(path.stem, None)  # a failed import leaves no half-made module
        raise
    finally:
        sys.path[:] = saved
    return module
