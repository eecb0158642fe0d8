"""The `privrl` command line.

Options are validated before anything is computed; an invalid one exits with status 2 and a
single line that names it. Runs write into a new directory and never overwrite results.
"""

from __future__ import annotations

import math
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.exceptions import TyperException

from privrl import __version__
from privrl.runtime.devices import use_host_devices

if TYPE_CHECKING:
    from rich.table import Table

    from privrl.algorithms.pgc_a3c import PGCA3CConfig

app = typer.Typer(
    name="privrl",
    help="Privacy-preserving distributed and federated reinforcement learning.\n\n"
    "Every run states the differential-privacy guarantee it delivered and writes its results "
    "(config, metrics, privacy ledger, summary, plots) into a new directory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
run_app = typer.Typer(help="Train an algorithm and write its results.", no_args_is_help=True,
                      rich_markup_mode=None)
app.add_typer(run_app, name="run")


class PresetName(StrEnum):
    paper = "paper"
    tuned = "tuned"


class MechanismName(StrEnum):
    laplace = "laplace"
    prs = "prs"
    none = "none"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privrl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """privrl command line."""


@run_app.command("pgc-a3c")
def run_pgc_a3c_command(
    preset: Annotated[PresetName, typer.Option(
        help="paper: paper 000's settings exactly (default). tuned: our improved settings "
        "(failure reward, sampled actions, biases, normalized advantages, Adam at the "
        "aggregator; see docs/pgc-a3c-fidelity.md). Options given explicitly override it.",
        case_sensitive=False)] = PresetName.paper,
    mechanism: Annotated[MechanismName, typer.Option(
        help="Local randomizer for each gradient report: laplace (L1 clip + Laplace noise), "
        "prs (projected random sign), or none (non-private ε = ∞ baseline: clipped, no noise; "
        "NO privacy guarantee).", case_sensitive=False)] = MechanismName.laplace,
    epsilon: Annotated[float | None, typer.Option(
        help="Each agent's total privacy budget ε (> 0, finite). Default 5. "
        "Not allowed with --mechanism none.")] = None,
    trials: Annotated[int, typer.Option(help="Independent trials, run vectorized.")] = 1,
    submissions: Annotated[int, typer.Option(
        help="Stop after N submissions per trial (the paper's cap: 90000).")] = 90_000,
    parallel_agents: Annotated[int, typer.Option(
        help="P agents start from the same snapshot of θ; their reports are applied in turn "
        "(the paper's 9 asynchronous threads).")] = 9,
    buffer: Annotated[int | None, typer.Option(
        help="Aggregator buffer size |B|: θ is updated with the mean of |B| reports. "
        "Default: the preset's (paper: 1 for laplace and none, 100 for prs; tuned: 10).")
    ] = None,
    clip: Annotated[float | None, typer.Option(
        help="Clip size C (> 0). Default: 0.01 for laplace and none, 1 for prs.")] = None,
    d_hat: Annotated[int | None, typer.Option(
        help="PRS projected dimension d̂ (1 ≤ d̂ ≤ 112). Default: max(1, min(d, ⌊ε/2.5⌋)).")
    ] = None,
    submissions_per_agent: Annotated[int, typer.Option(
        help="T reports per agent, each with ε/T (sequential composition; paper 3.2.1).")] = 1,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same results).")] = 0,
    out: Annotated[Path | None, typer.Option(
        help="New or empty directory for the results. Default: runs/pgc-a3c-<mechanism>-...")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """PGC-A3C (Ono & Takahashi): locally private distributed A3C on CartPole.

    Each agent is a new private environment (gravity 9.7, 9.8 or 9.9) that plays one episode,
    randomizes its A3C gradient with the mechanism (ε-LDP) and submits it once. Prints the
    results table and where the results were written.
    """
    from privrl.algorithms.pgc_a3c import ConfigError, PGCA3CConfig
    from privrl.results import check_out_dir

    if mechanism is MechanismName.none and epsilon is not None:
        raise ConfigError("--epsilon", "the non-private baseline (--mechanism none) has no ε; "
                                       "drop --epsilon")
    if epsilon is not None and math.isinf(epsilon):
        raise ConfigError("--epsilon", "ε must be finite; use --mechanism none for the "
                                       "non-private ε = ∞ baseline")
    config = PGCA3CConfig.from_preset(
        preset.value,
        mechanism=mechanism.value,
        epsilon=5.0 if epsilon is None else epsilon,
        clip=clip,
        buffer_size=buffer,
        d_hat=d_hat,
        submissions_per_agent=submissions_per_agent,
        parallel_agents=parallel_agents,
        submissions=submissions,
        trials=trials,
        seed=seed,
    ).resolved()
    check_out_dir(out)
    _execute_pgc(config, out, progress)


def _execute_pgc(config: PGCA3CConfig, out: Path | None, show_progress: bool) -> None:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from privrl.algorithms.pgc_a3c import PGCA3C
    from privrl.results import new_run_dir
    from privrl.runtime import local

    console = Console()
    err = Console(stderr=True)
    eps_tag = "inf" if math.isinf(config.epsilon) else f"{config.epsilon:g}"
    mech = PGCA3C(config).mechanism
    err.print(f"[bold]PGC-A3C[/] ({config.preset} preset) {config.mechanism}, "
              f"{mech.guarantee.describe()}; "
              f"{config.trials} trial(s) × {config.submissions} submissions, "
              f"P = {config.parallel_agents}, |B| = {config.buffer_size}")

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("submissions/trial"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        disable=not show_progress,
        transient=False,
    ) as bar:
        task = bar.add_task("training", total=config.submissions)
        result = local.run_pgc_a3c(
            config, progress=lambda done, total: bar.update(task, completed=done)
        )
    path = new_run_dir(out, f"pgc-a3c-{config.preset}-{config.mechanism}-eps{eps_tag}")
    summary = local.save(result, path, command=["privrl", *sys.argv[1:]])
    console.print(results_table(summary))
    console.print(f"Results written to [bold]{path}[/] "
                  "(config.json, metrics.csv, privacy.json, summary.json, plots/scores.png)")


def results_table(summary: dict) -> Table:
    from rich.table import Table

    t = Table(title="PGC-A3C results", show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    fst = summary["median_fst"]
    rows = [
        ("privacy", summary["privacy"]),
        ("preset", summary["preset"]),
        ("mechanism", summary["mechanism"]),
        ("trials × submissions", f"{summary['trials']} × {summary['submissions']}"),
        ("median FST (μ ≥ 195)", "not reached" if fst is None else f"{fst:g}"),
        ("success ratio", f"{summary['success_ratio']:.2f}"),
        ("success-ratio AUC (normalized)", f"{summary['success_ratio_auc']:.3f}"),
        ("mean score, all submissions", f"{summary['mean_score']:.1f}"),
        (f"mean score, last {summary['final_window']}", f"{summary['final_mean_score']:.1f}"),
        ("wall time", f"{summary['wall_seconds']:.1f} s "
                      f"(first chunk incl. compile {summary['compile_seconds']:.1f} s)"),
        ("episodes / s",
         f"{summary['episodes_per_second']:,.0f} on {summary['devices']} device(s)"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors (exit 2) for bad options, before any computation."""
    use_host_devices()
    from privrl.algorithms.pgc_a3c import ConfigError
    from privrl.privacy.ledger import BudgetExceededError
    from privrl.results import OutputDirError

    try:
        app(args=argv, prog_name="privrl", standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("privrl: interrupted; nothing was written", file=sys.stderr)
        return 130
    except TyperException as e:  # usage errors: unknown option, unparsable value, ...
        print(f"privrl: error: {e.format_message()}".replace("\n", " "), file=sys.stderr)
        return 2
    except (ConfigError, OutputDirError) as e:
        print(f"privrl: error: {e}", file=sys.stderr)
        return 2
    except BudgetExceededError as e:
        print(f"privrl: privacy budget: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
