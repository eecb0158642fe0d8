"""The plan's arithmetic: from what a pilot measured on the public simulator to the settings,
the fleet size K at which a task learns at ε, and the smallest ε at which a given K learns.

Pure Python over numbers (no JAX), so it is tested on synthetic pilot numbers. The model is the
one of SGD's sample complexity: a policy-gradient learner needs a number of episodes that grows
with the variance of what each update averages. Without privacy the pilot needed `E0` episodes
(its learning speed) at a per-episode gradient variance `V` (its spread); a private report adds
the mechanism's noise `N` (its squared norm, in expectation) to every report of `m` episodes, so
the private run needs

    E(ε) = E0 · (V/m + N(ε)) / (V/m)   episodes,

i.e. the fleet must bring `E(ε) / (reports per agent · m)` agents. The signal is the norm of the
mean clipped gradient `S`; the noise-to-signal ratio of an update averaging `n` reports is
`sqrt((V/m + N) / n) / S`. The noise `N` of a release comes from the privacy plan
(privrl.privacy.plan, the one reader of a privacy request): the ε per report of a pure
mechanism, the σ of a Gaussian one. That trace law holds for SGD whose step shrinks with the
noise. A learner that keeps a fixed-size Adam step (PGC-A3C's `adaptive`, its step from the
noise) needs E0 · max(1, ρ/ρ0) / (η'/η) instead, with ρ the update's noise-to-signal ratio
(`episodes_needed_adam`). A sweep on the simulator checks the recommendation: the model is a
guide, the sweep is the measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

from privrl.privacy.plan import PlanError, PrivacyRequest, plan_gaussian, plan_pure

# The mechanisms the plan models: how a release's noise scales with its parameter.
# laplace: L1 clip to C/2, Laplace(C/ε₀) per coordinate (privrl.privacy.mechanisms); gaussian:
# L2 clip C, N(0, (σC)²) per coordinate, on each report; distributed-gaussian / central: the
# same σC once on the SUM of the K reports of a round (user-level central DP).
MODELLED = ("laplace", "gaussian", "distributed-gaussian", "central-gaussian")
# The largest fleet the search considers, and its grid (geometric: the model is a guide).
MAX_FLEET = 10_000_000


@dataclass(frozen=True)
class PilotStats:
    """What the pilot measured on the public simulator (no agent's data).

    dim: parameters of the policy; norm_quantiles: the per-episode gradient norm (the norm the
    mechanism clips in) at quantiles 0.1, 0.5, 0.9; clipped_signal / clipped_variance: at the
    recommended clip, the norm of the mean clipped gradient (S) and the variance of one
    episode's clipped gradient about it (V); random_return / nonprivate_return: a uniform
    random policy's and the non-private pilot's final return; episodes_to_learn: episodes the
    non-private pilot played until it reached `target_fraction` of its improvement over random
    (E0; None: it did not); episodes_per_report: m, episodes behind one report."""

    dim: int
    norm_quantiles: tuple[float, float, float]
    clip: float
    clipped_signal: float
    clipped_variance: float
    random_return: float
    nonprivate_return: float
    episodes_to_learn: float | None
    episodes_per_report: int = 1
    # (‖s‖₁/‖s‖₂)²/d of the mean clipped gradient s: the share of the d coordinates its signal
    # spreads over (1: evenly), which Adam's per-coordinate step sees (`FleetLaw`); 1 where
    # the pilot does not measure it
    signal_spread: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Fleet:
    """How a system's fleet turns into reports: each of K agents sends `reports_per_agent`
    reports of `episodes_per_report` episodes; an update averages `batch` reports."""

    agents: int
    reports_per_agent: int
    episodes_per_report: int
    batch: int

    @property
    def episodes(self) -> int:
        return self.agents * self.reports_per_agent * self.episodes_per_report


def release_noise(mechanism: str, epsilon: float, releases: int, clip: float, dim: int,
                  delta: float = 1e-5, summed_over: int = 1) -> float:
    """E‖noise‖² one report carries at an agent's total `epsilon` over `releases` releases,
    by the privacy plan. `summed_over`: the reports one noise draw is shared by (a central or
    distributed mechanism adds σC once to the sum of K reports: each carries 1/K of its
    variance); 0 at ε = ∞."""
    if math.isinf(epsilon):
        return 0.0
    if mechanism == "laplace":
        e0 = _per_report(epsilon, releases, delta)
        return 2.0 * dim * (clip / e0) ** 2
    if mechanism in MODELLED:
        sigma = _sigma(epsilon, releases, delta)
        return dim * (sigma * clip) ** 2 / summed_over
    raise ValueError(f"the plan models {', '.join(MODELLED)}, not {mechanism!r}")


@lru_cache(maxsize=4096)
def _per_report(epsilon: float, releases: int, delta: float) -> float:
    p = plan_pure(PrivacyRequest(epsilon=epsilon, delta=delta), releases, afford_all=True)
    assert p.epsilon_per_report is not None
    return p.epsilon_per_report


@lru_cache(maxsize=4096)
def _sigma(epsilon: float, releases: int, delta: float) -> float:
    p = plan_gaussian(PrivacyRequest(epsilon=epsilon, delta=delta, accountant="rdp"), releases)
    assert p.noise_multiplier is not None
    return p.noise_multiplier


def noise_to_signal(stats: PilotStats, noise: float, batch: int) -> float:
    """sqrt((V/m + N) / n) / S: an update's noise over its signal, averaging `batch` reports
    of m episodes each carrying E‖noise‖² = `noise`."""
    per_report = stats.clipped_variance / stats.episodes_per_report + noise
    return math.sqrt(per_report / batch) / max(stats.clipped_signal, 1e-30)


def episodes_needed(stats: PilotStats, noise: float) -> float:
    """E(ε) = E0 · (V/m + N) / (V/m): the episodes a learner needs when each report of m
    episodes carries E‖noise‖² = `noise` (inf when the pilot did not learn)."""
    if stats.episodes_to_learn is None:
        return math.inf
    v = max(stats.clipped_variance / stats.episodes_per_report, 1e-30)
    return stats.episodes_to_learn * (v + noise) / v


def episodes_needed_adam(stats: PilotStats, noise: float, batch: int,
                         reference_batch: int, step_fraction: float) -> float:
    """E(ε) for a learner that steps with Adam at a step that does not shrink with the noise
    (PGC-A3C's `adaptive`: |B| reports an update, `step_from_noise`'s η·s/(1 + s), s the
    mechanism's known signal-to-noise ratio): Adam's step has a fixed size per coordinate,
    so an update's progress falls with its noise-to-signal ratio ρ, not with ρ² as under
    the trace model's SGD, whose step shrinks with the noise. So
    E(ε) = E0 · max(1, ρ(N, |B|)/ρ(0, |B₀|)) / `step_fraction`, |B₀| the pilot's batch
    (both steps average Adam's same window: it cancels). A model, checked against runs in
    benchmarks/log/26-plan3.md; inf when the pilot did not learn."""
    if stats.episodes_to_learn is None or not step_fraction > 0:
        return math.inf
    ratio = (noise_to_signal(stats, noise, batch)
             / max(noise_to_signal(stats, 0.0, reference_batch), 1e-30))
    return stats.episodes_to_learn * max(1.0, ratio) / step_fraction


# A system's noise per report: (ε, reports per agent, K) -> E‖noise‖² of one report.
NoiseFn = Callable[[float, int, int], float]
# The episodes a learner needs at (ε, E‖noise‖² of one report); None: `episodes_needed`.
NeededFn = Callable[[float, float], float]


def fleet_learns(stats: PilotStats, noise: NoiseFn, epsilon: float, agents: int,
                 reports_per_agent: int, needed: NeededFn | None = None) -> bool:
    """Whether K agents, each sending `reports_per_agent` reports, bring E(ε) episodes
    (`needed`; default the trace model, `episodes_needed`)."""
    try:
        n = noise(epsilon, reports_per_agent, agents)
    except (PlanError, ValueError):
        return False
    have = agents * reports_per_agent * stats.episodes_per_report
    want = episodes_needed(stats, n) if needed is None else needed(epsilon, n)
    return have >= want


def smallest_fleet(stats: PilotStats, noise: NoiseFn, epsilon: float,
                   reports_choices: tuple[int, ...], needed: NeededFn | None = None
                   ) -> tuple[int, int] | None:
    """The smallest K (and its reports per agent, among `reports_choices`) at which the task
    learns at ε by the model; None when no K up to MAX_FLEET does. K is searched by doubling,
    then bisected (whether K learns is monotone in K for each mechanism modelled: more agents
    bring more episodes and, summed, no more noise each)."""
    best: tuple[int, int] | None = None
    for r in reports_choices:
        k = smallest_k(lambda k, r=r: fleet_learns(stats, noise, epsilon, k, r, needed))
        if k is not None and (best is None or k < best[0]):
            best = (k, r)
    return best


def smallest_k(learns: Callable[[int], bool], start: int = 1, within: int | None = None
               ) -> int | None:
    """The smallest K ≤ MAX_FLEET for which `learns` (monotone in K) holds: doubling from
    `start`, then bisected to one agent, or to 1/`within` of K; None when none does."""
    hi = start
    while hi <= MAX_FLEET and not learns(hi):
        hi *= 2
    if hi > MAX_FLEET:
        return None
    lo = hi // 2  # fails (or 0)
    while hi - lo > (max(1, lo // within) if within else 1):
        mid = (lo + hi) // 2
        if learns(mid):
            hi = mid
        else:
            lo = mid
    return hi


def smallest_epsilon(stats: PilotStats, noise: NoiseFn, agents: int,
                     reports_choices: tuple[int, ...], low: float = 1e-3,
                     high: float = 1e4, steps: int = 40, needed: NeededFn | None = None
                     ) -> tuple[float, int] | None:
    """The smallest ε (and its reports per agent) at which K = `agents` learns by the model,
    bisected in log ε (more ε, less noise); None when even ε = `high` does not."""
    best: tuple[float, int] | None = None
    for r in reports_choices:
        if not fleet_learns(stats, noise, high, agents, r, needed):
            continue
        lo, hi = math.log(low), math.log(high)
        if fleet_learns(stats, noise, low, agents, r, needed):
            hi = lo
        for _ in range(steps):
            if hi - lo < 1e-3:
                break
            mid = (lo + hi) / 2
            if fleet_learns(stats, noise, math.exp(mid), agents, r, needed):
                hi = mid
            else:
                lo = mid
        eps = math.exp(hi)
        if best is None or eps < best[0]:
            best = (eps, r)
    return best


def update_batch(stats: PilotStats, noise: float, reference_ratio: float, most: int) -> int:
    """Reports an update should average so that its noise-to-signal ratio is the non-private
    pilot's (`reference_ratio`): the same step size then works; at most `most`."""
    per_report = stats.clipped_variance / stats.episodes_per_report + noise
    want = per_report / max((reference_ratio * stats.clipped_signal) ** 2, 1e-30)
    return int(max(1, min(most, math.ceil(want))))


def step_size(base: float, stats: PilotStats, noise: float, batch: int,
              reference_ratio: float) -> float:
    """The step size: the non-private one while an update's noise-to-signal ratio is the
    pilot's, scaled down by the square of the excess otherwise (post-processing)."""
    ratio = noise_to_signal(stats, noise, batch)
    return base if ratio <= reference_ratio else base * (reference_ratio / ratio) ** 2


# --- FedPG-Cen `fleet`: Poisson-sampled agents over the secure sum --------------------------
@dataclass(frozen=True)
class FleetLaw:
    """The facts of a `fleet` round the fleet law needs: each of K agents takes part with
    probability q = P/K (P = `participants`, min(K, the mechanism's default)); a report is
    the clipped mean gradient of `report_episodes` episodes (B_t); the secure sum's noise
    N(0, (z_Δ·C)²) per coordinate falls on the sum of the reports, divided by q·K; the clip's
    bits take σ_b = `count_share`·P of the same σ (Andrew et al. 2021's split, or σ_b = σ where
    that is too small, `systems.fleet_count_noise`). The non-private pilot ran
    `pilot_participants` agents every round and reached the mark in `rounds_to_learn` rounds
    (None: it did not); it averaged reports of the same `report_episodes`."""

    participants: int
    report_episodes: float
    pilot_participants: int
    rounds_to_learn: float | None
    count_share: float = 1 / 20
    accountant: str = "pld"


def fleet_noise_to_signal(stats: PilotStats, law: FleetLaw, update_multiplier: float,
                          agents: int) -> float:
    """ρ of one `fleet` round: the mean update (Σ of the sampled agents' clipped reports + the
    sum's N(0, (z_Δ·C)²·I)) / (q·K), P = q·K agents in expectation, against its signal S:

        ρ² = [(V/m + (1 − q)·S²) / P + d·(z_Δ·C)² / P²] / S²,

    the first term the reports' sampling variance (m episodes each; the (1 − q)·S² is the
    Poisson count's), the second the sum's noise. ρ(0) at P0 = the pilot's agents, q = 1, is
    the pilot's own."""
    p = min(int(agents), law.participants)
    q = p / max(int(agents), 1)
    s2 = max(stats.clipped_signal, 1e-30) ** 2
    sampling = (stats.clipped_variance / law.report_episodes + (1 - q) * s2) / p
    noise = stats.dim * (update_multiplier * stats.clip) ** 2 / p ** 2
    return math.sqrt((sampling + noise) / s2)


def _adam_rho(stats: PilotStats, rho: float) -> float:
    """ρ as Adam's per-coordinate step sees it: ρ·√(signal_spread). Noise spread evenly over
    d coordinates, a signal on a share k/d of them: on those, each coordinate's noise over its
    signal is ρ·√(k/d) (corridor: k/d ≈ 0.1, benchmarks/log/30-front.md)."""
    return rho * math.sqrt(min(1.0, max(stats.signal_spread, 1e-6)))


def fleet_rounds_needed(stats: PilotStats, law: FleetLaw, update_multiplier: float,
                        agents: int) -> float:
    """R(ε, K) = R0 · max(1, √((1 + ρ²)/(1 + ρ0²))): the `fleet` presets step with Adam at
    their own step η, which moves a coordinate about η·s/√(s² + n²) a step along its signal
    s under noise n: the full step while the update is cleaner than its signal (ρ < 1), a
    share 1/ρ of it beyond. So a round's progress is 1/√(1 + ρ²) of a clean round's, and
    the pilot's (ρ0, mostly below 1) is nearly a clean round's: counted against ρ/ρ0
    (`episodes_needed_adam`'s law) it asked ε ≈ 13 of K = 100 on corridor, which learned at
    0.5 (benchmarks/log/30-front.md). Counted in rounds: the run's rounds are fixed and K
    sets q, not the rounds. inf when the pilot did not learn."""
    if law.rounds_to_learn is None:
        return math.inf
    rho0 = _adam_rho(stats, _pilot_rho(stats, law))
    rho = _adam_rho(stats, fleet_noise_to_signal(stats, law, update_multiplier, agents))
    return law.rounds_to_learn * max(1.0, math.sqrt((1 + rho * rho) / (1 + rho0 * rho0)))


def _pilot_rho(stats: PilotStats, law: FleetLaw) -> float:
    """ρ0: the non-private pilot's round, its agents every round, no noise."""
    return fleet_noise_to_signal(stats, replace(law, participants=law.pilot_participants),
                                 0.0, law.pilot_participants)


def fleet_largest_update_multiplier(stats: PilotStats, law: FleetLaw, rounds: int,
                                    agents: int) -> float | None:
    """The largest z_Δ at which `rounds` rounds of K agents reach the mark
    (`fleet_rounds_needed` ≤ rounds, solved for z_Δ); inf where any noise does (the pilot
    is slower than the sampling alone allows), None where none does."""
    if law.rounds_to_learn is None or rounds < law.rounds_to_learn:
        return None
    rho0 = _adam_rho(stats, _pilot_rho(stats, law))
    rho_most2 = (((rounds / law.rounds_to_learn) ** 2 * (1 + rho0 * rho0) - 1)
                 / _adam_rho(stats, 1.0) ** 2)  # the norm ratio's room
    # less the reports' sampling share (ρ at z_Δ = 0): the sum's noise d·(z_Δ·C)²/(P²·S²)
    room = rho_most2 - fleet_noise_to_signal(stats, law, 0.0, agents) ** 2
    if room <= 0:
        return None
    p = min(int(agents), law.participants)
    s2 = max(stats.clipped_signal, 1e-30) ** 2
    return p * math.sqrt(room * s2 / stats.dim) / stats.clip


def fleet_round_multiplier(update_multiplier: float, participants: int,
                           count_share: float = 1 / 20) -> float:
    """The round's noise multiplier σ (what the accountant charges) whose split leaves the
    update z_Δ: with σ_b = count_share·P, σ = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2)
    (privacy.distributed.joint_noise_multiplier); where the plan raises σ_b to σ (a σ at or
    above 2·count_share·P, `systems.fleet_count_noise`), z_Δ = σ/√(3/4), i.e. σ = z_Δ·√(3/4),
    the larger (less ε) of the two where it is allowed."""
    from privrl.privacy.distributed import joint_noise_multiplier

    if math.isinf(update_multiplier):
        return math.inf
    sb = count_share * participants
    raised = update_multiplier * math.sqrt(0.75)
    return raised if raised >= 2 * sb else joint_noise_multiplier(update_multiplier, sb)


def fleet_smallest_epsilon(stats: PilotStats, law: FleetLaw, agents: int, rounds: int,
                           dp_rounds: int, delta: float) -> float | None:
    """The smallest user-level ε at which K = `agents` reach the mark in `rounds` rounds by the
    fleet law: the ε, by the accountant (privacy.plan.gaussian_spent, Poisson sampling at
    q = P/K over the `dp_rounds` its σ is calibrated for), of the largest σ whose update
    noise the rounds afford; None where no noise does; 0 where any does."""
    z = fleet_largest_update_multiplier(stats, law, rounds, agents)
    if z is None:
        return None
    if math.isinf(z):
        return 0.0
    p = min(int(agents), law.participants)
    return _spent(fleet_round_multiplier(z, p, law.count_share), dp_rounds, delta,
                  law.accountant, p / int(agents))


@lru_cache(maxsize=4096)
def _spent(sigma: float, releases: int, delta: float, accountant: str, q: float) -> float:
    from privrl.privacy.plan import gaussian_spent

    return gaussian_spent(sigma, releases, delta, accountant, q if q < 1 else None)


def fleet_smallest_fleet(stats: PilotStats, law: FleetLaw, epsilon: float, rounds: int,
                         dp_rounds: int, delta: float) -> int | None:
    """The smallest K at which the fleet law's ε (`fleet_smallest_epsilon`) is at most ε:
    more agents at the same P a round is a smaller q, so a smaller σ for the same ε
    (amplification by sampling); searched by doubling, then bisected to 5 %; None when no K
    up to MAX_FLEET does."""
    def learns(k: int) -> bool:
        e = fleet_smallest_epsilon(stats, law, k, rounds, dp_rounds, delta)
        return e is not None and e <= epsilon

    return smallest_k(learns, start=2, within=20)
