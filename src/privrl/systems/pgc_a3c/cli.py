"""`privrl run pgc-a3c`, `privrl reproduce pgc-a3c` and `privrl replay` (paper 000)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from privrl.audit.cli import execute_audit
from privrl.cli import (
    AddressOpt,
    Out,
    ProgressEvery,
    Resume,
    Runtime,
    Settings,
    ShowProgress,
    computing,
    config_command,
    execute_sweep,
    flag_names,
    print_results,
    progress_bar,
    results_table,
    run_and_save,
    sweep_dir,
    system_apps,
)
from privrl.config import ConfigError
from privrl.progress import DEFAULT_EVERY

if TYPE_CHECKING:

    from privrl.systems.pgc_a3c.config import PGCA3CConfig

run_app, reproduce_app = system_apps()
top_app = typer.Typer(rich_markup_mode=None)  # `privrl replay`
audit_app = typer.Typer(rich_markup_mode=None)  # `privrl audit pgc-a3c`


MAX_SUPERNODES = 64  # a local deployment's processes: two per SuperNode


@config_command(run_app, "pgc-a3c", "privrl.systems.pgc_a3c.config:PGCA3CConfig")
def run_pgc_a3c_command(
    settings: Settings,
    out: Out = None,
    progress: ShowProgress = True,
    progress_every: ProgressEvery = DEFAULT_EVERY,
    runtime: Annotated[Runtime, typer.Option(
        help="local: all agents vectorized in this process. ray: agents and the aggregator as "
        "Ray actors, asynchronous and fault-tolerant (one trial; pip install 'privrl[ray]'). "
        "flower: a local Flower deployment, the aggregator a ServerApp and the agents on "
        "--supernodes SuperNodes, each a process of its own, with TLS and SuperNode "
        "authentication (one trial; pip install 'privrl[flower]'; docs/flower.md).",
        case_sensitive=False)] = Runtime.local,
    supernodes: Annotated[int, typer.Option(
        help="Flower runtime: SuperNodes (agent processes); agent a lives on SuperNode a mod "
        "N. The SuperNode (with its agent executor) is the unit of trust: its agents share "
        "one process.", min=1, max=MAX_SUPERNODES)] = 2,
    one_process_per_agent: Annotated[bool, typer.Option(
        "--one-process-per-agent",
        help="Flower runtime: one SuperNode (and agent executor) per agent, for a trust "
        "domain of a single agent (replaces --supernodes; at most "
        f"{MAX_SUPERNODES} agents).")] = False,
    address: AddressOpt = None,
    agents_in_flight: Annotated[int | None, typer.Option(
        help="Ray runtime: agents running at once. Default: --parallel-agents.")] = None,
    checkpoint_every: Annotated[int, typer.Option(
        help="Ray runtime: the aggregator checkpoints every k θ updates.")] = 100,
) -> None:
    """PGC-A3C (Ono & Takahashi): locally private distributed A3C on CartPole (or --env).

    Each agent is a new private environment (gravity 9.7, 9.8 or 9.9) that plays one episode,
    randomizes its A3C gradient with the mechanism (ε-LDP) and submits it once. Prints the
    results table and where the results were written.
    """
    epsilon = settings.get("epsilon")
    if settings.get("mechanism") == "none" and epsilon is not None and math.isfinite(epsilon):
        raise ConfigError("epsilon", "the non-private baseline (--mechanism none) has no ε; "
                                     "drop --epsilon")
    if settings.get("mechanism") != "none" and epsilon is not None and math.isinf(epsilon):
        raise ConfigError("epsilon", "ε must be finite; use --mechanism none for the "
                                     "non-private ε = ∞ baseline")
    config = settings.build().resolved()  # every value checked before JAX is imported
    from privrl.output import check_out_dir
    from privrl.runtime.rules import require_extra

    check_out_dir(out)  # before the task, which may import --env's code
    from privrl.systems.pgc_a3c.algorithm import PGCA3C
    from privrl.systems.pgc_a3c.runtimes import check_runtime

    # The task's episode, target and shaping filled in; a bad --env/--private fails here,
    # before anything runs.
    config = PGCA3C(config).config
    check_runtime(config, runtime.value)  # the library's rules: the API refuses the same
    for flag, value in (("--agents-in-flight", agents_in_flight),
                        ("--checkpoint-every", checkpoint_every)):
        if value is not None and value < 1:
            raise ConfigError(flag, f"must be >= 1, got {value}")
    if runtime is not Runtime.ray and (address is not None or agents_in_flight is not None):
        raise ConfigError("--address", "--address and --agents-in-flight need --runtime ray")
    if one_process_per_agent and runtime is not Runtime.flower:
        raise ConfigError("--one-process-per-agent", "needs --runtime flower")
    require_extra(runtime.value)
    if one_process_per_agent:
        supernodes = math.ceil(config.submissions / config.submissions_per_agent)
        if supernodes > MAX_SUPERNODES:
            raise ConfigError("--one-process-per-agent", f"{supernodes} agents would need "
                              f"{supernodes} SuperNodes; at most {MAX_SUPERNODES} here")
    _execute_pgc(config, out, progress, progress_every, runtime, supernodes, address,
                 agents_in_flight, checkpoint_every)


def _execute_pgc(config: PGCA3CConfig, out: Path | None, show: bool, every: float,
                 runtime: Runtime = Runtime.local, supernodes: int = 2,
                 address: str | None = None, agents_in_flight: int | None = None,
                 checkpoint_every: int = 100) -> None:
    """A PGC-A3C run on `runtime`: a distributed one (ray, flower) saves θ_final for replay and
    `<runtime>.json` beside the files a local run writes (an empty directory is removed)."""
    import numpy as np
    from rich.console import Console

    from privrl.output import keeping_work, new_run_dir, removed_if_left_empty
    from privrl.privacy.record import planned
    from privrl.runtime.rules import NAMES
    from privrl.systems.pgc_a3c import local
    from privrl.systems.pgc_a3c.algorithm import PGCA3C

    PGCA3C(config)  # its mechanism (a user's: imported) refuses bad parameters before the run
    computing()
    err = Console(stderr=True)
    eps_tag = "inf" if math.isinf(config.epsilon) else f"{config.epsilon:g}"
    stem = f"{config.preset}-{config.mechanism}-eps{eps_tag}"
    note = local.target_note(config)
    lines = [None if note is None else f"[bold]Note:[/] {note}"]
    if runtime is Runtime.local:
        bound = planned(config.privacy_plan())  # each agent's whole-run budget
        err.print(f"[bold]PGC-A3C[/] ({config.preset} preset) {config.mechanism}"
                  f"{f', {bound}' if bound else ''}; {config.trials} trial(s) × "
                  f"{config.submissions} submissions, P = {config.parallel_agents}, "
                  f"|B| = {config.buffer_size}")
        path, summary = run_and_save(out, f"pgc-a3c-{stem}", lambda bar: local.run_pgc_a3c(
            config, progress=bar), local.save, err, show, every=every)
        print_results(path, " (config.json, metrics.csv, privacy.json, summary.json, "
                      "policy.npz, plots/scores.png)", results_table(
                          "PGC-A3C results", local.summary_rows(summary)), *lines,
                      summary=summary)
        return
    path = new_run_dir(out, f"pgc-a3c-{runtime.value}-{stem}")
    if runtime is Runtime.ray:
        from privrl.runtime.ray import ray_address
        from privrl.systems.pgc_a3c import ray as runner
        where = (f"cluster {ray_address(address) or 'local'}; aggregator log and checkpoints "
                 f"in {path}/aggregator")
    else:
        from privrl.systems.pgc_a3c import flower as runner  # type: ignore[no-redef]
        where = (f"{supernodes} SuperNodes on localhost (TLS, SuperNode authentication); "
                 f"aggregator files and logs in {path}")
    err.print(f"[bold]PGC-A3C on {NAMES[runtime.value]}[/] ({config.preset} preset) "
              f"{config.mechanism}, {config.submissions} submissions, {where}")
    def write(result: Any, path: Path) -> dict[str, Any]:
        np.save(path / "theta_final.npy", result.theta)
        return local.save(runner.as_run_output(result), path,
                          command=["privrl", *sys.argv[1:]], runtime=runtime.value,
                          files={f"{runtime.value}.json": result.record()})

    # A Ray run that fails after some work keeps it (the runner reads it from its actors):
    # the metrics and θ so far, privacy.json counting every report the aggregator accepted.
    with (removed_if_left_empty(path), keeping_work(lambda: path, write),
          progress_bar(err, show and runtime is Runtime.ray, "training") as (bar, task)):
        result = runner.run_pgc_a3c_ray(
            config, path / "aggregator", address=address, agents_in_flight=agents_in_flight,
            checkpoint_every=checkpoint_every, progress=lambda done, total: bar.update(
                task, completed=done, total=total)) if runtime is Runtime.ray else \
            runner.run_pgc_a3c_flower(config, path, supernodes)
    summary = write(result, path)
    error = getattr(result, "error", None)  # the files hold what was released before it ended
    print_results(path, f"; check them with: privrl replay {path}", results_table(
        "PGC-A3C results", local.summary_rows(summary)), *lines,
        f"Aggregator: {result.status}", summary=None if error else summary)
    if error:
        err.print(f"[bold red]The run ended early:[/] {error}")
        raise typer.Exit(1)


@top_app.command("replay")
@flag_names()
def replay_command(
    run_dir: Annotated[Path, typer.Argument(help="A Ray run's results directory.")],
) -> None:
    """Rebuild θ from a Ray run's accepted-report log and check it equals the final θ."""
    import numpy as np

    from privrl.systems.pgc_a3c.local import replay_run

    theta, final = replay_run(run_dir)
    if np.array_equal(theta, final):
        typer.echo(f"replayed θ equals the run's final θ exactly (d = {theta.size})")
        return
    typer.echo("MISMATCH: replayed θ differs from the final θ (max |Δ| = "
               f"{float(np.max(np.abs(theta - final))):g})", err=True)
    raise typer.Exit(1)


@config_command(reproduce_app, "pgc-a3c", "privrl.systems.pgc_a3c.reproduce:SweepConfig")
def reproduce_pgc_a3c_command(
    settings: Settings, out: Out = None, resume: Resume = None,
    one_program: Annotated[bool, typer.Option(
        "--one-program/--per-setting",
        help="Run all settings' trials as one compiled program (default; the same results "
        "per setting as running each alone, several times faster), or each setting alone in "
        "turn (each is saved as soon as it finishes).")] = True,
    progress: ShowProgress = True,
) -> None:
    """Paper 000's sweep: Laplace and PRS at ε = 1, 2, 5, 10 and the non-private run (other
    mechanisms and ε on request; their rows have no paper numbers beside them).

    Writes tables.md (Tables 1-3 with the paper's numbers beside ours), tables.json,
    plots/ (Figures 2 and 3 per mechanism), raw/trials.csv, per-setting scores and privacy
    records, and prints the tables.
    """
    from privrl.systems.pgc_a3c import reproduce

    cfg = settings.build()
    cfg.validate()
    path = sweep_dir(out, resume, f"reproduce-pgc-a3c-{cfg.preset}")
    execute_sweep(
        f"[bold]Reproducing paper 000[/] ({cfg.preset} preset): {len(cfg.settings())} settings "
        f"× {cfg.trials} trials × cap {cfg.cap:,}", path,
        lambda update, log: reproduce.run_sweep(cfg, path, progress=update, log=log,
                                                one_program=one_program),
        progress, "privrl reproduce pgc-a3c",
        "tables.md, tables.json, plots/, raw/trials.csv, privacy.json, settings/")


@config_command(audit_app, "pgc-a3c", "privrl.systems.pgc_a3c.audit:PGCA3CAudit")
def audit_pgc_a3c_command(settings: Settings, out: Out = None,
                          progress: ShowProgress = True) -> None:
    """End-to-end audit: a canary agent (its gradient replaced by a vector beyond the clip) vs
    an ordinary agent playing its own private CartPole episode; an attacker who sees one report
    bounds ε from below. Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    execute_audit(settings, out, progress, "pgc-a3c", " {mechanism} ({preset} preset)",
                  "{samples:,} reports per world")
