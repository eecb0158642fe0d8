"""The LDP frontier of PGC-A3C: median FST against ε per mechanism, the success ratio as the
marker's size, from recorded runs, in one command (issue 42):

    python benchmarks/plot_frontier.py --out benchmarks/figures/frontier_ldp.png

Rows come from benchmarks/frontier_pgc_a3c.csv (`--csv`: one row per recorded `privrl run
pgc-a3c` or sweep cell, with its seed, trials, successes, median FST, commit and the RESULTS
section that recorded it) and from any `privrl run pgc-a3c` run directories given with `--runs`
(their config.json and summary.json). Each (mechanism, ε, seed) is one marker: filled at its
median FST, hollow at the cap when the median trial never succeeded; area ∝ success ratio. The
line joins the median over seeds per ε; ε = ∞ (no mechanism) is the dotted line, and the paper's
points (cap 90,000) are crosses. Runs of a preset other than `tuned-ldp` (e.g. `tuned-ldp2`) are
their own series, labelled with the preset.

`--sweep SWEEP_DIR` draws the older two-panel figure of one `privrl reproduce pgc-a3c` directory
(median FST and success ratio vs ε; formerly `plot_frontier.py SWEEP_DIR OUT.png`).

`--plans PLAN_DIR ...` draws FedPG-Cen `fleet`'s ε/K frontier from `privrl plan fedpg-cen` runs
(one panel per task, issue 51): the fraction of the non-private improvement over random
against user-level ε, one line per fleet size K, random at 0 and non-private at 1, and the
planner's fleet law's smallest ε for each K (`planner.model.FleetLaw`, from the plan's own
pilot) as a marker on the 0.5 line; `--table` prints the same as a Markdown table
(benchmarks/log/30-front.md):

    PYTHONPATH=benchmarks privrl plan fedpg-cen --env untuned:corridor --private slip=0:0.2 \
        --epsilon 2 --agents 1000 --sweep-epsilons 0.5,1,2,4,8 \
        --sweep-agents 100,300,1000,3000 --max-sweep-episodes 1000000 --out DIR
    python benchmarks/plot_frontier.py --plans DIR ... --out benchmarks/figures/frontier_fleet.png
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker

from privrl.systems.pgc_a3c.reproduce import MECHANISM_LABEL, PAPER_TABLES

RECORDED = Path(__file__).with_name("frontier_pgc_a3c.csv")
ORDER = ("laplace", "prs", "privunit", "privunitg", "privunitg-seed", "projunit")
BASE_PRESET = "tuned-ldp"  # the frontier's own preset: its series are named by mechanism alone


def series(mechanism: str, preset: str) -> str:
    """A marker series: the mechanism, with the preset when it is not the frontier's own."""
    return mechanism if preset == BASE_PRESET else f"{mechanism} ({preset})"


def read_csv(path: Path) -> list[dict]:
    """The recorded rows: mechanism, ε, seed, trials, successes, median FST (None: the median
    trial never succeeded) and cap."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({"mechanism": series(r["mechanism"], r["preset"]),
                         "epsilon": float(r["epsilon"]),
                         "seed": int(r["seed"]), "trials": int(r["trials"]),
                         "success": int(r["successes"]) / int(r["trials"]),
                         "median_fst": float(r["median_fst"]) if r["median_fst"] else None,
                         "cap": int(r["cap"])})
    return rows


def read_run(run: Path) -> dict:
    """One `privrl run pgc-a3c` directory as a row."""
    cfg = json.loads((run / "config.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    eps = summary["epsilon"]
    return {"mechanism": series(summary["mechanism"], cfg["config"]["preset"]),
            "epsilon": math.inf if eps is None else eps,
            "seed": cfg["seed"], "trials": summary["trials"],
            "success": summary["success_ratio"], "median_fst": summary["median_fst"],
            "cap": summary["submissions"]}


def plot_frontier(rows: list[dict], out: str) -> None:
    cap = max(r["cap"] for r in rows)
    fig, ax = plt.subplots(figsize=(8, 5))
    mechs = sorted({r["mechanism"] for r in rows if math.isfinite(r["epsilon"])},
                   key=lambda m: (ORDER.index(m.split()[0]) if m.split()[0] in ORDER
                                  else len(ORDER), m))
    for i, mech in enumerate(mechs):
        name, _, preset = mech.partition(" ")
        color, label = f"C{i}", f"{MECHANISM_LABEL.get(name, name)} {preset}".strip()
        mine = [r for r in rows if r["mechanism"] == mech and math.isfinite(r["epsilon"])]
        # a small offset per mechanism so that points at the same ε stay apart
        shift = 1 + 0.04 * (i - (len(mechs) - 1) / 2)
        for r in mine:
            y = cap if r["median_fst"] is None else r["median_fst"]
            ax.scatter([r["epsilon"] * shift], [y], s=15 + 285 * r["success"],
                       facecolors="none" if r["median_fst"] is None else color,
                       edgecolors=color, alpha=0.75, linewidths=1.2)
        eps = sorted({r["epsilon"] for r in mine})
        med = [statistics.median(cap if r["median_fst"] is None else r["median_fst"]
                                 for r in mine if r["epsilon"] == e) for e in eps]
        ax.plot([e * shift for e in eps], med, "-", color=color, alpha=0.6, label=label)
        paper = None if preset else PAPER_TABLES["median_fst"].get(mech)
        if paper:
            pe = sorted(e for e in paper if math.isfinite(e))
            ax.plot(pe, [paper[e] for e in pe], "x--", color=color, alpha=0.5,
                    label=f"{label} (paper, cap 90k)")
    for r in rows:
        if not math.isfinite(r["epsilon"]) and r["median_fst"] is not None:
            ax.axhline(r["median_fst"], color="grey", ls=":", lw=1)
            ax.annotate(f"ε = ∞: {r['median_fst']:,.0f}", (0.01, r["median_fst"]),
                        xycoords=("axes fraction", "data"), va="bottom", fontsize=7)
            break
    ax.axhline(cap, color="grey", ls="--", lw=0.8)
    for sr in (0.25, 0.5, 1.0):  # the size legend
        ax.scatter([], [], s=15 + 285 * sr, facecolors="none", edgecolors="k",
                   label=f"success {sr:g}")
    ax.set(xscale="log", yscale="log", xlabel="ε per agent (pure ε-LDP over the run)",
           ylabel="median FST (submissions)",
           title=f"PGC-A3C LDP frontier: one marker per seed × 20 trials, area ∝ success "
                 f"(hollow at the cap {cap:,}: median trial never succeeded)")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7, ncol=2, loc="lower left", bbox_to_anchor=(0.0, 0.08))
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def plot_sweep(sweep: str, out: str) -> None:
    """One reproduce sweep: median FST and success ratio vs ε, one line per mechanism."""
    record = json.loads((Path(sweep) / "tables.json").read_text())["ours"]
    cap = json.loads((Path(sweep) / "sweep.json").read_text())["sweep"]["cap"]
    fig, (ax_fst, ax_sr) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (mech, by_eps) in enumerate(record["median_fst"].items()):
        eps = sorted(float(e) for e in by_eps if e != "inf")
        fst = [by_eps[str(e)] for e in eps]
        color = f"C{i}"
        label = MECHANISM_LABEL.get(mech, mech)
        # never reached within the cap: drawn at the cap, hollow
        ax_fst.plot(eps, [cap if f is None else f for f in fst], "o-", color=color, label=label)
        for e, f in zip(eps, fst, strict=True):
            if f is None:
                ax_fst.plot([e], [cap], "o", color="white", markeredgecolor=color)
        ax_sr.plot(eps, [record["success_ratio"][mech][str(e)] for e in eps], "o-",
                   color=color, label=label)
        paper = PAPER_TABLES["median_fst"].get(mech)
        if paper:
            pe = sorted(e for e in paper if math.isfinite(e))
            ax_fst.plot(pe, [paper[e] for e in pe], "x--", color=color, alpha=0.6,
                        label=f"{label} (paper, cap 90k)")
            ax_sr.plot(pe, [PAPER_TABLES["success_ratio"][mech][e] for e in pe], "x--",
                       color=color, alpha=0.6, label=f"{label} (paper)")
    ax_fst.set(xscale="log", yscale="log", xlabel="ε per agent", ylabel="median FST (submissions)",
               title=f"median FST (hollow: not reached within {cap:,})")
    ax_sr.set(xscale="log", xlabel="ε per agent", ylabel=f"success ratio (FST ≤ {cap:,})",
              ylim=(-0.05, 1.05), title="success ratio")
    ax_fst.legend(fontsize=7)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def fleet_frontier(plan_dir: Path) -> dict:
    """One `privrl plan fedpg-cen` directory's frontier: the task, ε, K, the measured fraction
    [ε][K] (None where undefined), the measured ε at which each K first reaches `mark` (the
    log-ε interpolation between the swept ε that straddle it; −ε: at or below the first swept
    ε; None: never)
    and the fleet law's smallest ε for each K, re-derived from the plan's pilot."""
    from privrl.planner import model
    from privrl.planner import systems as sy
    from privrl.planner.api import fraction_of

    d = json.loads((plan_dir / "plan.json").read_text())
    fr, rec, p = d["frontier"], d["recommendation"], d["pilot"]
    mark = p["mark"]
    names = {f.name for f in dataclasses.fields(model.PilotStats)}
    stats = model.PilotStats(**{k: (tuple(v) if isinstance(v, list) else v)
                                for k, v in p.items() if k in names})
    law = model.FleetLaw(**p["fleet_law"])
    facts = sy.facts("fedpg-cen", rec["preset"] == sy.FEDPG_FLEET_PRESETS[True])
    if "signal_spread" not in p:  # a plan from before the pilot measured it: the same sample
        from privrl.planner import pilot
        from privrl.planner.api import PlanConfig, task_of

        task = task_of(PlanConfig(env=d["env"], private_params=tuple(d["private_params"]),
                                  epsilon=d["epsilon"]))
        grads, _ = pilot.gradient_sample(task, facts.hidden, 64, 0)
        stats = dataclasses.replace(stats, signal_spread=pilot.signal_spread(
            grads, stats.clip * facts.radius, facts.norm))
    eps, ks = fr["epsilons"], fr["agents"]
    frac = [[fraction_of(y, fr["random_return"], n)
             for y, n in zip(row, fr["nonprivate_return"], strict=True)]
            for row in fr["final_return"]]
    measured, modelled = [], []
    for j, k in enumerate(ks):
        col = [frac[i][j] for i in range(len(eps))]
        at = None
        for i, x in enumerate(col):
            if x is not None and x >= mark:
                prev = col[i - 1] if i else None
                at = (-eps[i] if prev is None else math.exp(
                    math.log(eps[i - 1]) + (mark - prev) / (x - prev)
                    * (math.log(eps[i]) - math.log(eps[i - 1]))))
                break
        measured.append(at)
        modelled.append(sy.fleet_smallest_epsilon_at(stats, law, facts, k,
                                                     rec["reports_per_agent"], 1e-5))
    return {"task": d["env"], "epsilons": eps, "agents": ks, "fraction": frac, "mark": mark,
            "measured": measured, "model": modelled, "rounds": rec["reports_per_agent"],
            "random": fr["random_return"], "nonprivate": fr["nonprivate_return"],
            "final": fr["final_return"], "wall": fr["wall_seconds"]}


def plot_fleet(plans: list[Path], out: str, table: bool = False) -> None:
    """FedPG-Cen `fleet`'s measured ε/K frontier per task, with the fleet law's (see the module
    docstring)."""
    from privrl.planner.systems import fleet_participants

    rows = [fleet_frontier(p) for p in plans]
    fig, axes = plt.subplots(1, len(rows), figsize=(5.2 * len(rows), 4.2), squeeze=False)
    for ax, r in zip(axes[0], rows, strict=True):
        for j, k in enumerate(r["agents"]):
            ys = [r["fraction"][i][j] for i in range(len(r["epsilons"]))]
            ax.plot(r["epsilons"], [math.nan if y is None else y for y in ys], "o-",
                    color=f"C{j}", label=f"K = {k:,} (q·K = {fleet_participants(k)})")
            if r["model"][j] is not None and r["model"][j] > 0:
                ax.plot([r["model"][j]], [r["mark"]], "v", color=f"C{j}", ms=9, mfc="none")
        ax.axhline(0, color="grey", ls="--", label="random policy")
        ax.axhline(1, color="black", ls=":", label="non-private (q·K agents a round)")
        ax.axhline(r["mark"], color="grey", lw=0.6)
        ax.plot([], [], "v", color="k", mfc="none", label="fleet law's smallest ε (model)")
        ax.set(xscale="log", xlabel="user-level ε (δ = 1e-5)", ylim=(-0.3, 1.2),
               ylabel="fraction of the non-private improvement over random",
               title=f"{r['task']}: {r['rounds']} rounds")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=7)
    fig.suptitle("FedPG-Cen `fleet`: the measured ε/K frontier (2 trials) and the plan's "
                 "fleet law", fontsize=9)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    if table:
        for r in rows:
            print(f"\n{r['task']} ({r['rounds']} rounds; random {r['random']:.4g}, "
                  f"non-private {r['nonprivate'][0]:.4g}; sweep {r['wall']:.0f} s)\n")
            print("| ε \\ K | " + " | ".join(f"{k:,}" for k in r["agents"]) + " |")
            print("|---|" + "---:|" * len(r["agents"]))
            for e, fr_row, fin in zip(r["epsilons"], r["fraction"], r["final"], strict=True):
                print(f"| {e:g} | " + " | ".join(
                    "–" if x is None else f"{x:.2f} ({y:.4g})"
                    for x, y in zip(fr_row, fin, strict=True)) + " |")
            print("| measured ε at the mark | " + " | ".join(
                "> all" if x is None else f"≤ {-x:g}" if x < 0 else f"{x:.2g}"
                for x in r["measured"]) + " |")
            print("| fleet law's smallest ε | " + " | ".join(
                "–" if x is None else f"{x:.2g}" for x in r["model"]) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--csv", type=Path, default=RECORDED,
                    help="recorded rows (default: %(default)s)")
    ap.add_argument("--runs", type=Path, nargs="*", default=[],
                    help="privrl run pgc-a3c directories to add")
    ap.add_argument("--sweep", help="one reproduce sweep directory: the older two-panel figure")
    ap.add_argument("--plans", type=Path, nargs="*", default=[],
                    help="privrl plan fedpg-cen directories: FedPG-Cen fleet's ε/K frontier")
    ap.add_argument("--table", action="store_true",
                    help="with --plans: also print the frontier as Markdown tables")
    args = ap.parse_args()
    if args.plans:
        plot_fleet(args.plans, args.out, args.table)
        return
    if args.sweep:
        plot_sweep(args.sweep, args.out)
        return
    plot_frontier(read_csv(args.csv) + [read_run(r) for r in args.runs], args.out)


if __name__ == "__main__":
    main()
