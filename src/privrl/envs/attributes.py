"""A Gymnasium environment's numeric attributes, the fields `--private` may name on it. NumPy
only (no JAX), so that privrl.envs.spec can check a field before JAX is imported."""

from __future__ import annotations

from typing import Any

import numpy as np

from privrl.config import ConfigError

__all__ = ["attribute_name", "numeric_attributes"]


def _numeric(value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return False
    if isinstance(value, int | float | np.integer | np.floating):
        return True
    return isinstance(value, np.ndarray) and (np.issubdtype(value.dtype, np.integer)
                                              or np.issubdtype(value.dtype, np.floating))


def numeric_attributes(env: Any) -> list[str]:
    """The public numeric attributes of the unwrapped environment, its class's included."""
    base = env.unwrapped
    names = {k for k in dir(type(base)) if not k.startswith("_")} | set(vars(base))
    out = []
    for k in sorted(names):
        if k.startswith("_") or isinstance(getattr(type(base), k, None), property):
            continue
        try:
            if _numeric(getattr(base, k)):
                out.append(k)
        except Exception:  # an attribute that fails to read is not a parameter
            continue
    return out


def attribute_name(env: Any, field: str, name: str) -> str:
    """The attribute `field` names on the unwrapped environment (instance or class): itself if
    it exists, else the one numeric attribute equal to it without regard to case (Gymnasium's
    Acrobot: `link_mass_1` is `LINK_MASS_1`); a ConfigError naming `private` otherwise, listing
    the numeric attributes there are."""
    base = env.unwrapped
    if hasattr(base, field):
        return field
    numeric = numeric_attributes(env)
    same = [k for k in numeric if k.lower() == field.lower()]
    if len(same) == 1:
        return same[0]
    raise ConfigError("private", f"{name}'s environment ({type(base).__name__}) has no "
                      f"attribute {field!r} (its numeric attributes: "
                      f"{', '.join(numeric) or 'none'})")
