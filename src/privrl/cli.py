"""What every system's command line shares: the typer apps, shared options, the progress bar.

Each system's `cli.py` builds its own `run_app` / `reproduce_app` with `system_apps()` and
decorates its commands on them; `privrl.main` merges them under `privrl run` and
`privrl reproduce`. Nothing here imports a system, and nothing registers by being imported.
Options are validated before anything is computed; an invalid one exits with status 2 and a
single line that names it. Runs write into a new directory and never overwrite results.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.models import ArgumentInfo, ParameterInfo

from privrl import __version__
from privrl.choices import ACCOUNTANTS, COMPOSITIONS, NOISE_MODES
from privrl.config import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


def _typer(**kw: object) -> typer.Typer:
    return typer.Typer(no_args_is_help=True, rich_markup_mode=None, add_completion=False, **kw)


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

Noise = Annotated[NoiseMode | None, typer.Option(
    help="Mechanism noise keys. seeded: derived from --seed, so runs are reproducible, but "
    "anyone with config.json and the reports can subtract the noise (a simulation's "
    "guarantee, not a deployment's). secret: each agent's keys come from the OS CSPRNG in its "
    "own process and are never written or sent (deployable; the noise is not reproducible). "
    "Default: seeded for the local runtime, secret for --runtime ray and flower.",
    case_sensitive=False)]
SecureNoise = Annotated[bool, typer.Option(
    "--secure-noise",
    help="Float-safe noise: exact discrete Laplace/Gaussian on a grid from the OS CSPRNG, "
    "the input clipped in integers (no low-bit leak; slower; not reproducible; see "
    "docs/secure-noise.md). DP-SGD runs: with --accountant rdp.")]


AccountantName = value_enum("AccountantName", ACCOUNTANTS)


AccountantOpt = Annotated[AccountantName, typer.Option(
    "--accountant",
    help="pld (default): exact analytic Gaussian where it applies, else dp-accounting's PLD "
    "(a valid upper bound), with RDP recorded beside it; rdp: dp-accounting's RDP alone "
    "(looser). Calibrating σ to --epsilon uses the same accountant.")]


BudgetComposition = value_enum("BudgetComposition", COMPOSITIONS)


BudgetCompositionOpt = Annotated[BudgetComposition, typer.Option(
    "--budget-composition",
    help="How the ledger enforces each agent's budget over its pure ε-LDP reports. basic "
    "(default): the pure ε, Σ of the reports' ε. optimal: an (ε, δ) at --delta by the optimal "
    "composition theorem (Kairouz, Oh & Viswanath 2015), which admits more reports, or "
    "larger ε per report, for the same ε. privacy.json states both and which is enforced.",
    case_sensitive=False)]

# A seed JAX and NumPy both take (a larger one gave an OverflowError after other checks).
SEED_RANGE = {"min": 0, "max": 2**63 - 1}
Seed = Annotated[int, typer.Option(help="Random seed (same seed, same results).", **SEED_RANGE)]
SweepSeed = Annotated[int, typer.Option(help="Random seed (shared by all settings).",
                                        **SEED_RANGE)]
ShowProgress = Annotated[bool, typer.Option(help="Show a progress bar.")]
Out = Annotated[Path | None, typer.Option(
    help="New or empty directory for the results (never overwritten). Default: a new "
    "runs/<command>-...-<time>/.")]
EnvOpt = Annotated[str | None, typer.Option(
    "--env", help="The environment: gymnax:<id> (any gymnax registry id with discrete actions, "
    "e.g. gymnax:Acrobot-v1, or for dp-reinforce continuous ones, e.g. gymnax:Pendulum-v1; "
    "jitted, the fast path), gymnasium:<id> (a Gymnasium registry id, "
    "e.g. gymnasium:CartPole-v1; stepped on the host) or <module>:<callable> (a Python callable "
    "returning (gymnax_env, env_params), a Gymnasium Env or a privrl Task). Default: the "
    "system's CartPole. docs/environments.md")]
PrivateOpt = Annotated[list[str] | None, typer.Option(
    "--private", help="Per-agent private dynamics (repeatable): field=low:high (uniform) or "
    "field=v1,v2,... (one of), an environment-parameter field drawn per agent, e.g. "
    "link_mass_1=0.8:1.2 (Gymnasium: a numeric attribute of the unwrapped environment, e.g. "
    "gravity=9.7:9.9).")]
MaxStepsOpt = Annotated[int | None, typer.Option(
    "--max-steps", help="Episode cap in steps. Default: the task's own step limit (gymnax's "
    "max_steps_in_episode, Gymnasium's spec.max_episode_steps; the default CartPole task's: "
    "200 for PGC-A3C, CartPole-v0's, else 500, CartPole-v1's).")]
Resume = Annotated[Path | None, typer.Option(
    help="Continue an interrupted sweep in this directory; finished settings are kept.")]
AddressOpt = Annotated[str | None, typer.Option(
    help="Ray runtime: join this cluster (auto or HOST:PORT) instead of starting a local one.")]


@contextmanager
def progress_bar(console: Console, show: bool, description: str,
                  unit: str = "submissions/trial") -> Iterator[tuple]:
    """A rich progress bar (units done, elapsed, ETA) and its task id."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not show,
    ) as bar:
        yield bar, bar.add_task(description, total=None)


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


def mechanism_option(choices: type[StrEnum]) -> Callable[[Any], Any]:
    """The parser of a `--mechanism` option: one of `choices` (any case), or a user's own
    `module:callable` / `path/to/file.py:callable` (a `UserMechanism`)."""
    def parse(text: Any) -> Any:
        if isinstance(text, choices):
            return text
        try:
            return choices(str(text).lower())
        except ValueError:
            pass
        where, _, attr = str(text).rpartition(":")
        if where and attr.isidentifier():
            return UserMechanism(text)
        raise typer.BadParameter(f"{text!r} is none of {', '.join(c.value for c in choices)} "
                                 "and no module:callable of your own")
    return parse


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
