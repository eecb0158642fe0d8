"""`privrl run fedpg-cen|fedpg-dec` and `privrl reproduce fedpg` (paper 004). """

from __future__ import annotations

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
    print_results,
    progress_bar,
    results_table,
    run_and_save,
    sweep_dir,
    system_apps,
)
from privrl.progress import DEFAULT_EVERY

if TYPE_CHECKING:

    from privrl.systems.fedpg.config import FedPGConfig

run_app, reproduce_app = system_apps()
audit_app = typer.Typer(rich_markup_mode=None)  # `privrl audit fedpg`



# The privacy request's fields: a file (a run's config.json: the total with the split or σ it
# resolved to) gives them all, or the options do; never a mix of the two.
_REQUEST = ("epsilon", "epsilon_per_report", "noise_multiplier", "epsilon_budget")


def _config(algorithm: str, settings: Settings, out: Path | None) -> FedPGConfig:
    """The run's config from the file and the options (None: the preset's), every value
    checked before JAX is imported, then `out` checked, then its task. --epsilon is
    each agent's total over the run (the config's `epsilon`), --epsilon-per-report a pure
    mechanism's ε per release (`epsilon_per_report`): the privacy plan
    (`FedPGConfig.privacy_plan`) reads them, and a run's own config.json (the total with the
    split it resolved to) plans the same again."""
    from privrl.config import ConfigError
    from privrl.systems.fedpg.config import FedPGConfig

    given = settings.given()
    preset = given.pop("preset", "paper")
    options = {k for k, by in settings.given_by.items() if not by.endswith(": ")}
    by_file = {k for k, by in settings.given_by.items() if by.endswith(": ") and k in _REQUEST}
    if by_file and options & set(_REQUEST):
        raise ConfigError("--config", f"{settings.given_by[min(by_file)]}sets the privacy "
                          "request's fields; give ε, σ and the budget there or as options")
    if {"epsilon", "noise_multiplier"} <= options:
        raise ConfigError("noise_multiplier", "give either --epsilon (σ is calibrated) or "
                                              "--noise-multiplier, not both")
    if {"epsilon", "epsilon_per_report"} <= options:
        raise ConfigError("epsilon_per_report", "give either --epsilon (each agent's total "
                                                "over the run) or --epsilon-per-report, not "
                                                "both")
    cfg = FedPGConfig.from_preset(preset, algorithm=algorithm, **given).resolved()
    from privrl.output import check_out_dir

    check_out_dir(out)  # before the task, which may import --env's code
    from privrl.systems.fedpg.algorithm import FedPG

    # The task's episode and target filled in; a bad --env/--private fails here, first.
    return FedPG(cfg).config


_FEDPG = "privrl.systems.fedpg.config:FedPGConfig"
_CEN_ONLY = ("sampling_rate", "min_honest", "dp_rounds", "adaptive_clip", "clip_quantile",
             "clip_lr", "clip_count_stddev", "byzantine", "attack", "robust", "filter_sigma",
             "filter_delta", "byzantine_alpha", "bypass_mechanism", "attack_norm",
             "shuffle_delta")


@config_command(run_app, "fedpg-cen", _FEDPG, fixed={"algorithm": "cen"},
                skip=("topology", "window"))
def run_fedpg_cen_command(
    settings: Settings,
    out: Out = None, progress: ShowProgress = True, progress_every: ProgressEvery = DEFAULT_EVERY,
    runtime: Annotated[Runtime, typer.Option(
        help="local: all agents vectorized in this process. flower: a local Flower "
        "deployment (--supernodes SuperNodes, each hosting agents a ≡ i mod N, TLS and "
        "SuperNode authentication), one trial: --mechanism none, gaussian, laplace, privunit "
        "or privunitg sends each agent's Report; distributed-gaussian (with --epsilon) runs "
        "a real secure sum (SecAgg+) of discrete Gaussian noise shares (docs/flower.md).",
        case_sensitive=False)] = Runtime.local,
    supernodes: Annotated[int, typer.Option(
        help="Flower runtime: SuperNodes (<= --agents; >= 3 for distributed-gaussian).",
        min=1, max=64)] = 4,
    threshold: Annotated[int | None, typer.Option(
        help="Flower runtime: SuperNodes that must survive a round for SecAgg+ to reveal its "
        "sum (a strict majority, <= N; default N − 1); the ε statement counts as the honest "
        "shares the agents of the smallest sum a server deviating from the protocol can "
        "reveal (at the default, the threshold's SuperNodes).")] = None,
    stage_timeout: Annotated[float, typer.Option(
        help="Flower runtime: seconds each SecAgg+ stage waits for replies; a SuperNode "
        "silent past it is dropped from the round.", min=1.0)] = 120.0,
) -> None:
    """FedPG-Cen (paper 004, Algorithm 1; FedPG-BR, its Byzantine filter with --robust
    fedpg-br) on CartPole-v1 or --env.

    K agents send policy-gradient estimates to a server, which averages them (or applies
    --robust) and takes SCSG steps with importance weights. Defaults (--preset paper):
    FedPG-BR's CartPole setting.
    """
    if runtime is Runtime.flower and settings.get("mechanism") == "distributed-gaussian":
        from privrl.config import ConfigError

        if settings.get("sampling_rate") not in (None, 1.0):
            raise ConfigError("sampling_rate", "the Flower runtime's secure sum takes every "
                              "agent in every round (no amplification by sampling is claimed)")
        settings.values["sampling_rate"] = 1.0
    cfg = _config("cen", settings, out)
    from privrl.systems.fedpg.runtimes import check_runtime

    check_runtime(cfg, runtime.value)  # the library's rules: the API refuses the same
    if runtime is Runtime.flower:
        _execute_cen_flower(cfg, out, supernodes, threshold, stage_timeout)
        return
    _execute_fedpg(cfg, out, progress, every=progress_every)


def _execute_cen_flower(cfg: FedPGConfig, out: Path | None, supernodes: int,
                        threshold: int | None, stage_timeout: float) -> None:
    """FedPG-Cen on a local Flower deployment with a real secure sum (docs/flower.md)."""
    from rich.console import Console

    from privrl.output import new_run_dir, removed_if_left_empty, save
    from privrl.privacy.record import planned
    from privrl.runtime.rules import require_extra

    require_extra("flower")
    from privrl.systems.fedpg.flower import plan_run, record, run_fedpg_cen_flower

    plan = plan_run(cfg, supernodes, threshold)  # refuses before anything starts
    computing()
    path = new_run_dir(out, f"fedpg-cen-flower-{cfg.mechanism}")
    bound = planned(cfg.privacy_plan())
    Console(stderr=True).print(
        f"[bold]FedPG-Cen on Flower[/], K = {cfg.agents} agents on {supernodes} SuperNodes "
        "(TLS, SuperNode authentication), " + (
            f"SecAgg+ threshold {plan.threshold}" if plan.mechanism is not None else
            f"each agent's {cfg.mechanism} Report") + (f"; {bound}" if bound else "")
        + f"; logs in {path}/logs")
    with removed_if_left_empty(path):
        run = run_fedpg_cen_flower(plan, path, stage_timeout)
    summary = save(record(run), path, command=["privrl", *sys.argv[1:]])
    print_results(path, " (config.json, metrics.csv, privacy.json, summary.json, policy.npz, "
                  "flower.json)", f"{summary['rounds']} rounds, {summary['episodes_per_agent']} "
                  "episodes per agent; server's last mean episode length "
                  f"{summary['final_server_mean_length']:.1f}; {summary['privacy']}",
                  summary=summary)


@config_command(run_app, "fedpg-dec", _FEDPG, fixed={"algorithm": "dec"}, skip=_CEN_ONLY)
def run_fedpg_dec_command(
    settings: Settings,
    out: Out = None, progress: ShowProgress = True, progress_every: ProgressEvery = DEFAULT_EVERY,
    runtime: Annotated[Runtime, typer.Option(
        help="local: all nodes vectorized in this process. ray: every node a Ray actor, "
        "exchanging push-sum messages peer to peer (one trial; pip install 'privrl[ray]'). "
        "flower: refused (no peer-to-peer messages in Flower).",
        case_sensitive=False)] = Runtime.local,
    address: AddressOpt = None,
) -> None:
    """FedPG-Dec (paper 004, Algorithm 2 with correct push-sum) on CartPole-v1 or --env.

    No server: every node runs the SCSG round from its de-biased z and gossips (x, w) to its
    out-neighbours on a directed graph (push-sum, column-stochastic mixing).
    """
    from privrl.config import ConfigError
    cfg = _config("dec", settings, out)
    from privrl.systems.fedpg.algorithm import build_topology
    from privrl.systems.fedpg.runtimes import check_runtime

    check_runtime(cfg, runtime.value)  # the library's rules: the API refuses the same
    build_topology(cfg)  # a graph that is not strongly connected fails here, before running
    if runtime is Runtime.ray:
        from privrl.runtime.rules import require_extra

        require_extra("ray")
        _execute_fedpg(cfg, out, progress, address=address, ray=True, every=progress_every)
        return
    if address is not None:
        raise ConfigError("--address", "--address needs --runtime ray")
    _execute_fedpg(cfg, out, progress, every=progress_every)


def _execute_fedpg(cfg: FedPGConfig, out: Path | None, show_progress: bool,
                   address: str | None = None, ray: bool = False,
                   every: float = DEFAULT_EVERY) -> None:
    from rich.console import Console

    from privrl.output import keeping_work, new_run_dir, removed_if_left_empty
    from privrl.privacy.record import planned
    from privrl.runtime.ray import ray_address
    from privrl.systems.fedpg import local as runner
    from privrl.systems.fedpg.algorithm import FedPG
    from privrl.systems.fedpg.byzantine import byzantine_agents

    FedPG(cfg)  # a mechanism it cannot build (a user's that fails) is refused before any output
    computing()
    err = Console(stderr=True)
    stem = f"fedpg-{cfg.algorithm}" + (f"-{cfg.topology}" if cfg.algorithm == "dec" else "")
    # Ray nodes checkpoint into the run directory, so it exists before the run; locally it is
    # made after the run, so a failed run leaves nothing behind.
    path = new_run_dir(out, f"{stem}-ray-{cfg.mechanism}") if ray else None
    where = (f" on Ray (cluster {ray_address(address) or 'local'}, node checkpoints in {path})"
             if ray else "")
    # Each agent's whole-run ε where the plan bounds it before the run; the run's own ε (a
    # release's labelled per release) is stated with the results.
    bound = planned(cfg.privacy_plan())
    ids = byzantine_agents(cfg)
    who = (f"agents {', '.join(map(str, ids))}" if len(ids) <= 10
           else "their ids in summary.json")
    byz = f", {cfg.byzantine} Byzantine ({cfg.attack}: {who})" if cfg.byzantine else ""
    byz += f", robust rule {cfg.robust}" if cfg.robust != "none" else ""
    err.print(f"[bold]{runner.algorithm_label(cfg)}[/]{where} ({cfg.preset} preset), "
              f"K = {cfg.agents}{byz}, mechanism {cfg.mechanism}{f', {bound}' if bound else ''}"
              f"; {cfg.trials} trial(s) × {cfg.budget} episodes per agent")
    files = " (config.json, metrics.csv, privacy.json, summary.json, policy.npz, " \
            "plots/returns.png)"
    if ray:
        from privrl.systems.fedpg.ray import run_fedpg_dec_ray

        def write(result: tuple[Any, dict[str, Any]], path: Path) -> dict[str, Any]:
            return runner.save(result[0], path, command=["privrl", *sys.argv[1:]],
                               files={"ray.json": result[1]}, runtime="ray")

        # A Ray run that fails after some rounds keeps them (the runner reads its nodes).
        with (removed_if_left_empty(path), keeping_work(lambda: path, write),
              progress_bar(err, show_progress, "training", "episodes/agent", every) as (bar, _)):
            done = run_fedpg_dec_ray(cfg, path / "nodes", address, progress=bar)
        summary = write(done, path)
        files = files[:-1] + ", ray.json (cluster, every node's gossip log))"
    else:
        path, summary = run_and_save(out, f"{stem}-{cfg.mechanism}", lambda bar: runner.run_fedpg(
            cfg, progress=bar), runner.save, err, show_progress, "episodes/agent", every)
    print_results(path, files, results_table(f"{summary['label']} results",
                                             runner.summary_rows(summary)), summary=summary)


@config_command(reproduce_app, "fedpg", "privrl.systems.fedpg.reproduce:FedPGSweep")
def reproduce_fedpg_command(
    settings: Settings, out: Out = None, resume: Resume = None,
    one_program: Annotated[bool, typer.Option(
        "--one-program/--per-setting",
        help="Run the settings as compiled programs, FedPG-Cen's and FedPG-Dec's (default; the "
        "same results per setting as running each alone), or each setting alone in turn "
        "(each is saved as soon as it finishes).")] = True,
    progress: ShowProgress = True,
) -> None:
    """Paper 004: FedPG-Cen vs FedPG-Dec (ring, exponential, random) vs a single agent.

    Writes tables.md (episodes to a mean return of 475, final returns, rounds/s, episodes/s),
    plots/returns.png (mean return vs episodes per agent, band over trials), plots/private.png
    (Gaussian and Laplace variants), privacy.json and per-setting results; prints the table.
    """
    from privrl.systems.fedpg import reproduce

    cfg = settings.build()
    cfg.validate()
    path = sweep_dir(out, resume, "reproduce-fedpg")
    execute_sweep(
        f"[bold]Reproducing paper 004[/]: {len(cfg.settings())} settings × {cfg.trials} trials "
        f"× {cfg.budget:,} episodes per agent", path,
        lambda update, log: reproduce.run_sweep(cfg, path, log=log, progress=update,
                                                one_program=one_program),
        progress, "privrl reproduce fedpg", "tables.md, tables.json, plots/, privacy.json, "
        "settings/")


@config_command(audit_app, "fedpg", "privrl.systems.fedpg.audit:FedPGAudit")
def audit_fedpg_command(settings: Settings, out: Out = None,
                        progress: ShowProgress = True) -> None:
    """End-to-end audit: a canary agent (what it sends replaced by a vector beyond the clip) vs
    an ordinary agent playing its own private CartPole episodes; an attacker who sees one
    report bounds ε from below. Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    execute_audit(settings, out, progress, "fedpg-{algorithm}", " {mechanism}",
                  "{samples:,} reports per world")
