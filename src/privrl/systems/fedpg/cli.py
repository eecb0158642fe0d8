"""`privrl run fedpg-cen|fedpg-dec` and `privrl reproduce fedpg` (paper 004). """

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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
from privrl.progress import DEFAULT_EVERY
from privrl.systems.fedpg.choices import ALGORITHMS, ROBUST

if TYPE_CHECKING:

    from privrl.systems.fedpg.algorithm import FedPGConfig

run_app, reproduce_app = system_apps()
audit_app = typer.Typer(rich_markup_mode=None)  # `privrl audit fedpg`


FedPGRobust = value_enum("FedPGRobust", ROBUST)

# The privacy request's fields: a file (a run's config.json: the total with the split or σ it
# resolved to) gives them all, or the options do; never a mix of the two.
_REQUEST = ("epsilon", "epsilon_per_report", "noise_multiplier", "epsilon_budget")


def _config(algorithm: str, settings: Settings) -> FedPGConfig:
    """The run's config from the file and the options (None: the preset's). --epsilon is
    each agent's total over the run (the config's `epsilon`), --epsilon-per-report a pure
    mechanism's ε per release (`epsilon_per_report`): the privacy plan
    (`FedPGConfig.privacy_plan`) reads them, and a run's own config.json (the total with the
    split it resolved to) plans the same again."""
    from privrl.config import ConfigError
    from privrl.systems.fedpg.algorithm import FedPG
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
    from privrl.output import check_out_dir

    check_out_dir(out)  # before the config, which may import --env's code
    if runtime is Runtime.flower and settings.get("mechanism") == "distributed-gaussian":
        from privrl.config import ConfigError

        if settings.get("sampling_rate") not in (None, 1.0):
            raise ConfigError("sampling_rate", "the Flower runtime's secure sum takes every "
                              "agent in every round (no amplification by sampling is claimed)")
        settings.values["sampling_rate"] = 1.0
    cfg = _config("cen", settings)
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

    from privrl.config import ConfigError
    from privrl.output import new_run_dir, removed_if_left_empty, save

    try:
        import flwr  # noqa: F401
    except ImportError:
        raise ConfigError("--runtime", "the Flower runtime needs the flower extra: "
                          "pip install 'privrl[flower]'") from None
    from privrl.systems.fedpg.flower import plan_run, record, run_fedpg_cen_flower

    plan = plan_run(cfg, supernodes, threshold)  # refuses before anything starts
    console, err = Console(), Console(stderr=True)
    path = new_run_dir(out, f"fedpg-cen-flower-{cfg.mechanism}")
    summed = plan.mechanism is not None
    from privrl.privacy.record import planned

    bound = planned(cfg.privacy_plan())
    err.print(f"[bold]FedPG-Cen on Flower[/], K = {cfg.agents} agents on {supernodes} "
              f"SuperNodes (TLS, SuperNode authentication), " + (
                  f"SecAgg+ threshold {plan.threshold}" if summed else
                  f"each agent's {cfg.mechanism} Report") + (f"; {bound}" if bound else "")
              + f"; logs in {path}/logs")
    with removed_if_left_empty(path):
        run = run_fedpg_cen_flower(plan, path, stage_timeout)
    summary = save(record(run), path, command=["privrl", *sys.argv[1:]])
    console.print(f"{summary['rounds']} rounds, {summary['episodes_per_agent']} episodes per "
                  f"agent; server's last mean episode length "
                  f"{summary['final_server_mean_length']:.1f}; {summary['privacy']}")
    console.print(f"Results written to [bold]{path}[/] (config.json, metrics.csv, "
                  "privacy.json, summary.json, policy.npz, flower.json)")
    from privrl.evaluation import verdict_line

    console.print(verdict_line(summary), markup=False)


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
    from privrl.output import check_out_dir

    check_out_dir(out)  # before the config, which may import --env's code
    cfg = _config("dec", settings)
    from privrl.systems.fedpg.algorithm import build_topology
    from privrl.systems.fedpg.runtimes import check_runtime

    check_runtime(cfg, runtime.value)  # the library's rules: the API refuses the same
    build_topology(cfg)  # a graph that is not strongly connected fails here, before running
    if runtime is Runtime.ray:
        from privrl.runtime.ray import require_ray

        require_ray()
        _execute_fedpg(cfg, out, progress, address=address, ray=True, every=progress_every)
        return
    if address is not None:
        raise ConfigError("--address", "--address needs --runtime ray")
    _execute_fedpg(cfg, out, progress, every=progress_every)


def _execute_fedpg(cfg: FedPGConfig, out: Path | None, show_progress: bool,
                   address: str | None = None, ray: bool = False,
                   every: float = DEFAULT_EVERY) -> None:
    from rich.console import Console

    from privrl.evaluation import verdict_line
    from privrl.output import keeping_work, new_run_dir, removed_if_left_empty
    from privrl.privacy.record import planned
    from privrl.runtime.ray import ray_address
    from privrl.systems.fedpg import local as runner
    from privrl.systems.fedpg.algorithm import FedPG
    from privrl.systems.fedpg.byzantine import byzantine_agents

    FedPG(cfg)  # a mechanism it cannot build (a user's that fails) is refused before any output
    console, err = Console(), Console(stderr=True)
    label = runner.algorithm_label(cfg)
    stem = f"fedpg-{cfg.algorithm}" + (f"-{cfg.topology}" if cfg.algorithm == "dec" else "")
    # Ray nodes checkpoint into the run directory, so it exists before the run; locally it is
    # made after the run, so a failed run leaves nothing behind.
    path = new_run_dir(out, f"{stem}-ray-{cfg.mechanism}") if ray else None
    where = (f" on Ray (cluster {ray_address(address) or 'local'}, node checkpoints in {path})"
             if ray else "")
    # Each agent's whole-run ε where the plan bounds it before the run; the run's own ε (a
    # release's labelled per release) is stated with the results.
    bound = planned(cfg.privacy_plan())
    total = f", {bound}" if bound else ""
    ids = byzantine_agents(cfg)
    who = (f"agents {', '.join(map(str, ids))}" if len(ids) <= 10
           else "their ids in summary.json")
    byz = f", {cfg.byzantine} Byzantine ({cfg.attack}: {who})" if cfg.byzantine else ""
    byz += f", robust rule {cfg.robust}" if cfg.robust != "none" else ""
    err.print(f"[bold]{label}[/]{where} ({cfg.preset} preset), K = {cfg.agents}{byz}, "
              f"mechanism {cfg.mechanism}{total}; {cfg.trials} trial(s) × "
              f"{cfg.budget} episodes per agent")
    with progress_bar(err, show_progress, "training", "episodes/agent", every) as (update, _):
        if ray:
            from privrl.systems.fedpg.ray import run_fedpg_dec_ray

            with removed_if_left_empty(path):
                run, extra = run_fedpg_dec_ray(cfg, path / "nodes", address, progress=update)
        else:
            command = ["privrl", *sys.argv[1:]]
            with keeping_work(lambda: new_run_dir(out, f"{stem}-{cfg.mechanism}"),
                              lambda run, path: runner.save(run, path, command=command)):
                run = runner.run_fedpg(cfg, progress=update)
    if path is None:
        path = new_run_dir(out, f"{stem}-{cfg.mechanism}")
    summary = runner.save(run, path, command=["privrl", *sys.argv[1:]],
                          files={"ray.json": extra} if ray else None,
                          runtime="ray" if ray else "local")
    files = "config.json, metrics.csv, privacy.json, summary.json, policy.npz, plots/returns.png"
    if ray:
        files += ", ray.json (cluster, every node's gossip log)"
    console.print(results_table(f"{summary['label']} results", runner.summary_rows(summary)))
    console.print(f"Results written to [bold]{path}[/] ({files})")
    console.print(verdict_line(summary))


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


AuditAlgorithm = value_enum("AuditAlgorithm", ALGORITHMS)
AuditMechanism = value_enum("AuditMechanism", ("laplace", "gaussian"))


@audit_app.command("fedpg")
@flag_names(budget="--episodes")
def audit_fedpg_command(
    algorithm: Annotated[AuditAlgorithm, typer.Option(
        help="cen: the agent sends its gradient estimate to the server; dec: a node releases "
        "its update to its peers.", case_sensitive=False)] = AuditAlgorithm.cen,
    mechanism: Annotated[str, typer.Option(
        help="laplace (audits --epsilon-per-report, one release's ε), gaussian (audits one "
        "release's (ε, δ) when σ is calibrated to each agent's total --epsilon over the run), "
        "or your own module:callable (audits --epsilon-per-report, as it declares).",
        parser=mechanism_option(AuditMechanism))
    ] = AuditMechanism.laplace,
    epsilon: Annotated[str | None, typer.Option(
        help="gaussian: each agent's total ε over the run, values to audit (comma-separated). "
        "Default 0.5,1,2,5,10.")] = None,
    epsilon_per_report: Annotated[str | None, typer.Option(
        help="laplace: the ε of one release, values to audit (comma-separated). Default "
        "0.5,1,2,5,10.")] = None,
    clip: Annotated[float | None, typer.Option(help="Clip C of the mechanism (default 1).")
                    ] = None,
    delta: Annotated[float, typer.Option(help="gaussian: δ of the audited (ε, δ).")] = 1e-5,
    episodes: Annotated[int, typer.Option(
        help="Episodes each agent samples over the run (FedPG-BR's: 5000).")] = 5000,
    robust: Annotated[FedPGRobust, typer.Option(
        help="cen: the server's robust rule (fedpg-br, median, trimmed-mean); the attacker "
        "then sees its μ_t over all K agents' reports (the canary is one of them), to confirm "
        "the rule is post-processing. Default none: the attacker sees the one report.")
    ] = FedPGRobust.none,
    samples: Annotated[int, typer.Option(
        help="Reports per world (half choose the attack's threshold, half bound ε).")
    ] = 20_000,
    confidence: Annotated[float, typer.Option(help="Confidence of each lower bound.")] = 0.95,
    seed: SweepSeed = 0,
    out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """End-to-end audit: a canary agent (what it sends replaced by a vector beyond the clip) vs
    an ordinary agent playing its own private CartPole episodes; an attacker who sees one
    report bounds ε from below. Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    from dataclasses import replace

    from privrl.audit.cli import execute_audit
    from privrl.audit.mechanism import check_audit_settings
    from privrl.config import ConfigError, positive
    from privrl.output import check_out_dir

    check_out_dir(out)  # before the config, which may import --env's code
    from privrl.systems.fedpg.algorithm import FedPGConfig
    from privrl.systems.fedpg.audit import audit_fedpg

    flag, given = (("--epsilon-per-report", epsilon_per_report)
                   if mechanism is not AuditMechanism.gaussian else ("--epsilon", epsilon))
    other = {"--epsilon": epsilon, "--epsilon-per-report": epsilon_per_report}
    wrong = next(f for f in other if f != flag)
    if other[wrong] is not None:
        raise ConfigError(wrong, f"the {mechanism.value} audit takes {flag}")
    epsilons = parse_numbers("0.5,1,2,5,10" if given is None else given, flag)
    config = FedPGConfig.from_preset("paper", algorithm=algorithm.value,
                                     mechanism=mechanism.value, epsilon=1.0,
                                     clip=1.0 if clip is None else clip, delta=delta,
                                     budget=episodes, robust=robust.value)
    for e in epsilons:  # every setting validated (σ calibrated) before any draw
        positive(flag, e)
        try:
            replace(config, epsilon=e).resolved()
        except ConfigError as err:
            raise ConfigError(flag if err.field == "epsilon" else err.field, err.message) from err
    check_audit_settings(samples, confidence)
    execute_audit(
        f"[bold]audit fedpg-{algorithm.value}[/] {mechanism.value}: ε ∈ "
        f"{{{', '.join(f'{e:g}' for e in epsilons)}}}, {samples:,} reports per world",
        lambda progress_fn: audit_fedpg(config, epsilons, seed=seed, samples=samples,
                                        confidence=confidence, progress=progress_fn),
        f"audit-fedpg-{algorithm.value}-{mechanism.value}",
        {"system": f"fedpg-{algorithm.value}", "mechanism": mechanism.value,
         "epsilons": list(epsilons), "clip": config.clip, "delta": delta, "budget": episodes,
         "robust": robust.value, "samples": samples, "confidence": confidence, "seed": seed},
        out, progress)
