"""`privrl reproduce fedrl`: paper 002's Table 1 (Grid-World SuccRate and AvgRwd), ours beside
the paper's.

For each size, every model is trained with `runs` seeds (vmapped) on the training maps
(domains 0-6399), selected on the validation maps (6400-7199) and tested on the test maps
(7200-7999); the table reports the mean over runs. FedRL gives two rows from one training:
noise at test time and no noise at test time. Each model's run directory is kept under the
reproduction's directory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from privrl.config import Config, at_least, fail, one_of
from privrl.envs.gridworld import SIZES, load_maps
from privrl.output import write_json
from privrl.privacy.noise import NOISE_MODES
from privrl.systems.fedrl.algorithm import FedRL, FedRLConfig
from privrl.systems.fedrl.baselines import BaselineConfig, make_baseline
from privrl.systems.fedrl.local import load_splits, run_grid, save

MODELS = ("fcn-alpha", "dqn-alpha", "fedrl", "fcn-full", "dqn-full")
ROWS = ("FCN-alpha", "DQN-alpha", "FedRL, noise at test (FedRL-1)",
        "FedRL, no noise at test (FedRL-2)", "FCN-full", "DQN-full")
# Paper 002, Table 1 (8×8, 16×16, 32×32).
PAPER_SUCC = {"FCN-alpha": (69.73, 48.04, 41.73), "DQN-alpha": (88.27, 76.20, 71.41),
              ROWS[2]: (92.52, 79.83, 77.88), ROWS[3]: (95.06, 84.31, 82.02),
              "FCN-full": (72.16, 56.44, 50.15), "DQN-full": (93.69, 83.40, 79.73)}
PAPER_RWD = {"DQN-alpha": (13.781, -112.084, -285.946), ROWS[2]: (18.152, -94.193, -226.583),
             ROWS[3]: (19.101, -84.139, -189.756), "DQN-full": (31.286, -38.114, -52.72)}


@dataclass(frozen=True)
class ReproConfig(Config):
    maps: str | None
    sizes: tuple[int, ...] = (8,)
    runs: int = 5
    models: tuple[str, ...] = MODELS
    overrides: tuple[tuple[str, Any], ...] = ()  # GridConfig fields (epochs, ...) for all models
    seed: int = 0
    # Noise keys of the FedRL runs (the baselines release nothing): "seeded" / "secret"
    # (privrl.privacy.noise); None: seeded. Each run's privacy record states the mode.
    noise: str | None = None

    def validate(self) -> None:
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, what="noise mode")
        for s in self.sizes:
            if s not in SIZES:
                fail("sizes", f"{s} is not one of {', '.join(map(str, SIZES))}")
        for m in self.models:
            one_of("models", m, MODELS, what="model")
        at_least("runs", self.runs, 1)
        if self.maps is None:
            fail("maps", "the reproduction needs the paper's maps directory")
        for s in self.sizes:  # fail on bad options or a bad maps file before any training
            self.make(self.models[0], s)
            load_maps(self.maps, s)

    def make(self, model: str, size: int) -> Any:
        kw = {"maps": self.maps, "size": size, "seeds": self.runs, "seed": self.seed,
              **dict(self.overrides)}
        if model == "fedrl":
            return FedRL(FedRLConfig.from_preset("paper", noise=self.noise, **kw))
        return make_baseline(BaselineConfig.from_preset("paper", model=model, **kw))


def _rows(model: str, summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    t = summary["test"]
    if model == "fedrl":
        return [(ROWS[2], t["test-noise"]), (ROWS[3], t["test-clean"])]
    return [(model.upper().replace("-ALPHA", "-alpha").replace("-FULL", "-full"), t["greedy"])]


def run_reproduction(cfg: ReproConfig, path: Path,
                     log: Callable[[str], None] = print) -> dict[str, Any]:
    cfg = cfg.validate()
    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for size in cfg.sizes:
        splits = None
        for model in cfg.models:
            algo = cfg.make(model, size)
            if splits is None:
                splits = load_splits(algo.config)
            t0 = time.perf_counter()
            out = run_grid(algo, splits=splits)
            summary = save(out, _mkdir(path / f"{size}x{size}" / model))
            log(f"{size}×{size} {model}: {time.perf_counter() - t0:.0f} s, "
                f"{summary['epochs_run']} epochs, test "
                + ", ".join(f"{v} {r['success_rate']:.3f}" for v, r in summary["test"].items()))
            for row, r in _rows(model, summary):
                results.setdefault(row, {})[str(size)] = {
                    "success_rate": 100 * r["success_rate"], "avg_reward": r["avg_reward"],
                    "per_seed_success": r["per_seed"]["success"],
                    "epochs_run": summary["epochs_run"], "wall_seconds": out.wall_seconds,
                    "random_policy_success": 100 * summary["random_policy_test"]["success"],
                    "random_policy_avg_reward": summary["random_policy_test"]["avg_reward"]}
    table = {"sizes": list(cfg.sizes), "runs": cfg.runs, "overrides": dict(cfg.overrides),
             "maps": cfg.maps, "results": results, "paper_succ": PAPER_SUCC,
             "paper_avg_reward": PAPER_RWD, "wall_seconds": time.perf_counter() - start}
    write_json(path / "table1.json", table)
    (path / "table1.md").write_text(markdown(table))
    return table


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=False)
    return p


def markdown(table: dict[str, Any]) -> str:
    sizes = table["sizes"]
    idx = {8: 0, 16: 1, 32: 2}
    head = "| metric | model | " + " | ".join(f"{s}×{s} ours | {s}×{s} paper" for s in sizes)
    lines = [head + " |", "|---|---|" + "---|---|" * len(sizes)]
    for metric, paper, key, fmt in (("SuccRate %", PAPER_SUCC, "success_rate", "{:.2f}"),
                                    ("AvgRwd", PAPER_RWD, "avg_reward", "{:.3f}")):
        for row in ROWS:
            if row not in table["results"] and row not in paper:
                continue
            cells = []
            for s in sizes:
                r = table["results"].get(row, {}).get(str(s))
                cells.append(fmt.format(r[key]) if r else "not run")
                cells.append(fmt.format(paper[row][idx[s]]) if row in paper else "—")
            lines.append(f"| {metric} | {row} | " + " | ".join(cells) + " |")
    rnd = next((r for v in table["results"].values() for r in v.values()), None)
    if rnd:
        lines.append(f"\nRandom policy on the same test maps: SuccRate "
                     f"{rnd['random_policy_success']:.2f} %, AvgRwd "
                     f"{rnd['random_policy_avg_reward']:.3f} (first size run).")
    return "\n".join(lines) + "\n"


def with_overrides(cfg: ReproConfig, **kw: Any) -> ReproConfig:
    return replace(cfg, overrides=tuple((k, v) for k, v in kw.items() if v is not None))
