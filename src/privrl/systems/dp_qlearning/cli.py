"""`privrl run dp-qlearning` and `privrl reproduce dp-qlearning` (paper 001). """

from __future__ import annotations

import sys
from typing import Annotated

import typer

from privrl.cli import Noise, Out, Seed, SweepSeed, flag_names, system_apps

run_app, reproduce_app = system_apps()


@run_app.command("dp-qlearning")
@flag_names(sigma="--gp-scale", seeds="--trials")
def run_dp_qlearning_command(
    gp_scale: Annotated[float | None, typer.Option(
        help="Scale σ ≥ 0 of the Gaussian-process noise on Q (the privacy knob; not a noise "
        "multiplier: the process has no clip). Alone, no ε is claimed. With --epsilon: default "
        "Theorem 5's calibration; a given scale must satisfy it.")] = None,
    epsilon: Annotated[float | None, typer.Option(
        help="The reward function's total ε over the run (the protected unit: the whole "
        "reward function, every update included), in (0, 1) where Theorem 5 holds (needs "
        "--delta, --sensitivity-constant, --k).")] = None,
    delta: Annotated[float | None, typer.Option(help="Target δ in (0, 1) for Theorem 5.")] = None,
    sensitivity_constant: Annotated[float | None, typer.Option(
        help="Theorem 5's C(α, k, L, B) > 0. Required with --epsilon, no default: the poster "
        "does not define it, and the guarantee is only as valid as the C you supply.")] = None,
    k: Annotated[float | None, typer.Option(
        "--k", help="Theorem 5's k > 0 (the C you supply must be for this k); "
        "needs 2k > 8.68·√β·σ.")] = None,
    beta: Annotated[float, typer.Option(
        help="Theorem 5's β > 0 (our reading: the kernel's inverse length scale, 1 for "
        "exp(−|x−y|)).")] = 1.0,
    trials: Annotated[int, typer.Option(help="Independent trials, vmapped.")] = 1,
    episodes: Annotated[int, typer.Option(help="Episodes per run (authors: 100).")] = 100,
    noise_reset_episodes: Annotated[int, typer.Option(
        help="Fresh noise functions every N episodes (authors: 1; J = episodes / N).")] = 1,
    seed: Seed = 0,
    noise: Noise = None,
    secure_noise: Annotated[bool, typer.Option(
        "--secure-noise", help="Not available here: the functional noise is a Gaussian "
        "process, which the float-safe samplers do not cover (refused; docs/secure-noise.md)."
    )] = False,
    out: Out = None,
) -> None:
    """Q-learning with Gaussian-process functional noise (Wang & Hegde) on the 1-D task.

    Protects the reward function (neighbours: ‖r − r′‖∞ ≤ 1); the released object is the
    Q-function. Writes config.json, metrics.csv, privacy.json, summary.json, policy.npz,
    plots/returns.png.
    """
    from rich.console import Console

    from privrl.runtime.output import check_out_dir, new_run_dir
    from privrl.systems.dp_qlearning import local as runner
    from privrl.systems.dp_qlearning.algorithm import DPQLearningConfig, describe_privacy

    cfg = DPQLearningConfig.from_preset(
        "paper", sigma=gp_scale, epsilon=epsilon, delta=delta,
        sensitivity_constant=sensitivity_constant, k=k, beta=beta, seeds=trials,
        episodes=episodes, noise_reset_episodes=noise_reset_episodes, seed=seed,
        noise=None if noise is None else noise.value, secure_noise=secure_noise).resolved()
    check_out_dir(out)
    console, err = Console(), Console(stderr=True)
    err.print(f"[bold]DP Q-learning[/] (paper preset): {describe_privacy(cfg)}; "
              f"{cfg.seeds} trial(s) × {cfg.episodes} episodes")
    result = runner.run_dp_qlearning(cfg)
    path = new_run_dir(out, f"dp-qlearning-sigma{cfg.sigma:.4g}")
    summary = runner.save(result, path, command=["privrl", *sys.argv[1:]])
    console.print(f"privacy: {summary['privacy']}")
    console.print(summary["noise"])
    sd = summary["final_return_std_over_seeds"]
    console.print(f"final mean return (last {summary['final_episodes']} episodes): "
                  f"{summary['final_mean_return']:.2f} ± {sd:.2f} (sd over {cfg.seeds} "
                  f"trial(s)); wall {summary['wall_seconds']:.1f} s")
    console.print(f"Results written to [bold]{path}[/] "
                  "(config.json, metrics.csv, privacy.json, summary.json, policy.npz, "
                  "plots/returns.png)")


@reproduce_app.command("dp-qlearning")
@flag_names(seeds="--trials")
def reproduce_dp_qlearning_command(
    trials: Annotated[int, typer.Option(help="Trials per σ (authors: 10).")] = 10,
    episodes: Annotated[int, typer.Option(help="Episodes per run (authors: 100).")] = 100,
    seed: SweepSeed = 0,
    noise: Noise = None,
    out: Out = None,
) -> None:
    """Paper 001's sweep: σ = 0, 0.2, ..., 1.0 on the 1-D task, beside random and optimal.

    Writes tables.md, tables.json, plots/returns.png (mean and interquartile band per σ),
    raw/returns.csv and privacy.json, and prints the table.
    """
    from rich.console import Console
    from rich.markdown import Markdown

    from privrl.runtime.output import check_out_dir, new_run_dir
    from privrl.systems.dp_qlearning.reproduce import DPQLSweepConfig, run_sweep

    cfg = DPQLSweepConfig(seeds=trials, episodes=episodes, seed=seed,
                          noise=None if noise is None else noise.value)
    cfg.validate()
    check_out_dir(out)
    console, err = Console(), Console(stderr=True)
    path = new_run_dir(out, "reproduce-dp-qlearning")
    err.print(f"[bold]Reproducing paper 001[/]: σ ∈ {list(cfg.sigmas)} × {cfg.seeds} trials × "
              f"{cfg.episodes} episodes → {path}")
    run_sweep(cfg, path, log=err.print)
    console.print(Markdown((path / "tables.md").read_text()))
    console.print(f"Results written to [bold]{path}[/] (tables.md, tables.json, "
                  "plots/returns.png, raw/, privacy.json)")
