"""`privrl run dp-qlearning` and `privrl reproduce dp-qlearning` (paper 001). """

from __future__ import annotations

from privrl.cli import (
    Out,
    ProgressEvery,
    Settings,
    ShowProgress,
    config_command,
    print_results,
    run_and_save,
    system_apps,
)
from privrl.progress import DEFAULT_EVERY

run_app, reproduce_app = system_apps()


@config_command(run_app, "dp-qlearning",
                "privrl.systems.dp_qlearning.config:DPQLearningConfig")
def run_dp_qlearning_command(settings: Settings, out: Out = None, progress: ShowProgress = True,
                             progress_every: ProgressEvery = DEFAULT_EVERY) -> None:
    """Q-learning with Gaussian-process functional noise (Wang & Hegde) on the 1-D task.

    Protects the reward function (neighbours: ‖r − r′‖∞ ≤ 1); the released object is the
    Q-function. Writes config.json, metrics.csv, privacy.json, summary.json, policy.npz,
    plots/returns.png.
    """
    cfg = settings.build().resolved()  # every value checked before JAX is imported
    from rich.console import Console

    from privrl.output import check_out_dir
    from privrl.systems.dp_qlearning import local as runner
    from privrl.systems.dp_qlearning.algorithm import describe_privacy

    check_out_dir(out)
    err = Console(stderr=True)
    err.print(f"[bold]DP Q-learning[/] (paper preset): {describe_privacy(cfg)}; "
              f"{cfg.seeds} trial(s) × {cfg.episodes} episodes")
    path, summary = run_and_save(out, f"dp-qlearning-sigma{cfg.sigma:.4g}",
                                 lambda bar: runner.run_dp_qlearning(cfg, progress=bar),
                                 runner.save, err, progress, "episodes", progress_every)
    sd = summary["final_return_std_over_seeds"]
    print_results(path, " (config.json, metrics.csv, privacy.json, summary.json, policy.npz, "
                  "plots/returns.png)", f"privacy: {summary['privacy']}", summary.get("noise"),
                  f"final mean return (last {summary['final_episodes']} episodes): "
                  f"{summary['final_mean_return']:.2f} ± {sd:.2f} (sd over {cfg.seeds} "
                  f"trial(s)); wall {summary['wall_seconds']:.1f} s", summary=summary)


@config_command(reproduce_app, "dp-qlearning",
                "privrl.systems.dp_qlearning.reproduce:DPQLSweepConfig")
def reproduce_dp_qlearning_command(settings: Settings, out: Out = None) -> None:
    """Paper 001's sweep: σ = 0, 0.2, ..., 1.0 on the 1-D task, beside random and optimal.

    Writes tables.md, tables.json, plots/returns.png (mean and interquartile band per σ),
    raw/returns.csv and privacy.json, and prints the table.
    """
    from rich.console import Console
    from rich.markdown import Markdown

    from privrl.output import check_out_dir, new_run_dir
    from privrl.systems.dp_qlearning.reproduce import run_sweep

    cfg = settings.build()
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
