"""Plot FedPG run directories' learning curves side by side: one panel per environment, one line
per run and trial (batch mean return against episodes per agent).

    python benchmarks/plot_fedpg_runs.py --out benchmarks/figures/fedpg_envs.png \
        "FourRooms-misc|none|RUN_DIR" "FourRooms-misc|user-level ε 1.27|RUN_DIR" ...

Each argument is `panel|label|run directory` (a `privrl run fedpg-cen` output: metrics.csv and
config.json); the label should carry the run's privacy statement in short (its privacy.json
says it in full). The target return of each panel is drawn from config.json.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path


def curves(run: Path) -> dict[int, tuple[list[float], list[float]]]:
    """Per trial: (episodes per agent before the round, the round's batch mean return)."""
    out: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    with open(run / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            x, y = out[int(row["trial"])]
            x.append(float(row["episodes_per_agent_before"]))
            y.append(float(row["mean_return"]))
    return dict(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="panel|label|run directory")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--columns", type=int, default=None,
                        help="panels per row (default: all in one row)")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[str, list[tuple[str, Path]]] = defaultdict(list)
    for spec in args.runs:
        panel, label, run = spec.split("|", 2)
        panels[panel].append((label, Path(run)))
    cols = args.columns or len(panels)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (panel, runs) in zip(axes.flat[:len(panels)], panels.items(), strict=True):
        for i, (label, run) in enumerate(runs):
            color = f"C{i}"
            for trial, (x, y) in sorted(curves(run).items()):
                ax.plot(x, y, color=color, lw=1, alpha=0.8,
                        label=label if trial == 0 else None)
            target = json.loads((run / "config.json").read_text())["config"]["target_return"]
        ax.axhline(target, color="grey", ls="--", lw=0.8, label=f"target {target:g}")
        ax.set_title(panel)
        ax.set_xlabel("episodes per agent")
        ax.set_ylabel("batch mean return")
        ax.legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
