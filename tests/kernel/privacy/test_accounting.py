"""Gaussian mechanisms and the dp-accounting Accountant: ε equals a direct dp-accounting
computation, calibration hits its target, clipping is per example, noise has the declared scale."""

from __future__ import annotations

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from privrl.privacy import (
    Accountant,
    BoxGaussianMechanism,
    CalibrationError,
    GaussianMechanism,
    GaussianSumMechanism,
    PrivacyEvent,
    UnboundedGaussianNoise,
    calibrate_noise_multiplier,
    gaussian_epsilon,
)

POISSON = PrivacyEvent("gaussian", 1.1, "poisson", 0.01)


def test_accountant_matches_direct_dp_accounting() -> None:
    acc = Accountant("rdp")
    acc.compose(POISSON, 300)
    acc.compose(PrivacyEvent("gaussian", 2.0), 7)
    acc.compose(POISSON, 200)  # same event: counts add up
    direct = RdpAccountant()
    direct.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 500))
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 7))
    assert acc.epsilon(1e-5) == pytest.approx(direct.get_epsilon(1e-5), rel=1e-12)
    rec = acc.record(1e-5)
    assert rec["epsilon"] == acc.epsilon(1e-5)
    assert [e["count"] for e in rec["events"]] == [500, 7]
    assert rec["events"][0]["sampling"] == "poisson"


def test_accountant_empty_is_zero_and_epsilon_grows_with_count() -> None:
    acc = Accountant()
    assert acc.epsilon(1e-5) == 0.0
    eps = [acc.epsilon_if(POISSON, n, 1e-5) for n in (10, 100, 1000)]
    assert eps[0] < eps[1] < eps[2]
    assert acc.events == []  # epsilon_if records nothing


def test_pld_account_is_dp_accountings_pld_accountant_to_the_bit() -> None:
    """privrl builds a subsampled Gaussian release's PLD once and self-composes it per count;
    the ε must be the one dp-accounting's own PLDAccountant gives, alone and beside others."""
    from dp_accounting.pld import PLDAccountant

    laplace = PrivacyEvent("laplace", 3.0, "none", 1.0)
    for accounts in ([(POISSON, 700)], [(POISSON, 30)], [(POISSON, 30), (laplace, 2)]):
        theirs = PLDAccountant(value_discretization_interval=1e-4)
        ours = Accountant("pld")
        for event, count in accounts:
            theirs.compose(event.to_dp_event(), count)
            ours.compose(event, count)
        assert ours.epsilon(1e-5) == theirs.get_epsilon(1e-5)


def test_max_count_is_the_exact_boundary() -> None:
    """The cap `upper` only needs to lie above the boundary (n = 3,662 here) for the search to
    run: 20,000, not 1,000,000, whose PLD alone cost half the test."""
    acc = Accountant()
    acc.compose(POISSON, 50)
    n = acc.max_count(POISSON, 1e-5, 3.0, upper=20_000)
    assert 0 < n < 20_000
    assert acc.epsilon_if(POISSON, n, 1e-5) <= 3.0 < acc.epsilon_if(POISSON, n + 1, 1e-5)
    assert acc.max_count(POISSON, 1e-5, 1e-6, upper=10) == 0


@pytest.mark.parametrize(("target", "count", "q"), [(8.0, 1, 1.0), (2.0, 5000, 0.0128)])
def test_calibration_hits_the_target(target: float, count: int, q: float) -> None:
    sigma = calibrate_noise_multiplier(target, 1e-5, count, q)
    sampling = "poisson" if q < 1 else "none"
    acc = Accountant()
    eps = acc.epsilon_if(PrivacyEvent("gaussian", sigma, sampling, q), count, 1e-5)
    less = acc.epsilon_if(PrivacyEvent("gaussian", sigma * 0.999, sampling, q), count, 1e-5)
    assert eps <= target < less
    assert eps == pytest.approx(target, rel=1e-3)


def test_calibration_refuses_unreachable_targets() -> None:
    with pytest.raises(CalibrationError, match="cannot be reached"):
        calibrate_noise_multiplier(1e-7, 1e-10, 10**6)
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(CalibrationError, match="target epsilon"):
            calibrate_noise_multiplier(bad, 1e-5, 1)
    with pytest.raises(ValueError, match="delta"):
        calibrate_noise_multiplier(1.0, 1.5, 1)


@pytest.mark.parametrize("kwargs", [
    {"mechanism": "gaussian", "noise_multiplier": 0.0},
    {"mechanism": "gaussian", "noise_multiplier": 1.0, "sampling": "poisson",
     "sampling_probability": 0.0},
    {"mechanism": "gaussian", "noise_multiplier": 1.0, "sampling_probability": 0.5},
    {"mechanism": "cauchy", "noise_multiplier": 1.0},
])
def test_event_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PrivacyEvent(**kwargs)


def test_dpsgd_clipping_is_per_example() -> None:
    """One example with a huge gradient is clipped to C; the others pass through unchanged."""
    mech = GaussianSumMechanism(noise_multiplier=0.5, clip=1.0)
    grads = jnp.array([[0.3, 0.4, 0.0], [1e6, 0.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    key = jax.random.key(3)
    noise = 0.5 * 1.0 * jax.random.normal(key, (3,))
    got = mech.privatize(key, grads).value - noise
    expected = np.array([0.3 + 1.0, 0.4, 0.5])  # row 2 -> (1, 0, 0), rows 1 and 3 unchanged
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_dpsgd_noise_has_std_sigma_c() -> None:
    """Empirical std over 20,000 draws × 8 coordinates is within 2% of σC (the standard error of
    a sample std here is about 0.25%, so a false failure needs an 8-sigma deviation)."""
    mech = GaussianSumMechanism(noise_multiplier=0.7, clip=2.0, sampling_probability=0.1)
    keys = jax.random.split(jax.random.key(0), 20_000)
    zero = jnp.zeros((5, 8))
    draws = jax.vmap(lambda k: mech.privatize(k, zero).value)(keys)
    assert float(jnp.std(draws)) == pytest.approx(1.4, rel=0.02)
    assert mech.event == PrivacyEvent("gaussian", 0.7, "poisson", 0.1)
    g = mech.guarantee
    assert g.epsilon == pytest.approx(Accountant().epsilon_if(mech.event, 1, 1e-5))
    assert g.neighbouring == "add or remove one example"


def test_box_gaussian_clips_into_the_box_and_states_exact_epsilon() -> None:
    mech = BoxGaussianMechanism((-1.0, -2.0), (1.0, 2.0), noise_multiplier=0.8, delta=1e-6)
    assert mech.diagonal == pytest.approx(math.sqrt(4 + 16))
    np.testing.assert_allclose(mech.clip_input(jnp.array([5.0, -7.0])), [1.0, -2.0])
    np.testing.assert_allclose(mech.clip_input(jnp.array([0.5, 1.0])), [0.5, 1.0])
    assert mech.guarantee.epsilon == pytest.approx(gaussian_epsilon(0.8, 1e-6))
    assert mech.guarantee.sensitivity == pytest.approx(mech.diagonal)
    keys = jax.random.split(jax.random.key(1), 20_000)
    out = jax.vmap(lambda k: mech.privatize(k, jnp.array([9.0, 9.0])).value)(keys)
    np.testing.assert_allclose(out.mean(0), [1.0, 2.0], atol=5 * mech.std / math.sqrt(20_000))
    with pytest.raises(ValueError, match="low < high"):
        BoxGaussianMechanism((1.0,), (1.0,), 1.0)
    with pytest.raises(ValueError, match="delta"):
        BoxGaussianMechanism((0.0,), (1.0,), 1.0, delta=0.0)


def test_local_gaussian_uses_the_ball_diameter() -> None:
    mech = GaussianMechanism(noise_multiplier=2.0, clip=0.5)
    assert mech.event.noise_multiplier == 1.0  # std 1.0 over sensitivity 2·clip = 1.0
    assert mech.guarantee.epsilon == pytest.approx(gaussian_epsilon(1.0, 1e-5))
    x = mech.privatize(jax.random.key(0), jnp.array([3.0, 4.0])).value
    assert x.shape == (2,)


def test_unbounded_noise_claims_nothing() -> None:
    mech = UnboundedGaussianNoise((0.55, 0.39, 0.05, 0.32))
    assert not mech.guarantee.is_private
    assert "unbounded" in mech.guarantee.neighbouring
    with pytest.raises(ValueError):
        UnboundedGaussianNoise((-1.0,))


# --- the tight default: analytic Gaussian where exact, PLD otherwise, RDP beside it -------
def _direct(accountant: dp_accounting.PrivacyAccountant, *events: tuple[PrivacyEvent, int]
            ) -> dp_accounting.PrivacyAccountant:
    for event, count in events:
        accountant.compose(dp_accounting.SelfComposedDpEvent(event.to_dp_event(), count))
    return accountant


def test_default_pld_matches_direct_pld_and_records_rdp_beside_it() -> None:
    """The issue's dp-dqn example: 162 Poisson-subsampled releases at σ = 1, q = 0.0128."""
    from dp_accounting.pld import PLDAccountant

    event = PrivacyEvent("gaussian", 1.0, "poisson", 0.0128)
    acc = Accountant()
    acc.compose(event, 162)
    pld = _direct(PLDAccountant(value_discretization_interval=1e-4), (event, 162))
    rdp = _direct(RdpAccountant(), (event, 162))
    rec = acc.record(1e-5)
    assert acc.kind == "pld" and acc.method == "pld"
    assert rec["epsilon"] == pytest.approx(pld.get_epsilon(1e-5), rel=1e-12)
    assert rec["cross_check"]["epsilon"] == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-12)
    assert rec["epsilon"] == pytest.approx(1.087, abs=1e-3) and rec["cross_check"]["epsilon"] \
        == pytest.approx(1.502, abs=1e-3)  # the issue's numbers: 38 % lower
    assert rec["pld_parameters"]["value_discretization_interval"] == 1e-4
    assert rec["pld_parameters"]["pessimistic_estimate"] is True


def test_unsampled_gaussians_compose_exactly_by_the_analytic_gaussian() -> None:
    """k releases at z and m at w are one release at (k/z² + m/w²)^(-1/2), exactly (GDP); the
    analytic value lies below PLD's pessimistic one (by less than its grid's effect) and RDP.
    k = 10, not 40: any k shows it, and the direct PLD of 40 releases (ε ≈ 50, a wide loss
    grid) was 1.8 of the test's 2 CPU-s."""
    from dp_accounting.pld import PLDAccountant

    a, b = PrivacyEvent("gaussian", 1.0), PrivacyEvent("gaussian", 2.5)
    acc = Accountant()
    acc.compose(a, 10)
    acc.compose(b, 7)
    z = (10 / 1.0 + 7 / 2.5 ** 2) ** -0.5
    exact = dp_accounting.get_epsilon_gaussian(z, 1e-6)
    pld = _direct(PLDAccountant(value_discretization_interval=1e-4), (a, 10), (b, 7))
    rdp = _direct(RdpAccountant(), (a, 10), (b, 7))
    eps = acc.epsilon(1e-6)
    assert acc.method == "analytic" and eps == pytest.approx(exact, rel=1e-9)
    assert eps <= pld.get_epsilon(1e-6) <= eps * 1.002
    assert eps < rdp.get_epsilon(1e-6)
    assert acc.record(1e-6)["effective_noise_multiplier"] == pytest.approx(z)
    # The single releases: σ = 0.8 → 5.68 (RDP 6.12); σ = 0.6 → 8.00 (RDP 8.60).
    assert Accountant().epsilon_if(PrivacyEvent("gaussian", 0.8), 1, 1e-5) == pytest.approx(
        5.680, abs=1e-3)
    assert Accountant().epsilon_if(PrivacyEvent("gaussian", 0.6), 1, 1e-5) == pytest.approx(
        8.004, abs=1e-3)


def test_analytic_epsilon_never_falls_below_the_exact_root() -> None:
    from privrl.privacy.accounting import _gaussian_log_delta

    for z, delta in [(0.3, 1e-5), (1.0, 1e-5), (0.0447, 1e-5), (5.0, 1e-9)]:
        eps = gaussian_epsilon(z, delta)
        assert _gaussian_log_delta(z, eps) <= math.log(delta)
        assert eps == pytest.approx(dp_accounting.get_epsilon_gaussian(z, delta), rel=1e-9)


def test_laplace_under_pld_matches_direct_pld() -> None:
    from dp_accounting.pld import PLDAccountant

    event = PrivacyEvent("laplace", 2.0)
    acc = Accountant()
    acc.compose(event, 30)
    pld = _direct(PLDAccountant(value_discretization_interval=1e-4), (event, 30))
    assert acc.method == "pld"
    assert acc.epsilon(1e-5) == pytest.approx(pld.get_epsilon(1e-5), rel=1e-12)
    assert acc.epsilon(1e-5) < 30 / 2.0  # far below basic composition's Σε


def test_rdp_calibration_is_kept_when_chosen_and_tight_needs_less_noise() -> None:
    rdp = calibrate_noise_multiplier(2.0, 1e-5, 60, kind="rdp")
    tight = calibrate_noise_multiplier(2.0, 1e-5, 60)
    acc = Accountant("rdp")
    assert acc.epsilon_if(PrivacyEvent("gaussian", rdp), 60, 1e-5) <= 2.0
    assert acc.epsilon_if(PrivacyEvent("gaussian", rdp * 0.999), 60, 1e-5) > 2.0
    assert tight < rdp
    assert Accountant().epsilon_if(PrivacyEvent("gaussian", tight), 60, 1e-5) <= 2.0


# --- pure ε: the optimal composition beside basic composition ------------------------------
def _brute_force_delta(epsilon: float, k: int, eps_total: float) -> float:
    """δ(ε') of k-fold randomized response by enumerating all 2^k outputs (independent of the
    closed form): Σ_outputs max(0, P(o) − e^ε' Q(o))."""
    import itertools

    p = math.exp(epsilon) / (1 + math.exp(epsilon))
    total = 0.0
    for out in itertools.product((0, 1), repeat=k):
        ones = sum(out)
        po = p ** ones * (1 - p) ** (k - ones)
        qo = (1 - p) ** ones * p ** (k - ones)
        total += max(0.0, po - math.exp(eps_total) * qo)
    return total


@pytest.mark.parametrize(("epsilon", "k", "delta"), [(0.5, 8, 1e-3), (1.0, 10, 1e-2),
                                                     (0.2, 12, 1e-4)])
def test_optimal_composition_matches_brute_force(epsilon: float, k: int, delta: float) -> None:
    from privrl.privacy.accounting import optimal_pure_composition

    eps = optimal_pure_composition(epsilon, k, delta)
    assert _brute_force_delta(epsilon, k, eps) <= delta * (1 + 1e-9)
    assert _brute_force_delta(epsilon, k, eps * (1 - 1e-6)) > delta  # the least such ε'
    assert eps < k * epsilon


def test_optimal_composition_is_below_kov_bound_and_basic() -> None:
    """KOV's Theorem 3.4 upper bound and basic composition both bound the optimal ε'; one
    release stays ε (up to the tiny δ)."""
    from privrl.privacy.accounting import optimal_pure_composition, pure_composition_record

    for eps0, k, delta in [(0.1, 1000, 1e-5), (1 / 3, 300, 1e-5), (2.0, 3, 1e-5)]:
        opt = optimal_pure_composition(eps0, k, delta)
        kov = (k * eps0 * math.expm1(eps0) / (math.exp(eps0) + 1) + eps0 * math.sqrt(
            2 * k * math.log(math.e + math.sqrt(k * eps0 ** 2) / delta)))
        assert opt <= min(k * eps0, kov)
    assert optimal_pure_composition(1.0, 1, 1e-5) == pytest.approx(1.0, abs=1e-4)
    rec = pure_composition_record(0.1, 1000, 1e-5)
    assert rec["basic"]["epsilon"] == pytest.approx(100.0) and rec["basic"]["delta"] == 0
    assert rec["optimal"]["epsilon"] == pytest.approx(17.79, abs=0.01)
    assert rec["enforced_by_ledger"] == "basic"


@pytest.mark.parametrize(("total", "k", "delta"), [(2.0, 8, 1e-3), (3.0, 12, 1e-4)])
def test_calibrated_pure_epsilon_is_the_largest_the_optimal_composition_admits(
        total: float, k: int, delta: float) -> None:
    """Checked by brute force over k-fold randomized response: k releases of the calibrated
    ε_0 are (total, δ)-DP and slightly more are not; it buys more than total / k."""
    from privrl.privacy.accounting import calibrate_pure_epsilon, optimal_composition_admits

    eps0 = calibrate_pure_epsilon(total, k, delta)
    assert _brute_force_delta(eps0, k, total) <= delta * (1 + 1e-9)
    assert _brute_force_delta(eps0 * (1 + 1e-6), k, total) > delta
    assert eps0 > total / k
    assert optimal_composition_admits(eps0, k, total, delta)
    assert not optimal_composition_admits(eps0 * (1 + 1e-6), k, total, delta)
    with pytest.raises(ValueError):
        calibrate_pure_epsilon(math.inf, k, delta)


def test_tight_accountant_falls_back_to_rdp_where_a_pld_would_not_fit() -> None:
    event = PrivacyEvent("gaussian", 0.2, "poisson", 0.0128)
    acc = Accountant()
    acc.compose(event, 100)
    rec = acc.record(1e-5)
    assert acc.method == "rdp" and "fallback" in rec and "cross_check" not in rec
    assert rec["epsilon"] == pytest.approx(
        _direct(RdpAccountant(), (event, 100)).get_epsilon(1e-5), rel=1e-12)


def test_rdp_at_half_sampling_warns_nothing_and_keeps_dp_accountings_epsilon(
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture) -> None:
    """At q = 0.5 (`privrl plan fedpg-cen`'s fleet at K = 100) dp-accounting's RDP series of
    fractional orders does not converge; it logs a warning through absl for each order it
    leaves out (hundreds a plan). privrl's RDP accountants drop exactly that warning and give
    dp-accounting's own ε; absl's logger is left as it was."""
    import logging

    event = PrivacyEvent("gaussian", 16.8, "poisson", 0.5)
    with caplog.at_level(logging.WARNING):
        eps = Accountant("rdp").epsilon_if(event, 282, 1e-5)
        sigma = calibrate_noise_multiplier(2.0, 1e-5, 282, 0.5, "rdp")
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert "failed to converge" not in capfd.readouterr().err
    assert not logging.getLogger("absl").filters
    direct = RdpAccountant()  # the same numbers, and it does warn: the test can fail
    with caplog.at_level(logging.WARNING):
        direct.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(16.8)), 282))
    assert any("failed to converge" in r.getMessage() for r in caplog.records)
    assert eps == direct.get_epsilon(1e-5)
    assert Accountant("rdp").epsilon_if(PrivacyEvent("gaussian", sigma, "poisson", 0.5), 282,
                                        1e-5) <= 2.0
