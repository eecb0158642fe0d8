"""`privrl reproduce dp-qlearning`: paper 001's experiment, the σ sweep on the 1-D task.

σ ∈ {0, 0.2, 0.4, 0.6, 0.8, 1.0}, 10 seeds, 100 episodes each (the authors' settings). σ = 0 is
the non-private baseline. Beside them: a uniformly random policy and the optimal policy's
expected return (value iteration on a fine discretization, checked by Monte Carlo). All 60 runs
are one jitted, vmapped program. The poster prints no numbers (its results are a figure), so
there is no paper column; docs/dp-qlearning.md says what we can and cannot compare.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from privrl.choices import NOISE_MODES
from privrl.config import NOISE_HELP, Config, fail, option
from privrl.envs.line1d import optimal_return, policy_return, random_policy, table_policy
from privrl.output import versions, write_json
from privrl.systems.dp_qlearning.algorithm import DPQLearningConfig, privacy_record
from privrl.systems.dp_qlearning.local import (
    FINAL_EPISODES,
    final_returns,
    plot_returns,
    train_grid,
)

PAPER_SIGMAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
BASELINE_EPISODES = 20_000  # Monte Carlo episodes for the random and optimal policies


@dataclass(frozen=True)
class DPQLSweepConfig(Config):
    seeds: int = option(10, flag="--trials", help="Trials per σ (authors: 10).")
    episodes: int = option(100, help="Episodes per run (authors: 100).")
    seed: int = option(0, help="Random seed (shared by all settings).")
    sigmas: tuple[float, ...] = option(PAPER_SIGMAS, cli=False, help="The σ swept.")
    # Each run's privacy record states its noise keys' mode (None: seeded).
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)

    def run_config(self, sigma: float) -> DPQLearningConfig:
        return DPQLearningConfig(sigma=sigma, seeds=self.seeds, episodes=self.episodes,
                                 seed=self.seed, noise=self.noise).resolved()

    def validate(self) -> None:
        if not self.sigmas:
            fail("sigmas", "give at least one σ")
        for s in self.sigmas:
            self.run_config(s)


def reference_returns(seed: int) -> dict[str, Any]:
    """Random policy (Monte Carlo) and the optimal policy (value iteration, Monte Carlo check)."""
    v_opt, first = optimal_return()
    k_rand, k_opt = jax.random.split(jax.random.key(seed + 1_000_003))
    rand = policy_return(random_policy, k_rand, BASELINE_EPISODES)
    opt_mc = policy_return(table_policy(first), k_opt, BASELINE_EPISODES)
    se = lambda r: float(r.std(ddof=1) / np.sqrt(r.size))  # noqa: E731
    return {"optimal_value_iteration": v_opt,
            "optimal_policy_monte_carlo": float(opt_mc.mean()), "optimal_policy_mc_se": se(opt_mc),
            "random_policy": float(rand.mean()), "random_policy_se": se(rand),
            "monte_carlo_episodes": BASELINE_EPISODES,
            "method": "backward induction over 50 steps on a 1001-point state grid with the "
                      "U(0, 0.25) move by a 200-point midpoint rule (linear interpolation); the "
                      "Monte Carlo check plays the grid's optimal first action at every step"}


def run_sweep(cfg: DPQLSweepConfig, out: Path, log: Any = print) -> dict[str, Any]:
    cfg.validate()
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "sweep.json", {"sweep": cfg.to_dict(), "versions": versions(),
                                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    returns, wall, _ = train_grid(cfg.run_config(cfg.sigmas[0]), list(cfg.sigmas))
    log(f"{len(cfg.sigmas)} σ × {cfg.seeds} seeds × {cfg.episodes} episodes: {wall:.0f} s "
        "(one jitted program, including compilation)")
    refs = reference_returns(cfg.seed)
    (out / "raw").mkdir(exist_ok=True)
    np.savez_compressed(out / "raw" / "returns.npz", returns=returns,
                        sigmas=np.asarray(cfg.sigmas))
    with (out / "raw" / "returns.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sigma", "seed", "episode", "return"])
        for i, s in enumerate(cfg.sigmas):
            for k in range(cfg.seeds):
                for e in range(cfg.episodes):
                    w.writerow([s, k, e, f"{returns[i, k, e]:.4f}"])
    write_json(out / "privacy.json",
               {f"sigma={s:g}": privacy_record(cfg.run_config(s)) for s in cfg.sigmas})
    rows = []
    for i, s in enumerate(cfg.sigmas):
        final = final_returns(returns[i])
        rows.append({"sigma": s, "final_mean_return": float(final.mean()),
                     "final_sd_over_seeds": float(final.std(ddof=1)) if final.size > 1 else 0.0,
                     "mean_return_all_episodes": float(returns[i].mean()),
                     "privacy": "none (non-private baseline)" if s == 0 else "no ε claimed"})
    tables = {"rows": rows, "references": refs, "wall_seconds": wall,
              "final_episodes": FINAL_EPISODES}
    write_json(out / "tables.json", tables)
    (out / "tables.md").write_text(tables_markdown(cfg, tables))
    curves = {("σ = 0 (non-private)" if s == 0 else f"σ = {s:g}"): returns[i]
              for i, s in enumerate(cfg.sigmas)}
    plot_returns(out / "plots" / "returns.png", curves,
                 f"DP Q-learning, 1-D task: mean over {cfg.seeds} seeds, interquartile band",
                 {f"optimal ({refs['optimal_value_iteration']:.2f})":
                  refs["optimal_value_iteration"],
                  f"random policy ({refs['random_policy']:.2f})": refs["random_policy"]})
    return tables


def tables_markdown(cfg: DPQLSweepConfig, tables: dict[str, Any]) -> str:
    refs = tables["references"]
    lines = [
        "# DP Q-learning with functional noise (paper 001): the σ sweep", "",
        f"{cfg.seeds} seeds per σ, {cfg.episodes} episodes of 50 steps, seed {cfg.seed}. "
        f"Final return: each seed's mean over its last {FINAL_EPISODES} episodes; mean and "
        "standard deviation over seeds. No σ row claims an ε (Theorem 5's constant C is not "
        "defined in the poster); σ = 0 is the non-private baseline.", "",
        "| setting | final mean return | sd over seeds | mean return, all episodes |",
        "|---|---:|---:|---:|",
    ]
    for r in tables["rows"]:
        name = "σ = 0 (non-private baseline)" if r["sigma"] == 0 else f"σ = {r['sigma']:g}"
        lines.append(f"| {name} | {r['final_mean_return']:.2f} | "
                     f"{r['final_sd_over_seeds']:.2f} | {r['mean_return_all_episodes']:.2f} |")
    n_mc = refs["monte_carlo_episodes"]
    lines += [
        f"| random policy (Monte Carlo, {n_mc:,} episodes) | {refs['random_policy']:.2f} | "
        f"s.e. {refs['random_policy_se']:.2f} | {refs['random_policy']:.2f} |",
        f"| optimal policy (value iteration; Monte Carlo check "
        f"{refs['optimal_policy_monte_carlo']:.3f} ± {refs['optimal_policy_mc_se']:.3f}) | "
        f"{refs['optimal_value_iteration']:.2f} | | {refs['optimal_value_iteration']:.2f} |",
        "",
    ]
    return "\n".join(lines)
