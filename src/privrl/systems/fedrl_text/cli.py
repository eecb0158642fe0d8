"""`privrl run fedrl-text2action` and `privrl reproduce fedrl-text2action` (paper 002, Table 2)."""

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

Data = Annotated[Path, typer.Option(
    help="Directory holding win2k.json.gz, cooking.json.gz, wikihow.json.gz (read in place).")]
Preset = Annotated[str, typer.Option(
    help="paper (the paper's and authors' settings), cpu (fewer, batched updates), "
    "wide-head / cpu-wide-head (improvement: a 64-unit shared MLP).")]
Folds = Annotated[str, typer.Option(help="Comma-separated test folds of the authors' 5.")]
Epochs = Annotated[int | None, typer.Option(help="Override: epochs at most.")]
StepsPerEpoch = Annotated[int | None, typer.Option(
    help="Override: vector steps per epoch (default: one pass over the training words).")]
Patience = Annotated[int | None, typer.Option(help="Override: early-stop patience.")]
NumEnvs = Annotated[int | None, typer.Option(help="Override: texts stepped together.")]
Targets = Annotated[str | None, typer.Option(
    help="Target networks: copy (every target period: the paper) or frozen (never updated: "
    "what the authors' code does for FedRL; a control for the DQN baselines).")]


def _overrides(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


@config_command(run_app, "fedrl-text2action",
                "privrl.systems.fedrl_text.config:TextConfig")
def run_text2action(settings: Settings, data: Data, folds: Folds = "0,1,2,3,4",
                    out: Out = None, progress: ShowProgress = True,
                    progress_every: ProgressEvery = DEFAULT_EVERY) -> None:
    """FedRL or a baseline on one Text2Action corpus: cross-validation on the authors' folds."""
    # Secure Q-output noise is composed by RDP alone (its accountant's default).
    cfg = settings.build(**({"accountant": "rdp"} if settings.get("secure_noise") else {}))
    cfg = cfg.resolved()  # every value checked before JAX is imported
    from rich.console import Console
    from rich.table import Table

    from privrl.envs import text2action as t2a
    from privrl.output import check_out_dir
    from privrl.systems.fedrl_text.local import run_cv, save
    from privrl.systems.fedrl_text.reproduce import ReproConfig

    check_out_dir(out)
    preset, corpus, mode = cfg.preset, cfg.corpus, cfg.mode
    fold_ids = ReproConfig(str(data), (corpus,), (mode,), cfg.runs,
                           parse_numbers(folds, "--folds", int), preset).resolved().folds
    text = t2a.load_corpus(data, corpus)  # bad data fails here, before any training
    err = Console(stderr=True)
    err.print(f"[bold]{mode}[/] ({preset} preset) on {corpus} ({t2a.CORPORA[corpus]}, "
              f"{len(text.words)} texts), folds {list(fold_ids)}, {cfg.runs} trial(s) each")
    path, summary = run_and_save(
        out, f"{mode}-text2action-{corpus}", lambda bar: run_cv(
            cfg, text, fold_ids, progress=bar),
        lambda done, path, command: save(cfg, *done, path, command=command), err, progress,
        "epochs", progress_every)
    t = Table(title=f"{mode} on {corpus} test folds (mean over folds, then {cfg.runs} trial(s))",
              header_style="bold")
    for col in ("variant", "F1 %", "precision %", "recall %", "AvgRwd"):
        t.add_column(col, justify="right" if col != "variant" else "left")
    rows = [(v, r) for v, r in summary["test"].items()]
    rows += [(f"{k} (no learning)", r) for k, r in summary["reference_taggings"].items()]
    for v, r in rows:
        t.add_row(v, f"{100 * r['f1']:.2f}", f"{100 * r.get('precision', float('nan')):.2f}",
                  f"{100 * r.get('recall', float('nan')):.2f}", f"{r['avg_reward']:.3f}")
    print_results(path, " (config.json, metrics.csv, privacy.json, summary.json, policy.npz)",
                  t, f"Wall time {summary['wall_seconds']:.1f} s; epochs per fold "
                  f"{summary['epochs_run']}", f"Privacy: {summary['privacy']}",
                  summary.get("noise"))


@reproduce_app.command("fedrl-text2action")
@flag_names(mode="--models", corpus="--corpora", runs="--trials")
def reproduce_text2action(
    data: Data,
    corpora: Annotated[str, typer.Option(help="Comma-separated: win2k,cooking,wikihow.")]
    = "win2k,cooking,wikihow",
    models: Annotated[str, typer.Option(
        help="Comma-separated: fcn-alpha,dqn-alpha,fedrl,fcn-full,dqn-full.")]
    = "fcn-alpha,dqn-alpha,fedrl,fcn-full,dqn-full",
    trials: Annotated[int, typer.Option(help="Trials per fold (the paper: 5 runs).")] = 5,
    folds: Folds = "0,1,2,3,4", preset: Preset = "paper",
    epochs: Epochs = None, steps_per_epoch: StepsPerEpoch = None, patience: Patience = None,
    num_envs: NumEnvs = None, targets: Targets = None, noise: Noise = None, seed: Seed = 0,
    out: Out = None,
    resume: Annotated[Path | None, typer.Option(
        help="Continue an interrupted reproduction in this directory; finished settings are "
        "kept.")] = None,
) -> None:
    """Paper 002's Table 2: 5-fold cross-validation on the authors' folds, ours beside the
    paper's F1 and AvgRwd."""
    from rich.console import Console

    from privrl.config import ConfigError
    from privrl.output import check_out_dir, new_run_dir
    from privrl.systems.fedrl_text.reproduce import ReproConfig, run_reproduction

    if out is not None and resume is not None:
        raise ConfigError("--resume", "give either --out (a new run) or --resume (an old one)")
    if resume is not None and not (resume / "sweep.json").is_file():
        raise ConfigError("--resume", f"{resume} holds no reproduction (no sweep.json)")
    check_out_dir(out)
    over = _overrides(epochs=epochs, steps_per_epoch=steps_per_epoch, patience=patience,
                      num_envs=num_envs, targets=targets)
    cfg = ReproConfig(str(data), tuple(c.strip() for c in corpora.split(",")),
                      tuple(m.strip() for m in models.split(",")), trials,
                      parse_numbers(folds, "--folds", int), preset, tuple(over.items()),
                      seed, None if noise is None else noise.value).validate()
    err = Console(stderr=True)
    path = resume if resume is not None else new_run_dir(out, "reproduce-fedrl-text2action")
    err.print(f"[bold]Reproducing paper 002 Table 2[/] ({preset} preset) → {path}")
    table = run_reproduction(cfg, path, log=lambda s: err.print(s))
    Console().print((path / "table2.md").read_text())
    err.print(f"Total wall time {table['wall_seconds']:.0f} s; results in [bold]{path}[/]")
