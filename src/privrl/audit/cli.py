"""`privrl audit mechanism`: audited lower bounds on ε beside the claimed ε (docs/audit.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from privrl.cli import Out, Settings, ShowProgress, config_command, progress_bar


def audit_apps() -> typer.Typer:
    """A fresh `privrl audit` group holding `mechanism`; main adds the systems' end-to-end
    audits (each system's `audit_app`) to it."""
    app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, add_completion=False,
                      help="Empirical lower bounds on ε: falsify a claimed guarantee "
                      "(a lower bound, never a proof of privacy; docs/audit.md).")
    config_command(app, "mechanism", "privrl.audit.config:MechanismAudit")(
        audit_mechanism_command)
    return app


def audit_mechanism_command(settings: Settings, out: Out = None,
                            progress: ShowProgress = True) -> None:
    """Audit one mechanism at several claimed ε: draws its outputs on a worst-case pair of
    neighbouring inputs and bounds its true ε from below (held-out threshold test,
    Clopper–Pearson). Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    execute_audit(settings, out, progress, "", " {mechanism}",
                  "{samples:,} draws per input, {confidence:.0%} confidence")


def execute_audit(settings: Settings, out: Path | None, show: bool, system: str, detail: str,
                  scale: str, unit: str = "settings") -> None:
    """What every `privrl audit` command does: build and validate its audit config (every
    setting checked before anything is drawn), print a header (`system`, `detail` and `scale`
    are formatted with the config's fields), run the audits under a progress bar, write
    audit.json, audit.csv, audit.md and plots/audit.png into a new run directory, and print
    the table."""
    from rich.console import Console
    from rich.markdown import Markdown

    from privrl.audit.sweep import write_sweep
    from privrl.output import check_out_dir, new_run_dir

    check_out_dir(out)
    cfg = settings.build().resolved()
    fields = vars(cfg)
    system, detail = system.format_map(fields), detail.format_map(fields)
    console, err = Console(), Console(stderr=True)
    err.print(f"[bold]audit{' ' * bool(system)}{system}[/]{detail}: ε ∈ "
              f"{{{', '.join(f'{e:g}' for e in cfg.epsilons)}}}, {scale.format_map(fields)}")
    with progress_bar(err, show, "auditing", unit=unit) as (bar, task):
        results = cfg.run(lambda done, total: bar.update(task, completed=done, total=total))
    path = new_run_dir(out, "-".join(filter(None, ("audit", system, fields.get("mechanism")))))
    notes = cfg.claim_notes()
    write_sweep(path, results, {**({"system": system} if system else {}), **cfg.record(),
                                **({"claim_notes": notes} if notes else {}),
                                "command": ["privrl", *sys.argv[1:]]})
    console.print(Markdown((path / "audit.md").read_text()))
    console.print(f"Results written to [bold]{path}[/] (audit.json, audit.csv, audit.md, "
                  "plots/audit.png)")
