"""`privrl run dp-reinforce|dp-dqn|ldp-reinforce|ldp-dqn` and `privrl reproduce dpsgd-rl`
(paper 003)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from privrl.audit.cli import execute_audit
from privrl.cli import (
    Out,
    ProgressEvery,
    Resume,
    Settings,
    ShowProgress,
    config_command,
    execute_sweep,
    print_results,
    results_table,
    run_and_save,
    sweep_dir,
    system_apps,
)
from privrl.progress import DEFAULT_EVERY

run_app, reproduce_app = system_apps()
audit_app = typer.Typer(rich_markup_mode=None)  # `privrl audit dp-reinforce`

_DQN, _REINFORCE = ("privrl.systems.dpsgd_rl.config:DQNConfig",
                    "privrl.systems.dpsgd_rl.config:ReinforceConfig")


def _dp_settings(settings: Settings) -> Settings:
    """A DP-SGD command's σ: --noise-multiplier (default 1) or calibrated to --epsilon."""
    from privrl.config import ConfigError

    if "noise_multiplier" in settings and settings.get("target_epsilon") is not None:
        raise ConfigError("target_epsilon", "give either --noise-multiplier or --epsilon")
    return settings


def _execute(algorithm: str, config: Any, out: Path | None,
             show: bool, every: float = DEFAULT_EVERY) -> None:
    """Run `privrl run <algorithm>` with `config`: its values checked before JAX is imported
    (then the output directory, then the task and the learner)."""
    config.validate()
    from rich.console import Console

    from privrl.output import check_out_dir

    check_out_dir(out)
    from privrl.systems.dpsgd_rl.local import run_episodic, save, summary_rows

    if algorithm.endswith("dqn"):
        from privrl.systems.dpsgd_rl.dqn import DQN as algo_cls
    else:
        from privrl.systems.dpsgd_rl.reinforce import Reinforce as algo_cls
    algo = algo_cls.settings_algorithm([config])
    cfg = algo.config
    err = Console(stderr=True)
    if cfg.dp:
        sig = f"DP-SGD σ = {cfg.noise_multiplier:.4g}, C = {cfg.clip:g}"
        if cfg.target_epsilon is not None:
            sig += f" (calibrated to ε = {cfg.target_epsilon:g} at δ = {cfg.delta:g})"
    else:
        sig = f"LDP observations: {cfg.obs.mode}"
    err.print(f"[bold]{algorithm}[/] ({cfg.preset} preset), {sig}; {cfg.seeds} trial(s) × "
              f"≤ {cfg.episodes} episodes")
    path, summary = run_and_save(out, f"{algorithm}-{cfg.preset}", lambda bar: run_episodic(
        algo, algorithm, progress=bar), save, err, show, "episodes", every)
    print_results(
        path, " (config.json, metrics.csv, privacy.json, summary.json, policy.npz, "
        "plots/eval_returns.png)", results_table(f"{algorithm} results",
                                                 summary_rows(summary, cfg)),
        f"Model: {summary['privacy_model']}",
        f"Observations: {summary['privacy_observations']}", summary.get("noise"),
        f"[bold]Stopped by --epsilon-budget {cfg.max_epsilon:g}[/] after "
        f"{max(summary['updates'])} updates; results kept."
        if summary["stopped_by_max_epsilon"] else None,
        summary=summary if "learned" in summary else None)


@config_command(run_app, "dp-reinforce", _REINFORCE, fixed={"dp": True},
                defaults={"noise_multiplier": 1.0})
def run_dp_reinforce(settings: Settings, out: Out = None, progress: ShowProgress = True,
                     progress_every: ProgressEvery = DEFAULT_EVERY) -> None:
    """DP-SGD REINFORCE on CartPole-v1 (paper 003) or --env: the unit of privacy is one
    episode."""
    _execute("dp-reinforce", _dp_settings(settings).build(), out, progress, progress_every)


@config_command(run_app, "dp-dqn", _DQN, fixed={"dp": True}, defaults={"noise_multiplier": 1.0})
def run_dp_dqn(settings: Settings, out: Out = None, progress: ShowProgress = True,
               progress_every: ProgressEvery = DEFAULT_EVERY) -> None:
    """DP-SGD DQN on CartPole-v1 (paper 003) or --env: the unit of privacy is one
    transition."""
    _execute("dp-dqn", _dp_settings(settings).build(), out, progress, progress_every)


# LDP observations: the observation mechanism's fields are the flags; DP-SGD's are not.
_LDP_FLAGS = {"obs.noise_multiplier": "--noise-multiplier", "obs.delta": "--delta",
              "obs.box_low": "--box-low", "obs.box_high": "--box-high"}
_NO_DPSGD = ("noise_multiplier", "clip", "delta", "target_epsilon", "max_epsilon",
             "secure_noise")


def _ldp_command(name: str, algorithm: str) -> None:
    """Register `privrl run <name>`: `algorithm` seeing only locally privatized states."""

    @config_command(
        run_app, name, _DQN if algorithm == "dqn" else _REINFORCE, nested=("obs",),
        flags=_LDP_FLAGS, fixed={"dp": False}, defaults={"obs.mode": "sigma", "obs.sigma": 0.1},
        skip=(*_NO_DPSGD, *(("sampling_probability",) if algorithm == "dqn" else ())),
        help=f"{algorithm.upper() if algorithm == 'dqn' else 'REINFORCE'} on CartPole-v1 (or "
        "--env, with --mode box and its bounds) seeing only locally privatized states (paper "
        "003).")
    def command(settings: Settings, out: Out = None, progress: ShowProgress = True,
                progress_every: ProgressEvery = DEFAULT_EVERY) -> None:
        from privrl.config import ConfigError

        if settings.get("obs.mode") == "none":
            raise ConfigError("obs.mode", f"{name} perturbs the observations: choose sigma or box")
        # Secure observation noise is composed by RDP alone (its accountant's default).
        cfg = settings.build(**({"accountant": "rdp"} if settings.get("obs.secure") else {}))
        _execute(name, cfg, out, progress, progress_every)


_ldp_command("ldp-reinforce", "reinforce")
_ldp_command("ldp-dqn", "dqn")


@config_command(reproduce_app, "dpsgd-rl", "privrl.systems.dpsgd_rl.reproduce:SweepConfig")
def reproduce_dpsgd_rl(
    settings: Settings, out: Out = None, resume: Resume = None,
    one_program: Annotated[bool, typer.Option(
        "--one-program/--per-setting",
        help="Run the settings as three compiled programs, REINFORCE's, DP-SGD DQN's and LDP "
        "DQN's (default; the same results per setting as running each alone), or each setting "
        "alone in turn (each is saved as soon as it finishes).")] = True,
    progress: ShowProgress = True,
) -> None:
    """Paper 003's study: DP-SGD σ ∈ {0, .1, .2, .4, .6} and LDP σ ∈ {0, .01, .1, .2, .3, 2, 5}
    for REINFORCE and DQN; writes tables.md (σ → ε, episodes to solve) and plots/."""
    from privrl.systems.dpsgd_rl import reproduce

    cfg = settings.build()
    cfg.validate()
    path = sweep_dir(out, resume, "reproduce-dpsgd-rl")
    execute_sweep(
        f"[bold]Reproducing paper 003[/]: {len(cfg.settings())} settings", path,
        lambda update, log: reproduce.run_sweep(cfg, path, progress=update, log=log,
                                                one_program=one_program),
        progress, "privrl reproduce dpsgd-rl", "tables.md, plots/, settings/", unit="episodes")


@config_command(audit_app, "dp-reinforce", "privrl.systems.dpsgd_rl.audit:DPReinforceAudit",
                target_epsilon="--epsilon")
def audit_dp_reinforce_command(settings: Settings, out: Out = None,
                               progress: ShowProgress = True) -> None:
    """One-run audit (Steinke, Nasr & Jagielski 2023): canaries in a real DP-REINFORCE run, an
    attacker who sees every released noisy gradient; bounds the per-episode ε from below.
    Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    execute_audit(settings, out, progress, "dp-reinforce", "",
                  "{canaries:,} canaries, {episodes} updates per run", unit="runs")
