"""`privrl run dp-qlearning` and `privrl reproduce dp-qlearning` (paper 001). """

from __future__ import annotations

import sys
from typing import Annotated

import typer

from privrl.cli import Noise, Out, Settings, SweepSeed, config_command, flag_names, system_apps

run_app, reproduce_app = system_apps()


@config_command(run_app, "dp-qlearning",
                "privrl.systems.dp_qlearning.algorithm:DPQLearningConfig")
def run_dp_qlearning_command(settings: Settings, out: Out = None) -> None:
    """Q-learning with Gaussian-process functional noise (Wang & Hegde) on the 1-D task.

    Protects the reward function (neighbours: ‖r − r′‖∞ ≤ 1); the released object is the
    Q-function. Writes config.json, metrics.csv, privacy.json, summary.json, policy.npz,
    plots/returns.png.
    """
    from rich.console import Console

    from privrl.evaluation import verdict_line
    from privrl.output import check_out_dir, keeping_work, new_run_dir
    from privrl.systems.dp_qlearning import local as runner
    from privrl.systems.dp_qlearning.algorithm import describe_privacy

    cfg = settings.build().resolved()
    check_out_dir(out)
    console, err = Console(), Console(stderr=True)
    err.print(f"[bold]DP Q-learning[/] (paper preset): {describe_privacy(cfg)}; "
              f"{cfg.seeds} trial(s) × {cfg.episodes} episodes")
    command = ["privrl", *sys.argv[1:]]
    with keeping_work(lambda: new_run_dir(out, f"dp-qlearning-sigma{cfg.sigma:.4g}"),
                      lambda result, path: runner.save(result, path, command=command)):
        result = runner.run_dp_qlearning(cfg)
    path = new_run_dir(out, f"dp-qlearning-sigma{cfg.sigma:.4g}")
    summary = runner.save(result, path, command=command)
    console.print(f"privacy: {summary['privacy']}")
    console.print(summary["noise"])
    sd = summary["final_return_std_over_seeds"]
    console.print(f"final mean return (last {summary['final_episodes']} episodes): "
                  f"{summary['final_mean_return']:.2f} ± {sd:.2f} (sd over {cfg.seeds} "
                  f"trial(s)); wall {summary['wall_seconds']:.1f} s")
    console.print(f"Results written to [bold]{path}[/] "
                  "(config.json, metrics.csv, privacy.json, summary.json, policy.npz, "
                  "plots/returns.png)")
    console.print(verdict_line(summary))


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

    from privrl.output import check_out_dir, new_run_dir
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
