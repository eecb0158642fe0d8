"""`privrl reproduce fedpg`: paper 004's comparison on CartPole-v1.

FedPG-Cen vs FedPG-Dec on each topology (ring, exponential, random) vs a single agent
(SVRPG/SCSG alone: Cen with K = 1), mean return against episodes per agent over several
seeds (mean line, min-max band), a table of the episodes each needs to reach a mean return of
475, and privatized variants (Gaussian and Laplace on what each agent sends) at a few ε. The
settings run as three jitted programs (`programs`: FedPG-Cen's, FedPG-Dec's, the single
agent's; privrl.systems.fedpg.local.run_fedpg_settings), each setting with its own run's
results, and each is written atomically to `settings/<name>/`, so an interrupted sweep resumes
without redoing finished settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.choices import NOISE_MODES
from privrl.compute.programs import program_groups
from privrl.config import NOISE_HELP, Config, integer, option, positive
from privrl.output import open_sweep, run_setting, save_setting, write_json
from privrl.systems.fedpg.algorithm import FedPGConfig

TOPOLOGY_ORDER = ("ring", "exponential", "random")


@dataclass(frozen=True)
class FedPGSweep(Config):
    trials: int = option(10, help="Trials per setting (the issue: 10).")
    budget: int = option(5000, flag="--episodes",
                         help="Episodes per agent over the run (FedPG-BR: 5000).")
    agents: int = option(10, help="K agents (FedPG-BR: 10).")
    seed: int = option(0, help="Random seed (shared by all settings).")
    gaussian_epsilons: tuple[float, ...] = option(
        (10.0, 100.0), help="Total ε per agent (δ = 1e-5, exact analytic Gaussian "
        "composition) of the Gaussian variants of FedPG-Cen and FedPG-Dec (ring); empty: "
        "none.")
    laplace_epsilons: tuple[float, ...] = option(
        (100.0,), flag="--laplace-epsilons-per-report", help="ε per release of the Laplace "
        "variants (each agent releases once per round; composed: ε × rounds); empty: none.")
    clip: float = option(1.0, help="Clip C of the private variants.")
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)

    def settings(self) -> dict[str, FedPGConfig]:
        base = dict(trials=self.trials, budget=self.budget, seed=self.seed)
        out = {"cen": FedPGConfig(algorithm="cen", agents=self.agents, **base)}
        for topo in TOPOLOGY_ORDER:
            out[f"dec-{topo}"] = FedPGConfig(algorithm="dec", topology=topo, agents=self.agents,
                                             **base)
        out["single"] = FedPGConfig(algorithm="cen", agents=1, **base)
        private = [("gaussian", e) for e in self.gaussian_epsilons]
        private += [("laplace", e) for e in self.laplace_epsilons]
        for mech, eps in private:
            # laplace_epsilons are per release; gaussian_epsilons each agent's total
            field = "epsilon" if mech == "gaussian" else "epsilon_per_report"
            opts = dict(mechanism=mech, clip=self.clip, agents=self.agents, noise=self.noise,
                        **{field: eps})
            out[f"cen-{mech}-eps{eps:g}"] = FedPGConfig(algorithm="cen", **opts, **base)
            out[f"dec-ring-{mech}-eps{eps:g}"] = FedPGConfig(algorithm="dec", topology="ring",
                                                              **opts, **base)
        return out

    def validate(self) -> None:
        integer("trials", self.trials)
        for name in ("gaussian_epsilons", "laplace_epsilons"):
            for eps in getattr(self, name):
                positive(name, eps)
        for cfg in self.settings().values():
            cfg.validate()


SweepLog = Callable[[str], None]


def programs(configs: dict[str, FedPGConfig], names: list[str], one_program: bool = True
             ) -> list[list[str]]:
    """`names` (of resolved `configs`) in the groups that run as one program: each joins the
    first group it can run with (`one_program_field`: FedPG-Cen's K-agent settings, FedPG-Dec's
    graphs and mechanisms; the single agent, K = 1, alone); each alone if not `one_program`."""
    from privrl.systems.fedpg.algorithm import one_program_field

    return program_groups(names, lambda g: one_program_field([configs[n] for n in g]),
                          one_program)


def run_sweep(cfg: FedPGSweep, out: Path, log: SweepLog = print,
              progress: Callable[[str, float, int], None] | None = None,
              one_program: bool = True) -> str:
    """Run (or resume) every setting into `out`; returns the tables as markdown.
    `one_program`: each group of `programs` as one jitted program (the same results per
    setting as its own run); False: each setting alone, in turn."""
    from privrl.systems.fedpg.algorithm import settings_algorithm
    from privrl.systems.fedpg.local import local_config, record, run_fedpg_settings

    cfg.validate()
    open_sweep(out, cfg.to_dict())
    configs = {n: local_config(c.resolved()) for n, c in cfg.settings().items()}
    todo = []
    for name in configs:
        if (out / "settings" / name / "summary.json").exists():
            log(f"{name}: done earlier, skipped")
        else:
            todo.append(name)
    for group in programs(configs, todo, one_program):
        label = group[0] if len(group) == 1 else f"{group[0]} + {len(group) - 1} settings"
        report = None if progress is None else (
            lambda done, total, label=label: progress(label, done, total))
        runs = run_fedpg_settings(settings_algorithm([configs[n] for n in group]),
                                  progress=report)
        for name, run in zip(group, runs, strict=True):
            def write(tmp: Path, run: Any = run) -> dict:
                np.savez_compressed(tmp / "curves.npz", mean_return=run.mean_return,
                                    used_before=run.used_before, batch=run.batch,
                                    inner_steps=run.inner_steps)
                return save_setting(record(run), tmp)

            summary = run_setting(out, name, write, log)
            assert summary is not None
            med = summary["median_episodes_to_target"]
            where = "" if run.program is None else f" (one program of {len(group)})"
            log(f"{name}: {summary['reached_target']}/{run.config.trials} reached 475, median "
                f"{'never' if med is None else f'{med:.0f}'} episodes/agent, "
                f"{summary['wall_seconds']:.0f} s{where}")
    return write_report(cfg, out)


def _load(out: Path, name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    d = out / "settings" / name
    z = np.load(d / "curves.npz", allow_pickle=False)
    return {k: z[k] for k in z.files}, json.loads((d / "summary.json").read_text())


def short_privacy(summary: dict[str, Any]) -> str:
    """A table cell from the run's own headline (privrl.privacy.record): its whole-run claim and
    its release's ε labelled per release."""
    line = summary["privacy"]
    if summary["mechanism"] == "none" or line.startswith("NO PRIVACY GUARANTEE"):
        return "none"
    claim = line.split(" for ", 1)[0]
    per = line.partition("; per release ")[2].split(";")[0].split(" [")[0]
    return claim + (f", per release {per}" if per else "")


def table_markdown(cfg: FedPGSweep, summaries: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| setting | K | privacy (per agent, whole run) | seeds reaching 475 | "
        "median episodes/agent to 475 | final mean return (mean ± sd over seeds) | "
        "rounds/s | episodes/s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in summaries.items():
        med = s["median_episodes_to_target"]
        final = np.asarray(s["final_mean_return"], float)
        lines.append(
            f"| {name} ({s['label']}) | {s['agents']} | {short_privacy(s)} | "
            f"{s['reached_target']}/{s['trials']} | "
            f"{'never' if med is None else f'{med:,.0f}'} | "
            f"{final.mean():.0f} ± {final.std():.0f} | {s['rounds_per_second']:.1f} | "
            f"{s['episodes_per_second']:,.0f} |")
    head = [f"# FedPG on CartPole-v1 (paper 004): {cfg.trials} seeds, {cfg.budget:,} episodes "
            f"per agent, K = {cfg.agents}", "",
            "Episodes to 475: episodes per agent spent before the first round whose batch "
            "(the K·B_t episodes at θ₀ᵗ, or each node's B_t at z_k) has mean return ≥ 475; "
            "the median is over seeds (never: fewer than half reached it). Final mean return: "
            "the batches of the last 10 rounds. rounds/s (after the first round, which compiles) "
            "and episodes/s (all episodes played / wall time incl. compilation): of the "
            "program each setting ran in, on this machine (by default FedPG-Cen's settings "
            "run as one program, FedPG-Dec's as another; --per-setting: each alone).",
            ""]
    return "\n".join(head + lines) + "\n"


def write_report(cfg: FedPGSweep, out: Path) -> str:
    from privrl.systems.fedpg.local import plot_returns

    names = list(cfg.settings())
    missing = [n for n in names if not (out / "settings" / n / "summary.json").exists()]
    if missing:
        raise RuntimeError(f"settings not finished: {', '.join(missing)}")
    loaded = {n: _load(out, n) for n in names}
    summaries = {n: s for n, (_, s) in loaded.items()}
    text = table_markdown(cfg, summaries)
    (out / "tables.md").write_text(text)
    write_json(out / "tables.json", summaries)
    write_json(out / "privacy.json", {
        n: json.loads((out / "settings" / n / "privacy.json").read_text()) for n in names})

    def as_run(name: str) -> tuple[np.ndarray, np.ndarray]:
        curves, _ = loaded[name]
        return curves["used_before"], curves["mean_return"]

    public = [n for n in names if summaries[n]["mechanism"] == "none"]
    private = ["cen", "dec-ring"] + [n for n in names if summaries[n]["mechanism"] != "none"]
    clip = f"clip C = {cfg.clip:g}"
    plot_returns(out / "plots" / "returns.png",
                 {f"{n}: {summaries[n]['label']}": as_run(n) for n in public}, cfg.budget,
                 f"FedPG on CartPole-v1, K = {cfg.agents}, no privacy (as in the paper)")
    plot_returns(out / "plots" / "private.png", {n: as_run(n) for n in private}, cfg.budget,
                 f"FedPG with a mechanism on what each agent sends, {clip}")
    return text
