"""The one-run bound (Steinke, Nasr & Jagielski 2023): valid under a true ε, tight enough to
see it, and the guessing rule it assumes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from privrl.audit.one_run import epsilon_lower_one_run, one_run_audit, p_value_one_run
from privrl.config import ConfigError


def test_p_value_is_the_binomial_tail_plus_the_delta_term():
    m, r, v, eps, delta = 100, 40, 30, 1.0, 1e-3
    q = math.exp(eps) / (1 + math.exp(eps))
    tail = sum(binom.pmf(j, r, q) for j in range(v, r + 1))
    assert p_value_one_run(m, r, v, eps, 0.0) == pytest.approx(tail, rel=1e-9)
    # α = max over i of P[v - i <= Bin < v] / i, written out term by term
    alpha = max(sum(binom.pmf(v - j, r, q) for j in range(1, i + 1)) / i
                for i in range(1, v + 1))
    assert p_value_one_run(m, r, v, eps, delta) == pytest.approx(tail + 2 * m * delta * alpha,
                                                                rel=1e-9)
    # more ε explains more correct guesses: the p-value grows with ε
    ps = [p_value_one_run(m, r, v, e, delta) for e in (0.0, 0.5, 1.0, 2.0)]
    assert ps == sorted(ps) and ps[0] < ps[-1]


def test_bound_is_valid_for_randomized_response_and_sees_its_epsilon():
    """ε-DP randomized response on each canary's bit: the guesses are right with probability
    exactly e^ε/(1+e^ε), the worst case the bound allows; 400 repetitions at 95 % confidence."""
    rng = np.random.default_rng(0)
    eps, r = 1.0, 1000
    q = math.exp(eps) / (1 + math.exp(eps))
    bounds = np.array([epsilon_lower_one_run(r, r, int(rng.binomial(r, q)), 0.0, 0.95)
                       for _ in range(400)])
    # false refutations: ≤ 5 % in expectation; Binomial(400, 0.05) exceeds 34 w.p. < 0.5 %
    assert (bounds > eps).sum() <= 34
    assert np.median(bounds) > 0.8  # 1000 guesses see most of ε = 1


def test_all_guesses_right_give_the_closed_form_bound():
    # δ = 0, v = r: p(ε) = q^r, so the bound solves q^r = 1 − confidence
    r = 100
    q = 0.05 ** (1 / r)
    assert epsilon_lower_one_run(r, r, r, 0.0, 0.95) == pytest.approx(math.log(q / (1 - q)),
                                                                      abs=2e-4)
    assert epsilon_lower_one_run(r, r, r // 2, 0.0, 0.95) == 0.0  # chance level refutes nothing


def test_audit_guesses_top_in_and_bottom_out():
    included = np.array([1, 0, 1, 0, 1, 0, 1, 0], bool)
    scores = np.array([5.0, -5, 4, -4, -1, 1, 0.1, -0.1])  # canaries 4 and 5 look swapped
    res = one_run_audit(scores, included, guesses_in=2, guesses_out=2, epsilon_claimed=1.0,
                        delta=0.0)
    assert (res.guesses, res.correct, res.included, res.samples) == (4, 4, 4, 8)
    res = one_run_audit(scores, included, guesses_in=4, guesses_out=4, epsilon_claimed=1.0,
                        delta=0.0)
    assert res.correct == 6  # 4 and 5 guessed wrong
    for kin, kout in [(5, 4), (-1, 2)]:
        with pytest.raises(ConfigError, match="guesses"):
            one_run_audit(scores, included, guesses_in=kin, guesses_out=kout,
                          epsilon_claimed=1.0, delta=0.0)
    with pytest.raises(ConfigError, match="scores"):
        one_run_audit(scores[:3], included, guesses_in=1, guesses_out=1, epsilon_claimed=1.0,
                      delta=0.0)
