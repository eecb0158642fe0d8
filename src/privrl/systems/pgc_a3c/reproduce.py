"""`privrl reproduce pgc-a3c`: paper 000's sweep (Tables 1-3, Figures 2-3) beside the paper.

Settings: Laplace (paper: |B| = 1, C = 0.01) and PRS (|B| = 100, C = 1) at ε ∈ {1, 2, 5, 10},
plus the non-private run (ε = ∞), K trials each, capped at N submissions. The settings differ
only in numbers (mechanism family, ε, clip, |B|, d̂), so by default all trials of all settings
run as one jitted, sharded program (`local.run_pgc_a3c_settings`), each trial with its
setting's parameters as data, its own run's keys, and its setting's own ledger: every setting's
results equal its own run's, at a fraction of the cost (benchmarks/RESULTS.md). Settings that
cannot join (PrivUnit2/PrivUnitG sample on the host) run alone, as does every setting with
`one_program=False`. A trial retires once its FST is known, so finished trials cost nothing.
Each finished setting is written atomically to `settings/<name>/`, so an interrupted sweep
resumes without redoing finished settings (the one program writes its settings at its end).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.choices import NOISE_MODES
from privrl.compute.programs import program_groups
from privrl.config import NOISE_HELP, Config, fail, integer, option, positive
from privrl.output import open_sweep, run_setting, save_setting, write_json
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
from privrl.systems.pgc_a3c.metrics import (
    first_success_time,
    held_moving_average,
    median_fst,
    relative_auc,
    success_ratio_curve,
)

# Paper 000, Tables 1-3 (K = 20 trials, cap 90,000 submissions).
PAPER_EPSILONS = (1.0, 2.0, 5.0, 10.0)
PAPER_TABLES: dict[str, dict[str, dict[float, float]]] = {
    "median_fst": {
        "laplace": {1.0: 18377.0, 2.0: 20238.5, 5.0: 5714.5, 10.0: 4055.0, math.inf: 1769.0},
        "prs": {1.0: 25226.5, 2.0: 7549.0, 5.0: 2656.5, 10.0: 11217.5},
    },
    "success_ratio": {
        "laplace": {1.0: 0.80, 2.0: 0.90, 5.0: 1.00, 10.0: 1.00, math.inf: 1.0},
        "prs": {1.0: 0.85, 2.0: 0.95, 5.0: 0.90, 10.0: 0.90},
    },
    "relative_auc": {
        "laplace": {1.0: 0.673, 2.0: 0.711, 5.0: 0.909, 10.0: 0.965, math.inf: 1.0},
        "prs": {1.0: 0.660, 2.0: 0.862, 5.0: 0.835, 10.0: 0.771},
    },
}
TABLE_TITLES = {
    "median_fst": "Table 1: median FST (first submission n with μ_n ≥ 195; ∞ if never)",
    "success_ratio": "Table 2: success ratio (trials with FST ≤ cap)",
    "relative_auc": "Table 3: relative AUC of the success-ratio curve against ε = ∞",
}
MECHANISM_LABEL = {"laplace": "Lap", "prs": "PRS", "privunit": "PrivUnit2",
                   "privunitg": "PrivUnitG", "projunit": "ProjUnit",
                   "privunitg-seed": "PrivUnitG-seed"}


@dataclass(frozen=True)
class Setting:
    mechanism: str  # laplace | prs | none
    epsilon: float  # inf for none

    @property
    def name(self) -> str:
        if self.mechanism == "none":
            return "none-epsinf"
        return f"{self.mechanism}-eps{self.epsilon:g}"


@dataclass(frozen=True)
class SweepConfig(Config):
    preset: str = option(
        "paper", help="paper: the paper's settings; paper-code: the paper's settings with TF1 "
        "RMSProp at the aggregator and reward -1 on a fall; tuned: our improved preset; "
        "tuned-ldp, tuned-ldp2: tuned for small ε.")
    trials: int = option(20, help="Trials per setting (paper: 20).")
    cap: int = option(90_000, flag="--submissions", help="Submissions per trial (paper: 90000).")
    seed: int = option(0, help="Random seed (shared by all settings).")
    retire: bool = option(
        True, help="Stop a trial once it reaches the target (its FST is known); later curves "
        "hold its last average score.")
    epsilons: tuple[float, ...] = option(
        PAPER_EPSILONS, flag="--epsilon", help="Agent budgets ε swept: each agent's total ε "
        "over the run (the paper's: 1,2,5,10).")
    mechanisms: tuple[str, ...] = option(
        ("laplace", "prs"), listed=True, help="Mechanisms swept: laplace, prs (the paper's), "
        "privunit, privunitg.")
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)

    def settings(self) -> list[Setting]:
        out = [Setting("none", math.inf)]
        out += [Setting(m, e) for m in self.mechanisms for e in self.epsilons]
        return out

    def run_config(self, s: Setting) -> PGCA3CConfig:
        return PGCA3CConfig.from_preset(
            self.preset, mechanism=s.mechanism,
            epsilon=None if s.mechanism == "none" else s.epsilon,
            trials=self.trials, submissions=self.cap, seed=self.seed,
            noise=None if s.mechanism == "none" else self.noise,
        ).resolved()

    def validate(self) -> None:
        integer("trials", self.trials)
        integer("cap", self.cap, 10)
        if not self.mechanisms or not self.epsilons:
            fail("mechanisms" if not self.mechanisms else "epsilons", "give at least one")
        for m in self.mechanisms:
            if m not in MECHANISM_LABEL:
                fail("mechanisms", f"unknown mechanism {m!r}; one of "
                                   f"{', '.join(MECHANISM_LABEL)}")
        for e in self.epsilons:
            positive("epsilons", e)
        for s in self.settings():
            self.run_config(s)  # validates every setting before anything runs


SweepProgress = Callable[[str, int, int], None]  # (setting name, done, total) submissions


# --- running ---------------------------------------------------------------------------------
def run_sweep(cfg: SweepConfig, out: Path, progress: SweepProgress | None = None,
              log: Callable[[str], None] = print, one_program: bool = True) -> dict[str, Any]:
    """Run (or resume) the sweep into `out`; returns the tables as a dict. `one_program`
    (default): the unfinished settings that can run as one program do (same results as
    running each alone, `local.run_pgc_a3c_settings`); False: each setting alone, in turn."""
    from privrl.systems.pgc_a3c import local
    from privrl.systems.pgc_a3c.algorithm import one_program_field

    cfg.validate()
    open_sweep(out, cfg.to_dict())
    settings = cfg.settings()
    total = len(settings) * cfg.cap
    finished = 0  # settings accounted for in the progress

    def save(s: Setting, result: Any) -> None:
        def write(tmp: Path) -> dict[str, Any]:
            np.savez_compressed(tmp / "scores.npz", scores=result.scores,
                                submitted=result.submitted)
            return save_setting(local.record(result), tmp)

        summary = run_setting(out, s.name, write, log)
        assert summary is not None
        med = summary["median_fst"]
        alone = "" if result.program else f", {summary['wall_seconds']:.0f} s"
        log(f"{s.name}: median FST {'∞' if med is None else f'{med:g}'}, success "
            f"{summary['success_ratio']:.2f}{alone}")

    def reporter(name: str, width: int) -> Callable[[int, int], None]:
        offset = finished * cfg.cap

        def report(done: int, cap: int) -> None:
            if progress:
                progress(name, offset + done * width, total)
        return report

    pending = []
    for s in settings:
        if (out / "settings" / s.name / "summary.json").exists():
            log(f"{s.name}: done earlier, skipped")
            finished += 1
            if progress:
                progress(s.name, finished * cfg.cap, total)
        else:
            pending.append(s)
    configs = {s: cfg.run_config(s) for s in pending}
    for group in program_groups(
            pending, lambda g: one_program_field([configs[s] for s in g]), one_program):
        if len(group) == 1:
            save(group[0], local.run_pgc_a3c(configs[group[0]],
                                             progress=reporter(group[0].name, 1),
                                             retire_on_success=cfg.retire))
            finished += 1
            continue
        name = f"{len(group)} settings as one program"
        results = local.run_pgc_a3c_settings(
            [configs[s] for s in group], progress=reporter(name, len(group)),
            retire_on_success=cfg.retire)
        for s, result in zip(group, results, strict=True):
            save(s, result)
        finished += len(group)
        log(f"one program for {', '.join(s.name for s in group)}: "
            f"{results[0].wall_seconds:.0f} s")
    return write_report(cfg, out)


# --- reporting -------------------------------------------------------------------------------
def _load(out: Path, s: Setting) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    d = out / "settings" / s.name
    z = np.load(d / "scores.npz", allow_pickle=False)
    summary = json.loads((d / "summary.json").read_text())
    scores = z["scores"].astype(np.float64)
    if np.issubdtype(z["scores"].dtype, np.integer):  # written when scores were lengths
        scores[z["scores"] < 0] = np.nan  # -1 marked "no submission"
    return scores, z["submitted"], summary


def compute_tables(cfg: SweepConfig, fst: dict[str, np.ndarray]) -> dict[str, Any]:
    """Our Tables 1-3 from each setting's per-trial FST (inf = never reached)."""
    ref = success_ratio_curve(fst["none-epsinf"], cfg.cap)
    tables: dict[str, Any] = {"median_fst": {}, "success_ratio": {}, "relative_auc": {}}
    for s in cfg.settings():
        f = fst[s.name]
        curve = success_ratio_curve(f, cfg.cap)
        row = "laplace" if s.mechanism == "none" else s.mechanism  # ε = ∞ sits in the Lap row
        for t in tables.values():
            t.setdefault(row, {})
        tables["median_fst"][row][s.epsilon] = median_fst(f)
        tables["success_ratio"][row][s.epsilon] = float(np.mean(np.isfinite(f)))
        tables["relative_auc"][row][s.epsilon] = relative_auc(curve, ref)
    return tables


def _fmt(table: str, value: float | None) -> str:
    if value is None:
        return "∞"
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return {"median_fst": f"{value:.1f}", "success_ratio": f"{value:.2f}"}.get(
        table, f"{value:.3f}")


def tables_markdown(cfg: SweepConfig, tables: dict[str, Any]) -> str:
    eps_cols = [*cfg.epsilons, math.inf]
    head = "| 𝒬 | " + " | ".join("ε = ∞" if math.isinf(e) else f"ε = {e:g}"
                                  for e in eps_cols) + " |"
    sep = "|---|" + "---:|" * len(eps_cols)
    lines = [f"# PGC-A3C: paper 000 Tables 1-3 beside privrl ({cfg.preset} preset)", "",
             f"{cfg.trials} trials per setting, cap {cfg.cap:,} submissions, seed {cfg.seed}. "
             "Paper: K = 20 trials, cap 90,000. ∞: never reached within the cap.", ""]
    for key, title in TABLE_TITLES.items():
        lines += [f"## {title}", "", head, sep]
        for mech in cfg.mechanisms:
            paper = PAPER_TABLES[key].get(mech)  # None: a mechanism the paper did not run
            ours = tables[key].get(mech, {})
            label = MECHANISM_LABEL.get(mech, mech)
            if paper is not None:
                lines.append(f"| {label} (paper) | " + " | ".join(
                    _fmt(key, paper[e]) if e in paper else "" for e in eps_cols) + " |")
            lines.append(f"| {label} (privrl) | " + " | ".join(
                _fmt(key, ours[e]) if e in ours else "" for e in eps_cols) + " |")
        lines.append("")
    if any(math.isnan(v) for v in tables["relative_auc"].get("laplace", {}).values()):
        lines.append("Relative AUC is n/a where the ε = ∞ run never succeeded (zero area).")
    return "\n".join(lines) + "\n"


def write_report(cfg: SweepConfig, out: Path) -> dict[str, Any]:
    """tables.md, raw/trials.csv, privacy.json and plots/ from the finished settings."""
    settings = cfg.settings()
    missing = [s.name for s in settings
               if not (out / "settings" / s.name / "summary.json").exists()]
    if missing:
        raise RuntimeError(f"settings not finished: {', '.join(missing)}")
    loaded = {s.name: _load(out, s) for s in settings}
    fst = {name: first_success_time(sc, 195.0, 10) for name, (sc, _, _) in loaded.items()}
    tables = compute_tables(cfg, fst)
    (out / "tables.md").write_text(tables_markdown(cfg, tables))
    write_json(out / "tables.json", {"ours": tables, "paper": PAPER_TABLES})

    (out / "raw").mkdir(exist_ok=True)
    with (out / "raw" / "trials.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setting", "mechanism", "epsilon", "trial", "fst", "success", "submitted",
                    "mean_score"])
        for s in settings:
            sc, sub, _ = loaded[s.name]
            for k in range(sc.shape[0]):
                ok = math.isfinite(fst[s.name][k])
                w.writerow([s.name, s.mechanism, s.epsilon, k,
                            int(fst[s.name][k]) if ok else "", int(ok), int(sub[k]),
                            f"{sc[k, :sub[k]].mean():.2f}"])
    write_json(out / "privacy.json", {
        s.name: json.loads((out / "settings" / s.name / "privacy.json").read_text())
        for s in settings
    })
    plot_sweep(cfg, loaded, fst, out / "plots")
    return tables


def plot_sweep(cfg: SweepConfig, loaded: dict[str, Any], fst: dict[str, np.ndarray],
               plots: Path) -> None:
    """Figure 2 (average score vs submissions) and Figure 3 (success ratio), per mechanism."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots.mkdir(parents=True, exist_ok=True)
    step = max(1, cfg.cap // 2000)
    ref = Setting("none", math.inf)
    for mech in cfg.mechanisms:
        series = [Setting(mech, e) for e in cfg.epsilons] + [ref]
        fig, ax = plt.subplots(figsize=(7, 4))
        for s in series:
            sc, sub, _ = loaded[s.name]
            mu = held_moving_average(sc, sub, 10).mean(0)
            label = "ε = ∞ (non-private)" if s.mechanism == "none" else f"ε = {s.epsilon:g}"
            ax.plot(np.arange(1, mu.size + 1)[::step], mu[::step], lw=1, label=label)
        ax.axhline(195, color="k", ls="--", lw=0.8)
        ax.set(xlabel="submissions",
               ylabel="mean return of 10 consecutive episodes\n(the paper's μ_n; mean over trials)",
               title=f"PGC-A3C {MECHANISM_LABEL.get(mech, mech)} ({cfg.preset}): average score "
                     "(trials held after success)", ylim=(0, 205))
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plots / f"fig2_average_score_{mech}.png", dpi=120)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4))
        n = np.arange(1, cfg.cap + 1)
        for s in series:
            curve = success_ratio_curve(fst[s.name], cfg.cap)
            label = "ε = ∞ (non-private)" if s.mechanism == "none" else f"ε = {s.epsilon:g}"
            ax.step(n[::step], curve[::step], where="post", lw=1.2, label=label)
        ax.set(xlabel="submissions", ylabel="success ratio", ylim=(-0.02, 1.02),
               title=f"PGC-A3C {MECHANISM_LABEL.get(mech, mech)} ({cfg.preset}): success ratio "
                     "(Fig. 3)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plots / f"fig3_success_ratio_{mech}.png", dpi=120)
        plt.close(fig)
