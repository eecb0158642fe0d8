"""FedPG-Cen over a grid of agent counts K and privacy levels ε: episodes per agent to a batch
mean return of 475 (CartPole), for the RESULTS tables of issues 18 and 19.

Each point is one `privrl run fedpg-cen` into `<root>/<mechanism>-K<K>-eps<ε>-s<seed>/`; a point
whose summary.json exists is not run again, so an interrupted grid resumes. Then a markdown table
(stdout and `<root>/table.md`) and a plot of episodes-to-475 against ε, one line per K
(`<root>/episodes_to_475.png`; a point that never reached 475 is drawn at the budget, hollow).

    python benchmarks/fedpg_grid.py --root runs/fedpg-grid \
        --mechanism distributed-gaussian-continuous --agents 100,1000,10000 \
        --epsilons 0.5,1,2,4,8 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path


def _point_dir(root: Path, mechanism: str, k: int, eps: float, seed: int) -> Path:
    return root / f"{mechanism}-K{k}-eps{eps:g}-s{seed}"


def run_point(root: Path, mechanism: str, k: int, eps: float, seed: int,
              extra: list[str]) -> dict:
    out = _point_dir(root, mechanism, k, eps, seed)
    summary = out / "summary.json"
    if not summary.exists():
        cmd = [sys.executable, "-m", "privrl", "run", "fedpg-cen", "--agents", str(k),
               "--mechanism", mechanism, "--epsilon", f"{eps:g}", "--seed", str(seed),
               "--out", str(out), "--no-progress", *extra]
        if mechanism.startswith("distributed-gaussian"):
            cmd += ["--delta", "1e-5"]
        print("$", " ".join(cmd[1:]), flush=True)
        t0 = time.time()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        print(f"  done in {time.time() - t0:.0f} s", flush=True)
    return json.loads(summary.read_text())


def table(rows: list[tuple[int, float, int, dict]]) -> str:
    lines = ["| K | ε target (per release for LDP) | seed | ε stated per agent | rounds | "
             "episodes/agent to 475 | final mean return | wall |",
             "|---:|---:|---:|---|---:|---:|---:|---:|"]
    for k, eps, seed, s in rows:
        reached = s["episodes_to_target"][0]
        lines.append(
            f"| {k:,} | {eps:g} | {seed} | {s['epsilon_per_agent']:.3g} | {s['rounds']} | "
            f"{'never' if reached is None else f'{reached:,}'} | "
            f"{s['final_mean_return'][0]:.0f} | {s['wall_seconds']:.0f} s |")
    return "\n".join(lines)


def _median_reached(stats: list[dict]) -> float | None:
    """Median episodes to 475 over seeds, a seed that never reached it counting as +∞."""
    xs = sorted(math.inf if s["episodes_to_target"][0] is None else s["episodes_to_target"][0]
                for s in stats)
    n = len(xs)
    med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    return None if math.isinf(med) else med


def summary_table(rows: list[tuple[int, float, int, dict]]) -> str:
    """One line per (K, ε): seeds that reached 475 and the median episodes over seeds."""
    lines = ["| K | ε target | seeds reaching 475 | median episodes/agent to 475 | ε stated "
             "(max over seeds) |", "|---:|---:|---:|---:|---:|"]
    for k, eps in sorted({(r[0], r[1]) for r in rows}):
        stats = [s for kk, e, _, s in rows if (kk, e) == (k, eps)]
        med = _median_reached(stats)
        hit = sum(s["episodes_to_target"][0] is not None for s in stats)
        lines.append(f"| {k:,} | {eps:g} | {hit}/{len(stats)} | "
                     f"{'never' if med is None else f'{med:,.0f}'} | "
                     f"{max(s['epsilon_per_agent'] for s in stats):.3g} |")
    return "\n".join(lines)


def plot(rows: list[tuple[int, float, int, dict]], path: Path, title: str) -> None:
    """Median over seeds against ε, one line per K; hollow at the budget where the median
    seed never reached 475."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k in sorted({r[0] for r in rows}):
        xs, ys, never = [], [], []
        for eps in sorted({e for kk, e, _, _ in rows if kk == k}):
            stats = [s for kk, e, _, s in rows if (kk, e) == (k, eps)]
            med = _median_reached(stats)
            budget = stats[0]["budget_episodes_per_agent"]
            xs.append(eps)
            ys.append(budget if med is None else med)
            if med is None:
                never.append((eps, budget))
        line, = ax.plot(xs, ys, marker="o", label=f"K = {k:,}")
        if never:
            ax.scatter(*zip(*never, strict=True), s=80, facecolors="white",
                       edgecolors=line.get_color(), zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("ε (target)")
    ax.set_ylabel("median episodes per agent to mean return 475")
    ax.set_title(title + " (hollow: median seed never reached 475)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--mechanism", default="distributed-gaussian-continuous")
    p.add_argument("--agents", default="100,1000,10000")
    p.add_argument("--epsilons", default="0.5,1,2,4,8")
    p.add_argument("--seeds", default="0")
    p.add_argument("--extra", default="", help="more flags for every run, space separated")
    p.add_argument("--existing", action="store_true",
                   help="run nothing: tabulate and plot the points already in --root")
    a = p.parse_args()
    a.root.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in (int(x) for x in a.agents.split(",")):
        for eps in (float(x) for x in a.epsilons.split(",")):
            for seed in (int(x) for x in a.seeds.split(",")):
                if a.existing and not (_point_dir(a.root, a.mechanism, k, eps, seed)
                                       / "summary.json").exists():
                    continue
                s = run_point(a.root, a.mechanism, k, eps, seed, a.extra.split())
                rows.append((k, eps, seed, s))
    md = table(rows) + "\n\n" + summary_table(rows)
    (a.root / "table.md").write_text(md + "\n")
    print(md)
    plot(rows, a.root / "episodes_to_475.png", f"FedPG-Cen, {a.mechanism}")


if __name__ == "__main__":
    main()
