"""What the planner knows of each system: its fleet, its mechanism, how a recommendation
becomes config fields (`config_fields`: the ONE mapping; a new lever is one more line there),
and how it runs a list of settings as one compiled program on the simulator.

The three systems count their fleet differently:
- pgc-a3c: K agents, each a fresh environment sending `submissions_per_agent` Laplace-LDP
  reports of one episode; θ steps on the mean of |B| reports. An agent's ε does not depend on
  K, so one run of K_max agents gives every K ≤ K_max (its first K agents).
- fedpg-cen: K agents every round, each releasing one report per round (user-level ε over its
  R rounds); the distributed Gaussian adds σC once to the secure sum of the K reports.
- dp-reinforce: the protected unit is one episode, used once; K episodes (the fleet's), σC on
  the sum of the |B| clipped gradients of an update. σ does not depend on K either, so one run
  of K_max episodes gives every K ≤ K_max.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from privrl.planner.choices import SYSTEMS
from privrl.planner.model import (
    FleetLaw,
    NeededFn,
    PilotStats,
    episodes_needed_adam,
    release_noise,
)
from privrl.planner.model import fleet_smallest_epsilon as model_fleet_epsilon
from privrl.planner.model import fleet_smallest_fleet as model_fleet_fleet

__all__ = ["SYSTEMS", "Curve", "Recommendation", "SystemFacts", "config_fields", "facts"]
CONFIG_CLASSES = {
    "pgc-a3c": "privrl.systems.pgc_a3c.config:PGCA3CConfig",
    "dp-reinforce": "privrl.systems.dpsgd_rl.config:ReinforceConfig",
    "fedpg-cen": "privrl.systems.fedpg.config:FedPGConfig",
}


@dataclass(frozen=True)
class Recommendation:
    """The settings the plan recommends, in the planner's words (`config_fields` maps them to
    each system's fields): the mechanism, ε, the fleet K, clip C, reports per agent, reports
    an update averages, and the step size (PGC-A3C's `adaptive` command: its preset's |B| and
    the base η its `step_from_noise` scales)."""

    mechanism: str
    epsilon: float
    agents: int
    clip: float
    reports_per_agent: int
    batch: int
    learning_rate: float
    preset: str


@dataclass
class Curve:
    """One setting's learning curve on the simulator: the return against the episodes the
    fleet played (all agents together), mean over trials; and the program's wall time."""

    episodes: np.ndarray
    returns: np.ndarray
    wall_seconds: float
    trials_returns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # A run that kept its best public candidate (--public-eval-every): the kept policies'
    # mean return on fresh public-simulator episodes (the run's verdict's); None otherwise.
    final_policy: float | None = None
    final_policy_se: float | None = None  # that mean's standard error (all its episodes)

    def final(self, upto: float | None = None, tail: float = 0.1) -> float:
        """The mean return over the last `tail` of the curve up to `upto` episodes."""
        keep = np.isfinite(self.returns) & (
            True if upto is None else self.episodes <= upto * (1 + 1e-9))
        y = self.returns[keep]
        if y.size == 0:
            return math.nan
        n = max(1, round(tail * y.size))
        return float(np.mean(y[-n:]))


# The preset whose levers the recommended command turns on, by system and the preset the plan
# modelled (and swept): PGC-A3C's `adaptive` is `tuned` (same learner, network and shaped
# reward) plus the adaptive levers (docs/pgc-a3c.md), on a discrete task and on a continuous
# one alike (its Gaussian head's log-std state-free, `start_fields`). A continuous task used to
# model `continuous` (the critic in the report, the trace law): its 642-parameter report was
# mostly critic and it learned nothing privately on the untuned benchmark's `reach` and
# Pendulum, where `adaptive`'s policy-only report learns (benchmarks/log/28-cont.md).
# DP-REINFORCE on a Box task: `continuous` (its uniform start, benchmarks/log/28-floor.md)
# plus the same levers.
LEVERS_PRESET = {("pgc-a3c", "tuned"): "adaptive", ("dp-reinforce", "paper"): "adaptive",
                 ("dp-reinforce", "continuous"): "adaptive-continuous"}


def levers_apply(system: str, rec: Recommendation) -> bool:
    """Whether the recommended command of `rec` turns on `system`'s adaptive levers: a private
    run of a preset LEVERS_PRESET extends."""
    return rec.mechanism != "none" and (system, rec.preset) in LEVERS_PRESET


def start_fields(system: str, preset: str) -> dict[str, Any]:
    """The fields that start a run of `preset` (the pilot, the sweep) where the recommended
    command starts: PGC-A3C's `adaptive` starts at the uniform policy (`uniform_start`),
    `tuned` at its Glorot one, which on Acrobot already scores past the plan's mark, so a
    pilot from there measures its start, not its learning (benchmarks/log/24-untuned.md,
    "At the plan's K"). DP-REINFORCE's `adaptive` and FedPG-Cen start as the plan's preset."""
    if system != "pgc-a3c" or (system, preset) not in LEVERS_PRESET:
        return {}
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

    cfg = PGCA3CConfig.from_preset(LEVERS_PRESET[(system, preset)])
    start = {"uniform_start": True, "log_std": "parameter"} if cfg.uniform_start else {}
    return start | ({"critic": cfg.critic} if cfg.critic != "shared" else {})


def config_fields(system: str, rec: Recommendation, env: str, private: Sequence[str],
                  trials: int, seed: int, levers: bool = False) -> dict[str, Any]:
    """The recommendation as `system`'s config fields: the one place a planner knob meets a
    config field. `levers`: the recommended command's fields, with the system's adaptive
    levers on where they apply (`levers_apply`); without, the settings as the plan models and
    sweeps them (one compiled program: a run with a lever on runs alone)."""
    common: dict[str, Any] = {"env": env, "private_params": tuple(private), "seed": seed,
                              "learning_rate": rec.learning_rate, "clip": rec.clip}
    private_run = rec.mechanism != "none"
    if system == "pgc-a3c" and levers and levers_apply(system, rec):
        # The preset's own update rule (benchmarks/log/26-plan3.md): |B| = the preset's batch
        # (`_recommend` puts it in rec.batch) and its step rule, `step_from_noise`
        # (η·s/(1 + s) from the mechanism's known noise, η = rec.learning_rate): with the
        # policy-only report it learned at a smaller fleet than a large |B| and few updates
        # (benchmarks/log/26-report.md). r reports per agent, if the plan asks for them, are
        # one report of r episodes: one release at the agent's whole ε. The clip starts at
        # the plan's (the pilot's median norm, the preset's clip_quantile).
        r = rec.reports_per_agent
        return {**common, "preset": LEVERS_PRESET[(system, rec.preset)],
                "mechanism": rec.mechanism, "epsilon": rec.epsilon,
                "submissions_per_agent": 1, **({"episodes_per_report": r} if r > 1 else {}),
                "submissions": rec.agents, "buffer_size": rec.batch, "trials": trials}
    if system == "pgc-a3c":
        return {**common, "preset": rec.preset, **start_fields(system, rec.preset),
                "mechanism": rec.mechanism,
                "epsilon": rec.epsilon if private_run else None,
                "submissions_per_agent": rec.reports_per_agent,
                "submissions": rec.agents * rec.reports_per_agent,
                "buffer_size": rec.batch, "trials": trials}
    if system == "fedpg-cen":
        # r reports per agent: a budget of r rounds' episodes, and σ calibrated for the rounds
        # that budget takes (`fedpg_dp_rounds`), not for the most it could take (FedPGConfig's
        # default: budget/(B_min + b), about 2.2 r under paper's batches): the noise the model
        # counts. A trial that would need more rounds is refused there (its ε holds). Under
        # the `fleet` presets r counts rounds (an agent reports in each with probability q);
        # their non-private run turns the preset's adaptive clip off with the mechanism.
        rounds = ({"dp_rounds": fedpg_dp_rounds(rec.reports_per_agent, rec.preset)}
                  if private_run and rec.mechanism in FEDPG_ROUNDS_MECHANISMS else {})
        fleet = ({"adaptive_clip": private_run}
                 if rec.preset in FEDPG_FLEET_PRESETS.values() else {})
        fields = {**common, "preset": rec.preset, "algorithm": "cen",
                  "mechanism": rec.mechanism, "epsilon": rec.epsilon if private_run else None,
                  "agents": rec.agents,
                  "budget": round(rec.reports_per_agent * fedpg_round(rec.preset)[0]),
                  **rounds, **fleet, "trials": trials}
        return fields | fleet_count_noise(fields)
    if system == "dp-reinforce":
        # K episodes in updates of B: a run's `episodes` counts updates (B episodes each)
        fields = {**common, "preset": rec.preset, "dp": private_run,
                  "target_epsilon": rec.epsilon if private_run else None,
                  "episodes": max(1, math.ceil(rec.agents / rec.batch)),
                  "batch_episodes": rec.batch, "seeds": trials, "stop_when_solved": False}
        return reinforce_levers(fields) if levers and levers_apply(system, rec) else fields
    raise ValueError(f"unknown system {system!r}")


def report_sample(system: str, f: SystemFacts, env: str, private: Sequence[str], epsilon: float,
                  episodes: int, seed: int) -> tuple[np.ndarray, int] | None:
    """(episodes, d) `system`'s own per-report gradients at the recommended command's start
    (its preset, its start, one episode per report), and d; None: the system has none of its
    own here and the pilot's REINFORCE proxy (`pilot.gradient_sample`) stands in. PGC-A3C
    reports its own loss's gradient (`adaptive`: the policy's alone, benchmarks/log/
    26-report.md; the actor-critic loss's, critic included, under the other presets), whose
    norms are orders beyond the proxy's (benchmarks/log/24-untuned.md, "At the plan's K",
    cause 2): the clip, S and V must come from these."""
    if system != "pgc-a3c":
        return None
    import jax
    import jax.numpy as jnp

    from privrl.systems.pgc_a3c.algorithm import PGCA3C

    rec = Recommendation("laplace", epsilon, episodes, pgc_preset_clip(f.preset), 1, f.batch,
                         f.learning_rate, f.preset)
    fields = config_fields(system, rec, env, private, 1, seed, levers=True)
    algo = PGCA3C(build_config(system, {**fields, "parallel_agents": episodes}))
    theta = algo.init(jax.random.key(seed)).agg.theta
    args = (jnp.zeros((), jnp.int32), jax.random.key(seed + 1), jax.random.key(seed + 2),
            jnp.arange(episodes), jnp.ones(episodes, bool))
    if algo.task.host:
        traj = algo.host_rollout(theta, *args)
    else:
        from privrl.systems.pgc_a3c.algorithm import JITTED_EPISODES

        traj = jax.jit(lambda th: algo._one_trial(JITTED_EPISODES, th, algo.agents_plan(*args))
                       )(theta)
    return np.asarray(algo.report_grads(theta, traj), np.float64), int(theta.size)


def pgc_preset_clip(preset: str) -> float:
    """PGC-A3C's `preset`'s clip (its non-private baseline clips too: Table 1's Laplace
    pipeline without noise)."""
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

    return float(PGCA3CConfig.from_preset(preset, mechanism="none").resolved().clip)


# FedPG-Cen's mechanisms whose σ is calibrated for a number of rounds (`dp_rounds`).
FEDPG_ROUNDS_MECHANISMS = ("distributed-gaussian", "distributed-gaussian-continuous")
# What `privrl plan fedpg-cen` recommends, by the task's action space (FedPGConfig's `fleet`
# presets: Poisson-sampled agents over the secure sum, the clip at the agents' median norm, a
# small network, the preset's own Adam step; benchmarks/log/28-fedcen.md), and the rounds it
# chooses among: the sum's noise on the mean grows with √R, and its signal with R, so the
# rounds are set by the cost, not the noise (log 28-fedcen).
FEDPG_FLEET_PRESETS = {False: "fleet", True: "fleet-continuous"}
FEDPG_FLEET_ROUNDS = (64, 128, 256)
# `fleet-continuous`'s rounds: the most of FEDPG_FLEET_ROUNDS, the cost's choice (at a fixed
# user-level ε more rounds do not lower a round's noise-to-signal ratio, but Adam drifts further
# against its random walk); its larger reports made the model choose fewer rounds, which learned
# less on Pendulum (benchmarks/log/30-fedcen.md)
FEDPG_FLEET_CONTINUOUS_ROUNDS = FEDPG_FLEET_ROUNDS[-1:]


def fleet_participants(agents: int) -> int:
    """The agents a `fleet` round takes part in expectation: q·K = min(K, P), P the
    mechanism's default (`DEFAULT_PARTICIPANTS`; FedPGConfig.resolved's q = min(1, P/K))."""
    from privrl.systems.fedpg.config import DEFAULT_PARTICIPANTS

    return min(int(agents), DEFAULT_PARTICIPANTS)


def fleet_count_noise(fields: dict[str, Any]) -> dict[str, Any]:
    """A `fleet` command's clip-bit noise σ_b where its default (q·K/20) is too small for the
    round's noise multiplier σ: adaptive clipping needs σ_b > σ/2, which a small ε (a large σ)
    breaks, and `privrl run` would refuse the plan's own command. σ_b = σ then costs the
    gradient's noise a factor (1 − 1/4)^(-1/2) ≈ 1.15 (z_Δ = (σ⁻² − (2σ_b)⁻²)^(-1/2)), inside the
    same ε. Nothing where the default fits, or without the adaptive clip."""
    if not fields.get("adaptive_clip"):
        return {}
    cfg = build_config("fedpg-cen", {**fields, "adaptive_clip": False}).resolved()
    default = cfg.sampling_rate * cfg.agents / 20
    sigma = cfg.noise_multiplier
    return {} if sigma is None or 2 * default > sigma else {"clip_count_stddev": float(sigma)}


def fleet_law(system: str, f: SystemFacts, stats: PilotStats | None, pilot_agents: int
              ) -> FleetLaw | None:
    """The fleet law's facts where the plan recommends a `fleet` preset (None elsewhere: the
    trace law or PGC-A3C's Adam law size K): P = DEFAULT_PARTICIPANTS a round, a report of
    B_t's mean episodes, the clip bits' σ_b = q·K/20 (FedPGConfig.resolved's), the preset's
    accountant, and the pilot's rounds to the mark, E0 over its `pilot_agents` agents' round
    (each round takes `episodes_per_report` from every agent's budget)."""
    if system != "fedpg-cen" or f.preset not in FEDPG_FLEET_PRESETS.values():
        return None
    from privrl.systems.fedpg.config import DEFAULT_PARTICIPANTS, FedPGConfig

    cfg = FedPGConfig.from_preset(f.preset)
    e0 = None if stats is None else stats.episodes_to_learn
    return FleetLaw(DEFAULT_PARTICIPANTS, (cfg.batch_min + cfg.batch_max) / 2, pilot_agents,
                    None if e0 is None else e0 / (pilot_agents * stats.episodes_per_report),
                    1 / 20, cfg.accountant)


def fleet_smallest_epsilon(stats: PilotStats, law: FleetLaw, f: SystemFacts, agents: int,
                           delta: float) -> tuple[float, int] | None:
    """(the smallest ε at which K learns by the fleet law, its rounds among the preset's
    choices: the rounds with the smallest ε); None where no rounds choice learns."""
    got = [(e, r) for r in f.reports_choices
           if (e := fleet_smallest_epsilon_at(stats, law, f, agents, r, delta)) is not None]
    return min(got) if got else None


def fleet_smallest_epsilon_at(stats: PilotStats, law: FleetLaw, f: SystemFacts, agents: int,
                              rounds: int, delta: float) -> float | None:
    """The fleet law's smallest ε for K agents over `rounds` rounds (σ calibrated for the
    rounds' `fedpg_dp_rounds`, as the command's)."""
    return model_fleet_epsilon(stats, law, agents, rounds,
                               fedpg_dp_rounds(rounds, f.preset), delta)


def fleet_smallest_fleet(stats: PilotStats, law: FleetLaw, f: SystemFacts, epsilon: float,
                         delta: float) -> tuple[int, int] | None:
    """(the smallest K at which the fleet law learns at ε, its rounds: the fewest K, and of
    equal K the most rounds); None where no K up to MAX_FLEET does."""
    got = [(k, -r) for r in f.reports_choices
           if (k := model_fleet_fleet(stats, law, epsilon, r, fedpg_dp_rounds(r, f.preset),
                                      delta)) is not None]
    if not got:
        return None
    k, r = min(got)
    return k, -r
# dp_rounds covers the rounds a budget takes up to this many standard deviations.
DP_ROUNDS_SIGMAS = 3.0


@lru_cache(maxsize=64)
def fedpg_round(preset: str) -> tuple[float, float]:
    """The mean and standard deviation of the episodes one FedPG-Cen round of `preset` takes
    from an agent's budget (B_t and the server's N_t·b: paper's 2·16 + 4 = 36 on average),
    what one report costs an agent (FedPGConfig.round_episodes)."""
    from privrl.systems.fedpg.config import FedPGConfig

    return FedPGConfig.from_preset(preset).round_episodes()


@lru_cache(maxsize=1024)
def fedpg_dp_rounds(reports: int, preset: str) -> int:
    """The rounds a budget of `reports` mean rounds takes, with a margin: the run stops at the
    first round that reaches the budget, so R ≈ r + (1 + cv²)/2 with a standard deviation of
    about cv·√r (renewal counting; cv the round cost's coefficient of variation); covered to
    DP_ROUNDS_SIGMAS standard deviations, and never above the most rounds the budget allows."""
    from privrl.systems.fedpg.config import FedPGConfig

    mean, sd = fedpg_round(preset)
    cv = sd / mean
    most = FedPGConfig.from_preset(preset, budget=round(reports * mean)).max_rounds()
    return min(most, math.ceil(reports + (1 + cv * cv) / 2
                               + DP_ROUNDS_SIGMAS * cv * math.sqrt(reports)))


def reinforce_levers(fields: dict[str, Any]) -> dict[str, Any]:
    """A DP-REINFORCE command's fields with the levers of its preset's `adaptive` preset on
    (`paper` → `adaptive`, `continuous` → `adaptive-continuous`): the clip starts at the
    plan's and follows the episodes' median norm (its count's noise taken from the same ε:
    σ split, Andrew et al. 2021), the best policy on the public simulator is kept; the batch
    and step size stay the plan's (`step_from_noise` off: one rule sets the step)."""
    preset = LEVERS_PRESET[("dp-reinforce", fields.get("preset", "paper"))]
    return {**fields, "preset": preset, "step_from_noise": False}


@dataclass(frozen=True)
class SystemFacts:
    """A system's planning facts: its mechanism, the norm that mechanism clips in and the
    clip's radius per unit C, the network size of its policy (from the preset), the step
    size and batch of its non-private run, the reports-per-agent choices and the fleet axis
    (`prefix`: one run of K_max gives every smaller K)."""

    mechanism: str
    norm: str
    radius: float  # the clip ball's radius is radius·C
    hidden: tuple[int, ...]
    learning_rate: float
    batch: int
    reports_choices: tuple[int, ...]
    prefix: bool
    preset: str
    episodes_per_report: int = 1
    # The share of each report's ε the recommended command's adaptive clip spends on its clip
    # bit (LEVERS_PRESET; 0: no levers): the model gives the gradient the rest.
    clip_bit_share: float = 0.0
    # PGC-A3C with levers: the recommended command's own |B| and base step size (its preset's:
    # the plan keeps its update rule, `step_from_noise`, and models it: `needed_fn`); 0: the
    # plan sets |B| and the step (`_recommend`).
    command_batch: int = 0
    command_learning_rate: float = 0.0


def facts(system: str, continuous: bool) -> SystemFacts:
    """`system`'s planning facts on a discrete (or `continuous`) task, from its presets."""
    if system == "pgc-a3c":
        from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

        preset = "tuned"  # a continuous task too: LEVERS_PRESET
        cfg = PGCA3CConfig.from_preset(preset, mechanism="laplace", epsilon=1.0).resolved()
        levers = LEVERS_PRESET.get((system, preset))
        if levers is None:
            return SystemFacts("laplace", "l1", 0.5, (cfg.hidden,), cfg.learning_rate,
                               cfg.buffer_size or 1, (1, 2, 4, 8), True, preset)
        own = PGCA3CConfig.from_preset(levers, mechanism="laplace", epsilon=1.0).resolved()
        # the preset's own rule: one episode per report (its submissions_per_agent)
        return SystemFacts("laplace", "l1", 0.5, (cfg.hidden,), cfg.learning_rate,
                           cfg.buffer_size or 1, (own.submissions_per_agent,), True, preset,
                           clip_bit_share=own.clip_epsilon_share,
                           command_batch=own.buffer_size or 1,
                           command_learning_rate=own.learning_rate)
    if system == "fedpg-cen":
        from privrl.systems.fedpg.config import FedPGConfig

        preset = FEDPG_FLEET_PRESETS[continuous]
        cfg = FedPGConfig.from_preset(preset)
        # the command keeps the preset's step (command_learning_rate), not one shrunk for the
        # noise: under Adam that froze reach at its start (benchmarks/log/26-fedrows.md)
        rounds = FEDPG_FLEET_CONTINUOUS_ROUNDS if continuous else FEDPG_FLEET_ROUNDS
        return SystemFacts(cfg.mechanism, "l2", 1.0, tuple(cfg.hidden), cfg.learning_rate, 1,
                           rounds, False, preset, round(cfg.round_episodes()[0]),
                           command_learning_rate=cfg.learning_rate)
    if system == "dp-reinforce":
        from privrl.systems.dpsgd_rl.reinforce import ReinforceConfig

        # a Box task: `continuous`, the paper's learner started close to the uniform policy
        # (the paper's start played below random on Pendulum, benchmarks/log/28-floor.md)
        cfg = ReinforceConfig.from_preset("continuous" if continuous else "paper")
        return SystemFacts("gaussian", "l2", 1.0, (cfg.hidden,), cfg.learning_rate,
                           cfg.batch_episodes, (1,), True, cfg.preset)
    raise ValueError(f"unknown system {system!r}")


def noise_fn(system: str, f: SystemFacts, stats: PilotStats, delta: float = 1e-5
             ) -> Callable[[float, int, int], float]:
    """(ε, reports per agent, K) -> E‖noise‖² of one report of `system` at clip stats.clip."""
    d, c = stats.dim, stats.clip

    def pgc(eps: float, r: int, k: int) -> float:
        return release_noise("laplace", eps * (1 - f.clip_bit_share), r, c, d)

    def fedpg(eps: float, r: int, k: int) -> float:
        # σ for the run's dp_rounds, every agent in every round (the trace law's noise).
        # The `fleet` presets are sized by the fleet law instead (`fleet_law`: q·K sampled
        # agents, σ by the accountant at q, inverted once per K rather than calibrated in
        # every step of a bisection)
        return release_noise("distributed-gaussian", eps, fedpg_dp_rounds(r, f.preset), c, d,
                             delta, summed_over=k)

    def reinforce(eps: float, r: int, k: int) -> float:
        b = reinforce_batch(stats, release_noise("gaussian", eps, 1, c, d, delta), k,
                            f.batch)
        return release_noise("gaussian", eps, 1, c, d, delta, summed_over=b)

    return {"pgc-a3c": pgc, "fedpg-cen": fedpg, "dp-reinforce": reinforce}[system]


def adam_law(system: str, f: SystemFacts) -> bool:
    """Whether the recommended command keeps its preset's Adam rule, so that
    `model.episodes_needed_adam` sizes its K (`needed_fn`)."""
    return system == "pgc-a3c" and bool(f.command_batch)


# Where the Adam law sizes K, the share of the way from the mark to the pilot's final return
# that K is sized to reach: at 0.5 of the way (an aim of 0.75) Gymnasium CartPole's run read
# 0.485, at 0.8 (0.9) 0.66; every prefix from 16,000 agents read 0.66-1.03, the non-private
# reference swinging 216-386 between them (benchmarks/log/28-disc.md).
AIM_SHARE = 0.8


def sizing_aim(system: str, f: SystemFacts, fraction: float, aim: float | None) -> float:
    """The fraction of the pilot's improvement over random the plan sizes K to reach: `aim`
    where given; else, where the Adam law sizes K, AIM_SHARE of the way from the mark
    (`fraction`) to the pilot's final return. The law puts the private run AT the aim after K
    agents, so a K sized for the mark itself lands on it about half the time (Gymnasium
    CartPole: 0.4997 at such a K). The trace law keeps the mark by default (its systems' runs
    were planned and measured at it); a given `aim` applies to every system."""
    if aim is not None:
        return aim
    return fraction + AIM_SHARE * (1.0 - fraction) if adam_law(system, f) else fraction


def needed_fn(system: str, f: SystemFacts, stats: PilotStats) -> NeededFn | None:
    """(ε, E‖noise‖² of one report) -> the episodes the recommended command needs, where it
    keeps its preset's update rule (PGC-A3C's `adaptive`: |B| reports, Adam, the step from
    the noise, `model.episodes_needed_adam`); None: the trace model (`episodes_needed`), the
    plan's own |B| and step."""
    if not adam_law(system, f):
        return None
    from privrl.federation.adapt import noise_step
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig, report_snr, reports_per_step

    cfg = PGCA3CConfig.from_preset(LEVERS_PRESET[(system, f.preset)], mechanism="laplace",
                                   epsilon=1.0).resolved()
    window = reports_per_step(cfg)

    def needed(eps: float, noise: float) -> float:
        # step_from_noise's η'/η at the report's gradient ε (its clip bit's share off)
        snr = report_snr(cfg, eps * (1 - f.clip_bit_share), stats.dim)
        return episodes_needed_adam(stats, noise, f.command_batch, f.batch,
                                    noise_step(1.0, snr, window))

    return needed


# The most episodes a DP-REINFORCE update averages, and the fewest updates a run makes (the
# plan's caps: a batch larger than the run would make no update at all).
MAX_REINFORCE_BATCH = 256
MIN_UPDATES = 10


def reinforce_updates(stats: PilotStats, pilot_batch: int) -> int:
    """The fewest updates a DP-REINFORCE run makes: MIN_UPDATES, or the updates the non-private
    pilot took to learn (E0 over its batch), whichever is more. Adam's step has a fixed size
    whatever the batch averages, so a run of fewer, larger updates moves the policy less than
    the pilot did: on Pendulum the plan's 10 updates of 158 episodes ended below random,
    non-private too, where the pilot's 500 updates of one episode learned
    (benchmarks/log/28-floor.md)."""
    e0 = stats.episodes_to_learn
    if e0 is None:
        return MIN_UPDATES
    return max(MIN_UPDATES, math.ceil(e0 / max(1, pilot_batch)))


def reinforce_batch(stats: PilotStats, noise_sum: float, episodes: int,
                    pilot_batch: int = 1) -> int:
    """DP-REINFORCE's |B|: the batch whose update has the noise-to-signal ratio of one
    non-private episode, √V/S: B²S²(V/S²) = V·B + N_sum, so B = 1 + N_sum/V; at most
    MAX_REINFORCE_BATCH and `episodes` over the updates the run needs (`reinforce_updates`,
    from the pilot, whose batch was `pilot_batch`)."""
    v = max(stats.clipped_variance, 1e-30)
    most = max(1, min(MAX_REINFORCE_BATCH,
                      episodes // reinforce_updates(stats, pilot_batch)))
    return int(max(1, min(most, math.ceil(1 + noise_sum / v))))


# --- running settings on the simulator -----------------------------------------------------
Progress = Callable[[int, int], None]


def build_config(system: str, fields: dict[str, Any]) -> Any:
    """`system`'s config from the fields `config_fields` gave."""
    if system == "pgc-a3c":
        from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

        fields = dict(fields)
        return PGCA3CConfig.from_preset(fields.pop("preset"), **fields)
    if system == "fedpg-cen":
        from privrl.systems.fedpg.config import FedPGConfig

        fields = dict(fields)
        return FedPGConfig.from_preset(fields.pop("preset"), **fields)
    from privrl.systems.dpsgd_rl.reinforce import ReinforceConfig

    fields = dict(fields)
    return ReinforceConfig.from_preset(fields.pop("preset", "paper"), **fields)


def run_settings(system: str, configs: Sequence[Any], progress: Progress | None = None,
                 together: bool = True, final_policy: bool = False) -> list[Curve]:
    """Each config's learning curve; those that can run as one compiled program do (the
    systems' own `for_settings` machinery, `privrl.compute.programs`); each alone when not
    `together` (a task stepped on the host cannot be one program). `final_policy`
    (dp-reinforce): every curve also gets its final policy's return on fresh public
    episodes (`Curve.final_policy`)."""
    from privrl.compute.programs import program_groups

    if system == "pgc-a3c":
        from privrl.systems.pgc_a3c import local

        def run(group: list[Any]) -> list[Curve]:
            outs = (local.run_pgc_a3c_settings(group, progress=progress) if len(group) > 1
                    else [local.run_pgc_a3c(group[0], progress=progress)])
            return [_curve(np.arange(1, o.scores.shape[1] + 1), o.scores, o.wall_seconds)
                    for o in outs]
    elif system == "fedpg-cen":
        from privrl.systems.fedpg import local as fed_local
        from privrl.systems.fedpg.algorithm import settings_algorithm

        def run(group: list[Any]) -> list[Curve]:
            algo = settings_algorithm([fed_local.local_config(c) for c in group])
            outs = fed_local.run_fedpg_settings(algo, progress)
            return [_curve(np.nanmean(o.used_before, axis=0) * o.config.agents,
                           o.mean_return, o.wall_seconds) for o in outs]
    else:
        from privrl.systems.dpsgd_rl.local import final_policy_returns, run_episodic_settings
        from privrl.systems.dpsgd_rl.reinforce import Reinforce

        def run(group: list[Any]) -> list[Curve]:
            algo = Reinforce.settings_algorithm(group)
            outs = run_episodic_settings(algo, [f"s{i}" for i in range(len(group))],
                                         progress)
            # a final policy without the best-candidate lever: its θ, played as the lever's
            # kept policy is (final_policy_returns), so the two compare like for like
            return [_curve(np.arange(1, o.eval_returns.shape[1] + 1)  # episodes played
                           * o.config.batch_episodes, o.eval_returns, o.wall_seconds,
                           o.final_returns if o.final_returns is not None else
                           (final_policy_returns(algo, o.policy.theta.reshape(
                               o.policy.theta.shape[0], -1)) if final_policy else None))
                    for o in outs]
    curves: dict[int, Curve] = {}
    index = {id(c): i for i, c in enumerate(configs)}
    for group in program_groups(list(configs), refusal_of(system), together):
        for c, curve in zip(group, run(group), strict=True):
            curves[index[id(c)]] = curve
    return [curves[i] for i in range(len(configs))]


def refusal_of(system: str) -> Callable[[list[Any]], str | None]:
    """`system`'s own test of which configs run as one program (the field that keeps them
    apart, or None)."""
    if system == "pgc-a3c":
        from privrl.systems.pgc_a3c.algorithm import one_program_field

        return one_program_field
    if system == "fedpg-cen":
        from privrl.systems.fedpg.algorithm import one_program_field as fed_field

        return fed_field
    from privrl.systems.dpsgd_rl.reinforce import Reinforce

    return Reinforce.one_program_field


def program_count(system: str, configs: Sequence[Any], together: bool = True) -> int:
    """How many compiled programs `run_settings` runs `configs` as."""
    from privrl.compute.programs import program_groups

    return len(program_groups(list(configs), refusal_of(system), together))


def _curve(x: np.ndarray, per_trial: np.ndarray, wall: float,
           final_policy: np.ndarray | None = None) -> Curve:
    y = np.asarray(per_trial, np.float64)
    with np.errstate(all="ignore"):
        mean = np.nanmean(y, axis=0) if np.isfinite(y).any() else np.full(y.shape[1], np.nan)
    if final_policy is None:
        return Curve(np.asarray(x, np.float64), mean, float(wall), y)
    fp = np.asarray(final_policy, np.float64).reshape(-1)
    return Curve(np.asarray(x, np.float64), mean, float(wall), y, float(fp.mean()),
                 float(fp.std(ddof=1) / math.sqrt(fp.size)) if fp.size > 1 else None)


def _moving_mark(curve: Curve, random: float, fraction: float
                 ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(episodes, where the curve's moving average reaches random + `fraction` of its final
    improvement over random, the window); None when the final return is not above random."""
    keep = np.isfinite(curve.returns)
    x, y = curve.episodes[keep], curve.returns[keep]
    if y.size < 2:
        return None
    final = curve.final()
    scale = max(abs(random), abs(final), 1.0)
    if final - random <= 0.05 * scale:
        return None
    w = max(1, y.size // 20)
    smooth = np.convolve(y, np.ones(w) / w, mode="valid")
    return x, np.nonzero(smooth >= random + fraction * (final - random))[0], w


def starts_past_mark(curve: Curve, random: float, fraction: float) -> bool:
    """Whether the curve's first window already reaches the mark: its start, not learning."""
    got = _moving_mark(curve, random, fraction)
    return got is not None and got[1].size > 0 and got[1][0] == 0


def episodes_to_learn(curve: Curve, random: float, fraction: float) -> float | None:
    """Episodes until the curve's moving average first reaches random + `fraction` of its final
    improvement over random; None when the final return is not above random, or when the
    first window already reaches it (`starts_past_mark`: the start is measured, not the
    learning speed)."""
    got = _moving_mark(curve, random, fraction)
    if got is None or (got[1].size and got[1][0] == 0):
        return None
    x, hit, w = got
    return float(x[hit[0] + w - 1]) if hit.size else float(x[-1])
