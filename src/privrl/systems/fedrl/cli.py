"""`privrl run fedrl`, `privrl run fedrl-baseline` and `privrl reproduce fedrl` (paper 002)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from privrl.cli import (
    AccountantName,
    AccountantOpt,
    Noise,
    Out,
    Seed,
    ShowProgress,
    flag_names,
    parse_numbers,
    progress_bar,
    system_apps,
)

run_app, reproduce_app = system_apps()

Size = Annotated[int, typer.Option(help="Grid-World size N: 8, 16 or 32.")]
Maps = Annotated[Path | None, typer.Option(
    help="Directory holding gridworld_{N}.npz (the paper's maps) or the .npz file itself. "
    "Default: maps from the built-in generator.")]
History = Annotated[int | None, typer.Option(
    help="H: observations stacked per input. Default: the authors' 2, 4, 8 for N = 8, 16, 32.")]
AlphaView = Annotated[int, typer.Option(help="α's window (odd; paper text: 3).")]
BetaView = Annotated[int, typer.Option(help="β's window (odd; paper text: 5).")]
Epochs = Annotated[int, typer.Option(help="Training epochs at most (early stop on validation).")]
UpdatesPerEpoch = Annotated[int, typer.Option(help="Environment steps (one update each) per "
                                                   "epoch.")]
Patience = Annotated[int, typer.Option(help="Stop after this many epochs without validation "
                                            "improvement.")]
GeneratedMaps = Annotated[int, typer.Option(
    help="Without --maps: how many maps to generate (split 8:1:1).")]
NumEnvs = Annotated[int, typer.Option(help="Episodes stepped together per update.")]
BufferSize = Annotated[int, typer.Option(help="Replay memory capacity (transitions).")]
Trials = Annotated[int, typer.Option(help="Independent trials, vectorized.")]


def _grid_options(size: int, maps: Path | None, history: int | None, alpha_view: int,
                  beta_view: int, epochs: int, updates_per_epoch: int, patience: int,
                  num_envs: int, buffer_size: int, trials: int, seed: int,
                  generated_maps: int) -> dict[str, Any]:
    return {"generated_maps": generated_maps, "size": size,
            "maps": None if maps is None else str(maps), "history": history,
            "alpha_view": alpha_view, "beta_view": beta_view, "epochs": epochs,
            "updates_per_epoch": updates_per_epoch, "patience": patience,
            "num_envs": num_envs, "buffer_size": buffer_size, "seeds": trials, "seed": seed}


def _execute(algo: Any, out: Path | None, show: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from privrl.runtime.output import check_out_dir, new_run_dir
    from privrl.systems.fedrl.local import load_splits, run_grid, save

    check_out_dir(out)
    cfg = algo.config
    splits = load_splits(cfg)  # bad maps fail here, before any training
    err, console = Console(stderr=True), Console()
    err.print(f"[bold]{algo.name}[/] ({cfg.preset} preset) on {cfg.size}×{cfg.size} maps "
              f"({splits.info['source']}: {splits.info['train']} train / "
              f"{splits.info['valid']} validation / {splits.info['test']} test), H = {cfg.h}, "
              f"{cfg.seeds} trial(s) × ≤ {cfg.epochs} epochs of {cfg.updates_per_epoch} steps")
    with progress_bar(err, show, "training", unit="epochs") as (bar, task):
        result = run_grid(algo, progress=lambda d, t: bar.update(task, completed=d, total=t),
                          splits=splits)
    path = new_run_dir(out, f"{algo.name}-{cfg.size}")
    summary = save(result, path, command=["privrl", *sys.argv[1:]])
    t = Table(title=f"{algo.name} on {cfg.size}×{cfg.size} test maps (mean of "
                    f"{cfg.seeds} trial(s))", header_style="bold")
    for col in ("variant", "SuccRate %", "AvgRwd"):
        t.add_column(col, justify="right" if col != "variant" else "left")
    for v, r in summary["test"].items():
        t.add_row(v, f"{100 * r['success_rate']:.2f}", f"{r['avg_reward']:.3f}")
    rnd = summary["random_policy_test"]
    t.add_row("random policy", f"{100 * rnd['success']:.2f}", f"{rnd['avg_reward']:.3f}")
    console.print(t)
    console.print(f"Epochs: {summary['epochs_run']} (best {summary['best_epoch']}); wall time "
                  f"{summary['wall_seconds']:.1f} s")
    console.print(f"Privacy: {result.privacy['headline']}")
    if "noise" in summary:
        console.print(summary["noise"])
    console.print(f"Results written to [bold]{path}[/] (config.json, metrics.csv, "
                  "privacy.json, summary.json, policy.npz, plots/valid_success.png)")


@run_app.command("fedrl")
@flag_names(seeds="--trials", noise_sigma="--noise-std")
def run_fedrl(
    size: Size = 8, maps: Maps = None, history: History = None, alpha_view: AlphaView = 3,
    beta_view: BetaView = 5,
    noise_std: Annotated[float, typer.Option(
        help="Std σ of the Gaussian noise on released Q outputs (paper: 1; with --bounded the "
        "noise multiplier is σ/B).")] = 1.0,
    bounded: Annotated[float | None, typer.Option(
        help="B: clip each released Q vector to L2 norm B, making each release a Gaussian "
        "mechanism with an (ε, δ) (composed per party). Default: the paper's unbounded noise, "
        "which has NO formal ε.")] = None,
    delta: Annotated[float, typer.Option(help="δ of the stated (ε, δ) in bounded mode.")] = 1e-5,
    accountant: AccountantOpt = AccountantName.pld,
    noise: Noise = None,
    secure_noise: Annotated[bool, typer.Option(
        "--secure-noise", help="With --bounded: float-safe discrete Gaussian Q-output noise from "
        "the OS CSPRNG (docs/secure-noise.md); ε by RDP (the RDP accountant composes each "
        "party's releases). Slow: one host call per released vector.")] = False,
    epochs: Epochs = 200, updates_per_epoch: UpdatesPerEpoch = 2000, patience: Patience = 10,
    num_envs: NumEnvs = 1, buffer_size: BufferSize = 100_000,
    generated_maps: GeneratedMaps = 8000, trials: Trials = 1, seed: Seed = 0, out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """FedRL on Grid-World (paper 002): two parties, noisy Q outputs, a shared MLP."""
    from privrl.systems.fedrl.algorithm import FedRL, FedRLConfig

    cfg = FedRLConfig.from_preset(
        "paper", noise_sigma=noise_std, bounded=bounded, delta=delta,
        noise=None if noise is None else noise.value, secure_noise=secure_noise,
        accountant="rdp" if secure_noise else accountant.value,
        **_grid_options(size, maps, history, alpha_view, beta_view, epochs, updates_per_epoch,
                        patience, num_envs, buffer_size, trials, seed, generated_maps))
    _execute(FedRL(cfg), out, progress)


@run_app.command("fedrl-baseline")
@flag_names(seeds="--trials")
def run_fedrl_baseline(
    model: Annotated[str, typer.Option(
        help="dqn-alpha | dqn-full | fcn-alpha | fcn-full.")] = "dqn-alpha",
    size: Size = 8, maps: Maps = None, history: History = None, alpha_view: AlphaView = 3,
    beta_view: BetaView = 5, epochs: Epochs = 200, updates_per_epoch: UpdatesPerEpoch = 2000,
    patience: Patience = 10, num_envs: NumEnvs = 1, buffer_size: BufferSize = 100_000,
    generated_maps: GeneratedMaps = 8000, trials: Trials = 1, seed: Seed = 0, out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """Paper 002's Grid-World baselines: DQN or FCN on α's observation or on both."""
    from privrl.systems.fedrl.baselines import BaselineConfig, make_baseline

    cfg = BaselineConfig.from_preset(
        "paper", model=model,
        **_grid_options(size, maps, history, alpha_view, beta_view, epochs, updates_per_epoch,
                        patience, num_envs, buffer_size, trials, seed, generated_maps))
    _execute(make_baseline(cfg), out, progress)


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

    from privrl.runtime.output import check_out_dir, new_run_dir
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
