"""Issue 41's attack × defence table from `privrl run fedpg-cen --byzantine ... --robust ...`
run directories: per run, the trials that reached the target, the episodes per agent to it on
privrl's axis and on FedPG-BR's, the final returns and how often the rule kept honest and
Byzantine reports.

    python benchmarks/byzantine_table.py RUN_DIR...

privrl counts B_t + b·N_t episodes per agent each round (the server's N_t·b charged to every
agent); FedPG-BR's code advances its x-axis by (K·B_t + b·N_t)/(K + 1), the mean over the K
agents and the server. Both are read off each run's metrics.csv (batch, inner_steps).
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path


def to_target(run: Path) -> list[tuple[float | None, float | None]]:
    """Per trial: (privrl's, FedPG-BR's) episodes per agent before the first round whose
    batch mean return reached the target (None: never)."""
    cfg = json.loads((run / "config.json").read_text())["config"]
    k, b, target = cfg["agents"], cfg["minibatch"], cfg["target_return"]
    rows = defaultdict(list)
    with open(run / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            rows[int(row["trial"])].append(row)
    out = []
    for trial in sorted(rows):
        ours = theirs = 0.0
        hit: tuple[float | None, float | None] = (None, None)
        for row in rows[trial]:
            if row["mean_return"] in ("", "nan"):
                break
            if float(row["mean_return"]) >= target:
                hit = (float(row["episodes_per_agent_before"]), theirs)
                break
            batch, steps = float(row["batch"]), float(row["inner_steps"])
            ours += batch + b * steps
            theirs += (k * batch + b * steps) / (k + 1)
        out.append(hit)
    return out


def _hits(hits: list[tuple[float | None, float | None]], axis: int) -> str:
    return ", ".join("never" if h[axis] is None else f"{h[axis]:,.0f}" for h in hits)


def _kept(summary: dict, key: str) -> str:
    """The filter's keep rate; blank for the coordinate-wise rules (they keep every report)."""
    if summary.get(key) is None or summary.get("robust") in ("median", "trimmed-mean"):
        return ""
    return f"{summary[key]:.0%}"


def main() -> None:
    print("| run | reached | episodes/agent to 475 (privrl) | (FedPG-BR's axis) | final | "
          "honest kept | Byzantine kept |")
    print("|---|---:|---|---|---|---:|---:|")
    for arg in sys.argv[1:]:
        run = Path(arg)
        s = json.loads((run / "summary.json").read_text())
        hits = to_target(run)
        print(f"| {run.name} | {s['reached_target']}/{s['trials']} | {_hits(hits, 0)} | "
              f"{_hits(hits, 1)} | {', '.join(f'{x:.0f}' for x in s['final_mean_return'])} | "
              f"{_kept(s, 'honest_reports_kept')} | {_kept(s, 'byzantine_reports_kept')} |")


if __name__ == "__main__":
    main()
