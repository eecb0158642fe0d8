"""`privrl`: the entry point. Builds the command line from every system's own commands.

Each system's `cli.py` holds its `run_app` and `reproduce_app` (and, for PGC-A3C, the top-level
`replay`); `build_app` merges them under one `privrl`. System CLI modules import no JAX at
module level, so `main` can ask XLA for one host device per core before anything starts JAX.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import typer
import typer.main

try:  # a typer that carries its own click: its usage errors derive from TyperException
    from typer.exceptions import TyperException as UsageError
except ImportError:  # typer < 0.21 (the one flwr 1.42 accepts, constraints.txt): click's
    from click import ClickException as UsageError

from privrl.audit.cli import audit_apps
from privrl.cli import (
    UnknownFlag,
    _ConfigCommand,
    close_flags,
    command_flag_names,
    renamed_flag,
    root_apps,
    tune_when_computing,
)
from privrl.compute.devices import (
    run_cpu_inline_once_imported,
    tune_garbage_collector,
    use_compilation_cache,
    use_host_devices,
)
from privrl.config import ConfigError, RayNotInstalledError
from privrl.evaluate_cli import top_app as evaluate_app
from privrl.planner import cli as planner
from privrl.systems.dp_qlearning import cli as dp_qlearning
from privrl.systems.dpsgd_rl import cli as dpsgd_rl
from privrl.systems.fedpg import cli as fedpg
from privrl.systems.fedrl import cli as fedrl
from privrl.systems.fedrl_text import cli as fedrl_text
from privrl.systems.pgc_a3c import cli as pgc_a3c

# In the order `privrl run --help` lists them.
SYSTEMS = (pgc_a3c, dp_qlearning, dpsgd_rl, fedpg, fedrl, fedrl_text)


def build_app() -> typer.Typer:
    """The `privrl` app with every system's `run` and `reproduce` commands, `audit` and
    `evaluate`."""
    app, run_app, reproduce_app = root_apps()
    audit_app = audit_apps()
    for system in SYSTEMS:
        run_app.add_typer(system.run_app)
        reproduce_app.add_typer(system.reproduce_app)
        top = getattr(system, "top_app", None)
        if top is not None:
            app.add_typer(top)
        audit = getattr(system, "audit_app", None)
        if audit is not None:
            audit_app.add_typer(audit)
    app.add_typer(audit_app, name="audit")
    app.add_typer(evaluate_app)
    app.add_typer(planner.top_app)
    return app


def _user_errors() -> tuple[type[Exception], ...]:
    """The errors that are the user's to fix (one line, exit 2): those of the modules the
    command imported (one it did not import cannot have raised)."""
    found: list[type[Exception]] = [ConfigError, RayNotInstalledError]
    for module, name in (("privrl.output", "OutputDirError"), ("privrl.runfile", "RunFileError")):
        if module in sys.modules:
            found.append(getattr(sys.modules[module], name))
    return tuple(found)


def _budget_error() -> type[Exception] | None:
    ledger = sys.modules.get("privrl.privacy.ledger")
    return None if ledger is None else ledger.BudgetExceededError


def _before_each_command(group: Any, setup: Callable[[bool], None], path: str = "") -> None:
    """Run `setup(checks_first)` once the command line has parsed, before the chosen command
    runs (what it imports, JAX above all, costs seconds: an invalid command line is refused
    without it); `checks_first`: a `privrl run` command, which checks its config's values
    before it imports JAX."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            _before_each_command(command, setup, f"{path}{name} ")
        elif command.callback is not None:
            command.callback = _after(setup, command.callback, path == "run " and isinstance(
                inspect.unwrap(command.callback), _ConfigCommand))


def _after(setup: Callable[[bool], None], callback: Callable[..., Any],
           generated: bool = False) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        setup(generated)
        return callback(*args, **kwargs)
    return run


def _process_setup(generated: bool = False) -> None:
    """The `privrl` process's own JAX settings (a caller's process keeps its own): JAX's CPU
    computations inline (asked as JAX is imported: this imports none), and the garbage
    collector tuned after the imports: now, or for a command that checks its values before it
    imports JAX (`privrl run`), once it starts computing (`privrl.cli.computing`)."""
    run_cpu_inline_once_imported()
    if generated:
        tune_when_computing(tune_garbage_collector)
    else:
        tune_garbage_collector()


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors (exit 2) for bad options, before any computation and
    before JAX or a system is imported."""
    import click

    old = renamed_flag(sys.argv[1:] if argv is None else argv)
    if old is not None:
        print(f"privrl: error: {old}", file=sys.stderr)
        return 2
    try:
        use_host_devices()
    except ValueError as e:  # PRIVRL_DEVICES
        print(f"privrl: error: {e}", file=sys.stderr)
        return 2
    use_compilation_cache()
    command = typer.main.get_command(build_app())
    if argv is None:  # the `privrl` process itself
        _before_each_command(command, _process_setup)
    try:
        # Without standalone mode, click returns a command's `typer.Exit(code)` as a value
        # instead of exiting: it is the command's exit status (`privrl replay`'s MISMATCH: 1).
        status = command.main(args=argv, prog_name="privrl", standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("privrl: interrupted; nothing was written", file=sys.stderr)
        return 130
    except UsageError as e:  # usage errors: unknown option, unparsable value, ...
        if isinstance(e, click.NoSuchOption) and not isinstance(e, UnknownFlag) \
                and e.ctx is not None:  # our own suggestions
            e.possibilities = close_flags(e.option_name, command_flag_names(e.ctx.command))
        print(f"privrl: error: {e.format_message()}".replace("\n", " "), file=sys.stderr)
        return 2
    except Exception as e:
        failed = getattr(sys.modules.get("privrl.output"), "RunFailedError", None)
        if failed is not None and isinstance(e, failed):  # the failure, then where its work is
            import traceback

            traceback.print_exception(e.__cause__, file=sys.stderr)
            print(f"privrl: error: {e}", file=sys.stderr)
            return 1
        if isinstance(e, _user_errors()):
            print(f"privrl: error: {e}", file=sys.stderr)
            return 2
        budget = _budget_error()
        if budget is not None and isinstance(e, budget):
            print(f"privrl: privacy budget: {e}", file=sys.stderr)
            return 3
        raise
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
