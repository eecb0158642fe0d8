"""The task a config names (`env`, `private_params`), checked as text: the forms, the numbers,
a file's presence. It imports no JAX, gymnax or Gymnasium, so the command line refuses a
mistake there in well under a second (issue 53, item 10); what needs the environment itself (a
registry id, a parameter field, the user's code) is checked when the task is made
(privrl.envs.task.make_task).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from privrl.config import ConfigError
from privrl.plugins import split_callable

__all__ = ["REGISTRIES", "check_env", "check_task_fields", "parse_private_text"]

REGISTRIES = ("gymnax:", "gymnasium:")


def check_env(spec: object, option: str = "env") -> str:
    """`gymnax:<id>`, `gymnasium:<id>` or `<module>:<callable>` / `path/file.py:callable` (the
    file there); ConfigError(option) otherwise."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(option, "expected gymnax:<id>, gymnasium:<id> or <module>:<callable>, "
                          f"got {spec!r}")
    for prefix in REGISTRIES:
        if spec.startswith(prefix):
            if not spec.removeprefix(prefix).strip():
                raise ConfigError(option, f"{prefix}<id> needs an id (e.g. {prefix}"
                                  f"CartPole-v1), got {spec!r}")
            return spec
    split_callable(spec, option, exists=True)
    return spec


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


def check_task_fields(env: str | None, private_params: Sequence[str]) -> None:
    """A config's `env` and `private_params`, as text (module doc)."""
    if env is not None:
        check_env(env, "env")
    for text in private_params:
        parse_private_text(text, "private_params")
