"""A package whose names are imported on first use (PEP 562).

`privrl.privacy`, `privrl.envs` and `privrl.federation` re-export their modules' names;
imported eagerly, importing one light module of any of them (the privacy plan, the CartPole
spec, which a config's validation reads; a Flower app reference) would import JAX, and a bad
command-line value would wait seconds for it (issue 53).
"""

from __future__ import annotations

import importlib
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
