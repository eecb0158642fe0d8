"""One PGC-A3C setting, for tuning probes: prints success ratio and median FST as one JSON line.

    PYTHONPATH=src python benchmarks/probe_pgc_a3c.py [field=value ...]

Defaults: the tuned preset, PrivUnit2, ε = 1, 20 trials, cap 30,000, seed 0; any
`PGCA3CConfig` field can be overridden (e.g. `preset=tuned-ldp seed=1`,
`buffer_size=1 clip=0.05 parallel_agents=3 hidden=16`). Trials retire once they reach the
target, so FSTs equal a full run's at the same device count (here: one XLA device).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import numpy as np

from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
from privrl.systems.pgc_a3c.local import run_pgc_a3c
from privrl.systems.pgc_a3c.metrics import first_success_time, median_fst

_TYPES = {f.name: f.type for f in dataclasses.fields(PGCA3CConfig)}


def _parse(item: str) -> tuple[str, object]:
    key, value = item.split("=", 1)
    kind = _TYPES.get(key)
    if kind is None:
        raise SystemExit(f"unknown field {key!r}")
    if "int" in str(kind):
        return key, int(value)
    if "float" in str(kind):
        return key, float(value)
    return key, value


def main(argv: list[str]) -> None:
    fields = {"preset": "tuned", "mechanism": "privunit", "epsilon": 1.0, "trials": 20,
              "submissions": 30_000, "seed": 0, **dict(_parse(a) for a in argv)}
    preset = fields.pop("preset")
    cfg = PGCA3CConfig.from_preset(preset, **fields)
    start = time.perf_counter()
    out = run_pgc_a3c(cfg, retire_on_success=True)
    fst = first_success_time(out.scores, out.config.target_score, out.config.score_window)
    print(json.dumps({"preset": preset, **{k: v for k, v in fields.items()},
                      "success": float(np.mean(np.isfinite(fst))), "median": median_fst(fst),
                      "fst": [int(f) if np.isfinite(f) else None for f in fst],
                      "wall_s": round(time.perf_counter() - start)}))


if __name__ == "__main__":
    main(sys.argv[1:])
