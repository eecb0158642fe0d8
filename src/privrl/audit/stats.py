"""The distinguishing test behind every audit: a threshold on a scalar statistic, chosen on one
half of the samples, and Clopper–Pearson bounds on its error rates from the other half.

(ε, δ)-DP says that for every output set S and both orders of a neighbouring pair (a, b),
P_b(S) ≤ e^ε P_a(S) + δ. So for any S,

    ε ≥ log((P_b(S) − δ) / P_a(S)),

and replacing P_b(S) by a lower and P_a(S) by an upper confidence bound, each at level α/2,
gives a lower bound on ε that holds with probability ≥ 1 − α (union bound over the two
intervals). S = {t > τ} or {t ≤ τ} for a threshold τ on the statistic t. τ, the side and the
order (a, b) are chosen on the *selection* half; the bound is computed on the *held-out* half
only, so it needs no correction for the many thresholds tried (they never saw that data).
With S = {t > τ} and a the "null" input: P_a(S) is the attack's false-positive rate and
1 − P_b(S) its false-negative rate, the form of Jagielski et al. 2020 and Nasr et al. 2021.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

__all__ = ["Threshold", "clopper_pearson_lower", "clopper_pearson_upper", "epsilon_bound",
           "held_out_bound", "scored_threshold", "select_threshold"]


def clopper_pearson_upper(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """One-sided upper bound on a binomial p from k successes in n trials: P(p > bound) ≤ α."""
    k = np.asarray(k, dtype=float)
    out = beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, out)


def clopper_pearson_lower(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """One-sided lower bound on a binomial p from k successes in n trials: P(p < bound) ≤ α."""
    k = np.asarray(k, dtype=float)
    out = beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1.0)
    return np.where(k <= 0, 0.0, out)


def epsilon_bound(k_a: np.ndarray, k_b: np.ndarray, n: int, delta: float,
                  alpha: float) -> np.ndarray:
    """log((P_b_lower − δ) / P_a_upper) from counts in S of n draws each; 0 where vacuous.

    Each of the two one-sided bounds is at level α/2, so the result holds with prob ≥ 1 − α.
    """
    upper_a = clopper_pearson_upper(k_a, n, alpha / 2.0)
    lower_b = clopper_pearson_lower(k_b, n, alpha / 2.0) - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(lower_b > 0, np.log(np.maximum(lower_b, 1e-300) / upper_a), 0.0)
    return np.maximum(eps, 0.0)


@dataclass(frozen=True)
class Threshold:
    """A rejection set S = {t > tau} (side "above") or {t <= tau} ("below"), and the order of
    the pair: `null` is the input whose P(S) is bounded above (a), the other is bounded below."""

    tau: float
    side: str
    null: int

    def counts(self, t0: np.ndarray, t1: np.ndarray) -> tuple[int, int]:
        """(k_a, k_b): how many draws of the null and of the other input fall in S."""
        def in_s(t: np.ndarray) -> int:
            return int(np.sum(t > self.tau) if self.side == "above" else np.sum(t <= self.tau))
        ka, kb = (in_s(t0), in_s(t1)) if self.null == 0 else (in_s(t1), in_s(t0))
        return ka, kb


def _candidates(t0: np.ndarray, t1: np.ndarray, count: int) -> np.ndarray:
    """Thresholds at pooled-sample quantiles, dense in both tails (where pure-DP leaks show)."""
    pooled = np.sort(np.concatenate([t0, t1]))
    m = pooled.size
    ranks = np.unique(np.concatenate([
        np.geomspace(1, m, count // 2), m - np.geomspace(1, m, count // 2),
        np.linspace(0, m - 1, count // 2)]).astype(int).clip(0, m - 1))
    return np.unique(pooled[ranks])


def select_threshold(t0: np.ndarray, t1: np.ndarray, delta: float, alpha: float,
                     count: int = 600) -> Threshold:
    """The (τ, side, order) whose Clopper–Pearson ε bound is largest on this (selection) half.

    The bounds are scored at level α / (number of candidates): the maximum over many noisy
    estimates is biased towards thresholds with few draws in S, which then fall back on the
    held-out half; the stricter level prefers thresholds whose bound is stable.
    """
    return scored_threshold(t0, t1, delta, alpha, count)[0]


def scored_threshold(t0: np.ndarray, t1: np.ndarray, delta: float, alpha: float,
                     count: int = 600) -> tuple[Threshold, float]:
    """`select_threshold`'s choice and its score on the selection half (used to choose among
    several statistics on that half too: the held-out bound stays valid whatever is chosen)."""
    t0s, t1s = np.sort(t0), np.sort(t1)
    n = min(t0.size, t1.size)
    taus = _candidates(t0, t1, count)
    alpha = alpha / (4 * taus.size)
    above0 = t0s.size - np.searchsorted(t0s, taus, side="right")
    above1 = t1s.size - np.searchsorted(t1s, taus, side="right")
    best, best_eps = Threshold(float(taus[0]), "above", 0), -math.inf
    for side, k0, k1 in (("above", above0, above1),
                         ("below", t0s.size - above0, t1s.size - above1)):
        for null, ka, kb in ((0, k0, k1), (1, k1, k0)):
            eps = epsilon_bound(ka, kb, n, delta, alpha)
            i = int(np.argmax(eps))
            if eps[i] > best_eps:
                best, best_eps = Threshold(float(taus[i]), side, null), float(eps[i])
    return best, best_eps


def held_out_bound(threshold: Threshold, t0: np.ndarray, t1: np.ndarray, delta: float,
                   alpha: float) -> tuple[float, int, int]:
    """ε lower bound of a fixed threshold on held-out draws (n each), and its counts."""
    if t0.size != t1.size:
        raise ValueError("the held-out half needs as many draws from each input")
    ka, kb = threshold.counts(t0, t1)
    return float(epsilon_bound(np.array(ka), np.array(kb), t0.size, delta, alpha)), ka, kb
