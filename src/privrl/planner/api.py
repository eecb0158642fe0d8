"""`privrl.planner.plan`: what ε and fleet a task needs, measured on its public simulator.

The plan looks ONLY at the task's public simulator, with the agents' private parameters drawn
from the ranges the user gives (`private_params`, parsed as `privrl run --private` parses
them). It never looks at an agent's data: tuning on the agents' private data would itself
cost privacy (every look is a release that the ledger would have to charge), so a plan made
that way would not be free. Steps:

1. pilot: per-episode gradient norms and their spread of a fresh policy, a random policy's
   return, and the system's own non-private run (its learning speed: episodes to reach
   `fraction` of its improvement over random);
2. model (privrl.planner.model): the clip, reports per agent, update batch and step size, and
   the fleet K at which the task learns at ε (or, given K, the smallest ε at which it does);
3. check: one sweep over (ε, K) on the simulator, the settings of one K as one compiled
   program (the systems' `for_settings`), the frontier drawn with random and non-private lines;
4. plan.json and plan.png in a new directory (never overwritten), and the `privrl run` command.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from privrl.config import (
    PRIVATE_HELP,
    Config,
    fail,
    in_range,
    integer,
    option,
    positive,
)
from privrl.planner.choices import SYSTEMS

PLAN_SCHEMA = "privrl-plan/1"
SIMULATOR_ONLY = (
    "The plan used only the task's public simulator, with the agents' private parameters "
    "drawn from the ranges given for them; it looked at no agent's data. Tuning on the agents' "
    "private data would cost privacy: every look at it is a release the agents' budget would "
    "have to pay for.")


# The pilot's random baseline is the floor the plan's learning mark and fractions are measured
# from; session 9's 64 episodes were too few for it (benchmarks/log/26-fedrows.md).
MAX_RANDOM_EPISODES = 100_000
WIDE_RANDOM = 0.1  # a note when the baseline's 95% half-width exceeds this share of the pilot's
# improvement over random


@dataclass(frozen=True)
class PlanConfig(Config):
    """What `privrl plan` asks: the task, the privacy target and the sizes of its pilot and
    sweep."""

    env: str | None = option(
        None, help="The task's PUBLIC simulator: gymnax:<id>, gymnasium:<id> or "
        "<module>:<callable> (as privrl run's --env). Required.")
    private_params: tuple[str, ...] = option((), flag="--private", help=PRIVATE_HELP + (
        " The plan draws the agents' parameters from these ranges; it sees no agent's."))
    epsilon: float | None = option(
        None, help="The protected unit's total ε the run will have (pgc-a3c: per agent, LDP; "
        "fedpg-cen: per agent over the run, user-level; dp-reinforce: per episode). "
        "Required.")
    agents: int | None = option(
        None, help="The fleet size K you have (pgc-a3c, fedpg-cen: agents; dp-reinforce: "
        "episodes). Given: the plan finds the smallest ε at which K learns. Default: the plan "
        "finds the K at which the task learns at --epsilon.")
    delta: float = option(1e-5, help="δ of the Gaussian mechanisms' (ε, δ), in (0, 1).")
    fraction: float = option(
        0.5, help="What counts as learning: reaching this fraction of the non-private "
        "improvement over a random policy, in (0, 1].")
    aim: float | None = option(
        None, help="The fraction of the non-private pilot's improvement over random the plan "
        "sizes the fleet K to reach, in [--fraction, 1]: above the mark, so the recommended "
        "run clears it with a margin (K sized for the mark itself lands on it about half the "
        "time). Default: 0.8 of the way from --fraction to 1 (0.9 at 0.5) where the Adam law "
        "sizes K (pgc-a3c's `adaptive`), --fraction itself for the other systems.")
    pilot_episodes: int | None = option(
        None, help="Episodes of the non-private pilot run. Default: 3000 (pgc-a3c), 1000 "
        "(dp-reinforce), 10800 (fedpg-cen: 10 agents × 30 rounds).", unit="episodes")
    gradient_episodes: int = option(
        64, help="Episodes whose gradients the pilot measures.", unit="episodes")
    random_episodes: int = option(
        1000, help="Episodes of the random policy whose mean return is the pilot's floor "
        "(plan.json gives its 95% interval).", unit="episodes")
    sweep: bool = option(True, help="Check the recommendation with a sweep over (ε, K).")
    sweep_epsilons: tuple[float, ...] = option(
        (), help="The sweep's ε values. Default: ε/4, ε/2, ε, 2ε, 4ε and the smallest ε the "
        "model gives.")
    sweep_agents: tuple[int, ...] = option(
        (), help="The sweep's fleet sizes. Default: K/4, K/2, K, 2K of the recommended K.")
    max_sweep_episodes: int = option(
        400_000, help="Cap on the episodes of one sweep setting (the fleet sizes above it "
        "are left out and the plan says so).", unit="episodes")
    trials: int = option(2, help="Independent trials of every sweep setting.")
    seed: int = option(0, help="Random seed (same seed, same plan).")

    def validate(self) -> None:
        if self.env is None:
            fail("env", "required: the task's public simulator (e.g. gymnax:Acrobot-v1)")
        if self.epsilon is None:
            fail("epsilon", "required: the ε the run will have (> 0, finite)")
        positive("epsilon", self.epsilon)
        if self.agents is not None:
            integer("agents", self.agents)
        in_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        in_range("fraction", self.fraction, 0, 1, low_open=True)
        if self.aim is not None:
            in_range("aim", self.aim, 0, 1, low_open=True)
            if self.aim < self.fraction:
                fail("aim", f"at least --fraction ({self.fraction:g}): K is sized to reach "
                     f"at least the mark, got {self.aim:g}")
        if self.pilot_episodes is not None:
            integer("pilot_episodes", self.pilot_episodes, 10)
        integer("gradient_episodes", self.gradient_episodes, 4)
        integer("random_episodes", self.random_episodes, 2)
        integer("max_sweep_episodes", self.max_sweep_episodes)
        integer("trials", self.trials)
        integer("seed", self.seed, 0)
        for e in self.sweep_epsilons:
            positive("sweep_epsilons", e)
        for k in self.sweep_agents:
            integer("sweep_agents", k)
        if self.gradient_episodes > 4096:
            fail("gradient_episodes", f"at most 4096, got {self.gradient_episodes}")
        if self.random_episodes > MAX_RANDOM_EPISODES:
            fail("random_episodes", f"at most {MAX_RANDOM_EPISODES:,}, got "
                 f"{self.random_episodes}")


# FedPG-Cen's: 10 agents × 30 rounds of about 36 episodes (FedPG-BR's CartPole needs about
# 2,000 episodes per agent to solve; 2 rounds did not leave random).
PILOT_EPISODES = {"pgc-a3c": 3000, "dp-reinforce": 1000, "fedpg-cen": 10_800}
PILOT_FEDPG_AGENTS = 10


@dataclass(frozen=True)
class Frontier:
    """The sweep: final return (mean of the last 10 % of each curve up to the fleet's
    episodes, mean over trials) at every (ε, K); None where not run."""

    epsilons: tuple[float, ...]
    agents: tuple[int, ...]
    final_return: tuple[tuple[float | None, ...], ...]  # [ε][K]
    nonprivate_return: tuple[float | None, ...]  # [K]
    random_return: float
    wall_seconds: float
    left_out: tuple[int, ...] = ()  # fleet sizes above max_sweep_episodes
    programs: int = 0  # the compiled programs the sweep ran (its settings grouped)


@dataclass(frozen=True)
class PlanResult:
    """What `plan` returns and plan.json holds."""

    system: str
    env: str
    private_params: tuple[str, ...]
    epsilon: float
    agents_given: int | None
    pilot: dict[str, Any]
    recommendation: dict[str, Any]
    smallest_epsilon: float | None
    fields: dict[str, Any]
    frontier: Frontier | None
    check: dict[str, Any] | None
    learns: bool | None
    notes: tuple[str, ...]
    path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        from privrl.config import json_safe

        d = asdict(self)
        d.pop("path")
        return json_safe({"schema": PLAN_SCHEMA, "simulator_only": SIMULATOR_ONLY, **d})


ProgressFn = Callable[[str, int, int], None]


def plan(system: str, config: PlanConfig, out: str | Path | None = None,
         progress: ProgressFn | None = None, log: Callable[[str], None] = print
         ) -> PlanResult:
    """The plan for `system` (pgc-a3c, dp-reinforce or fedpg-cen) on `config`'s task; with
    `out` (or "auto": a new runs/plan-...), plan.json and plan.png are written into a new
    directory. ConfigError (naming a field) before anything is computed."""
    from privrl.config import ConfigError
    from privrl.output import check_out_dir

    if system not in SYSTEMS:
        raise ConfigError("system", f"unknown system {system!r}; choose one of "
                          f"{', '.join(SYSTEMS)}")
    config.validate()
    if out is not None and str(out) != "auto":
        check_out_dir(out)
    task = task_of(config)
    from privrl.evaluation import mean_interval, random_returns
    from privrl.planner import model, pilot
    from privrl.planner import systems as sy

    f = sy.facts(system, bool(task.head.continuous))
    stage = progress or (lambda name, done, total: None)
    notes: list[str] = []
    t0 = time.perf_counter()

    # 1. pilot: gradients and a random policy on the simulator
    stage("pilot: gradients", 0, 3)
    own = sy.report_sample(system, f, config.env, config.private_params,  # type: ignore
                           float(config.epsilon), config.gradient_episodes, config.seed)
    grads, dim = own or pilot.gradient_sample(task, f.hidden, config.gradient_episodes,
                                              config.seed)
    norms = pilot.norms(grads, f.norm)
    q = tuple(float(x) for x in _quantiles(norms))
    clip = float(f"{max(q[1], 1e-8) / f.radius:.3g}")  # the clip ball's radius: the median
    signal, variance = pilot.clipped_moments(grads, clip * f.radius, f.norm)
    stage("pilot: random policy", 1, 3)
    rand, rand_ci = mean_interval(random_returns(task, config.random_episodes, config.seed))
    stage("pilot: non-private run", 2, 3)
    pilot_curve, pilot_fields = _nonprivate_pilot(system, config, f, clip, progress,
                                                  not task.host)
    e0 = sy.episodes_to_learn(pilot_curve, rand, config.fraction)
    # K is sized for the aim (at or above the mark): the episodes the pilot took to reach it
    aim = sy.sizing_aim(system, f, config.fraction, config.aim)
    e0_aim = e0 if e0 is None or aim == config.fraction else sy.episodes_to_learn(
        pilot_curve, rand, aim)
    nonprivate_final = pilot_curve.final()
    stage("pilot: done", 3, 3)
    if e0 is None and sy.starts_past_mark(pilot_curve, rand, config.fraction):
        notes.append("The non-private pilot's first twentieth (its first moving-average "
                     f"window) already reaches {config.fraction:g} of its improvement over "
                     f"random ({rand:.4g} to {nonprivate_final:.4g}): that is where it starts, "
                     "not how fast it learns, so its learning speed is not measured and no fleet "
                     "size is planned from it.")
    elif e0 is None:
        notes.append(f"The non-private pilot ({pilot_curve.episodes[-1]:.0f} episodes) did not "
                     f"end above random ({nonprivate_final:.4g} vs {rand:.4g}): no private run "
                     "can be planned from it; give the pilot more episodes (pilot_episodes), or "
                     "another system.")
    half = (rand_ci[1] - rand_ci[0]) / 2
    if nonprivate_final > rand and half > WIDE_RANDOM * (nonprivate_final - rand):
        notes.append(f"The random baseline ({rand:.4g}, 95% interval ±{half:.3g} over "
                     f"{config.random_episodes:,} episodes) is uncertain by more than "
                     f"{WIDE_RANDOM:.0%} of the pilot's improvement over it: the learning speed "
                     "is measured from an uncertain floor; give more random_episodes.")
    stats = model.PilotStats(dim, q, clip, signal, variance, rand, nonprivate_final, e0_aim,
                             f.episodes_per_report,
                             pilot.signal_spread(grads, clip * f.radius, f.norm)
                             if sy.fleet_law(system, f, None, PILOT_FEDPG_AGENTS) else 1.0)
    noise = sy.noise_fn(system, f, stats, config.delta)
    needed = sy.needed_fn(system, f, stats)
    # FedPG-Cen `fleet`: the fleet law (planner.model.FleetLaw) sizes K or ε
    law = sy.fleet_law(system, f, stats, PILOT_FEDPG_AGENTS)

    def smallest_fleet(e: float) -> tuple[int, int] | None:
        return (sy.fleet_smallest_fleet(stats, law, f, e, config.delta) if law else
                model.smallest_fleet(stats, noise, e, f.reports_choices, needed))

    def smallest_epsilon(k: int) -> tuple[float, int] | None:
        return (sy.fleet_smallest_epsilon(stats, law, f, k, config.delta) if law else
                model.smallest_epsilon(stats, noise, k, f.reports_choices, needed=needed))

    # 2. the model's recommendation
    eps = float(config.epsilon)  # type: ignore[arg-type]
    smallest = None
    if config.agents is None:
        found = smallest_fleet(eps)
        agents, reports = found if found else (None, f.reports_choices[0])
        if found is None and e0 is not None:
            notes.append(f"At ε = {eps:g} no fleet up to {model.MAX_FLEET:,} learns by the "
                         "model.")
    else:
        agents = config.agents
        got = smallest_epsilon(agents)
        smallest, reports = got if got else (None, f.reports_choices[0])
        if got is not None:
            found_r = None if law else smallest_fleet(eps)
            if found_r is not None and agents >= found_r[0]:
                reports = found_r[1]
        if smallest is not None and smallest > eps:
            notes.append(f"K = {agents:,} learns by the model only from ε ≈ {smallest:.3g}, "
                         f"above the ε = {eps:g} asked: more agents, or more ε.")
    if config.agents is None and e0 is not None:
        got = smallest_epsilon(agents) if agents else None
        smallest = got[0] if got else None
    k = agents or _fallback_agents(system, config)
    rec = _recommend(system, f, stats, noise, eps, k, reports)
    fields = sy.config_fields(system, rec, config.env, config.private_params,  # type: ignore
                              config.trials, config.seed, levers=True)
    sy.build_config(system, fields).validate()
    if sy.levers_apply(system, rec) and system == "dp-reinforce":
        notes.append(f"The command runs preset {fields['preset']!r}: the plan's settings with "
                     "the adaptive levers on (the clip starts at the plan's and follows the "
                     "episodes' median norm, its count's noise split off the same ε and "
                     "counted; the best policy on the public simulator is kept; the batch and "
                     "step size are the plan's)"
                     + (". The sweep ran the settings with the levers off (a run with a lever "
                        "on runs alone, not in one compiled program)." if config.sweep else "."))
    elif sy.levers_apply(system, rec):
        notes.append(f"The command runs preset {fields['preset']!r} with its own update rule: "
                     f"|B| = {rec.batch} reports an update, Adam, the step set from the "
                     f"mechanism's noise (step_from_noise, from η = {rec.learning_rate:g}); the "
                     "clip starts at the plan's and follows the agents' median norm (its bit "
                     "paid from each report's ε, which the model counts); the best policy on "
                     "the public simulator is kept"
                     + (". The sweep ran |B| and η with the levers off (a fixed step; a run "
                        "with a lever on runs alone, not in one compiled program)."
                        if config.sweep else "."))
    if system == "fedpg-cen" and fields["preset"] in sy.FEDPG_FLEET_PRESETS.values():
        from privrl.systems.fedpg.config import DEFAULT_PARTICIPANTS

        notes.append(f"The command runs preset {fields['preset']!r}: "
                     "distributed-gaussian-continuous (a simulation of the secure sum with "
                     "continuous Gaussian shares; the Flower deployment's distributed-gaussian "
                     "samples no agents), each agent in a round with probability q "
                     f"({DEFAULT_PARTICIPANTS} agents a round in expectation; amplification by "
                     "sampling, by the accountant), the "
                     "clip starting at the plan's and following the agents' median norm (its "
                     "bits in the same ε), the preset's own Adam step. The fleet law sizes it "
                     "(planner.model.FleetLaw): a round's noise-to-signal ratio ρ over "
                     "q·K sampled reports with σ by the accountant, as Adam's per-coordinate "
                     "step sees it, and R0 · √((1 + ρ²)/(1 + ρ0²)) rounds needed, R0 the "
                     "pilot's rounds to the mark (benchmarks/log/30-front.md).")
    if agents is not None:
        notes.append("K = " + f"{agents:,}: " + (
            "the model's fleet law for the sampled secure sum (R0 · √((1 + ρ²)/(1 + ρ0²)) "
            "rounds, ρ a round's noise-to-signal ratio over q·K reports with the "
            "accountant's σ at q, ρ0 the pilot's; planner.model.fleet_rounds_needed)"
            if law is not None else
            "the model's Adam law for the command's rule (E0 · max(1, ρ/ρ0) / (η'/η): an "
            "update's noise-to-signal ratio ρ at its |B| against the pilot's ρ0, and "
            "step_from_noise's step fraction; planner.model.episodes_needed_adam)"
            if needed is not None else
            "the model's trace law (E0 · (V + N)/V, planner.model.episodes_needed)")
            + (f", E0 = {e0_aim:,.0f} episodes: the pilot's to reach {aim:g} of its improvement "
               f"over random, a margin over the mark {config.fraction:g} (reached at "
               f"{e0:,.0f})" if aim > config.fraction and e0 is not None and e0_aim is not None
               else "")
            + (", checked by the sweep (check)." if config.sweep else
               "; the sweep did not run: not checked here."))

    # 3. the check: one sweep over (ε, K)
    frontier = check = learns = None
    if config.sweep:
        if task.host:
            notes.append(f"{task.name} is stepped on the host: the sweep ran each setting "
                         "on its own, not as one compiled program.")
        frontier = _sweep(system, config, rec, f, stats, smallest, progress, log,
                          not task.host)
        check, learns = _check(frontier, rec, config.fraction)
        if law is not None:  # the fleet law's frontier beside the measured one
            check["model_smallest_epsilon"] = {
                str(k): sy.fleet_smallest_epsilon_at(stats, law, f, k, rec.reports_per_agent,
                                                     config.delta) for k in frontier.agents}
        if frontier.left_out:
            notes.append("The sweep left out K = " + ", ".join(f"{x:,}" for x in
                         frontier.left_out) + f" (over max_sweep_episodes = "
                         f"{config.max_sweep_episodes:,}).")
    pilot_record = {**stats.to_dict(), "random_return_ci": list(rand_ci),
                    # K's target: episodes_to_learn is the pilot's to reach `aim`
                    "aim": aim, "mark": config.fraction, "episodes_to_mark": e0,
                    "random_episodes": config.random_episodes,
                    "norm": f.norm, "clip_radius": f.radius,
                    "pilot_run": {"fields": pilot_fields,
                                  "episodes": float(pilot_curve.episodes[-1]),
                                  "final_return": nonprivate_final,
                                  "wall_seconds": pilot_curve.wall_seconds},
                    "gradient_proxy": (
                        "none: the system's own per-report gradients at the recommended "
                        "command's start (its preset, one episode per report)" if own else
                        "REINFORCE on an MLP of the system's hidden sizes, a fresh policy, "
                        "per-episode standardized returns-to-go"),
                    "noise_to_signal_nonprivate": model.noise_to_signal(stats, 0.0, f.batch),
                    # which law of planner.model sized K (plan.json says how K was found)
                    "fleet_model": ("fleet: fleet_rounds_needed" if law is not None else
                                    "adam: episodes_needed_adam" if needed is not None else
                                    "trace: episodes_needed"),
                    **({"fleet_law": asdict(law)} if law is not None else {}),
                    "seconds": time.perf_counter() - t0}
    result = PlanResult(system, config.env, tuple(config.private_params), eps,  # type: ignore
                        config.agents, pilot_record, asdict(rec), smallest, fields, frontier,
                        check, learns, tuple(notes))
    if out is not None:
        result = write(result, out)
    return result


def task_of(config: PlanConfig) -> Any:
    """The task's simulator with the `private_params` ranges, parsed as `privrl run --private`
    parses them (ConfigError naming `env` or `private` before anything runs)."""
    from privrl.envs.task import configured_task

    return configured_task(config.env, config.private_params, lambda: None)  # type: ignore


def recommend_at(result: PlanResult, agents: int) -> Any:
    """The plan's settings for another fleet size K (its ε, its pilot): the update batch and
    step size re-derived for K (a benchmark that caps the fleet runs these)."""
    from privrl.planner import model
    from privrl.planner import systems as sy

    f = sy.facts(result.system, bool(task_of(PlanConfig(
        env=result.env, private_params=result.private_params, epsilon=result.epsilon)
        ).head.continuous))
    names = {x.name for x in dataclasses.fields(model.PilotStats)}
    p = result.pilot
    stats = model.PilotStats(**{k: (tuple(v) if isinstance(v, list) else v)
                                for k, v in p.items() if k in names})
    noise = sy.noise_fn(result.system, f, stats)
    return _recommend(result.system, f, stats, noise, result.epsilon, int(agents),
                      int(result.recommendation["reports_per_agent"]))


def _quantiles(x: Any) -> tuple[float, float, float]:
    import numpy as np

    return tuple(float(v) for v in np.quantile(x, [0.1, 0.5, 0.9]))  # type: ignore


def _fallback_agents(system: str, config: PlanConfig) -> int:
    """K for the command and sweep when the model found none: the pilot's size."""
    episodes = config.pilot_episodes or PILOT_EPISODES[system]
    return PILOT_FEDPG_AGENTS if system == "fedpg-cen" else episodes


def _recommend(system: str, f: Any, stats: Any, noise: Any, eps: float, agents: int,
               reports: int) -> Any:
    """The settings at (ε, K): the update batch, the step size."""
    from privrl.planner import model
    from privrl.planner import systems as sy

    n = noise(eps, reports, agents)
    ratio0 = model.noise_to_signal(stats, 0.0, f.batch)
    if system == "pgc-a3c" and f.command_batch:
        # the command keeps its preset's |B| and step rule (`step_from_noise` from this base
        # step): the model (`sy.needed_fn`) sized K for that rule
        return sy.Recommendation(f.mechanism, eps, int(agents), float(stats.clip), int(reports),
                                 int(f.command_batch), float(f.command_learning_rate),
                                 f.preset)
    if system == "pgc-a3c":
        batch = model.update_batch(stats, n, ratio0, max(1, agents * reports // 20))
    elif system == "fedpg-cen":
        batch = agents
        if f.command_learning_rate:  # the `fleet` preset's own Adam step (`sy.facts`)
            return sy.Recommendation(f.mechanism, eps, int(agents), float(stats.clip),
                                     int(reports), int(batch), float(f.command_learning_rate),
                                     f.preset)
    else:
        batch = sy.reinforce_batch(stats, model.release_noise("gaussian", eps, 1, stats.clip,
                                                              stats.dim), agents, f.batch)
    lr = model.step_size(f.learning_rate, stats, n, batch, ratio0)
    return sy.Recommendation(f.mechanism, eps, int(agents), float(stats.clip), int(reports),
                             int(batch), float(f"{lr:.3g}"), f.preset)


def _nonprivate_pilot(system: str, config: PlanConfig, f: Any, clip: float,
                      progress: ProgressFn | None, together: bool = True
                      ) -> tuple[Any, dict[str, Any]]:
    """The system's own non-private run on the simulator: its learning curve."""
    from privrl.planner import systems as sy

    episodes = config.pilot_episodes or PILOT_EPISODES[system]
    if system == "fedpg-cen":
        agents = PILOT_FEDPG_AGENTS
        reports = max(1, episodes // (agents * f.episodes_per_report))
    else:
        agents, reports = episodes, 1
    rec = sy.Recommendation("none", math.inf, agents, clip if system != "pgc-a3c" else
                            sy.pgc_preset_clip(f.preset), reports, f.batch, f.learning_rate,
                            f.preset)
    fields = sy.config_fields(system, rec, config.env, config.private_params,  # type: ignore
                              config.trials, config.seed)
    if system != "pgc-a3c":
        fields.pop("clip")  # the non-private run: the system's own (no clip needed)
    cfg = sy.build_config(system, fields)
    tick = None if progress is None else (lambda d, t: progress("pilot: non-private run", d, t))
    return sy.run_settings(system, [cfg], tick, together)[0], fields



def sweep_grid(config: PlanConfig, rec: Any, smallest: float | None
               ) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The (ε, K) grid: the user's, or around the recommendation."""
    eps = config.sweep_epsilons or tuple(sorted({round(rec.epsilon * m, 6) for m in
                                                 (0.25, 0.5, 1, 2, 4)} | (
        {round(smallest, 6)} if smallest and math.isfinite(smallest) else set())))
    agents = config.sweep_agents or tuple(sorted({max(1, round(rec.agents * m))
                                                  for m in (0.25, 0.5, 1, 2)}))
    return tuple(eps), tuple(agents)


def _sweep(system: str, config: PlanConfig, rec: Any, f: Any, stats: Any,
           smallest: float | None, progress: ProgressFn | None, log: Callable[[str], None],
           together: bool = True) -> Frontier:
    """Final return at every (ε, K), and the non-private line: per fleet size (or one run of
    the largest where a smaller fleet is its prefix), every ε and the non-private setting as
    one compiled program."""
    from privrl.planner import systems as sy

    eps, agents = sweep_grid(config, rec, smallest)
    per_agent = rec.reports_per_agent * f.episodes_per_report
    fleet = system == "fedpg-cen" and rec.preset in sy.FEDPG_FLEET_PRESETS.values()
    if fleet:
        return _sweep_fleet(system, config, rec, f, stats, eps, agents, progress, log,
                            together)
    kept = tuple(k for k in agents if k * per_agent <= config.max_sweep_episodes)
    left = tuple(k for k in agents if k not in kept)
    if not kept:
        kept, left = (max(1, config.max_sweep_episodes // per_agent),), agents
    runs = [max(kept)] if f.prefix else list(kept)
    t0 = time.perf_counter()
    table: dict[tuple[float, int], float] = {}
    nonprivate: dict[int, float] = {}
    programs = 0
    for i, k in enumerate(runs):
        settings = [replace(rec, epsilon=e, agents=k) for e in eps] + [
            replace(rec, mechanism="none", epsilon=math.inf, agents=k)]
        curves, n = _run_sweep(system, config, settings,
                               f"sweep {i + 1}/{len(runs)}: K = {k:,}", progress, log, together)
        programs += n
        ks = [x for x in kept if x <= k] if f.prefix else [k]
        for kk in ks:
            upto = kk * per_agent
            for e, c in zip(eps, curves[:-1], strict=True):
                table[(e, kk)] = c.final(upto)
            nonprivate[kk] = curves[-1].final(upto)
    fin = tuple(tuple(_num(table.get((e, k))) for k in kept) for e in eps)
    return Frontier(eps, kept, fin, tuple(_num(nonprivate.get(k)) for k in kept),
                    stats.random_return, time.perf_counter() - t0, left, programs)


def _run_sweep(system: str, config: PlanConfig, settings: list[Any], label: str,
               progress: ProgressFn | None, log: Callable[[str], None],
               together: bool) -> tuple[list[Any], int]:
    """One step of a sweep: the settings' configs run (as one program where `together` and
    the system allow), logged and ticked under `label`; their curves, in order, and the
    compiled programs they ran as."""
    from privrl.planner import systems as sy

    configs = [sy.build_config(system, sy.config_fields(
        system, s, config.env, config.private_params, config.trials, config.seed))  # type: ignore
        for s in settings]
    count = sy.program_count(system, configs, together)
    name = (f"{label}, {len(configs)} settings as {count} compiled "
            f"program{'s' if count > 1 else ''}")
    log(name)
    tick = None if progress is None else (lambda d, t: progress(name, d, t))
    return sy.run_settings(system, configs, tick, together), count


def _sweep_fleet(system: str, config: PlanConfig, rec: Any, f: Any, stats: Any,
                 eps: tuple[float, ...], agents: tuple[int, ...],
                 progress: ProgressFn | None, log: Callable[[str], None],
                 together: bool = True) -> Frontier:
    """FedPG-Cen `fleet`'s sweep: an agent plays a round with probability q = P/K (P the
    mechanism's participants a round, `DEFAULT_PARTICIPANTS`), so a setting plays about
    P·R rounds' episodes whatever K (its cap, `max_sweep_episodes`, counts those). The
    non-private line plays min(K, P) agents every round (no noise, so no sampling): the
    same episodes and rounds as the private settings, one run for every K ≥ P (untuned.py's
    reference). Every ε of one K runs as one compiled program (the sampled secure sum's σ and
    σ_b as each trial's data, FedPG's `ONE_PROGRAM_SUMS`), the non-private line as one more;
    K is a shape of the round (its K shares, the sampled lanes), so each K is its own."""
    from privrl.planner import systems as sy

    def played(k: int) -> float:  # a setting's expected episodes at fleet size k
        return sy.fleet_participants(k) * rec.reports_per_agent * f.episodes_per_report

    kept = tuple(k for k in agents if played(k) <= config.max_sweep_episodes)
    left = tuple(k for k in agents if k not in kept)
    t0 = time.perf_counter()
    table: dict[tuple[float, int], float] = {}
    nonprivate: dict[int, float] = {}
    references: dict[int, float] = {}
    programs = 0
    for i, k in enumerate(kept):
        settings = [replace(rec, epsilon=e, agents=k) for e in eps]
        p = sy.fleet_participants(k)
        if p not in references:
            settings.append(replace(rec, mechanism="none", epsilon=math.inf, agents=p))
        curves, n = _run_sweep(system, config, settings,
                               f"sweep {i + 1}/{len(kept)}: K = {k:,}", progress, log, together)
        programs += n
        for e, c in zip(eps, curves, strict=False):
            table[(e, k)] = c.final()
        if p not in references:
            references[p] = curves[-1].final()
        nonprivate[k] = references[p]
    fin = tuple(tuple(_num(table.get((e, k))) for k in kept) for e in eps)
    return Frontier(eps, kept, fin, tuple(_num(nonprivate.get(k)) for k in kept),
                    stats.random_return, time.perf_counter() - t0, left, programs)


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def fraction_of(final: float | None, random: float, nonprivate: float | None) -> float | None:
    """(final − random) / (non-private − random): the share of the non-private improvement
    over random a private run reaches (None where undefined)."""
    if final is None or nonprivate is None or nonprivate - random <= 0:
        return None
    return (final - random) / (nonprivate - random)


def _check(fr: Frontier, rec: Any, target: float) -> tuple[dict[str, Any], bool | None]:
    """The sweep's verdict at the recommended (ε, K) (the nearest swept K)."""
    if rec.epsilon not in fr.epsilons or not fr.agents:
        return {"note": "the recommended ε was not swept"}, None
    i = fr.epsilons.index(rec.epsilon)
    j = min(range(len(fr.agents)), key=lambda j: abs(math.log(fr.agents[j] / rec.agents)))
    got = fraction_of(fr.final_return[i][j], fr.random_return, fr.nonprivate_return[j])
    return ({"epsilon": rec.epsilon, "agents": fr.agents[j],
             "final_return": fr.final_return[i][j], "nonprivate_return":
             fr.nonprivate_return[j], "random_return": fr.random_return,
             "fraction_of_nonprivate_improvement": got, "target_fraction": target},
            None if got is None else got >= target)


def write(result: PlanResult, out: str | Path) -> PlanResult:
    """plan.json and plan.png (where the sweep ran a setting) into a new directory (`out`, or
    "auto": runs/plan-...)."""
    from privrl.output import new_run_dir

    path = new_run_dir(None if str(out) == "auto" else out,
                       f"plan-{result.system}-{result.env}")
    result = replace(result, path=path)
    d = result.to_dict()
    (path / "plan.json").write_text(json.dumps(d, indent=2, allow_nan=False) + "\n")
    if result.frontier is not None and result.frontier.agents:  # nothing swept: no figure
        plot_frontier(result, path / "plan.png")
    return result


def plot_frontier(result: PlanResult, path: Path) -> None:
    """Final return against ε (a line per K) and against K (a line per ε), with the random
    and non-private lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fr = result.frontier
    assert fr is not None
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for j, k in enumerate(fr.agents):
        ys = [fr.final_return[i][j] for i in range(len(fr.epsilons))]
        a.plot(fr.epsilons, [math.nan if y is None else y for y in ys], "o-", label=f"K = {k:,}")
    for i, e in enumerate(fr.epsilons):
        ys = list(fr.final_return[i])
        b.plot(fr.agents, [math.nan if y is None else y for y in ys], "o-", label=f"ε = {e:g}")
    npv = [y for y in fr.nonprivate_return if y is not None]
    for ax in (a, b):
        ax.axhline(fr.random_return, color="grey", ls="--", label="random policy")
        if npv:
            ax.axhline(max(npv), color="black", ls=":", label="non-private (largest K)")
        ax.set_xscale("log")
        ax.set_ylabel("final return (last 10 % of episodes)")
        ax.legend(fontsize=7)
    a.set_xlabel("ε (the protected unit's total)")
    b.set_xlabel("fleet size K")
    fig.suptitle(f"privrl plan {result.system} on {result.env}: the frontier on the simulator")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
