"""A package whose names are imported on first use (PEP 562), and a module imported on first
use (`modules_on_first_use`).

`privrl.privacy`, `privrl.envs` and `privrl.federation` re-export their modules' names;
imported eagerly, importing one light module of any of them (the privacy plan, the CartPole
spec, which a config's validation reads; a Flower app reference) would import JAX, and a bad
command-line value would wait seconds for it (issue 53).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, where: Mapping[str, str], namespace: dict[str, Any]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: `where` maps each name to the submodule that
    defines it, imported when the name is first read (then kept in `namespace`)."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__


class OnFirstUse(types.ModuleType):
    """A module imported only when one of its names is first read (`import` statements that
    find it bind it without reading any); then the real module takes its place in
    `sys.modules`, and this one forwards every name to it."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def modules_on_first_use(*names: str) -> None:
    """Each of `names` not imported yet is imported on its first use instead (`OnFirstUse` in
    `sys.modules`), for a dependency that imports it eagerly where privrl needs it rarely. Its
    spec, the real one's for whoever asks, is found without importing its package."""
    for name in names:
        if name in sys.modules:
            continue
        package, _, _ = name.rpartition(".")
        if package:
            outer = importlib.util.find_spec(package)
            where = None if outer is None else outer.submodule_search_locations
            spec = None if where is None else importlib.machinery.PathFinder.find_spec(
                name, list(where))
        else:
            spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        stub = OnFirstUse(name)
        stub.__spec__ = spec
        sys.modules[name] = stub
