"""Learning metrics of paper 000 (section 4): μ_n, FST, success ratio, relative AUC.

Submissions are numbered from 1 as in the paper. Every function takes numpy arrays whose last
axis is the submission axis, so a (trials, N) score matrix works directly.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "first_success_time",
    "median_fst",
    "moving_average",
    "relative_auc",
    "success_ratio_curve",
]


def moving_average(scores: np.ndarray, m: int = 10) -> np.ndarray:
    """μ_n = (1/m) Σ_{n'=n}^{n+m-1} ζ_{n'} (eq. 25), for n = 1 … N-m+1 (forward window)."""
    scores = np.asarray(scores, dtype=np.float64)
    if m < 1:
        raise ValueError(f"window m must be >= 1, got {m}")
    n = scores.shape[-1]
    if n < m:
        return np.zeros((*scores.shape[:-1], 0))
    c = np.cumsum(scores, axis=-1)
    c = np.concatenate([np.zeros((*scores.shape[:-1], 1)), c], axis=-1)
    return (c[..., m:] - c[..., :-m]) / m


def first_success_time(scores: np.ndarray, threshold: float = 195.0, m: int = 10) -> np.ndarray:
    """FST = min{n : μ_n ≥ Θ} (eq. 26), 1-based; inf where the target is never reached."""
    mu = moving_average(scores, m)
    hit = mu >= threshold
    first = np.argmax(hit, axis=-1).astype(np.float64) + 1.0
    return np.where(hit.any(axis=-1), first, np.inf)


def success_ratio_curve(fst: np.ndarray, n_max: int) -> np.ndarray:
    """success_ratio(n) = |{k : FST_k ≤ n}| / K for n = 1 … n_max (eq. 27)."""
    fst = np.asarray(fst, dtype=np.float64).reshape(-1)
    if fst.size == 0:
        raise ValueError("need at least one trial")
    n = np.arange(1, n_max + 1, dtype=np.float64)
    return (fst[None, :] <= n[:, None]).mean(axis=1)


def relative_auc(curve: np.ndarray, reference: np.ndarray) -> float:
    """Area under a success-ratio curve relative to a reference curve (Table 3: ε = ∞)."""
    curve, reference = np.asarray(curve, float), np.asarray(reference, float)
    if curve.shape != reference.shape:
        raise ValueError(f"curves differ in length: {curve.shape} vs {reference.shape}")
    ref = reference.sum()
    return float(curve.sum() / ref) if ref > 0 else math.nan


def median_fst(fst: np.ndarray) -> float | None:
    """Median FST over trials, counting unreached trials as ∞ (None if the median is ∞)."""
    med = float(np.median(np.asarray(fst, dtype=np.float64)))
    return med if math.isfinite(med) else None
