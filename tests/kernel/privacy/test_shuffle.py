"""Amplification by shuffling (FMT21): the exact δ(ε) of the clones reduction, checked by brute
force, against the authors' released numbers, and against their closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from privrl.privacy.shuffle import (
    closed_form_epsilon,
    shuffle_delta,
    shuffle_epsilon,
    shuffle_record,
)


def _brute_delta(eps0: float, n: int, eps: float) -> float:
    """max(D_{e^ε}(P‖Q), D_{e^ε}(Q‖P)) summed over every (c, a), no monotonicity used."""
    alpha = math.exp(eps0) / (1 + math.exp(eps0))
    out = [0.0, 0.0]
    for c in range(n):
        w = binom.pmf(c, n - 1, math.exp(-eps0))
        a = np.arange(c + 2)
        b, b1 = binom.pmf(a, c, 0.5), binom.pmf(a - 1, c, 0.5)
        p = alpha * b + (1 - alpha) * b1
        q = (1 - alpha) * b + alpha * b1
        out[0] += w * np.maximum(p - math.exp(eps) * q, 0).sum()
        out[1] += w * np.maximum(q - math.exp(eps) * p, 0).sum()
    return max(out)


@pytest.mark.parametrize("eps0, n", [(1.5, 20), (3.0, 50), (0.5, 7)])
def test_delta_equals_the_brute_force_hockey_stick_divergence(eps0, n):
    for eps in (0.0, 0.1, 0.4, 0.9 * eps0):
        assert shuffle_delta(eps0, n, eps) == pytest.approx(_brute_delta(eps0, n, eps),
                                                            rel=1e-9, abs=1e-15)
    assert shuffle_delta(eps0, n, eps0) == 0.0


@pytest.mark.parametrize("n, eps0, delta, lower, upper", [
    # apple/ml-shuffling-amplification's numericalanalysis (step 10, 20 bisection steps):
    # its lower and upper bounds on the same quantity
    (100_000, 4.0, 1e-6, 0.16954549645247463, 0.1751216352840992),
    (10_000, 1.0, 1e-6, 0.05297003208028857, 0.0549681624822656),
    (1_000, 2.0, 1e-5, 0.45868873596191406, 0.4923858642578125),
    # the published ones: the authors' README prints example.py's output (step 100, 10 steps),
    # "eps between 0.1675385583317841 and 0.172790550755978", and the closed form 0.5378...
    (100_000, 4.0, 1e-6, 0.1675385583317841, 0.172790550755978),
])
def test_epsilon_lies_between_the_authors_numerical_bounds(n, eps0, delta, lower, upper):
    eps = shuffle_epsilon(eps0, n, delta)
    assert lower - 1e-5 <= eps <= upper
    assert shuffle_delta(eps0, n, eps) <= delta < shuffle_delta(eps0, n, eps - 1e-5)
    closed = closed_form_epsilon(eps0, n, delta)
    assert closed is None or eps < closed  # the numerical bound is the tighter one


def test_closed_form_is_the_authors_and_has_their_regime():
    # the authors' closedformanalysis(10**5, 4, 1e-6) and (10**4, 1, 1e-6)
    assert closed_form_epsilon(4.0, 100_000, 1e-6) == pytest.approx(0.5378040242374512, 1e-12)
    assert closed_form_epsilon(1.0, 10_000, 1e-6) == pytest.approx(0.2332655961237434, 1e-12)
    assert closed_form_epsilon(2.0, 1_000, 1e-5) is None  # ε₀ > log(n / (16 log(4/δ)))


def test_one_report_hides_among_nobody_and_more_reports_hide_better():
    # n = 1: randomized response, δ(ε) = (e^ε₀ − e^ε)/(e^ε₀ + 1) reaches 1e-5 just below ε₀
    eps = shuffle_epsilon(1.0, 1, 1e-5)
    assert eps == pytest.approx(math.log(math.e - 1e-5 * (math.e + 1)), abs=2e-6)
    eps_n = [shuffle_epsilon(1.0, n, 1e-6) for n in (100, 1_000, 10_000)]
    assert eps_n == sorted(eps_n, reverse=True) and eps_n[-1] < 0.1


def test_record_and_bad_input():
    rec = shuffle_record(1.0, 10_000, 1e-6, batches=3)
    assert rec["central_epsilon"] == pytest.approx(3 * rec["central_epsilon_per_batch"])
    assert rec["central_delta"] == pytest.approx(3e-6) and "shuffler" in rec["trust"]
    for args in [(0.0, 10, 1e-6), (1.0, 0, 1e-6), (1.0, 10, 0.0), (math.inf, 10, 1e-6)]:
        with pytest.raises(ValueError):
            shuffle_epsilon(*args)
