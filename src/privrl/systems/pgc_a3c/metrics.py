"""Learning metrics of paper 000 (section 4): μ_n, FST, success ratio, relative AUC.

Submissions are numbered from 1 as in the paper. Every function takes numpy arrays whose last
axis is the submission axis, so a (trials, N) score matrix works directly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

__all__ = [
    "first_success_time",
    "held_moving_average",
    "median_fst",
    "moving_average",
    "plot_scores",
    "relative_auc",
    "success_ratio_curve",
    "write_metrics_csv",
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
    if hit.shape[-1] == 0:  # fewer scores than one window: no μ_n, never reached
        return np.full(hit.shape[:-1], np.inf)
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


def write_metrics_csv(path: Path, scores: np.ndarray, submitted: np.ndarray, window: int) -> None:
    """One row per (trial, submission made): score and μ_n (blank where the window runs past
    the trial's last submission). Scores are returns, written with 7 significant digits (a
    float32's): an integer return (CartPole's) prints as the integer it is."""
    with path.open("w") as f:
        f.write("trial,submission,score,mu\n")
        for k, n in enumerate(submitted):
            mu = moving_average(scores[k, :n], window)
            full = mu.shape[0]
            rows = np.column_stack([np.full(full, k), np.arange(1, full + 1), scores[k, :full], mu])
            np.savetxt(f, rows, fmt=["%d", "%d", "%.7g", "%.1f"], delimiter=",")
            for j in range(full, n):
                f.write(f"{k},{j + 1},{float(scores[k, j]):.7g},\n")


def held_moving_average(scores: np.ndarray, submitted: np.ndarray, window: int) -> np.ndarray:
    """μ_n per trial over the full submission axis; after a trial's last complete window
    (it stopped early, e.g. retired at success) its last μ is held."""
    n_max = scores.shape[1] - window + 1
    out = np.zeros((scores.shape[0], max(n_max, 0)))
    for k, n in enumerate(submitted):
        mu = moving_average(scores[k, :n], window)
        out[k, : mu.size] = mu
        out[k, mu.size :] = mu[-1] if mu.size else 0.0
    return out


def plot_scores(
    path: Path, scores: np.ndarray, submitted: np.ndarray, window: int, title: str,
    target: float | None, random: float | None = None,
) -> None:
    """Average score μ_n against submissions (paper Figure 2): mean over trials, IQR band;
    `random` (a random policy's return) as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privrl.output import draw_random, plural

    mu = held_moving_average(scores, submitted, window)
    n = np.arange(window, mu.shape[1] + window)  # μ_n at its window's last episode
    step = max(1, mu.shape[1] // 2000)
    fig, ax = plt.subplots(figsize=(7, 4))
    label = f"mean over {plural(scores.shape[0], 'trial')}"
    if np.any(submitted < scores.shape[1]):
        label += " (a trial's mean is held after it stopped)"
    ax.plot(n[::step], mu.mean(0)[::step], lw=1.2, label=label)
    if scores.shape[0] > 1:
        lo, hi = np.percentile(mu, [25, 75], axis=0)
        ax.fill_between(n[::step], lo[::step], hi[::step], alpha=0.25, label="interquartile range")
    if target is not None:  # a task without a target has no line
        ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target: {target:g}")
    draw_random(ax, random)
    ax.set_xlabel("episodes submitted (each agent's episode is one submission)")
    ax.set_ylabel(f"mean return over the last {plural(window, 'episode')}")
    ax.set_title(title, fontsize=10)
    # returns that can be negative keep their range
    if np.nanmin(scores, initial=0.0) >= 0 and (random is None or random >= 0):
        ax.set_ylim(0, None)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
