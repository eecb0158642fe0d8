"""Privacy amplification by shuffling (Feldman, McMillan & Talwar 2021, "Hiding among the
clones: a simple and nearly optimal analysis of privacy amplification by shuffling", FOCS 2021,
arXiv:2012.12803).

Setting: n users each send one report of an ε₀-LDP randomizer (which may depend on the reports
before it); a shuffler forwards the n reports in a uniformly random order without identities.
FMT21 show (Section 3, the "clones" reduction) that the shuffled output is (ε, δ)-DP for one
user's data whenever the following two distributions are (ε, δ)-indistinguishable:

    C ~ Bin(n − 1, e^{−ε₀}),  A ~ Bin(C, 1/2),  Δ ~ Bernoulli(e^{ε₀}/(e^{ε₀} + 1)),
    P = (A + Δ, C − A + 1 − Δ),   Q = (A + 1 − Δ, C − A + Δ).

`shuffle_delta` computes δ(ε) = max(D_{e^ε}(P‖Q), D_{e^ε}(Q‖P)) for this pair exactly (the sum
over every c with mass above 1e-300, the rest added whole, so it is an upper bound), using that
given C = c the likelihood ratio of P to Q is monotone in A, so the hockey-stick divergence is a
difference of two binomial CDFs at one cut-off. `shuffle_epsilon` is the smallest ε (bisection)
with δ(ε) ≤ δ. FMT21's closed form (their Theorem 3.1, valid when ε₀ ≤ log(n/(16 log(4/δ))))
is `closed_form_epsilon` (the refined form of the authors' released code); the numerical bound
is never larger.

Trust: the guarantee needs a shuffler that hides who sent which report and permutes uniformly;
the aggregator must see only the shuffled batch. Against the shuffler itself (or anyone who sees
reports with identities) only the local ε₀ holds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import binom

__all__ = ["closed_form_epsilon", "shuffle_delta", "shuffle_epsilon", "shuffle_record"]

_REF = ("Feldman, McMillan & Talwar 2021 (FOCS), 'Hiding among the clones', Section 3: the "
        "clones reduction to P, Q over C ~ Bin(n − 1, e^{−ε₀}), computed numerically and exactly "
        "(privrl.privacy.shuffle)")


def _check(epsilon0: float, n: int) -> None:
    if not (math.isfinite(epsilon0) and epsilon0 > 0):
        raise ValueError(f"the local ε₀ must be finite and > 0, got {epsilon0}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"the batch size n must be an integer >= 1, got {n!r}")


def shuffle_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """δ(ε) of n shuffled ε₀-LDP reports (the module docstring); 0 for ε ≥ ε₀."""
    _check(epsilon0, n)
    if epsilon >= epsilon0 or n == 1:
        return 0.0 if epsilon >= epsilon0 else _local_delta(epsilon0, epsilon)
    alpha = 1.0 / (1.0 + math.exp(-epsilon0))
    e = math.exp(epsilon)
    # P_c(a) − e^ε Q_c(a) > 0 iff a < β(c + 1), β = r/(1 + r) with r below
    r = (alpha - e * (1 - alpha)) / (e * alpha - (1 - alpha))
    beta = r / (1 + r)
    mass = binom(n - 1, math.exp(-epsilon0))
    lo, hi = (int(x) for x in mass.ppf([1e-300, 1 - 1e-16]))
    c = np.arange(max(lo - 1, 0), min(hi + 1, n - 1) + 1)
    weight = mass.pmf(c)
    k = np.ceil(beta * (c + 1)) - 1  # the largest a with a < β(c + 1)
    f_k, f_km1 = binom.cdf(k, c, 0.5), binom.cdf(k - 1, c, 0.5)
    p_le = alpha * f_k + (1 - alpha) * f_km1
    q_le = (1 - alpha) * f_k + alpha * f_km1
    inside = float(np.sum(weight * np.maximum(p_le - e * q_le, 0.0)))
    # D(P‖Q) = D(Q‖P) (a ↦ c + 1 − a swaps them); the mass of c outside the sum counts whole
    return min(1.0, inside + max(0.0, 1.0 - float(weight.sum())))


def _local_delta(epsilon0: float, epsilon: float) -> float:
    """n = 1: one ε₀-LDP report, nothing to hide among (randomized response's δ(ε))."""
    return max(0.0, (math.exp(epsilon0) - math.exp(epsilon)) / (math.exp(epsilon0) + 1))


def shuffle_epsilon(epsilon0: float, n: int, delta: float, tol: float = 1e-6) -> float:
    """The smallest ε (within `tol`, rounded up) with δ(ε) ≤ δ; at most ε₀."""
    _check(epsilon0, n)
    if not 0 < delta < 1:
        raise ValueError(f"δ must be in (0, 1), got {delta}")
    lo, hi = 0.0, epsilon0
    if shuffle_delta(epsilon0, n, 0.0) <= delta:
        return 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if shuffle_delta(epsilon0, n, mid) <= delta else (mid, hi)
    return hi


def closed_form_epsilon(epsilon0: float, n: int, delta: float) -> float | None:
    """FMT21's closed-form ε (Theorem 3.1, in the refined form of the authors' released code),
    or None outside its regime ε₀ ≤ log(n/(16 log(4/δ)))."""
    _check(epsilon0, n)
    if epsilon0 > math.log(n / (16 * math.log(4 / delta))):
        return None
    a = 8 * math.sqrt(math.exp(epsilon0) * math.log(4 / delta) / n) + 8 * math.exp(epsilon0) / n
    slack = math.log(1 + a)
    return math.log(1 + (1 - math.exp(-epsilon0)) / (1 + math.exp(-epsilon0 - slack)) * a)


def shuffle_record(epsilon0: float, n: int, delta: float, batches: int = 1) -> dict[str, Any]:
    """privacy.json's account of shuffling: each user's report in a batch of n, and a user in
    `batches` batches (basic composition of the amplified (ε, δ) over them)."""
    eps = shuffle_epsilon(epsilon0, n, delta)
    return {"local_epsilon_per_report": epsilon0, "batch_size": n, "delta": delta,
            "central_epsilon_per_batch": eps, "batches_per_user": batches,
            "central_epsilon": eps * batches, "central_delta": delta * batches,
            "closed_form_epsilon_per_batch": closed_form_epsilon(epsilon0, n, delta),
            "how": _REF + "; basic composition over a user's batches",
            "trust": "the shuffler is trusted to hide identities and permute uniformly; the "
                     "aggregator sees only shuffled batches. Against the shuffler only the "
                     "local ε₀ per report holds."}
