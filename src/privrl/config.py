"""What every algorithm's configuration shares: the error, the `Config` base, the checks.

Library code speaks in config *field* names (`ConfigError("buffer_size", "must be >= 1")`);
only the command line knows flags, and it renames fields to the flags the user typed
(`privrl.cli.flag_names`). The checks below raise with one wording everywhere, so a rule reads
the same whichever system enforces it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from numbers import Integral, Real
from typing import Any, ClassVar, NoReturn, Self

import numpy as np


class ConfigError(ValueError):
    """An invalid setting; `field` names it as the config (or function argument) spells it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class RayNotInstalledError(RuntimeError):
    """Ray is an optional extra; the message says how to install it."""


# --- the validation toolkit --------------------------------------------------------------------
# Each check raises ConfigError(field, ...) and otherwise returns the value, so a rule is one
# line and its wording is the same in every system.

def fail(field: str, message: str) -> NoReturn:
    """Raise ConfigError(field, message): for the rules no check below expresses."""
    raise ConfigError(field, message)


def _real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def integer(field: str, value: Any, low: int = 1) -> int:
    """An integer (not a bool) >= `low`: "must be an integer >= 1, got 0"."""
    if not isinstance(value, Integral) or isinstance(value, bool) or value < low:
        fail(field, f"must be an integer >= {low}, got {value!r}")
    return value


def at_least(field: str, value: Any, low: float) -> Any:
    """A number >= `low` (int or float): "must be >= 1, got 0"."""
    if not _real(value) or math.isnan(value) or value < low:
        fail(field, f"must be >= {low}, got {value!r}")
    return value


def positive(field: str, value: Any, finite: bool = True) -> Any:
    """A number > 0 (and, unless `finite=False`, not infinite): "must be finite and > 0, got 0"."""
    if not _real(value) or math.isnan(value) or value <= 0 or (finite and math.isinf(value)):
        fail(field, f"must be {'finite and ' if finite else ''}> 0, got {value!r}")
    return value


def non_negative(field: str, value: Any) -> Any:
    """A finite number >= 0: "must be finite and >= 0, got -1"."""
    if not _real(value) or not math.isfinite(value) or value < 0:
        fail(field, f"must be finite and >= 0, got {value!r}")
    return value


def finite(field: str, value: Any) -> Any:
    """A finite number: "must be finite, got inf"."""
    if not _real(value) or not math.isfinite(value):
        fail(field, f"must be finite, got {value!r}")
    return value


def in_range(field: str, value: Any, low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> Any:
    """A number in the interval, its ends open or closed: "must be in (0, 1], got 0"."""
    ok = _real(value) and not math.isnan(value) and (
        (low < value if low_open else low <= value)
        and (value < high if high_open else value <= high))
    if not ok:
        fail(field, f"must be in {'(' if low_open else '['}{low}, {high}"
                    f"{')' if high_open else ']'}, got {value!r}")
    return value


def probability(field: str, value: Any) -> Any:
    """A number in [0, 1]."""
    return in_range(field, value, 0, 1)


def one_of(field: str, value: Any, choices: Iterable[Any], what: str | None = None) -> Any:
    """One of `choices`: "unknown mechanism 'x'; choose one of laplace, prs, none"."""
    choices = tuple(choices)
    if value not in choices:
        fail(field, f"unknown {what or field.replace('_', ' ')} {value!r}; "
                    f"choose one of {', '.join(map(str, choices))}")
    return value


def odd(field: str, value: Any, low: int = 1) -> int:
    """An odd integer >= `low`: "must be an odd integer >= 1, got 4"."""
    if not isinstance(value, Integral) or isinstance(value, bool) or value < low \
            or value % 2 == 0:
        fail(field, f"must be an odd integer >= {low}, got {value!r}")
    return value


@contextmanager
def within(prefix: str) -> Iterator[None]:
    """Validate a nested config: its ConfigErrors name `prefix.field` (e.g. `obs.sigma`)."""
    try:
        yield
    except ConfigError as e:
        raise ConfigError(f"{prefix}.{e.field}", e.message) from None


# --- fields declared once ----------------------------------------------------------------------

def option(default: Any = dataclasses.MISSING, *, help: str, unit: str | None = None,
           flag: str | None = None, cli: bool = True,
           default_factory: Any = dataclasses.MISSING) -> Any:
    """A config field declared once: its default, its help (what it is, in the user's words),
    its unit, and the flag a command line gives it (None: the field's name, `_` as `-`;
    `cli=False`: no flag, e.g. a probe's field). The CLI generates its options from these, so
    a field's help is written here and nowhere else."""
    meta = {"help": help, "unit": unit, "flag": flag, "cli": cli}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_flag(f: dataclasses.Field) -> str | None:
    """The flag of a config field (`--learning-rate`), or None when it has none."""
    if not f.metadata.get("cli", True):
        return None
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


# --- the Config base ---------------------------------------------------------------------------

class Config:
    """Mixin for every (frozen) config dataclass: presets, validation, a JSON-safe dict.

    A subclass sets `presets` (name -> field overrides) if it has a `preset` field, overrides
    `validate()` with its own rules, and `resolved()` if some defaults depend on the preset.
    """

    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    @classmethod
    def from_preset(cls, preset: str = "paper", **overrides: Any) -> Self:
        """`cls(preset=preset, **presets[preset], **overrides)`, None overrides ignored (so a
        CLI can pass every option); an unknown preset is a ConfigError naming the choices."""
        check_preset(preset, cls.presets)
        given = {k: v for k, v in overrides.items() if v is not None}
        return cls(preset=preset, **{**cls.presets[preset], **given})

    def validate(self) -> None:
        """Raise ConfigError on the first invalid field (the base has no rules)."""

    def resolved(self) -> Self:
        """The config with preset-dependent defaults filled in, validated (base: itself)."""
        self.validate()
        return self

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-safe (infinities as "inf": strict JSON has none), for config.json."""
        return json_safe(dataclasses.asdict(self))  # type: ignore[call-overload]


def json_safe(obj: Any) -> Any:
    """Replace non-finite floats by strings ("inf", "nan") so the JSON is strict."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else ("inf" if f > 0 else "-inf" if f < 0 else "nan")
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    return obj


def other_field(configs: Sequence[Any], allowed: Sequence[str]) -> str | None:
    """The first config field outside `allowed` in which one of the dataclass `configs`
    differs from the first (None: they differ only in `allowed`): what keeps settings from
    running as one program."""
    first = configs[0]
    for cfg in configs:
        if dataclasses.replace(cfg, **{f: getattr(first, f) for f in allowed}) != first:
            return next(f.name for f in dataclasses.fields(cfg) if f.name not in allowed
                        and getattr(cfg, f.name) != getattr(first, f.name))
    return None


def check_preset(preset: str, presets: Mapping[str, Any]) -> str:
    """An existing preset name: "unknown preset 'x'; choose one of paper, tuned"."""
    return one_of("preset", preset, presets)

