"""One PGC-A3C setting under a reading of paper 000: success count and median FST.

Used for the readings in docs/pgc-a3c-fidelity.md: a preset plus any config overrides, K trials
capped at N submissions, trials retired once their FST is known (as in `privrl reproduce`).

    python benchmarks/pgc_readings.py --preset paper-code --mechanism laplace --epsilon 10 \\
        --trials 8 --cap 30000 --set learning_rate=0.01 --set server_optimizer=sgd
"""

from __future__ import annotations

import argparse
import ast
import json
import time

import numpy as np

from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
from privrl.systems.pgc_a3c.local import run_pgc_a3c
from privrl.systems.pgc_a3c.metrics import first_success_time, median_fst


def _value(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: a string option such as sgd or failure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="paper-code")
    ap.add_argument("--mechanism", default="laplace")
    ap.add_argument("--epsilon", type=float, default=None)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--cap", type=int, default=30_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a PGCA3CConfig field override (repeatable)")
    args = ap.parse_args()
    overrides = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    cfg = PGCA3CConfig.from_preset(
        args.preset, mechanism=args.mechanism,
        epsilon=None if args.mechanism == "none" else args.epsilon,
        trials=args.trials, submissions=args.cap, seed=args.seed, **overrides).resolved()
    t0 = time.perf_counter()
    out = run_pgc_a3c(cfg, retire_on_success=True)
    fst = first_success_time(out.scores, cfg.target_score, cfg.score_window)
    med = median_fst(fst)
    print(json.dumps({
        "preset": args.preset, "mechanism": cfg.mechanism, "epsilon": cfg.epsilon,
        "overrides": overrides, "trials": cfg.trials, "cap": cfg.submissions, "seed": cfg.seed,
        "success": f"{int(np.isfinite(fst).sum())}/{cfg.trials}",
        "median_fst": med,
        "fst": sorted(int(f) for f in fst if np.isfinite(f)),
        "wall_s": round(time.perf_counter() - t0, 1)}, default=str))


if __name__ == "__main__":
    main()
