"""What every system's command line shares: the typer apps, shared options, the progress bar.

Each system's `cli.py` builds its own `run_app` / `reproduce_app` with `system_apps()` and
decorates its commands on them; `privrl.main` merges them under `privrl run` and
`privrl reproduce`. Nothing here imports a system, and nothing registers by being imported.
Options are validated before anything is computed; an invalid one exits with status 2 and a
single line that names it. Runs write into a new directory and never overwrite results.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import click
import typer
from typer.core import TyperCommand
from typer.models import ArgumentInfo, ParameterInfo

from privrl import __version__
from privrl.choices import NOISE_MODES
from privrl.config import (
    NOISE_HELP,
    ConfigError,
    field_flag,
    one_of,
)

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


# typer escapes the "[" of every option's "[default: …]" for rich markup whenever rich is
# installed (typer.core.TyperOption.get_help_record), even with rich_markup_mode=None, where the
# help is printed by click as plain text: --help showed a literal "\[default: …]". privrl's apps
# all print plain help, so the flag that makes typer escape is cleared.
typer.core.HAS_RICH = False


def _typer(**kw: object) -> typer.Typer:
    # suggest_commands off: click itself says "Did you mean" (typer's said it a second time)
    return typer.Typer(no_args_is_help=True, rich_markup_mode=None, add_completion=False,
                       suggest_commands=False, **kw)


def root_apps() -> tuple[typer.Typer, typer.Typer, typer.Typer]:
    """A fresh `privrl` app and its (empty) `run` and `reproduce` groups."""
    app = _typer(
        name="privrl",
        help="Privacy-preserving distributed and federated reinforcement learning.\n\n"
        "Every run states the differential-privacy guarantee it delivered and writes its "
        "results (config, metrics, privacy ledger, summary, plots) into a new directory.",
        pretty_exceptions_enable=False,
    )
    run_app = _typer(help="Train an algorithm and write its results.")
    reproduce_app = _typer(help="Reproduce a paper's headline tables, printed beside the paper's.")
    app.add_typer(run_app, name="run")
    app.add_typer(reproduce_app, name="reproduce")
    app.callback()(_root)
    return app, run_app, reproduce_app


def system_apps() -> tuple[typer.Typer, typer.Typer]:
    """A system's own `run` and `reproduce` command groups (merged into privrl's by main)."""
    return _typer(), _typer()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privrl {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """privrl command line."""


def value_enum(name: str, values: Iterable[str]) -> type[StrEnum]:
    """A typer choice enum over a config's value tuple, so each value set is written once
    (member names: the values with "-" as "_", e.g. `FedPGMechanism.distributed_gaussian`)."""
    return StrEnum(name, {v.replace("-", "_"): v for v in values})  # type: ignore[return-value]


# Old flag -> its new name, per command (issue 38's one vocabulary). `privrl.main` refuses an
# old flag before anything parses: one line that names the new one, exit 2.
_DPSGD = {"--seeds": "--trials", "--sigma": "--noise-multiplier",
          "--target-epsilon": "--epsilon", "--max-epsilon": "--epsilon-budget"}
_LDP = {"--seeds": "--trials", "--sigma": "--iqr-scale",
        "--obs-noise-multiplier": "--noise-multiplier"}
_FEDPG = {"--budget": "--episodes"}
RENAMED: dict[tuple[str, str], dict[str, str]] = {
    ("run", "pgc-a3c"): {"--target-score": "--target-return"},
    ("reproduce", "pgc-a3c"): {"--cap": "--submissions"},
    ("run", "dp-qlearning"): {"--seeds": "--trials", "--sigma": "--gp-scale"},
    ("reproduce", "dp-qlearning"): {"--seeds": "--trials"},
    ("run", "dp-reinforce"): _DPSGD,
    ("run", "dp-dqn"): _DPSGD,
    ("run", "ldp-reinforce"): _LDP,
    ("run", "ldp-dqn"): _LDP,
    ("reproduce", "dpsgd-rl"): {"--seeds-reinforce": "--trials-reinforce",
                                "--seeds-dqn": "--trials-dqn"},
    ("run", "fedpg-cen"): _FEDPG,
    ("run", "fedpg-dec"): _FEDPG,
    ("reproduce", "fedpg"): {**_FEDPG, "--laplace-epsilons": "--laplace-epsilons-per-report"},
    ("audit", "fedpg"): _FEDPG,
    ("run", "fedrl"): {"--seeds": "--trials", "--noise-sigma": "--noise-std"},
    ("run", "fedrl-baseline"): {"--seeds": "--trials"},
    ("reproduce", "fedrl"): {"--runs": "--trials"},
    ("run", "fedrl-text2action"): {"--runs": "--trials", "--noise-sigma": "--noise-std"},
    ("reproduce", "fedrl-text2action"): {"--runs": "--trials"},
}


# Flags other run commands take that these systems refuse, and why (one line, exit 2, instead
# of the parser's "No such option"). docs/environments.md says the same.
_TASK_BOUND = "its task is fixed; --env/--private are not supported"
REFUSED: dict[tuple[str, str], dict[str, str]] = {
    ("run", "dp-qlearning"): dict.fromkeys(("--env", "--private"), (
        f"dp-qlearning: {_TASK_BOUND}: its functional noise is a Gaussian process over paper "
        "001's 1-D state, sampled exactly only because exp(-|x - y|) is Markov in one "
        "dimension (each new state conditions on its two stored neighbours), and Theorem 5's "
        "calibration is for that kernel on [0, 1]; a d-dimensional state would need another "
        "sampler and another calibration")),
    ("run", "fedrl"): dict.fromkeys(("--env", "--private"), (
        f"fedrl: {_TASK_BOUND}: its two parties each see their own half of paper 002's "
        "Grid-World (their own window history), and the protocol (privrl.federation.vertical) "
        "is built for that split; splitting another environment's observation between two "
        "parties is not built yet")),
}


def renamed_flag(argv: list[str]) -> str | None:
    """The one-line error for the first old flag `argv` gives its command ("--seeds was renamed
    --trials") or a flag it refuses (`REFUSED`), or None when it gives none."""
    table = RENAMED.get(tuple(argv[:2]), {})  # type: ignore[call-overload]
    refused = REFUSED.get(tuple(argv[:2]), {})  # type: ignore[call-overload]
    for arg in argv[2:]:
        if arg == "--":
            break
        old = arg.split("=", 1)[0]
        if old in table:
            return f"{old} was renamed {table[old]}"
        if old in refused:
            return f"{old}: {refused[old]}"
    return None


RUNTIMES = ("local", "ray", "flower")
Runtime = value_enum("Runtime", RUNTIMES)
NoiseMode = value_enum("NoiseMode", NOISE_MODES)

Noise = Annotated[NoiseMode | None, typer.Option(help=NOISE_HELP, case_sensitive=False)]


# A seed JAX and NumPy both take (a larger one gave an OverflowError after other checks).
SEED_RANGE = {"min": 0, "max": 2**63 - 1}
Seed = Annotated[int, typer.Option(help="Random seed (same seed, same results).", **SEED_RANGE)]
SweepSeed = Annotated[int, typer.Option(help="Random seed (shared by all settings).",
                                        **SEED_RANGE)]
ShowProgress = Annotated[bool, typer.Option(help="Show a progress bar.")]
ProgressEvery = Annotated[float, typer.Option(
    help="Without a terminal (a file, nohup, a batch job): seconds between two progress lines "
    "(done/total, mean return, ε spent).", min=0.001)]
Out = Annotated[Path | None, typer.Option(
    help="New or empty directory for the results (never overwritten). Default: a new "
    "runs/<command>-...-<time>/.")]
Resume = Annotated[Path | None, typer.Option(
    help="Continue an interrupted sweep in this directory; finished settings are kept.")]
AddressOpt = Annotated[str | None, typer.Option(
    help="Ray runtime: join this cluster (auto or HOST:PORT) instead of starting a local one.")]


@contextmanager
def progress_bar(console: Console, show: bool, description: str,
                 unit: str = "submissions/trial", every: float | None = None) -> Iterator[tuple]:
    """The run's progress display (privrl.progress.RunProgress: a bar in a terminal, a line
    every `every` seconds without one, the compile phase's time) and a task id, for callers
    that update it as a rich Progress; the display is also a progress callback itself."""
    from privrl.progress import DEFAULT_EVERY, RunProgress

    with RunProgress(console, show, description, unit,
                     DEFAULT_EVERY if every is None else every) as shown:
        yield shown, None


def command_flags(fn: Callable[..., Any]) -> dict[str, str]:
    """Parameter name -> what the user types for it: `--name-like-this` (or the option's own
    `--flag`), an argument's metavar (`RUN_DIR`)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    flags = {}
    for name in inspect.signature(fn).parameters:
        info = next((m for m in getattr(hints.get(name), "__metadata__", ())
                     if isinstance(m, ParameterInfo)), None)
        if isinstance(info, ArgumentInfo):
            flags[name] = info.metavar or name.upper()
            continue
        decls = [d for d in (info.param_decls or ()) if d.startswith("--")] if info else []
        flags[name] = decls[0].split("/")[0] if decls else "--" + name.replace("_", "-")
    return flags


def flag_names(**renames: str) -> Callable[[F], F]:
    """Decorate a command so the ConfigErrors it lets out name flags, not config fields.

    Library code raises `ConfigError(field, ...)`; the user typed a flag. A field that is also
    the name of one of the command's parameters becomes that parameter's flag; put this between
    `@app.command(...)` and the function with `field="--flag"` for every field set by an option
    named otherwise (e.g. `buffer_size="--buffer"`). A field no option sets (a preset fixes it)
    and an error already naming a flag pass through unchanged.
    """
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except ConfigError as e:
                flag = renames.get(e.field) or command_flags(fn).get(e.field)
                if flag is None:
                    raise
                raise ConfigError(flag, e.message) from e
        return command  # type: ignore[return-value]
    return decorate


class UserMechanism(str):
    """`--mechanism module:callable`: a user's own mechanism (privrl.privacy.user), imported
    only when the run builds it, after every other option has been checked."""

    @property
    def value(self) -> str:
        return str(self)


def parse_numbers(text: str, option: str, kind: type = float,
                  count: int | None = None) -> tuple:
    """A comma-separated option ("1,2,3") as a tuple of `kind`; a ConfigError naming `option`
    if a value does not parse or (with `count`) there are not exactly `count` of them."""
    what = "numbers" if kind is float else "integers"
    need = f"{count} comma-separated {what}" if count else f"comma-separated {what}"
    try:
        vals = tuple(kind(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(option, f"expected {need}, got {text!r}") from None
    if count is not None and len(vals) != count:
        raise ConfigError(option, f"expected {need}, got {len(vals)}")
    return vals


# --- options generated from a config's fields ---------------------------------------------------
# A config field is declared once (privrl.config.option: default, help, unit, flag); a `privrl
# run` command's options are generated from its config's fields, with `--config FILE` beside
# them. Precedence: the preset < the command's own defaults < the file < the options given.

ConfigFile = Annotated[Path | None, typer.Option(
    "--config", help="Read settings from this file: a TOML table of config fields (field = "
    "value, a nested config as a [table]), or a run's own config.json, which repeats that run. "
    "Precedence: the preset < this file < the options given. At most 1 MiB; never executed.")]


@dataclasses.dataclass(frozen=True)
class FieldOption:
    """One generated option: the config field it sets (`obs.sigma` for a nested config's), its
    flag, the function parameter typer sees, its type and help."""

    field: str
    flag: str
    param: str
    kind: Any  # the field's type, None removed
    meta: Mapping[str, Any]
    help: str


@dataclasses.dataclass
class Settings:
    """What a command's `--config FILE` and generated options gave: field -> value (a nested
    config's fields as `prefix.field`), and who gave each (a flag or the file), so an error
    names what the user typed."""

    cls: type
    values: dict[str, Any]
    given_by: dict[str, str]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def pop(self, name: str, default: Any = None) -> Any:
        """Take a value out (the command reads it itself: it does not reach the config)."""
        return self.values.pop(name, default)

    def given(self) -> dict[str, Any]:
        """The fields the file and the options gave, but the command's `fixed` ones (a file
        that sets one otherwise is refused)."""
        for name, value in self.fixed.items():
            if name in self.values and self.values[name] != value:
                raise ConfigError(name, f"this command runs with {name} = {value!r}")
        self._check_task()
        return {k: v for k, v in self.values.items() if k not in self.fixed}

    def _check_task(self) -> None:
        """The `env` and `private_params` a user gave, checked as text before JAX (envs.spec).
        Here, not in the configs' `validate()`: a Python API run names its own Task in
        `env` (config.json records it), which need not be an `--env` form."""
        env, private = self.values.get("env"), self.values.get("private_params", ())
        if "env" not in self.values and not private:
            return
        if (env is None or isinstance(env, str)) and isinstance(private, (list, tuple)) and all(
                isinstance(text, str) for text in private):
            from privrl.envs.spec import check_task_fields

            check_task_fields(env, private)

    def build(self, **defaults: Any) -> Any:
        """The config: the preset (the config's `preset` field, given or default), the
        command's defaults (and `defaults`), then the file and the options; the command's
        `fixed` fields it sets itself."""
        values = {**self.defaults, **defaults, **self.given(), **self.fixed}
        top = {k: v for k, v in values.items() if "." not in k}
        nested: dict[str, dict[str, Any]] = {}
        for k, v in values.items():
            if "." in k:
                prefix, sub = k.split(".", 1)
                nested.setdefault(prefix, {})[sub] = v
        nones = {k: v for k, v in top.items() if v is None}
        given = {k: v for k, v in top.items() if v is not None}
        if getattr(self.cls, "presets", None):
            config = self.cls.from_preset(given.pop("preset", "paper"), **given)
        else:
            config = self.cls(**given)
        config = dataclasses.replace(config, **nones)  # a file's null: None, not the preset's
        for prefix, sub in nested.items():
            config = dataclasses.replace(
                config, **{prefix: dataclasses.replace(getattr(config, prefix), **sub)})
        return config


def _plain(hint: Any) -> Any:
    """`X | None` -> X."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        return kinds[0] if len(kinds) == 1 else hint
    return hint


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(_shown, value)) if value else "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def field_options(cls: type, skip: Iterable[str] = (), flags: Mapping[str, str] | None = None,
                  nested: Iterable[str] = (), defaults: Mapping[str, Any] | None = None
                  ) -> list[FieldOption]:
    """The options of `cls`'s fields: every field with a flag (privrl.config.option), but those
    in `skip`; `flags` renames a field's flag for this command; the nested configs named in
    `nested` add their own fields as `prefix.field`. Each help ends with the default (the
    command's `defaults`, else the field's, and the presets that change it) unless it says its
    default itself."""
    skip, flags, out = set(skip), dict(flags or {}), []
    presets = getattr(cls, "presets", {})

    def walk(klass: type, prefix: str) -> None:
        hints = typing.get_type_hints(klass)
        for f in dataclasses.fields(klass):
            name = prefix + f.name
            if name in skip:
                continue
            if f.name in nested and not prefix:
                walk(_plain(hints[f.name]), f.name + ".")
                continue
            flag = flags.pop(name, None) or field_flag(f)
            if flag is None or "help" not in f.metadata or f.metadata.get("cli") is False:
                continue
            meta = f.metadata
            text = meta["help"] + (f" Unit: {meta['unit']}." if meta.get("unit") else "")
            if "Default" not in text:
                default = (defaults or {}).get(name, f.default) \
                    if f.default is not dataclasses.MISSING else None
                changed = [f"{p}: {_shown(v[name])}" for p, v in presets.items()
                           if not prefix and name in v and v[name] != default]
                if default is not None or changed:
                    text += f" Default: {_shown(default)}" + (
                        f" (preset {'; '.join(changed)})" if changed else "") + "."
            out.append(FieldOption(name, flag, name.replace(".", "__"), _plain(hints[f.name]),
                                   meta, text))

    walk(cls, "")
    known = {f.name for f in dataclasses.fields(cls)} | {
        f"{p}.{g.name}" for p in nested
        for g in dataclasses.fields(_plain(typing.get_type_hints(cls)[p]))}
    if skip - known:
        raise ValueError(f"{cls.__name__}: skip names no field: {sorted(skip - known)}")
    if flags:
        raise ValueError(f"{cls.__name__}: flags for no option: {sorted(flags)}")
    return out


def _is_callable_spec(text: str) -> bool:
    where, _, attr = text.rpartition(":")
    return bool(where) and attr.isidentifier()


def _choice_parser(choices: tuple[str, ...], user_callable: bool) -> Callable[[Any], Any]:
    """One of `choices` in any case, or (`user_callable`) a user's `module:callable`; anything
    else is kept as typed and refused with the config's own wording (`_check_choices`)."""
    def parse(text: Any) -> str:
        low = str(text).lower()
        if low in choices:
            return low
        return UserMechanism(text) if user_callable and _is_callable_spec(str(text)) \
            else str(text)
    return parse


def _check_choices(options: list[FieldOption], values: Mapping[str, Any]) -> None:
    """Each choice field's value is one of its choices (or a user's module:callable where
    the field takes one: its form, and a file's presence, checked as text): "unknown model
    'x'; choose one of ...", before anything runs."""
    from privrl.plugins import split_callable

    for opt in options:
        value, choices = values.get(opt.field), opt.meta.get("choices")
        if value is None or not choices:
            continue
        if opt.meta.get("user_callable") and _is_callable_spec(str(value)):
            split_callable(str(value), opt.field, exists=True)
        else:
            one_of(opt.field, value, choices, opt.field.rpartition(".")[2].replace("_", " "))


def _click_option(opt: FieldOption) -> Any:
    """The click option of a generated option (default None: not given)."""
    import click

    kind, meta = opt.kind, opt.meta
    decls, kw = [opt.param, opt.flag], {"default": None, "help": opt.help}
    if meta.get("choices"):  # any case; checked by `_check_choices`
        kw["metavar"] = "[" + "|".join(meta["choices"]) + (
            "|MODULE:CALLABLE]" if meta.get("user_callable") else "]")
    elif kind is bool:
        decls = [opt.param, f"{opt.flag}/--no-{opt.flag[2:]}"]
    elif typing.get_origin(kind) is tuple:
        if typing.get_args(kind)[0] is str and not meta.get("listed"):
            kw["multiple"] = True  # repeated
        else:
            kw["metavar"] = "X,Y,..."  # numbers (or `listed` strings): comma-separated
    elif kind in (int, float):
        kw["type"] = click.IntRange(SEED_RANGE["min"], SEED_RANGE["max"]) \
            if opt.field == "seed" else click.INT if kind is int else click.FLOAT
    return click.Option(decls, **kw)


# --- flags known without importing a config ------------------------------------------------------
# A config class lives beside its system's code, which imports JAX; importing it only to say
# that a flag does not exist took seconds. Its fields are read from its source instead (the
# `option(...)` declarations: the same ones `field_options` reads from the class), and an
# unknown flag is refused before anything is imported. tests/test_cli_startup.py checks that
# these flags are exactly the generated options' for every command.

def _module_source(module: str) -> Any:
    """The parsed source of a privrl module (None for a module outside privrl)."""
    import ast

    root, _, rest = module.partition(".")
    if root != "privrl":
        return None
    base = Path(__file__).parent.joinpath(*rest.split(".")) if rest else Path(__file__).parent
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _source_fields(module: str, name: str) -> dict[str, tuple[str | None, str, str]]:
    """Class `name`'s dataclass fields as declared in `module`'s source, its bases' first:
    field -> (its flag, None when it has no option; its annotation's text; the module its
    annotation names a class of)."""
    import ast

    tree = _module_source(module)
    if tree is None:
        return {}
    imported = {a.asname or a.name: n.module for n in tree.body
                if isinstance(n, ast.ImportFrom) and n.module for a in n.names}
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    fields: dict[str, tuple[str | None, str, str]] = {}
    for base in reversed(node.bases):  # dataclasses: the last base's fields first
        if isinstance(base, ast.Name):
            fields.update(_source_fields(imported.get(base.id, module), base.id))
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        call = item.value
        flag = None
        called = getattr(call.func, "id", "") if isinstance(call, ast.Call) else ""
        if called == "option" or called.endswith("_option"):  # config.py's shared declarations
            kw = {k.arg: k.value for k in call.keywords}
            cli = not (isinstance(kw.get("cli"), ast.Constant) and kw["cli"].value is False)
            given = kw.get("flag")
            flag = (given.value if isinstance(given, ast.Constant) and given.value else
                    "--" + item.target.id.replace("_", "-")) if cli else None
        kind = ast.unparse(item.annotation).replace("| None", "").replace("None |", "").strip()
        fields[item.target.id] = (flag, kind, imported.get(kind, module))
    return fields


def source_flags(cls: str, skip: Iterable[str] = (), flags: Mapping[str, str] | None = None,
                 nested: Iterable[str] = (), **_: Any) -> dict[str, bool]:
    """The flags `field_options(cls, ...)` generates (a bool's `--no-` form too), read from
    the source of `cls` ("module:Class") without importing it: flag -> whether it takes a
    value."""
    skip, flags, out = set(skip), dict(flags or {}), {}

    def walk(module: str, name: str, prefix: str) -> None:
        for field, (flag, kind, where) in _source_fields(module, name).items():
            full = prefix + field
            if full in skip:
                continue
            if field in nested and not prefix:
                walk(where, kind, field + ".")
                continue
            flag = flags.get(full) or flag
            if flag is None:
                continue
            is_bool = kind == "bool"
            out[flag] = not is_bool
            if is_bool:
                out["--no-" + flag[2:]] = False

    module, _, name = cls.partition(":")
    walk(module, name, "")
    return out


def close_flags(typed: str, known: Iterable[str]) -> list[str]:
    """The flags a mistyped `typed` may have meant: those it begins (`--hid` for
    `--hidden-sizes`), else the close spellings of the name without its dashes (a shared
    "--" made `--hidden` look like `--env`)."""
    import difflib

    known = sorted({k for k in known if k.startswith("--")})
    stem = typed.lstrip("-")
    if len(stem) >= 3 and (starts := [k for k in known if k[2:].startswith(stem)]):
        return starts[:3]
    names = {k[2:]: k for k in known}
    return [names[m] for m in difflib.get_close_matches(stem, list(names), n=3, cutoff=0.7)]


def command_flag_names(command: Any) -> set[str]:
    """Every long flag a click command takes."""
    return {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))
            if o.startswith("--")}


class UnknownFlag(click.NoSuchOption):
    """A flag refused before the command's config was imported (its suggestions are made)."""


class _LazyCommand(TyperCommand):
    """A typer command whose generated options (`_ConfigCommand.click_options`) are built on
    first use, parsing it or its help: building `privrl` imports no system's config, and an
    unknown flag is refused before it is (its flags read from the config's source)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        source = inspect.unwrap(self.callback)
        if self._params is None and isinstance(source, _ConfigCommand):
            self._refuse_unknown(ctx, args, source)
        return super().parse_args(ctx, args)

    def _refuse_unknown(self, ctx: Any, args: list[str], source: _ConfigCommand) -> None:
        """A click NoSuchOption for the first flag in `args` that the command does not take."""
        import click

        try:
            generated = source_flags(source.cls_name, **source.opts)
        except Exception:  # a source this reader does not follow: the full parse decides
            return
        takes_value = {**generated, **{
            o: not p.is_flag for p in self._own if isinstance(p, click.Option)
            for o in (*p.opts, *p.secondary_opts)}}
        known = {*takes_value, *ctx.help_option_names}
        values = iter(args)
        for arg in values:
            if arg == "--":
                return
            if not arg.startswith("--"):
                continue
            flag, eq, _ = arg.partition("=")
            if flag not in known:
                raise UnknownFlag(flag, possibilities=close_flags(flag, known), ctx=ctx)
            if not eq and takes_value.get(flag):  # the value that follows is not a flag
                next(values, None)

    @property  # type: ignore[override]
    def params(self) -> list[Any]:
        if self._params is None:  # one list: click appends to it (and pops) in place
            source = inspect.unwrap(self.callback)
            self._params = [*self._own, *(source.click_options() if isinstance(
                source, _ConfigCommand) else [])]
        return self._params

    @params.setter
    def params(self, value: list[Any]) -> None:
        self._own, self._params = list(value), None


def _value(opt: FieldOption, value: Any) -> Any:
    """A generated option's value as its field's: a choice in any case, repeated strings and
    comma-separated numbers as tuples."""
    if opt.meta.get("choices"):
        return _choice_parser(opt.meta["choices"], opt.meta.get("user_callable", False))(value)
    if typing.get_origin(opt.kind) is tuple:
        item = typing.get_args(opt.kind)[0]
        if item is str:
            return tuple(value) if not opt.meta.get("listed") else tuple(
                v.strip() for v in value.split(",") if v.strip())
        return parse_numbers(value, opt.flag, item) if value.strip() else ()
    return value


class _ConfigCommand:
    """A command whose options are generated from a config class, imported only when the
    command is parsed or its help shown (a `privrl` command imports its own system's config
    only; the config modules import no JAX, so a command checks every value before it imports
    its system)."""

    def __init__(self, fn: Callable[..., Any], cls: str, opts: dict[str, Any],
                 algorithms: tuple[str, ...], renames: dict[str, str],
                 fixed: dict[str, Any]) -> None:
        self.fn, self.cls_name, self.opts, self.algorithms = fn, cls, opts, algorithms
        self.renames, self.fixed = renames, fixed
        self.__name__, self.__qualname__ = fn.__name__, fn.__qualname__
        self.__module__, self.__doc__ = fn.__module__, fn.__doc__

    @functools.cached_property
    def cls(self) -> type:
        import importlib

        module, _, name = self.cls_name.partition(":")
        return getattr(importlib.import_module(module), name)

    @functools.cached_property
    def options(self) -> list[FieldOption]:
        return field_options(self.cls, **self.opts)

    def click_options(self) -> list[Any]:
        """The generated options (imports the config class)."""
        own = set(inspect.signature(self.fn).parameters)
        if clash := own & {o.param for o in self.options}:
            raise ValueError(f"{self.fn.__name__}: options declared twice: {sorted(clash)}")
        return [_click_option(o) for o in self.options]

    @functools.cached_property
    def __signature__(self) -> inspect.Signature:  # type: ignore[override]
        """What typer reads: the command's own options and --config (the generated ones are
        `_LazyCommand`'s)."""
        hints = typing.get_type_hints(self.fn, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation), kind=p.KEYWORD_ONLY)
               for p in inspect.signature(self.fn).parameters.values() if p.name != "settings"]
        config = inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY,
                                   annotation=ConfigFile, default=None)
        return inspect.Signature([*own, config])

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}

    def __call__(self, **kwargs: Any) -> Any:
        path = kwargs.pop("config", None)
        values, given_by = {}, {}
        if path is not None:
            from privrl.config import read_config_file

            for field, value in read_config_file(path, self.cls, self.algorithms).items():
                if isinstance(value, dict):  # a nested config's fields
                    values.update({f"{field}.{k}": v for k, v in value.items()})
                else:
                    values[field] = value
            given_by = dict.fromkeys(values, f"{path}: ")
        for opt in self.options:
            value = kwargs.pop(opt.param, None)
            if value is not None and value != ():  # () : a repeated option not given
                values[opt.field] = _value(opt, value)
                given_by[opt.field] = opt.flag
        try:
            _check_choices(self.options, values)
            settings = Settings(self.cls, values, given_by, self.opts["defaults"], self.fixed)
            return self.fn(settings=settings, **kwargs)
        except ConfigError as e:
            by = given_by.get(e.field)
            if by is not None and by.endswith(": "):  # set by the file alone
                raise ConfigError(f"{by}{e.field}", e.message) from e
            flags = {**{o.flag[2:].replace("-", "_"): o.flag for o in self.options},
                     **{o.field: o.flag for o in self.options}, **command_flags(self.fn),
                     **self.renames}  # a library error may name the field or the flag
            flag = by or flags.get(e.field)
            if flag is None:
                raise
            raise ConfigError(flag, e.message) from e


def config_command(app: typer.Typer, name: str, cls: str, *, skip: Iterable[str] = (),
                   flags: Mapping[str, str] | None = None, nested: Iterable[str] = (),
                   algorithms: Iterable[str] | None = None, help: str | None = None,
                   defaults: Mapping[str, Any] | None = None,
                   fixed: Mapping[str, Any] | None = None, **renames: str) -> Callable[[F], F]:
    """Register `fn` as command `name` of `app`, with an option for every tunable field of the
    config class `cls` ("module:Class", imported when the command is built; see
    `field_options` for `skip`, `flags` and `nested`) and `--config FILE`. `fn` takes
    `settings: Settings` and its own (non-field) options. Its ConfigErrors name what the user
    typed: the flag, or the file and field; `renames` maps other fields to flags (as
    `flag_names`). `algorithms`: the runs whose config.json it repeats (default: `name`).
    `defaults`: the command's own defaults (over the preset's, under the file and options);
    `fixed`: fields the command sets itself (no option; a file may not change them)."""
    def decorate(fn: F) -> F:
        app.command(name, help=help, cls=_LazyCommand)(_ConfigCommand(
            fn, cls, {"skip": (*skip, *(fixed or {})), "flags": dict(flags or {}),
                      "nested": tuple(nested), "defaults": dict(defaults or {})},
            (name,) if algorithms is None else tuple(algorithms), renames, dict(fixed or {})))
        return fn
    return decorate


# --- what every command prints ------------------------------------------------------------------

def sweep_dir(out: Path | None, resume: Path | None, stem: str) -> Path:
    """A sweep's directory: `resume`'s (which must hold a sweep) or a new one; --out and
    --resume together are refused."""
    from privrl.output import check_out_dir, new_run_dir

    if out is not None and resume is not None:
        raise ConfigError("--resume", "give either --out (a new sweep) or --resume (an old one)")
    if resume is not None:
        if not (resume / "sweep.json").is_file():
            raise ConfigError("--resume", f"{resume} holds no sweep (no sweep.json)")
        return resume
    check_out_dir(out)
    return new_run_dir(out, stem)


def execute_sweep(title: str, path: Path, run: Callable[..., Any], show: bool, command: str,
                  files: str, unit: str = "submissions/trial") -> None:
    """Run a reproduction sweep into `path` under a progress bar: `run(progress, log)`, with
    `progress(name, done, total)`; then print its tables.md and where the results are. An
    interruption says how to resume (`command --resume path`)."""
    from rich.console import Console
    from rich.markdown import Markdown

    err = Console(stderr=True)
    err.print(f"{title} → {path}")
    computing()
    with progress_bar(err, show, "sweep", unit=unit) as (bar, task):
        try:
            run(lambda name, done, total: bar.update(task, completed=done, total=total,
                                                     description=name),
                lambda message: bar.console.print(message))
        except KeyboardInterrupt:
            err.print(f"interrupted: finished settings are kept; continue with {command} "
                      f"--resume {path}")
            raise
    Console().print(Markdown((path / "tables.md").read_text()))
    Console().print(f"Results written to [bold]{path}[/] ({files})")


# What the `privrl` process does once a `privrl run` command has imported what it runs with and
# starts computing (privrl.main: the garbage collector's tuning, which freezes what is
# imported); empty for a caller of privrl.main.main(argv), whose process keeps its own.
_WHEN_COMPUTING: list[Callable[[], None]] = []


def tune_when_computing(action: Callable[[], None]) -> None:
    """Run `action` once, when the command starts computing (`computing`)."""
    _WHEN_COMPUTING[:] = [action]


def computing() -> None:
    """The command has imported its system and starts computing: run what waited for that."""
    while _WHEN_COMPUTING:
        _WHEN_COMPUTING.pop()()


def run_and_save(out: Path | None, stem: str, run: Callable[[Any], Any],
                 save: Callable[..., dict[str, Any]], err: Console, show: bool,
                 unit: str = "submissions/trial", every: float | None = None
                 ) -> tuple[Path, dict[str, Any]]:
    """A local run under a progress bar (`run(progress)`), its work kept should it fail
    (privrl.output.keeping_work), then saved into a new run directory `stem` by
    `save(result, path, command=...)`: (the directory, its summary)."""
    import sys

    from privrl.output import keeping_work, new_run_dir

    command = ["privrl", *sys.argv[1:]]
    computing()
    with (keeping_work(lambda: new_run_dir(out, stem),
                       lambda result, path: save(result, path, command=command)),
          progress_bar(err, show, "training", unit, every) as (bar, _)):
        result = run(bar)
    path = new_run_dir(out, stem)
    return path, save(result, path, command=command)


def print_results(path: Path, files: str, *lines: Any,
                  summary: Mapping[str, Any] | None = None) -> None:
    """A run's last words on stdout: its table and notes (`lines`, None skipped), where its
    results are (`files`: what follows the directory) and, given its `summary`, whether it
    learned (privrl.evaluation.verdict_line)."""
    from rich.console import Console

    from privrl.evaluation import verdict_line

    console = Console()
    for line in lines:
        if line is not None:
            console.print(line)
    console.print(f"Results written to [bold]{path}[/]{files}")
    if summary is not None:
        console.print(verdict_line(summary))


def results_table(title: str, rows: Iterable[tuple[str, str]]) -> Any:
    """A two-column (metric, value) rich table of a run's results."""
    from rich.table import Table

    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for metric, value in rows:
        table.add_row(metric, value)
    return table
