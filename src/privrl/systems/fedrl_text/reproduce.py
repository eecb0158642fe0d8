"""`privrl reproduce fedrl-text2action`: paper 002's Table 2 (Text2Action F1 and AvgRwd), ours
beside the paper's.

For each corpus and model: 5-fold cross-validation with the authors' folds, `runs` runs per
fold (vmapped), test F1 and AvgRwd averaged over folds, then over runs. FedRL gives two rows
from one training: noise at test time (FedRL-1) and none (FedRL-2). Each (corpus, model) is
saved atomically under `settings/<corpus>-<model>/` when it finishes, so `--resume DIR`
continues an interrupted reproduction without redoing finished settings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privrl.config import Config, check_preset, fail, one_of
from privrl.envs import text2action as t2a
from privrl.output import open_sweep, run_setting, write_json
from privrl.privacy.noise import NOISE_MODES
from privrl.systems.fedrl_text.algorithm import TextConfig, text_config
from privrl.systems.fedrl_text.config import PRESETS
from privrl.systems.fedrl_text.local import run_cv, save

MODELS = ("fcn-alpha", "dqn-alpha", "fedrl", "fcn-full", "dqn-full")
ROWS = ("FCN-alpha", "DQN-alpha", "FedRL-1 (noise at test)", "FedRL-2 (no noise at test)",
        "FCN-full", "DQN-full")
# Paper 002, Table 2 (WHS = win2k, CT = cooking, WHG = wikihow).
PAPER_F1 = {"FCN-alpha": (86.19, 65.44, 55.18), "DQN-alpha": (92.11, 74.64, 66.37),
            ROWS[2]: (93.76, 85.05, 75.64), ROWS[3]: (94.41, 84.92, 75.85),
            "FCN-full": (91.42, 79.03, 68.93), "DQN-full": (94.55, 83.39, 74.63)}
PAPER_RWD = {"DQN-alpha": (54.762, 47.375, 46.510), ROWS[2]: (55.623, 50.472, 48.359),
             ROWS[3]: (55.894, 50.452, 48.373), "DQN-full": (56.192, 50.307, 48.154)}
PAPER_COLUMN = {"win2k": 0, "cooking": 1, "wikihow": 2}


@dataclass(frozen=True)
class ReproConfig(Config):
    data: str
    corpora: tuple[str, ...] = tuple(t2a.CORPORA)
    models: tuple[str, ...] = MODELS
    runs: int = 5
    folds: tuple[int, ...] = (0, 1, 2, 3, 4)
    preset: str = "paper"
    overrides: tuple[tuple[str, Any], ...] = ()  # TextConfig fields for every model
    seed: int = 0
    # Noise keys of the FedRL runs (the baselines release nothing): "seeded" / "secret"
    # (privrl.privacy.noise); None: seeded. Each run's privacy record states the mode.
    noise: str | None = None

    def validate(self) -> None:
        check_preset(self.preset, PRESETS)
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, what="noise mode")
        for m in self.models:
            one_of("models", m, MODELS, what="model")
        for f in self.folds:
            if f not in range(5):
                fail("folds", f"fold {f} is not one of 0-4")
        if not self.folds or len(set(self.folds)) != len(self.folds):
            fail("folds", "give distinct folds")
        for c in self.corpora:
            self.make(self.models[0], c)  # bad options fail here, before any training
            t2a.corpus_file(self.data, c)

    def make(self, model: str, corpus: str) -> TextConfig:
        noise = self.noise if model == "fedrl" else None
        return text_config(self.preset, mode=model, corpus=corpus, runs=self.runs,
                           seed=self.seed, noise=noise, **dict(self.overrides))


def _rows(model: str, summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    t = summary["test"]
    if model == "fedrl":
        return [(ROWS[2], t["test-noise"]), (ROWS[3], t["test-clean"])]
    return [(model.upper().replace("-ALPHA", "-alpha").replace("-FULL", "-full"), t["greedy"])]


def run_reproduction(cfg: ReproConfig, path: Path, log: Callable[[str], None] = print
                     ) -> dict[str, Any]:
    """Run (or resume) every (corpus, model) into `path`; writes table2.json / table2.md."""
    cfg = cfg.validate()
    open_sweep(path, cfg.to_dict())
    start = time.perf_counter()
    for corpus_name in cfg.corpora:
        corpus = t2a.load_corpus(cfg.data, corpus_name)
        for model in cfg.models:
            name = f"{corpus_name}-{model}"

            def write(tmp: Path, name: str = name, model: str = model,
                      corpus_name: str = corpus_name, corpus: Any = corpus) -> dict[str, Any]:
                run_cfg = cfg.make(model, corpus_name)
                folds, refs = run_cv(run_cfg, corpus, cfg.folds,
                                     log=lambda m: log(f"{name} {m}"))
                return save(run_cfg, folds, refs, tmp)

            summary = run_setting(path, name, write, log)
            if summary is None:
                continue
            log(f"{name}: {summary['wall_seconds']:.0f} s, test F1 " + ", ".join(
                f"{v} {100 * r['f1']:.2f} %" for v, r in summary["test"].items()))
    return write_table(cfg, path, time.perf_counter() - start)


def write_table(cfg: ReproConfig, path: Path, wall: float) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    reference: dict[str, dict[str, Any]] = {}
    for corpus_name in cfg.corpora:
        for model in cfg.models:
            f = path / "settings" / f"{corpus_name}-{model}" / "summary.json"
            if not f.exists():
                continue
            summary = json.loads(f.read_text())
            for row, r in _rows(model, summary):
                results.setdefault(row, {})[corpus_name] = {
                    "f1": 100 * r["f1"], "precision": 100 * r["precision"],
                    "recall": 100 * r["recall"], "avg_reward": r["avg_reward"],
                    "per_run_f1": r["per_run_f1"], "per_fold_f1": r["per_fold_f1"],
                    "epochs_run": summary["epochs_run"], "wall_seconds": summary["wall_seconds"]}
            for ref, r in summary["reference_taggings"].items():
                reference.setdefault(ref, {})[corpus_name] = {"f1": 100 * r["f1"],
                                                              "avg_reward": r["avg_reward"]}
    table = {"corpora": list(cfg.corpora), "runs": cfg.runs, "folds": list(cfg.folds),
             "preset": cfg.preset, "overrides": dict(cfg.overrides), "data": cfg.data,
             "results": results, "reference_taggings": reference, "paper_f1": PAPER_F1,
             "paper_avg_reward": PAPER_RWD, "wall_seconds": wall}
    write_json(path / "table2.json", table)
    (path / "table2.md").write_text(markdown(table))
    return table


def markdown(table: dict[str, Any]) -> str:
    corpora = table["corpora"]
    head = "| metric | model | " + " | ".join(
        f"{t2a.CORPORA[c]} ours | {t2a.CORPORA[c]} paper" for c in corpora)
    lines = [head + " |", "|---|---|" + "---:|---:|" * len(corpora)]
    for metric, paper, key, fmt in (("F1 %", PAPER_F1, "f1", "{:.2f}"),
                                    ("AvgRwd", PAPER_RWD, "avg_reward", "{:.3f}")):
        for row in ROWS:
            if row not in paper and row not in table["results"]:
                continue
            cells = []
            for c in corpora:
                r = table["results"].get(row, {}).get(c)
                cells.append(fmt.format(r[key]) if r else "not run")
                cells.append(fmt.format(paper[row][PAPER_COLUMN[c]]) if row in paper else "—")
            lines.append(f"| {metric} | {row} | " + " | ".join(cells) + " |")
        for ref, per in table["reference_taggings"].items():
            cells = []
            for c in corpora:
                r = per.get(c)
                cells += [fmt.format(r[key]) if r else "—", "—"]
            lines.append(f"| {metric} | {ref} (no learning) | " + " | ".join(cells) + " |")
    lines.append(f"\n{table['runs']} run(s) × folds {table['folds']} per cell, preset "
                 f"`{table['preset']}`, overrides {table['overrides'] or 'none'}; F1: mean over "
                 "folds, then runs; AvgRwd = total test reward / total test steps.")
    return "\n".join(lines) + "\n"
