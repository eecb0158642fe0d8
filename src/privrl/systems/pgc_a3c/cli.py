"""`privrl run pgc-a3c`, `privrl reproduce pgc-a3c` and `privrl replay` (paper 000)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from privrl.cli import (
    AddressOpt,
    Out,
    ProgressEvery,
    Resume,
    Runtime,
    Settings,
    ShowProgress,
    SweepSeed,
    config_command,
    execute_sweep,
    flag_names,
    mechanism_option,
    parse_numbers,
    progress_bar,
    results_table,
    sweep_dir,
    system_apps,
    value_enum,
)
from privrl.config import ConfigError, positive
from privrl.progress import DEFAULT_EVERY
from privrl.systems.pgc_a3c.choices import MECHANISMS

if TYPE_CHECKING:

    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

run_app, reproduce_app = system_apps()
top_app = typer.Typer(rich_markup_mode=None)  # `privrl replay`
audit_app = typer.Typer(rich_markup_mode=None)  # `privrl audit pgc-a3c`


MechanismName = value_enum("MechanismName", MECHANISMS)
MAX_SUPERNODES = 64  # a local deployment's processes: two per SuperNode


@config_command(run_app, "pgc-a3c", "privrl.systems.pgc_a3c.algorithm:PGCA3CConfig")
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
    from privrl.output import check_out_dir
    from privrl.systems.pgc_a3c.algorithm import PGCA3C

    check_out_dir(out)  # before the config, which may import --env's code
    epsilon = settings.get("epsilon")
    if settings.get("mechanism") == "none" and epsilon is not None and math.isfinite(epsilon):
        raise ConfigError("epsilon", "the non-private baseline (--mechanism none) has no ε; "
                                     "drop --epsilon")
    if settings.get("mechanism") != "none" and epsilon is not None and math.isinf(epsilon):
        raise ConfigError("epsilon", "ε must be finite; use --mechanism none for the "
                                     "non-private ε = ∞ baseline")
    # The task's episode, target and shaping filled in; a bad --env/--private fails here,
    # before anything runs.
    config = PGCA3C(settings.build().resolved()).config
    from privrl.systems.pgc_a3c.runtimes import check_runtime

    check_runtime(config, runtime.value)  # the library's rules: the API refuses the same
    if runtime is Runtime.ray:
        if agents_in_flight is not None and agents_in_flight < 1:
            raise ConfigError("--agents-in-flight", f"must be >= 1, got {agents_in_flight}")
        if checkpoint_every < 1:
            raise ConfigError("--checkpoint-every", f"must be >= 1, got {checkpoint_every}")
        from privrl.runtime.ray import require_ray

        require_ray()
        _execute_pgc_ray(config, out, progress, address, agents_in_flight, checkpoint_every)
        return
    if address is not None or agents_in_flight is not None:
        raise ConfigError("--address", "--address and --agents-in-flight need --runtime ray")
    if runtime is Runtime.flower:
        try:
            import flwr  # noqa: F401
        except ImportError:
            raise ConfigError("--runtime", "the Flower runtime needs the flower extra: "
                              "pip install 'privrl[flower]'") from None
        if one_process_per_agent:
            supernodes = math.ceil(config.submissions / config.submissions_per_agent)
            if supernodes > MAX_SUPERNODES:
                raise ConfigError("--one-process-per-agent", f"{supernodes} agents would need "
                                  f"{supernodes} SuperNodes; at most {MAX_SUPERNODES} here")
        _execute_pgc_flower(config, out, progress, supernodes)
        return
    if one_process_per_agent:
        raise ConfigError("--one-process-per-agent", "needs --runtime flower")
    _execute_pgc(config, out, progress, progress_every)


def _execute_pgc(config: PGCA3CConfig, out: Path | None, show_progress: bool,
                 every: float = DEFAULT_EVERY) -> None:
    from rich.console import Console

    from privrl.evaluation import verdict_line
    from privrl.output import keeping_work, new_run_dir
    from privrl.privacy.record import planned
    from privrl.systems.pgc_a3c import local
    from privrl.systems.pgc_a3c.algorithm import PGCA3C

    console = Console()
    err = Console(stderr=True)
    eps_tag = "inf" if math.isinf(config.epsilon) else f"{config.epsilon:g}"
    PGCA3C(config)  # its mechanism refuses parameters it cannot release with, before any run
    # Each agent's whole-run budget; the run's guarantee is stated with the results.
    bound = planned(config.privacy_plan())
    total = f", {bound}" if bound else ""
    err.print(f"[bold]PGC-A3C[/] ({config.preset} preset) {config.mechanism}{total}; "
              f"{config.trials} trial(s) × {config.submissions} submissions, "
              f"P = {config.parallel_agents}, |B| = {config.buffer_size}")

    def run_dir() -> Path:
        return new_run_dir(out, f"pgc-a3c-{config.preset}-{config.mechanism}-eps{eps_tag}")

    command = ["privrl", *sys.argv[1:]]
    with (keeping_work(run_dir, lambda result, path: local.save(result, path, command)),
          progress_bar(err, show_progress, "training", every=every) as (bar, _)):
        result = local.run_pgc_a3c(config, progress=bar)
    path = run_dir()
    summary = local.save(result, path, command=command)
    console.print(results_table("PGC-A3C results", local.summary_rows(summary)))
    if (note := local.target_note(config)) is not None:
        console.print(f"[bold]Note:[/] {note}")
    console.print(f"Results written to [bold]{path}[/] "
                  "(config.json, metrics.csv, privacy.json, summary.json, policy.npz, "
                  "plots/scores.png)")
    console.print(verdict_line(summary))


def _execute_pgc_ray(config: PGCA3CConfig, out: Path | None, show_progress: bool,
                     address: str | None, agents_in_flight: int | None,
                     checkpoint_every: int) -> None:
    from privrl.runtime.ray import ray_address
    from privrl.systems.pgc_a3c import ray as ray_runner

    def run(path: Path, bar: Any, task: Any) -> tuple[Any, Any, dict[str, Any]]:
        result = ray_runner.run_pgc_a3c_ray(
            config, path / "aggregator", address=address, agents_in_flight=agents_in_flight,
            checkpoint_every=checkpoint_every,
            progress=lambda done, total: bar.update(task, completed=done, total=total))
        files = {"cluster": result.cluster, "aggregator": result.status,
                 **({} if result.shuffler is None else {"shuffler": result.shuffler}),
                 "agents_in_flight": result.agents_in_flight}
        return result, ray_runner.as_run_output(result), files

    _execute_distributed(config, out, show_progress, "ray", "Ray",
                         f"cluster {ray_address(address) or 'local'}; aggregator log and "
                         "checkpoints in {path}/aggregator", run)


def _execute_pgc_flower(config: PGCA3CConfig, out: Path | None, show_progress: bool,
                        supernodes: int) -> None:
    from privrl.systems.pgc_a3c import flower

    def run(path: Path, bar: Any, task: Any) -> tuple[Any, Any, dict[str, Any]]:
        result = flower.run_pgc_a3c_flower(config, path, supernodes)
        files = {"supernodes": supernodes, "aggregator": result.status,
                 "refused": result.refused, "dead_supernodes": result.dead,
                 # reports an agent may have released that did not arrive, charged in
                 # privacy.json's ledger (privrl.systems.pgc_a3c.flower.spent_ledger)
                 "presumed_released": {str(a): n for a, n in result.presumed.items()},
                 **({"error": result.error} if result.error else {})}
        return result, flower.as_run_output(result), files

    _execute_distributed(config, out, False, "flower", "Flower",
                         f"{supernodes} SuperNodes on localhost (TLS, SuperNode "
                         "authentication); aggregator files and logs in {path}", run)


def _execute_distributed(config: PGCA3CConfig, out: Path | None, show_progress: bool,
                         runtime: str, label: str, where: str,
                         run: Callable[[Path, Any, Any], tuple[Any, Any, dict[str, Any]]]
                         ) -> None:
    """A PGC-A3C run on `runtime` (ray, flower): its run directory, `run(path, bar, task)` ->
    (result, its local RunOutput, `<runtime>.json`'s contents), θ_final for replay, the files
    the local runner writes, and the printed results; an empty directory is removed."""
    import numpy as np
    from rich.console import Console

    from privrl.evaluation import verdict_line
    from privrl.output import new_run_dir, removed_if_left_empty
    from privrl.systems.pgc_a3c import local
    from privrl.systems.pgc_a3c.algorithm import PGCA3C

    PGCA3C(config)  # its mechanism (a user's: imported) refuses bad parameters before the run
    console, err = Console(), Console(stderr=True)
    eps_tag = "inf" if math.isinf(config.epsilon) else f"{config.epsilon:g}"
    path = new_run_dir(out, f"pgc-a3c-{runtime}-{config.preset}-{config.mechanism}-eps{eps_tag}")
    err.print(f"[bold]PGC-A3C on {label}[/] ({config.preset} preset) {config.mechanism}, "
              f"{config.submissions} submissions, {where.format(path=path)}")
    with (removed_if_left_empty(path), progress_bar(err, show_progress, "training")
          as (bar, task)):
        result, output, files = run(path, bar, task)
    np.save(path / "theta_final.npy", result.theta)
    summary = local.save(output, path, command=["privrl", *sys.argv[1:]], runtime=runtime,
                         files={f"{runtime}.json": files})
    console.print(results_table("PGC-A3C results", local.summary_rows(summary)))
    if (note := local.target_note(config)) is not None:
        console.print(f"[bold]Note:[/] {note}")
    console.print(f"Aggregator: {result.status}")
    console.print(f"Results written to [bold]{path}[/]; check them with: privrl replay {path}")
    if getattr(result, "error", None):  # the files hold what was released before it ended
        err.print(f"[bold red]The run ended early:[/] {result.error}")
        raise typer.Exit(1)
    console.print(verdict_line(summary))


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


@audit_app.command("pgc-a3c")
@flag_names(epsilons="--epsilon")
def audit_pgc_a3c_command(
    mechanism: Annotated[str, typer.Option(
        help="The agents' mechanism: laplace, prs, privunit, privunitg, projunit, "
        "privunitg-seed or your own "
        "module:callable.", parser=mechanism_option(MechanismName))
    ] = MechanismName.laplace,
    epsilon: Annotated[str, typer.Option(
        help="Agent budgets ε to audit (comma-separated; one report per agent).")
    ] = "0.5,1,2,5,10",
    preset: Annotated[str, typer.Option(
        help="paper (default), paper-code, tuned, tuned-ldp or tuned-ldp2: the clip and "
        "network of that "
        "preset.")] = "paper",
    samples: Annotated[int, typer.Option(
        help="Reports per world (half choose the attack's threshold, half bound ε).")
    ] = 20_000,
    confidence: Annotated[float, typer.Option(help="Confidence of each lower bound.")] = 0.95,
    seed: SweepSeed = 0,
    out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """End-to-end audit: a canary agent (its gradient replaced by a vector beyond the clip) vs
    an ordinary agent playing its own private CartPole episode; an attacker who sees one report
    bounds ε from below. Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    from privrl.audit.cli import execute_audit
    from privrl.audit.mechanism import check_audit_settings
    from privrl.output import check_out_dir
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

    check_out_dir(out)  # before the config, which may import --env's code

    if mechanism is MechanismName.none:
        raise ConfigError("mechanism", "the non-private baseline claims no ε; nothing to audit")
    epsilons = parse_numbers(epsilon, "--epsilon")
    check_audit_settings(samples, confidence)
    for e in epsilons:
        positive("epsilons", e)
        PGCA3CConfig.from_preset(preset, mechanism=mechanism.value,
                                 epsilon=e).resolved().validate()
    from privrl.systems.pgc_a3c.audit import audit_pgc_a3c

    config = PGCA3CConfig.from_preset(preset, mechanism=mechanism.value, epsilon=1.0)
    execute_audit(
        f"[bold]audit pgc-a3c[/] {mechanism.value} ({preset} preset): "
        f"ε ∈ {{{', '.join(f'{e:g}' for e in epsilons)}}}, {samples:,} reports per world",
        lambda progress_fn: audit_pgc_a3c(config, epsilons, seed=seed, samples=samples,
                                          confidence=confidence, progress=progress_fn),
        f"audit-pgc-a3c-{mechanism.value}",
        {"system": "pgc-a3c", "mechanism": mechanism.value, "preset": preset,
         "epsilons": list(epsilons), "samples": samples, "confidence": confidence,
         "seed": seed}, out, progress)
