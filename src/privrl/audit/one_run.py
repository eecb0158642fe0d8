"""One-run auditing (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training
run"): a lower bound on ε from a single training run with m canaries.

Each canary is included in the training data independently with probability 1/2. After the run
the auditor scores every canary, guesses "in" for the k₊ highest scores and "out" for the k₋
lowest (abstaining on the rest), and counts its correct guesses v out of r = k₊ + k₋. If the run
is (ε, δ)-DP with respect to each canary, the number of correct guesses is stochastically
dominated, up to a δ term, by Binomial(r, e^ε / (1 + e^ε)) (their Theorem 3.3 / Appendix D):

    P[V ≥ v] ≤ β + α·δ·2m,
    β = P[Binomial(r, q) ≥ v],  α = max_{1≤i≤v} P[v > Binomial(r, q) ≥ v − i] / i,  q = e^ε/(1+e^ε).

The lower bound at confidence 1 − a is the largest ε whose p-value is still ≤ a: a claim of that
ε (at the same δ) would have produced so many correct guesses with probability ≤ a. k₊ and k₋
must be fixed before the scores are seen (no correction is made for choosing them afterwards).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import binom

from privrl.config import ConfigError

__all__ = ["OneRunResult", "epsilon_lower_one_run", "one_run_audit", "p_value_one_run"]


def p_value_one_run(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability of ≥ v correct guesses out of r, m canaries, under (ε, δ)-DP."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need ε >= 0 and δ in [0, 1], got ε={epsilon}, δ={delta}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    beta = float(binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(beta, 1.0)
    # P[Binomial = v - i] for i = 1..v; cumulative sums give P[v > Binomial >= v - i]
    below = np.cumsum(binom.pmf(v - np.arange(1, v + 1), r, q))
    alpha = float(np.max(below / np.arange(1, v + 1)))
    return min(beta + alpha * delta * 2 * m, 1.0)


def epsilon_lower_one_run(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest ε (to 1e-4) whose p-value for v correct guesses is ≤ 1 − confidence; 0 if
    even ε = 0 explains them. The p-value grows with ε, so bisection finds it."""
    a = 1.0 - confidence
    if p_value_one_run(m, r, v, 0.0, delta) > a:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value_one_run(m, r, v, hi, delta) <= a:
        lo, hi = hi, 2 * hi
        if hi > 1e3:  # every guess right with many guesses: bounded only by the p-value floor
            return lo
    while hi - lo > 1e-4:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value_one_run(m, r, v, mid, delta) <= a else (lo, mid)
    return lo


@dataclass(frozen=True)
class OneRunResult:
    """A one-run audit: the lower bound, the claim it is compared with, and the guesses."""

    mechanism: str
    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    confidence: float
    samples: int  # canaries m (each in with probability 1/2)
    test: str
    guesses: int  # r = k₊ + k₋
    correct: int  # v
    included: int  # canaries that were in the run

    @property
    def violated(self) -> bool:
        """The audit refutes the claim: the true ε exceeds the claimed one (at `confidence`)."""
        return self.epsilon_lower > self.epsilon_claimed

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "violated": self.violated}


def one_run_audit(scores: np.ndarray, included: np.ndarray, *, guesses_in: int,
                  guesses_out: int, epsilon_claimed: float, delta: float,
                  confidence: float = 0.95, name: str = "one-run audit",
                  test: str = "top/bottom scores") -> OneRunResult:
    """Guess "in" for the `guesses_in` highest scores and "out" for the `guesses_out` lowest,
    count the correct guesses and bound ε (the module docstring)."""
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    m = scores.shape[0]
    if scores.ndim != 1 or included.shape != scores.shape:
        raise ConfigError("scores", f"need one score per canary, got {scores.shape} scores "
                                    f"and {included.shape} inclusion flags")
    if guesses_in < 0 or guesses_out < 0 or guesses_in + guesses_out > m:
        raise ConfigError("guesses", f"k+ = {guesses_in} and k- = {guesses_out} must be >= 0 "
                                     f"with k+ + k- <= m = {m}")
    if not np.all(np.isfinite(scores)):
        raise ConfigError("scores", "a canary's score is not finite")
    order = np.argsort(scores, kind="stable")
    out_idx, in_idx = order[:guesses_out], order[m - guesses_in:]
    correct = int(included[in_idx].sum() + (~included[out_idx]).sum())
    r = guesses_in + guesses_out
    lower = epsilon_lower_one_run(m, r, correct, delta, confidence)
    return OneRunResult(name, lower, float(epsilon_claimed), float(delta), float(confidence), m,
                        f"{test}; one-run bound of Steinke, Nasr & Jagielski 2023",
                        r, correct, int(included.sum()))
