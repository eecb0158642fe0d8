"""The plan's arithmetic on synthetic pilot numbers (no JAX, no simulator)."""

from __future__ import annotations

import math

import pytest

from privrl.planner import model
from privrl.planner.model import PilotStats
from privrl.privacy.plan import PrivacyRequest, plan_gaussian

STATS = PilotStats(dim=100, norm_quantiles=(0.5, 1.0, 2.0), clip=2.0, clipped_signal=0.2,
                   clipped_variance=0.5, random_return=20.0, nonprivate_return=200.0,
                   episodes_to_learn=400.0)


def laplace(eps: float, r: int, k: int) -> float:
    return model.release_noise("laplace", eps, r, STATS.clip, STATS.dim)


def test_noise_to_signal_is_the_formula() -> None:
    # sqrt((V/m + N) / n) / S with V = 0.5, m = 1, N = 1.5, n = 4, S = 0.2: sqrt(0.5)/0.2
    assert model.noise_to_signal(STATS, 1.5, 4) == pytest.approx(math.sqrt(2.0 / 4) / 0.2)
    # m episodes per report divide the sampling variance, not the mechanism's noise
    m4 = PilotStats(**{**STATS.to_dict(), "episodes_per_report": 4})
    assert model.noise_to_signal(m4, 1.5, 1) == pytest.approx(math.sqrt(0.125 + 1.5) / 0.2)


def test_laplace_noise_is_split_over_the_reports() -> None:
    # L1 clip C/2, Laplace(C/ε₀) per coordinate: E‖noise‖² = 2d(C/ε₀)², ε₀ = ε/R (basic)
    assert laplace(4.0, 1, 1) == pytest.approx(2 * 100 * (2.0 / 4.0) ** 2)
    assert laplace(4.0, 2, 1) == pytest.approx(4 * laplace(4.0, 1, 1))
    assert laplace(math.inf, 1, 1) == 0.0


def test_gaussian_noise_comes_from_the_privacy_plan() -> None:
    sigma = plan_gaussian(PrivacyRequest(epsilon=2.0, accountant="rdp"), 8).noise_multiplier
    got = model.release_noise("gaussian", 2.0, 8, 0.5, 10)
    assert got == pytest.approx(10 * (sigma * 0.5) ** 2)
    # shared by K reports (a noise draw on the sum): each carries 1/K of it
    assert model.release_noise("distributed-gaussian", 2.0, 8, 0.5, 10, summed_over=50) \
        == pytest.approx(got / 50)


def test_episodes_needed_scales_with_the_variance() -> None:
    assert model.episodes_needed(STATS, 0.0) == pytest.approx(400.0)
    assert model.episodes_needed(STATS, 1.0) == pytest.approx(400.0 * 1.5 / 0.5)
    did_not_learn = PilotStats(**{**STATS.to_dict(), "episodes_to_learn": None})
    assert model.episodes_needed(did_not_learn, 0.0) == math.inf
    assert model.smallest_fleet(did_not_learn, laplace, 5.0, (1,)) is None


def test_fleet_needed_grows_as_epsilon_shrinks() -> None:
    fleets = [model.smallest_fleet(STATS, laplace, e, (1, 2, 4))[0]  # type: ignore[index]
              for e in (8.0, 4.0, 2.0, 1.0, 0.5)]
    assert fleets == sorted(fleets) and fleets[-1] > 10 * fleets[0]
    k, r = model.smallest_fleet(STATS, laplace, 1.0, (1, 2, 4))  # type: ignore[misc]
    assert r == 1  # LDP: noise ∝ R², so one report per agent
    assert model.fleet_learns(STATS, laplace, 1.0, k, r)
    assert not model.fleet_learns(STATS, laplace, 1.0, k - 1, r)  # the smallest


def test_smallest_epsilon_inverts_the_fleet() -> None:
    k, _ = model.smallest_fleet(STATS, laplace, 2.0, (1,))  # type: ignore[misc]
    eps, _ = model.smallest_epsilon(STATS, laplace, k, (1,))  # type: ignore[misc]
    # the bisection stops within 1e-3 in log ε, from above
    assert eps <= 2.0 * math.exp(1e-3) and eps == pytest.approx(2.0, rel=0.05)
    bigger, _ = model.smallest_epsilon(STATS, laplace, 4 * k, (1,))  # type: ignore[misc]
    assert bigger < eps  # more agents, less ε needed


def test_batch_and_step_size_follow_the_noise() -> None:
    ref = model.noise_to_signal(STATS, 0.0, 1)
    assert model.update_batch(STATS, 0.0, ref, 1000) == 1
    assert model.update_batch(STATS, 4.5, ref, 1000) == 10  # (0.5 + 4.5) / 0.5
    assert model.update_batch(STATS, 4.5, ref, 3) == 3
    assert model.step_size(0.01, STATS, 4.5, 10, ref) == pytest.approx(0.01)
    assert model.step_size(0.01, STATS, 4.5, 5, ref) == pytest.approx(0.005)


def test_the_adam_law_grows_with_the_noise_to_signal_ratio_not_its_square() -> None:
    # ρ(N = 4.5, |B| = 9) / ρ(0, |B₀| = 10) = sqrt((0.5 + 4.5)/9) / sqrt(0.5/10) = sqrt(100/9);
    # at half the step: E0 · (10/3) / 0.5
    got = model.episodes_needed_adam(STATS, 4.5, 9, 10, 0.5)
    assert got == pytest.approx(400.0 * (10.0 / 3.0) / 0.5)
    assert got < model.episodes_needed(STATS, 4.5)  # the trace law: E0 · 10
    # no slower than the pilot where the update is as clean as its, and none without E0
    assert model.episodes_needed_adam(STATS, 0.0, 20, 10, 1.0) == 400.0
    none = PilotStats(**{**STATS.to_dict(), "episodes_to_learn": None})
    assert math.isinf(model.episodes_needed_adam(none, 4.5, 9, 10, 0.5))
    # the fleet search takes the law: K is its episodes (one report each)
    k, _ = model.smallest_fleet(STATS, laplace, 2.0, (1,),  # type: ignore[misc]
                                lambda e, n: model.episodes_needed_adam(STATS, n, 9, 10, 0.5))
    want = model.episodes_needed_adam(STATS, laplace(2.0, 1, 1), 9, 10, 0.5)
    assert k == math.ceil(want)
