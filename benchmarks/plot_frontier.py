"""The privacy-utility frontier of PGC-A3C from one `privrl reproduce pgc-a3c` directory:
median FST and success ratio vs ε, one line per mechanism, the paper's points beside them.

    python benchmarks/plot_frontier.py SWEEP_DIR OUT.png
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from privrl.systems.pgc_a3c.reproduce import MECHANISM_LABEL, PAPER_TABLES


def main(sweep: str, out: str) -> None:
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


if __name__ == "__main__":
    main(*sys.argv[1:])
