"""One figure of audited vs claimed ε from several `privrl audit` run directories.

    python benchmarks/plot_audit.py OUT.png RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from privrl.audit.sweep import plot_audits


def main(out: str, *run_dirs: str) -> None:
    series, confidence, samples = {}, 0.95, set()
    for d in run_dirs:
        record = json.loads((Path(d) / "audit.json").read_text())
        results = record["results"]
        label = results[0]["mechanism"]
        series[label] = ([r["epsilon_claimed"] for r in results],
                         [r["epsilon_lower"] for r in results])
        confidence = results[0]["confidence"]
        samples.add(results[0]["samples"])
    draws = ", ".join(f"{s:,}" for s in sorted(samples))
    plot_audits(Path(out), series, f"audited lower bound vs claimed ε ({draws} draws per input)",
                confidence)


if __name__ == "__main__":
    main(*sys.argv[1:])
