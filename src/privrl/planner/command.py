"""The `privrl run` command line of a config's fields: each field's own flag (the one its
`privrl.config.option` declares), so the recommended command is what the run's CLI parses."""

from __future__ import annotations

import dataclasses
import importlib
import math
import shlex
from typing import Any

from privrl.config import field_flag
from privrl.planner.systems import CONFIG_CLASSES

# Fields a command sets itself (privrl.cli.config_command's `fixed`): they take no flag.
FIXED = {"fedpg-cen": {"algorithm"}, "dp-reinforce": {"dp"}}


def run_command(system: str, fields: dict[str, Any]) -> str:
    """`privrl run SYSTEM --flag value ...` for `fields` (None values and a command's fixed
    fields left out; a repeated string option once per value)."""
    module, _, name = CONFIG_CLASSES[system].partition(":")
    cls = getattr(importlib.import_module(module), name)
    flags = {f.name: field_flag(f) for f in dataclasses.fields(cls)}
    words = ["privrl", "run", system]
    for key, value in fields.items():
        if value is None or key in FIXED.get(system, ()):
            continue
        flag = flags.get(key)
        if flag is None:
            raise ValueError(f"{system}: field {key!r} has no flag")
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, tuple | list):
            if value and all(isinstance(v, str) for v in value):
                for v in value:
                    words += [flag, v]
            elif value:
                words += [flag, ",".join(_num(v) for v in value)]
        else:
            words += [flag, _num(value)]
    return shlex.join(words)


def _num(v: Any) -> str:
    if isinstance(v, float):
        if math.isinf(v):
            raise ValueError("an infinite value has no flag")
        return repr(v) if v != int(v) or abs(v) >= 1e16 else f"{v:g}"
    return str(v)
