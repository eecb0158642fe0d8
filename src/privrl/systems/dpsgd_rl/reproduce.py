"""`privrl reproduce dpsgd-rl`: paper 003's noise-level study, now with the ε each point costs.

DP-SGD σ ∈ {0, 0.1, 0.2, 0.4, 0.6} for REINFORCE and DQN, LDP σ ∈ {0, 0.01, 0.1, 0.2, 0.3, 2, 5}
(σ·IQR observation noise) for both; several seeds each. Per setting: reward-vs-episode curves
(the slides' Figures 8 and 12) and episodes until solved against σ (Figures 9 and 13), with the
accountant's ε for DP-SGD and "no formal ε" for σ·IQR noise, which has none.

REINFORCE's settings differ only in numbers (DP-SGD's σ, on or off; the observation noise's
σ), so all of them run as one jitted program (`Reinforce.for_settings`), every setting getting
the floats of its own run; DQN's run as two (`DQN.for_settings`): DP-SGD's σ, and the
observation noise's (non-private DQN samples and steps differently). Each setting is written to
settings/<name>/ when its program finishes (atomically), so an interrupted sweep resumes with
the settings it has not written.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.compute.programs import program_groups
from privrl.config import NOISE_HELP, Config, fail, integer, one_of, option
from privrl.output import open_sweep, plot_curves
from privrl.privacy.noise import NOISE_MODES
from privrl.systems.dpsgd_rl.config import ObservationPrivacy
from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
from privrl.systems.dpsgd_rl.local import (
    EpisodicOutput,
    final_eval_mean,
    run_episodic_settings,
    save,
)
from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

DP_SIGMAS = (0.0, 0.1, 0.2, 0.4, 0.6)
LDP_SIGMAS = (0.0, 0.01, 0.1, 0.2, 0.3, 2.0, 5.0)
# What the slides report (read off their text and figures; approximate).
SLIDES = {
    "reinforce": "non-private ~180 episodes; DP-SGD stopping point ~400 (small σ) → ~1,000 at "
                 "σ = 0.6; LDP unaffected up to σ = 0.3, fails at σ = 5",
    "dqn": "non-private ~350 episodes",
}


@dataclass(frozen=True)
class Setting:
    algorithm: str  # "reinforce" | "dqn"
    kind: str  # "dp" | "ldp"
    sigma: float

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.algorithm}-sigma{self.sigma:g}"


@dataclass(frozen=True)
class SweepConfig(Config):
    seeds_reinforce: int = option(5, flag="--trials-reinforce",
                                  help="Trials per REINFORCE setting.")
    seeds_dqn: int = option(3, flag="--trials-dqn", help="Trials per DQN setting.")
    episodes: int = option(1000, help="Training episodes at most (stops when solved).")
    seed: int = option(0, help="Random seed (shared by all settings).")
    clip_reinforce: float = option(1.0, help="C of the REINFORCE settings.")
    clip_dqn: float = option(10.0, help="C of the DQN settings.")
    delta: float = option(1e-5, help="δ of the stated (ε, δ), in (0, 1).")
    algorithms: tuple[str, ...] = option(("reinforce", "dqn"), listed=True,
                                         help="The algorithms swept: reinforce, dqn.")
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)

    def validate(self) -> None:
        integer("seeds_reinforce", self.seeds_reinforce)
        integer("seeds_dqn", self.seeds_dqn)
        if self.episodes < 25:
            fail("episodes", "need at least 25 episodes (the solve window)")
        for a in self.algorithms:
            one_of("algorithms", a, ("reinforce", "dqn"), what="algorithm")
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, what="noise mode")

    def settings(self) -> list[Setting]:
        out = []
        for alg in self.algorithms:
            out += [Setting(alg, "dp", s) for s in DP_SIGMAS]
            out += [Setting(alg, "ldp", s) for s in LDP_SIGMAS]
        return out

    def make(self, s: Setting) -> Any:
        common = {"seeds": self.seeds_reinforce if s.algorithm == "reinforce" else self.seeds_dqn,
                  "episodes": self.episodes, "seed": self.seed, "delta": self.delta,
                  "noise": self.noise}
        if s.kind == "dp":
            clip = self.clip_reinforce if s.algorithm == "reinforce" else self.clip_dqn
            common.update(dp=True, noise_multiplier=s.sigma, clip=clip)
        else:
            common.update(obs=ObservationPrivacy(mode="sigma", sigma=s.sigma))
        if s.algorithm == "reinforce":
            return Reinforce(ReinforceConfig.from_preset("paper", **common))
        return DQN(DQNConfig.from_preset("paper", **common))


ProgressFn = Callable[[str, int, int], None]


def programs(settings: list[Setting], one_program: bool = True) -> list[list[Setting]]:
    """`settings` in the groups that run as one program: REINFORCE's all together (they
    differ only in numbers), DQN's in two, DP-SGD's and the observation noise's (a DP-SGD DQN
    samples its batches and steps differently from a non-private one); each alone if not
    `one_program`."""
    def program(s: Setting) -> tuple[str, str]:
        return s.algorithm, s.kind if s.algorithm == "dqn" else ""

    return program_groups(
        settings, lambda g: None if len({program(s) for s in g}) == 1 else "algorithm",
        one_program)


def run_sweep(cfg: SweepConfig, path: Path, progress: ProgressFn | None = None,
              log: Callable[[str], None] = print, one_program: bool = True) -> None:
    """Run (or resume) the sweep into `path`. `one_program`: each group of `programs` as one
    jitted program (the same results per setting); False: each setting alone, in turn."""
    open_sweep(path, cfg.to_dict())  # resuming: refused if the sweep's options differ
    settings = cfg.settings()
    todo = [s for s in settings if not (path / "settings" / s.name / "summary.json").is_file()]
    done = len(settings) - len(todo)
    for group in programs(todo, one_program):
        algos = [cfg.make(s) for s in group]
        names = [f"{s.kind}-{s.algorithm}" for s in group]
        algo = type(algos[0]).settings_algorithm([a.config for a in algos])
        outs = run_episodic_settings(algo, names, progress=_progress(
            progress, group, done, len(settings)))
        done += len(group)
        for s, out in zip(group, outs, strict=True):
            _write_setting(path, s, out, log)
    write_report(cfg, path)


def _progress(progress: ProgressFn | None, group: list[Setting], before: int, total: int
              ) -> Callable[[int, int], None] | None:
    """A program's progress (episodes d of t, for each of its settings) as the sweep's, in
    setting-episodes, after `before` settings."""
    if progress is None:
        return None
    kinds = {s.kind for s in group}
    label = group[0].name if len(group) == 1 else (
        f"{group[0].kind + '-' if len(kinds) == 1 else ''}{group[0].algorithm} "
        f"({len(group)} settings)")
    return lambda d, t: progress(label, before * t + len(group) * d, total * t)


def _write_setting(path: Path, s: Setting, out: EpisodicOutput,
                   log: Callable[[str], None]) -> None:
    """settings/<name>/: the setting's run directory, written whole or not at all."""
    final = path / "settings" / s.name
    tmp = path / "settings" / f".{s.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    summary = save(out, tmp, command=["privrl", "reproduce", "dpsgd-rl"])
    np.save(tmp / "eval_returns.npy", out.eval_returns)
    tmp.rename(final)
    solved = summary["median_episodes_to_solve"]
    where = "" if out.program is None else f" (one program of {out.program['settings']})"
    log(f"{s.name}: solved {summary['solved_seeds']}/{summary['seeds']}, median episodes "
        f"{solved if solved is not None else '—'}, ε {_eps_text(summary, s)}, "
        f"{summary['wall_seconds']:.0f} s{where}")


def _eps_text(summary: dict[str, Any], s: Setting) -> str:
    if s.sigma == 0:
        return "∞ (no noise)"
    if s.kind == "ldp":
        return "no formal ε (σ·IQR noise on unbounded states)"
    return f"{summary['dpsgd_epsilon']:.3g}"


def collect(cfg: SweepConfig, path: Path) -> list[dict[str, Any]]:
    rows = []
    for s in cfg.settings():
        d = path / "settings" / s.name
        if not (d / "summary.json").is_file():
            continue
        summary = json.loads((d / "summary.json").read_text())
        rows.append({"setting": s, "summary": summary,
                     "eval_returns": np.load(d / "eval_returns.npy", allow_pickle=False)})
    return rows


def write_report(cfg: SweepConfig, path: Path) -> str:
    rows = collect(cfg, path)
    lines = ["# paper 003 (DP-SGD and LDP for REINFORCE and DQN): noise level → ε and "
             "episodes until solved", "",
             f"CartPole-v1, solved = mean of 25 consecutive greedy evaluation episodes ≥ 475, "
             f"at most {cfg.episodes} training episodes; DP-SGD: C = {cfg.clip_reinforce:g} "
             f"(REINFORCE), {cfg.clip_dqn:g} (DQN), "
             f"δ = {cfg.delta:g}, accountant pld (exact analytic Gaussian for REINFORCE, "
             "dp-accounting's PLD for DQN). Episodes until solved: median over the seeds "
             "that solved (solved/seeds); — if none.", ""]
    for alg in cfg.algorithms:
        lines += [f"## {alg.upper() if alg == 'dqn' else 'REINFORCE'}", "",
                  f"The slides: {SLIDES[alg]}.", "",
                  f"| noise | σ | ε (δ = {cfg.delta:g}) | solved | median episodes to solve | "
                  "mean of the last 25 eval returns |", "|---|---|---|---|---|---|"]
        for r in rows:
            s, sm = r["setting"], r["summary"]
            if s.algorithm != alg:
                continue
            med = sm["median_episodes_to_solve"]
            final = final_eval_mean(r["eval_returns"])
            lines.append(
                f"| {'DP-SGD' if s.kind == 'dp' else 'LDP σ·IQR'} | {s.sigma:g} | "
                f"{_eps_text(sm, s)} | {sm['solved_seeds']}/{sm['seeds']} | "
                f"{'—' if med is None else f'{med:g}'} | "
                f"{'—' if final is None else f'{final:.0f}'} |")
        lines.append("")
    text = "\n".join(lines)
    (path / "tables.md").write_text(text)
    plot_sweep(rows, path / "plots", cfg)
    return text


def plot_sweep(rows: list[dict[str, Any]], plots: Path, cfg: SweepConfig) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for alg in cfg.algorithms:
        for kind in ("dp", "ldp"):
            sel = [r for r in rows if r["setting"].algorithm == alg and r["setting"].kind == kind]
            if not sel:
                continue
            label = "DP-SGD" if kind == "dp" else "LDP σ·IQR"
            curves = {}
            for r in sel:
                eps = r["summary"].get("dpsgd_epsilon")
                tag = f"σ = {r['setting'].sigma:g}" + (
                    f" (ε = {eps:.3g})" if kind == "dp" and eps is not None else "")
                curves[tag] = r["eval_returns"]
            plot_curves(plots / f"{kind}-{alg}-returns.png", curves,
                        f"{label} {alg}: evaluation return per episode (held after solving)",
                        "training episode", "evaluation return", 475.0)
            fig, ax = plt.subplots(figsize=(6, 3.5))
            for r in sel:
                sig = r["setting"].sigma
                ep = [e if e is not None else math.nan
                      for e in r["summary"]["episodes_to_solve"]]
                x = np.full(len(ep), max(sig, 1e-3))
                ax.scatter(x, [cfg.episodes * 1.05 if math.isnan(e) else e for e in ep],
                           c=["tab:red" if math.isnan(e) else "tab:blue" for e in ep], s=14)
            ax.set_xscale("log")
            ax.axhline(cfg.episodes, color="k", lw=0.6, ls=":")
            ax.set_xlabel("σ (σ = 0 drawn at 1e-3)")
            ax.set_ylabel("episodes until solved")
            ax.set_title(f"{label} {alg}: red = not solved within {cfg.episodes}", fontsize=9)
            fig.tight_layout()
            fig.savefig(plots / f"{kind}-{alg}-episodes-to-solve.png", dpi=120)
            plt.close(fig)
