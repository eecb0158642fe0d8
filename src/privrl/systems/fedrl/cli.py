"""`privrl run fedrl`, `privrl run fedrl-baseline` and `privrl reproduce fedrl` (paper 002)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from privrl.cli import (
    Noise,
    Out,
    ProgressEvery,
    Seed,
    Settings,
    ShowProgress,
    config_command,
    flag_names,
    parse_numbers,
    print_results,
    run_and_save,
    system_apps,
)
from privrl.progress import DEFAULT_EVERY

run_app, reproduce_app = system_apps()


def _execute(algo: Any, out: Path | None, show: bool, every: float = DEFAULT_EVERY) -> None:
    from rich.console import Console
    from rich.table import Table

    from privrl.output import check_out_dir
    from privrl.systems.fedrl.local import load_splits, run_grid, save

    check_out_dir(out)
    cfg = algo.config
    splits = load_splits(cfg)  # bad maps fail here, before any training
    err = Console(stderr=True)
    err.print(f"[bold]{algo.name}[/] ({cfg.preset} preset) on {cfg.size}×{cfg.size} maps "
              f"({splits.info['source']}: {splits.info['train']} train / "
              f"{splits.info['valid']} validation / {splits.info['test']} test), H = {cfg.h}, "
              f"{cfg.seeds} trial(s) × ≤ {cfg.epochs} epochs of {cfg.updates_per_epoch} steps")
    path, summary = run_and_save(out, f"{algo.name}-{cfg.size}", lambda bar: run_grid(
        algo, progress=bar, splits=splits), save, err, show, "epochs", every)
    t = Table(title=f"{algo.name} on {cfg.size}×{cfg.size} test maps (mean of "
                    f"{cfg.seeds} trial(s))", header_style="bold")
    for col in ("variant", "SuccRate %", "AvgRwd"):
        t.add_column(col, justify="right" if col != "variant" else "left")
    for v, r in summary["test"].items():
        t.add_row(v, f"{100 * r['success_rate']:.2f}", f"{r['avg_reward']:.3f}")
    rnd = summary["random_policy_test"]
    t.add_row("random policy", f"{100 * rnd['success']:.2f}", f"{rnd['avg_reward']:.3f}")
    print_results(path, " (config.json, metrics.csv, privacy.json, summary.json, policy.npz, "
                  "plots/valid_success.png)", t, f"Epochs: {summary['epochs_run']} (best "
                  f"{summary['best_epoch']}); wall time {summary['wall_seconds']:.1f} s",
                  f"Privacy: {summary['privacy']}", summary.get("noise"))


@config_command(run_app, "fedrl", "privrl.systems.fedrl.config:FedRLConfig")
def run_fedrl(settings: Settings, out: Out = None, progress: ShowProgress = True,
              progress_every: ProgressEvery = DEFAULT_EVERY) -> None:
    """FedRL on Grid-World (paper 002): two parties, noisy Q outputs, a shared MLP."""
    # Secure Q-output noise is composed by RDP alone (its accountant's default).
    cfg = settings.build(**({"accountant": "rdp"} if settings.get("secure_noise") else {}))
    cfg.validate()  # every value checked before JAX is imported
    from privrl.systems.fedrl.algorithm import FedRL

    _execute(FedRL(cfg), out, progress, progress_every)


@config_command(run_app, "fedrl-baseline", "privrl.systems.fedrl.config:BaselineConfig")
def run_fedrl_baseline(settings: Settings, out: Out = None, progress: ShowProgress = True,
                       progress_every: ProgressEvery = DEFAULT_EVERY) -> None:
    """Paper 002's Grid-World baselines: DQN or FCN on α's observation or on both."""
    cfg = settings.build()
    cfg.validate()  # every value checked before JAX is imported
    from privrl.systems.fedrl.baselines import make_baseline

    _execute(make_baseline(cfg), out, progress, progress_every)


@reproduce_app.command("fedrl")
@flag_names(size="--sizes", model="--models", seeds="--trials", runs="--trials")
def reproduce_fedrl(
    maps: Annotated[Path, typer.Option(
        help="Directory with the paper's gridworld_{8,16,32}.npz (required).")],
    sizes: Annotated[str, typer.Option(help="Comma-separated sizes, e.g. 8,16,32.")] = "8",
    trials: Annotated[int, typer.Option(help="Trials per model (the paper: 5 runs).")] = 5,
    models: Annotated[str, typer.Option(
        help="Comma-separated: fcn-alpha,dqn-alpha,fedrl,fcn-full,dqn-full.")]
    = "fcn-alpha,dqn-alpha,fedrl,fcn-full,dqn-full",
    epochs: Annotated[int | None, typer.Option(help="Override: epochs at most.")] = None,
    updates_per_epoch: Annotated[int | None, typer.Option(
        help="Override: steps per epoch.")] = None,
    patience: Annotated[int | None, typer.Option(help="Override: early-stop patience.")] = None,
    num_envs: Annotated[int | None, typer.Option(help="Override: episodes per step.")] = None,
    noise: Noise = None, seed: Seed = 0, out: Out = None,
) -> None:
    """Paper 002's Table 1: train on maps 0-6399, select on 6400-7199, test on 7200-7999."""
    from rich.console import Console

    from privrl.output import check_out_dir, new_run_dir
    from privrl.systems.fedrl.reproduce import ReproConfig, run_reproduction, with_overrides

    check_out_dir(out)
    cfg = with_overrides(
        ReproConfig(str(maps), parse_numbers(sizes, "--sizes", int), trials,
                    tuple(m.strip() for m in models.split(",")), seed=seed,
                    noise=None if noise is None else noise.value),
        epochs=epochs, updates_per_epoch=updates_per_epoch, patience=patience,
        num_envs=num_envs).resolved()
    err = Console(stderr=True)
    path = new_run_dir(out, "reproduce-fedrl")
    table = run_reproduction(cfg, path, log=lambda s: err.print(s))
    Console().print((path / "table1.md").read_text())
    err.print(f"Total wall time {table['wall_seconds']:.0f} s; results in [bold]{path}[/]")
