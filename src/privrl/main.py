"""`privrl`: the entry point. Builds the command line from every system's own commands.

Each system's `cli.py` holds its `run_app` and `reproduce_app` (and, for PGC-A3C, the top-level
`replay`); `build_app` merges them under one `privrl`. System CLI modules import no JAX at
module level, so `main` can ask XLA for one host device per core before anything starts JAX.
"""

from __future__ import annotations

import sys

import typer

try:  # a typer that carries its own click: its usage errors derive from TyperException
    from typer.exceptions import TyperException as UsageError
except ImportError:  # typer < 0.21 (the one flwr 1.42 accepts, constraints.txt): click's
    from click import ClickException as UsageError

from privrl.audit.cli import audit_apps
from privrl.cli import renamed_flag, root_apps
from privrl.compute.devices import (
    run_cpu_inline,
    tune_garbage_collector,
    use_compilation_cache,
    use_host_devices,
)
from privrl.config import ConfigError, RayNotInstalledError
from privrl.evaluate_cli import top_app as evaluate_app
from privrl.output import OutputDirError
from privrl.planner import cli as planner
from privrl.runfile import RunFileError
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


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors (exit 2) for bad options, before any computation."""
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
    from privrl.privacy.ledger import BudgetExceededError

    if argv is None:  # the `privrl` process itself; a caller's process keeps its own settings
        run_cpu_inline()  # imports JAX: before the collector freezes what is imported
        tune_garbage_collector()

    try:
        # Without standalone mode, click returns a command's `typer.Exit(code)` as a value
        # instead of exiting: it is the command's exit status (`privrl replay`'s MISMATCH: 1).
        status = build_app()(args=argv, prog_name="privrl", standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("privrl: interrupted; nothing was written", file=sys.stderr)
        return 130
    except UsageError as e:  # usage errors: unknown option, unparsable value, ...
        print(f"privrl: error: {e.format_message()}".replace("\n", " "), file=sys.stderr)
        return 2
    except (ConfigError, OutputDirError, RayNotInstalledError, RunFileError) as e:
        print(f"privrl: error: {e}", file=sys.stderr)
        return 2
    except BudgetExceededError as e:
        print(f"privrl: privacy budget: {e}", file=sys.stderr)
        return 3
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
