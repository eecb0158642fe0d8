"""`privrl evaluate RUN_DIR`: a run's saved policy played on a task (privrl.evaluation)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from privrl.cli import flag_names

top_app = typer.Typer(rich_markup_mode=None)  # `privrl evaluate`


@top_app.command("evaluate")
@flag_names(run_dir="RUN_DIR")
def evaluate_command(
    run_dir: Annotated[Path, typer.Argument(help="A run's results directory (its policy.npz).")],
    env: Annotated[str | None, typer.Option(
        help="The task to evaluate on: gymnax:<id>, gymnasium:<id> or module:callable "
        "(default: the one the policy was trained on, if it is a registry id). Its "
        "observation and action spaces must be the policy's.")] = None,
    episodes: Annotated[int | None, typer.Option(
        help="Episodes per trial (default 10; a Grid-World run of FedRL or a baseline: one "
        "per test map of the run, all of them, or this many drawn with --seed).")] = None,
    trial: Annotated[int | None, typer.Option(
        help="Evaluate this trial only (default: every trial of the run).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the episodes' randomness.")] = 0,
    max_steps: Annotated[int | None, typer.Option(
        help="Episode cap (default: the training run's, else the task's own).")] = None,
    sample: Annotated[bool, typer.Option(
        "--sample", help="Play actions sampled from the policy, as in training (default: "
        "its greedy action: the argmax, or a continuous policy's mean action).")
    ] = False,
    model: Annotated[str | None, typer.Option(
        help="Your own network, for a run trained with it: module:callable or "
        "path/to/file.py:callable, a flax module or a callable returning one (the policy "
        "file names it but is never allowed to import it; this option is).")] = None,
    data: Annotated[Path | None, typer.Option(
        help="A Text2Action run's corpus directory (required for one, refused otherwise): "
        "each trial tags its fold's test texts.")] = None,
) -> None:
    """Play a run's trained policy and report its returns (mean, std, per trial); write them
    into the run directory as evaluate-N.json and evaluate-N.csv (never overwriting)."""
    from rich.console import Console
    from rich.table import Table

    from privrl.evaluation import evaluate_run

    ev = evaluate_run(run_dir, env, episodes, trial, seed, max_steps, sample, model, data)
    json_path, csv_path = ev.write()
    s = ev.summary()
    console = Console()
    if "f1" in s:  # Text2Action: each trial's fold's test texts
        t = Table(title=f"{s['env']}", header_style="bold")
        for name in ("trial", "fold", "run", "texts", "F1 %", "AvgRwd"):
            t.add_column(name, justify="right")
        for row in s["per_trial"]:
            t.add_row(*(str(row[k]) for k in ("trial", "fold", "run", "texts")),
                      f"{100 * row['f1']:.2f}", f"{row['avg_reward']:.4f}")
        console.print(t)
        console.print(f"F1 {100 * s['f1']:.2f}% (mean over trials), average reward per step "
                      f"{s['mean_return']:.4f}; written to {json_path} and {csv_path}")
        return
    success = "success_rate" in s  # Grid-World: whether each episode met
    t = Table(title=f"{s['policy']} policy on {s['env']}, {s['episodes']} episode(s) each, "
              f"cap {s['max_steps']} steps", header_style="bold")
    for name in ("trial", "learner", *(("SuccRate %",) if success else ()), "mean return",
                 "std", "min", "max"):
        t.add_column(name, justify="right")
    for row in s["per_trial"]:
        t.add_row(str(row["trial"]), str(row["learner"]),
                  *((f"{100 * row['success_rate']:.2f}",) if success else ()),
                  f"{row['mean']:.3f}", f"{row['std']:.3f}", f"{row['min']:.3f}",
                  f"{row['max']:.3f}")
    console.print(t)
    rate = f"success rate {100 * s['success_rate']:.2f}%, " if success else ""
    console.print(s["policy_note"])
    console.print(f"{rate}mean return {s['mean_return']:.3f} (std over trials "
                  f"{s['std_over_trials']:.3f}); written to {json_path} and {csv_path}")
