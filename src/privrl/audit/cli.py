"""`privrl audit mechanism`: audited lower bounds on ε beside the claimed ε (docs/audit.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from privrl.choices import AUDIT_MECHANISMS
from privrl.cli import (
    Out,
    Seed,
    ShowProgress,
    flag_names,
    mechanism_option,
    parse_numbers,
    progress_bar,
    value_enum,
)
from privrl.config import ConfigError


def audit_apps() -> typer.Typer:
    """A fresh `privrl audit` group holding `mechanism`; main adds the systems' end-to-end
    audits (each system's `audit_app`) to it."""
    app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, add_completion=False,
                      help="Empirical lower bounds on ε: falsify a claimed guarantee "
                      "(a lower bound, never a proof of privacy; docs/audit.md).")
    app.command("mechanism")(audit_mechanism_command)
    return app


AuditMechanism = value_enum("AuditMechanism", AUDIT_MECHANISMS)


@flag_names(epsilons="--epsilon")
def audit_mechanism_command(
    mechanism: Annotated[str, typer.Option(
        help="laplace, prs, privunit, privunitg (PrivUnit2 / PrivUnitG), projunit, "
        "privunitg-seed (ProjUnit, seed-compressed PrivUnitG), gaussian (local, L2 "
        "clip), box-gaussian (LDP states), gaussian-sum "
        "(DP-SGD's noisy sum, add/remove one example), functional (paper 001's GP noise at 4 "
        "fixed states), broken-laplace (a deliberately broken Laplace with half its noise, to "
        "show the audit refutes it), or your own module:callable (asked for each ε on inputs "
        "of length 1; docs/ldp-mechanisms.md).",
        parser=mechanism_option(AuditMechanism))] = AuditMechanism.laplace,
    epsilon: Annotated[str, typer.Option(
        help="Claimed ε values (comma-separated); each mechanism is calibrated to claim each "
        "one for a single release.")] = "0.5,1,2,5,10",
    samples: Annotated[int, typer.Option(
        help="Draws per neighbouring input (half choose the test's threshold, half bound ε).")
    ] = 1_000_000,
    confidence: Annotated[float, typer.Option(
        help="Confidence of each lower bound.")] = 0.95,
    delta: Annotated[float, typer.Option(help="δ of the (ε, δ) mechanisms.")] = 1e-5,
    sampling_probability: Annotated[float, typer.Option(
        help="gaussian-sum: Poisson sampling probability q (the audit samples the example).")
    ] = 1.0,
    seed: Seed = 0,
    out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """Audit one mechanism at several claimed ε: draws its outputs on a worst-case pair of
    neighbouring inputs and bounds its true ε from below (held-out threshold test,
    Clopper–Pearson). Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    from privrl.audit.mechanism import check_audit_settings
    from privrl.output import check_out_dir

    epsilons = parse_numbers(epsilon, "--epsilon")
    check_audit_settings(samples, confidence)
    if not 0 < delta < 1:
        raise ConfigError("delta", f"must be in (0, 1), got {delta}")
    check_out_dir(out)
    from privrl.audit.sweep import build_mechanism, run_audit_sweep

    for e in epsilons:  # every setting validated (a user's mechanism imported) before any draw
        build_mechanism(mechanism.value, e, delta, sampling_probability)
    execute_audit(
        f"[bold]audit[/] {mechanism.value}: ε ∈ {{{', '.join(f'{e:g}' for e in epsilons)}}}, "
        f"{samples:,} draws per input, {confidence:.0%} confidence",
        lambda progress_fn: run_audit_sweep(
            mechanism.value, epsilons, seed=seed, samples=samples, confidence=confidence,
            delta=delta, sampling_probability=sampling_probability, progress=progress_fn),
        f"audit-{mechanism.value}",
        {"mechanism": mechanism.value, "epsilons": list(epsilons), "samples": samples,
         "confidence": confidence, "delta": delta,
         "sampling_probability": sampling_probability, "seed": seed},
        out, progress)


def execute_audit(header: str, run: Callable[[Callable[[int, int], None]], list[Any]],
                  run_dir: str, settings: dict[str, Any], out: Path | None, show: bool,
                  unit: str = "settings") -> None:
    """What every `privrl audit` command does once its options are checked: print `header`,
    run the audits (`run(progress)`) under a progress bar, write audit.json, audit.csv,
    audit.md and plots/audit.png into a new run directory, and print the table."""
    from rich.console import Console
    from rich.markdown import Markdown

    from privrl.audit.sweep import write_sweep
    from privrl.output import new_run_dir

    console, err = Console(), Console(stderr=True)
    err.print(header)
    with progress_bar(err, show, "auditing", unit=unit) as (bar, task):
        results = run(lambda done, total: bar.update(task, completed=done, total=total))
    path = new_run_dir(out, run_dir)
    write_sweep(path, results, {**settings, "command": ["privrl", *sys.argv[1:]]})
    console.print(Markdown((path / "audit.md").read_text()))
    console.print(f"Results written to [bold]{path}[/] (audit.json, audit.csv, audit.md, "
                  "plots/audit.png)")
