"""What every algorithm's configuration shares: the error, the `Config` base, the checks.

Library code speaks in config *field* names (`ConfigError("buffer_size", "must be >= 1")`);
only the command line knows flags, and it renames fields to the flags the user typed
(`privrl.cli.flag_names`). The checks below raise with one wording everywhere, so a rule reads
the same whichever system enforces it.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar, NoReturn, Self

from privrl.choices import CONTINUOUS_COMMANDS, LOG_STDS


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
           flag: str | None = None, cli: bool = True, choices: Iterable[str] | None = None,
           user_callable: bool = False, listed: bool = False,
           default_factory: Any = dataclasses.MISSING) -> Any:
    """A config field declared once: its default, its help (what it is, in the user's words),
    its unit, and the flag a command line gives it (None: the field's name, `_` as `-`;
    `cli=False`: no flag, e.g. a probe's field). The CLI generates its options from these, so
    a field's help is written here and nowhere else. `choices`: the values a string field
    takes (the option accepts them in any case); `user_callable`: or a user's own
    `module:callable` (a mechanism). A tuple field's option takes comma-separated numbers, or
    strings repeated (`--private a --private b`), or with `listed` comma-separated."""
    meta = {"help": help, "unit": unit, "flag": flag, "cli": cli,
            "choices": None if choices is None else tuple(choices),
            "user_callable": user_callable, "listed": listed}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def log_std_option() -> Any:
    """The `log_std` field of every config whose network may have a Gaussian head: declared
    once, so each system's flag says the same thing. (A `*_option()` helper's field takes its
    name's flag: `cli.source_flags` reads it so before JAX.)"""
    return option("state", choices=LOG_STDS, help="A continuous-action task's Gaussian head: "
                  "its log-std from the network's outputs (state) or a learned vector "
                  "(parameter); a discrete task's head has no log-std and ignores it.")


def uniform_start_option(layer: str = "output layer", needs_log_std: bool = True) -> Any:
    """The `uniform_start` field (issue 51): the policy starts at (or close to) the uniform
    one, declared once; `layer` names what starts at zero in the system's network, and
    `needs_log_std` whether the system asks for the state-free log-std with it
    (`check_uniform_start`)."""
    needs = "Needs --log-std parameter" if needs_log_std else (
        "On a continuous task it needs --log-std parameter")
    return option(False, help=f"The policy starts at (or close to) a uniformly random one: "
                  f"the {layer} starts at zero, so a discrete task's logits are all 0 (the "
                  "uniform policy) and a continuous task's Gaussian has its mean at the centre "
                  "of the action box in every state, its σ the uniform's standard deviation, "
                  f"(high − low)/√12 (the learned log-std's start). {needs}; a network you "
                  "pass (--model) starts as it initializes itself.")


def check_uniform_start(uniform_start: object, log_std: str) -> None:
    """`uniform_start` is a bool, and true only with the state-free log-std."""
    if uniform_start is not False and (uniform_start is not True or log_std != "parameter"):
        fail("uniform_start", "needs the state-free log-std (log_std parameter)"
             if uniform_start is True else f"must be true or false, got {uniform_start!r}")


def field_flag(f: dataclasses.Field) -> str | None:
    """The flag of a config field (`--learning-rate`), or None when it has none."""
    if not f.metadata.get("cli", True):
        return None
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


# --- config files ------------------------------------------------------------------------------
# A config file is data, never code: TOML (tomllib) or JSON, at most this many bytes, every key
# a field of the config, every value of the field's type; anything else is refused, naming the
# file and the field, before anything is computed.
MAX_CONFIG_BYTES = 1 << 20
# The keys a run's config.json holds besides its "config" table (privrl.output): what
# the run recorded about itself (its command line, versions, devices, ...), not settings.
RUN_RECORD_KEYS = frozenset({"algorithm", "config", "seed", "command", "created", "versions",
                             "devices", "topology", "maps", "folds", "runtime", "supernodes"})


def read_config_file(path: Path, cls: type, algorithms: Iterable[str] = ()) -> dict[str, Any]:
    """The fields a config file sets, checked against the dataclass `cls`: field -> value (a
    nested config's: a dict of its fields). The file is a TOML table of field names (nested
    configs as sub-tables), or a run's own config.json (its "config" table; `algorithms`: the
    ones whose runs this command repeats). A ConfigError names the file and the field."""
    import json
    import tomllib

    where = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        fail(where, f"cannot read it ({e.strerror or e})")
    if len(raw) > MAX_CONFIG_BYTES:
        fail(where, f"larger than {MAX_CONFIG_BYTES} bytes; a config file is a small table")
    try:
        text = raw.decode("utf-8")
        if path.suffix.lower() == ".json":
            data = json.loads(text, parse_constant=lambda c: fail(where, f"{c} is not JSON"))
        else:
            data = tomllib.loads(text)
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError, TOMLDecodeError
        fail(where, f"not a valid {'JSON' if path.suffix.lower() == '.json' else 'TOML'} "
                    f"file ({str(e).splitlines()[0]})")
    if not isinstance(data, dict):
        fail(where, "must hold a table of config fields")
    if "config" in data and "algorithm" in data:  # a run's config.json
        algorithms = tuple(algorithms)
        if algorithms and data["algorithm"] not in algorithms:
            fail(where, f"is a {data['algorithm']!r} run's config; this command runs "
                        f"{' or '.join(map(repr, algorithms))}")
        if other := sorted(set(data) - RUN_RECORD_KEYS):
            fail(where, f"{other[0]}: not a key of a run's config.json")
        data = data["config"]
        if not isinstance(data, dict):
            fail(where, "config: must be a table of config fields")
    return _fields_of(data, cls, where, "")


def _fields_of(data: dict[str, Any], cls: type, where: str, prefix: str) -> dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    out = {}
    for key, value in data.items():
        if key not in names:
            fail(where, f"{prefix}{key}: not a field of {cls.__name__} "
                        f"(fields: {', '.join(names)})")
        out[key] = _typed(value, hints[key], where, f"{prefix}{key}")
    return out


def _typed(value: Any, hint: Any, where: str, name: str) -> Any:
    """`value` as the field's type `hint` (JSON's "inf"/"nan" strings as floats, lists as
    tuples, a nested config as a dict of its fields), or a ConfigError naming file and field."""
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        for kind in kinds:
            try:
                return _typed(value, kind, where, name)
            except ConfigError:
                if kind is kinds[-1]:
                    raise
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            fail(where, f"{name}: must be a table of {hint.__name__} fields, got {value!r}")
        return _fields_of(value, hint, where, name + ".")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            fail(where, f"{name}: must be a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(v, args[0], where, f"{name}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            fail(where, f"{name}: must be a list of {len(args)}, got {value!r}")
        return tuple(_typed(v, a, where, f"{name}[{i}]") for i, (v, a) in
                     enumerate(zip(args, value, strict=True)))
    if hint is bool and not isinstance(value, bool):
        fail(where, f"{name}: must be true or false, got {value!r}")
    if hint is int and (not isinstance(value, int) or isinstance(value, bool)):
        fail(where, f"{name}: must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, str) and value in ("inf", "-inf", "nan"):  # json_safe's spelling
            return float(value)
        if not _real(value):
            fail(where, f"{name}: must be a number, got {value!r}")
        return float(value)
    if hint is str and not isinstance(value, str):
        fail(where, f"{name}: must be a string, got {value!r}")
    return value


# --- help shared by several systems' fields -----------------------------------------------------
NOISE_HELP = (
    "Mechanism noise keys. seeded: derived from --seed, so runs are reproducible, but anyone "
    "with config.json and the reports can subtract the noise (a simulation's guarantee, not a "
    "deployment's). secret: each agent's keys come from the OS CSPRNG in its own process and "
    "are never written or sent (deployable; the noise is not reproducible). Default: seeded "
    "for the local runtime, secret for --runtime ray and flower.")
ENV_HELP = (
    "The environment: gymnax:<id> (a gymnax registry id, e.g. gymnax:Acrobot-v1; jitted, the "
    "fast path), gymnasium:<id> (a Gymnasium registry id, e.g. gymnasium:CartPole-v1; stepped "
    "on the host) or <module>:<callable> (a Python callable returning (gymnax_env, "
    "env_params), a Gymnasium Env or a privrl Task). Discrete actions for every command; "
    "continuous (Box) actions, e.g. gymnax:Pendulum-v1, for "
    f"{', '.join(CONTINUOUS_COMMANDS)}. Default: the system's CartPole. docs/environments.md")
PRIVATE_HELP = (
    "Per-agent private dynamics (repeatable): field=low:high (uniform) or field=v1,v2,... (one "
    "of), an environment-parameter field drawn per agent, e.g. link_mass_1=0.8:1.2 "
    "(Gymnasium: a numeric attribute of the unwrapped environment, e.g. gravity=9.7:9.9).")
# The safety cap on the episodes of a Gymnasium environment that states no step limit (it
# ends its own episodes by `terminated`/`truncated`): `--max-steps` (`max_episode_steps`)
# changes it. It bounds what an episode can cost and is what the run's statements count
# (privrl.envs.task.resolve_task).
HOST_EPISODE_CAP = 10_000


def max_steps_help(default: str) -> str:
    """The `--max-steps` help of a system whose default task's cap is `default`."""
    return ("Episode cap in steps. Default: the task's own step limit (gymnax's "
            f"max_steps_in_episode, Gymnasium's spec.max_episode_steps; {default}); a "
            f"Gymnasium env that states none ends its own episodes, capped at "
            f"{HOST_EPISODE_CAP}.")


ACCOUNTANT_HELP = (
    "pld (default): exact analytic Gaussian where it applies, else dp-accounting's PLD (a "
    "valid upper bound), with RDP recorded beside it; rdp: dp-accounting's RDP alone "
    "(looser). Calibrating σ to --epsilon uses the same accountant.")


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
    np = sys.modules.get("numpy")  # not imported: no numpy value (a bad flag's error skips it)
    if isinstance(obj, float) or (np is not None and isinstance(obj, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else ("inf" if f > 0 else "-inf" if f < 0 else "nan")
    if np is not None and isinstance(obj, np.integer):
        return int(obj)
    if np is not None and isinstance(obj, np.ndarray):
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

