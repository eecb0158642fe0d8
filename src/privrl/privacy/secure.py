"""Float-safe noise: exact discrete Laplace and discrete Gaussian samplers on a grid.

Textbook Laplace or Gaussian noise computed in floating point leaks its input through the
low-order bits of the output (Mironov 2012): the set of floats x + noise can reach depends on x.
Here nothing random touches a float. The input is rounded to a grid of step γ (a power of two)
and clipped *in integers* to a radius K (so its sensitivity is bounded exactly, whatever the
float errors before it), integer noise is added, and the integer result times γ is converted
to a float afterwards, which is post-processing.

Samplers (Canonne, Kamath, Steinke 2020, "The discrete Gaussian for differential privacy",
Algorithms 1-3) use only uniform integers and Bernoulli trials with rational probabilities,
so they are exact: no float enters a probability. The uniform integers come from `os.urandom`
(the OS CSPRNG) by rejection sampling, in batches; no seeded generator is involved, so secure
noise is never reproducible from a run's seed.

Grid. γ = 2^(⌊log2 s⌋ − 10) for the noise scale s (Laplace b = clip/ε, Gaussian σ): the noise is
1024-2048 grid steps wide, so rounding moves the input by at most γ/2 ≤ s/2048 per coordinate
(invisible under the noise) and every integer stays far from int64's range.

This runs on the host (numpy); inside jitted code it is reached through
`jax.experimental.io_callback`, which JAX neither elides nor duplicates.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np

__all__ = ["discrete_gaussian", "discrete_laplace", "gaussian_grid", "laplace_grid",
           "secure_gaussian", "secure_gaussian_sum", "secure_laplace"]

_GRID_BITS = 10  # the noise scale is 2^10 to 2^11 grid steps
_MAX_BOUND = 1 << 62


def _words(n: int) -> np.ndarray:
    """n uniform 64-bit words from the OS CSPRNG."""
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


def uniform_below(n: np.ndarray) -> np.ndarray:
    """Exactly uniform integers in [0, n_i) for each n_i (1 <= n_i < 2^62), by rejection."""
    n = np.asarray(n, dtype=np.int64)
    if n.size and (n.min() < 1 or n.max() >= _MAX_BOUND):
        raise ValueError("uniform_below needs 1 <= n < 2^62")
    out = np.empty(n.shape, np.int64)
    flat_n, flat_out = n.reshape(-1), out.reshape(-1)
    # 2^bits >= n (one spare bit against log2's rounding); acceptance probability >= 1/4.
    bits = np.minimum(np.ceil(np.log2(flat_n.astype(np.float64))).astype(np.int64) + 1, 63)
    todo = np.arange(flat_n.size)
    while todo.size:
        shift = (64 - bits[todo]).astype(np.uint64)
        w = (_words(todo.size) >> shift).astype(np.int64)
        ok = w < flat_n[todo]
        flat_out[todo[ok]] = w[ok]
        todo = todo[~ok]
    return out


def _bernoulli_exp_frac(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Bernoulli(exp(−num/den)) for 0 <= num <= den (CKS20 Algorithm 1, γ <= 1): draw
    A_k ~ Bernoulli(γ/k) for k = 1, 2, ... until the first A_k = 0; return whether k is odd."""
    num = np.asarray(num, np.int64)
    den = np.asarray(den, np.int64)
    out = np.zeros(num.shape, bool)
    active = np.ones(num.shape, bool)
    k = 1
    while active.any():
        idx = np.flatnonzero(active)
        if int(den[idx].max()) * k >= _MAX_BOUND:  # probability < 1/k!: never in practice
            raise OverflowError("Bernoulli(exp(-γ)) sampler ran past int64")
        a = uniform_below(den[idx] * k) < num[idx]
        stop = idx[~a]
        out[stop] = k % 2 == 1
        active[stop] = False
        k += 1
    return out


def _bernoulli_exp_neg(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Bernoulli(exp(−num/den)) for integers num >= 0, den >= 1 (CKS20 Algorithm 1, any γ):
    ⌊γ⌋ Bernoulli(e^−1) trials (stopping at the first failure), then Bernoulli(exp(−frac γ)).
    num may be a Python-int object array (it can exceed int64); den must fit int64."""
    num = np.asarray(num, dtype=object)
    den = np.asarray(den, dtype=object)
    whole = num // den
    frac = (num % den).astype(np.int64)
    den64 = den.astype(np.int64)
    out = np.ones(num.shape, bool)
    active = whole > 0
    done = 0
    while active.any():
        idx = np.flatnonzero(active)
        ok = _bernoulli_exp_frac(np.ones(idx.size, np.int64), np.ones(idx.size, np.int64))
        out[idx[~ok]] = False
        active[idx[~ok]] = False
        done += 1
        active &= (whole > done).astype(bool)
    idx = np.flatnonzero(out)
    out[idx] = _bernoulli_exp_frac(frac[idx], den64[idx])
    return out


def discrete_laplace(t: int, size: int) -> np.ndarray:
    """`size` draws of the discrete Laplace P(y) ∝ exp(−|y|/t), y ∈ ℤ, for an integer t >= 1
    (CKS20 Algorithm 2 with s = 1)."""
    t = int(t)
    if t < 1 or t >= 1 << 40:
        raise ValueError(f"discrete_laplace needs an integer scale 1 <= t < 2^40, got {t}")
    out = np.empty(size, np.int64)
    todo = np.arange(size)
    while todo.size:
        m = todo.size
        u = uniform_below(np.full(m, t, np.int64))
        keep = _bernoulli_exp_frac(u, np.full(m, t, np.int64))  # accept u w.p. exp(−u/t)
        v = np.zeros(m, np.int64)  # v ~ Geometric: successes of Bernoulli(e^−1) before a failure
        going = keep.copy()
        while going.any():
            idx = np.flatnonzero(going)
            ok = _bernoulli_exp_frac(np.ones(idx.size, np.int64), np.ones(idx.size, np.int64))
            v[idx[ok]] += 1
            going[idx[~ok]] = False
        x = u + t * v
        neg = uniform_below(np.full(m, 2, np.int64)) == 1
        good = keep & ~(neg & (x == 0))  # −0 is rejected so that 0 is not counted twice
        out[todo[good]] = np.where(neg, -x, x)[good]
        todo = todo[~good]
    return out


def discrete_gaussian(sigma2: int, size: int) -> np.ndarray:
    """`size` draws of the discrete Gaussian P(y) ∝ exp(−y²/(2σ²)), y ∈ ℤ, for an integer
    σ² >= 1 (CKS20 Algorithm 3: discrete Laplace proposals with t = ⌊σ⌋ + 1, accepted with
    probability exp(−(|y| − σ²/t)²/(2σ²)), computed as a ratio of integers). σ² < 2^26: the
    ratio's denominator 2σ²t² (times the trial count) must fit int64."""
    s2 = int(sigma2)
    if s2 < 1 or s2 >= 1 << 26:
        raise ValueError(f"discrete_gaussian needs an integer variance 1 <= σ² < 2^26, got {s2}")
    t = math.isqrt(s2) + 1
    den = 2 * s2 * t * t
    out = np.empty(size, np.int64)
    todo = np.arange(size)
    while todo.size:
        m = todo.size
        y = discrete_laplace(t, m)
        num = (np.abs(y).astype(object) * t - s2) ** 2
        ok = _bernoulli_exp_neg(num, np.full(m, den, dtype=object))
        out[todo[ok]] = y[ok]
        todo = todo[~ok]
    return out


def _grid(scale: float) -> Fraction:
    """γ = 2^(⌊log2 scale⌋ − 10): a power of two, so k·γ is exact in floats."""
    _, e = math.frexp(scale)  # scale = m·2^e with 0.5 <= m < 1, so ⌊log2 scale⌋ = e − 1
    return Fraction(2) ** (e - 1 - _GRID_BITS)


def laplace_grid(epsilon: float, clip: float) -> tuple[Fraction, int, int]:
    """(γ, K, t) of the secure Laplace mechanism: grid step, the L1 radius of the clipped input
    in grid steps (K = ⌊clip/(2γ)⌋), and the integer noise scale t = ⌈clip/(εγ)⌉.
    Two clipped inputs differ by at most 2K <= clip/γ in L1 (grid units) and t >= (clip/γ)/ε,
    so the discrete Laplace release is ε-DP exactly (the ε of the float mechanism)."""
    gamma = _grid(clip / epsilon)
    k = math.floor(Fraction(clip) / 2 / gamma)
    t = math.ceil(Fraction(clip) / (Fraction(epsilon) * gamma))
    return gamma, k, t


def gaussian_grid(std: float, clip: float) -> tuple[Fraction, int, int]:
    """(γ, K, σ²) of the secure Gaussian mechanisms: grid step, the L2 radius of a clipped input
    in grid steps (K = ⌊clip/γ⌋) and the integer variance σ² = ⌈(std/γ)²⌉ >= (std/γ)²."""
    gamma = _grid(std)
    k = math.floor(Fraction(clip) / gamma)
    s2 = math.ceil((Fraction(std) / gamma) ** 2)
    return gamma, k, s2


def _to_grid(x: np.ndarray, gamma: Fraction) -> np.ndarray:
    """Round to the nearest grid point, as integers (non-finite entries count as 0)."""
    x = np.nan_to_num(np.asarray(x, np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    return np.rint(x / float(gamma)).astype(np.int64)


def _clip_l1_int(k: np.ndarray, radius: int) -> np.ndarray:
    """Integers with Σ|k_i| <= radius exactly: k_i·radius/Σ|k| truncated toward zero."""
    total = int(np.abs(k).astype(object).sum())
    if total <= radius:
        return k
    mag = (np.abs(k).astype(object) * radius) // total
    return (np.sign(k) * mag.astype(np.int64)).astype(np.int64)


def _clip_l2_int(k: np.ndarray, radius: int) -> np.ndarray:
    """Integers with Σ k_i² <= radius² exactly: k_i·radius/⌈√Σk²⌉ truncated toward zero."""
    sq = int((k.astype(object) ** 2).sum())
    if sq <= radius * radius:
        return k
    root = math.isqrt(sq)
    if root * root < sq:
        root += 1
    mag = (np.abs(k).astype(object) * radius) // root
    return (np.sign(k) * mag.astype(np.int64)).astype(np.int64)


def _prescale(x: np.ndarray, norm: float, radius: float) -> np.ndarray:
    """A float pre-clip that only keeps the integers small; the exact clip is in integers."""
    x = np.nan_to_num(np.asarray(x, np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    return x * min(1.0, radius / norm) if norm > 0 else x


def secure_laplace(x: np.ndarray, epsilon: float, clip: float) -> np.ndarray:
    """The float-safe LaplaceMechanism on a 1-D array: L1 clip to clip/2 on the grid, add
    discrete Laplace noise; returns k·γ as float64 (every value lies on the grid)."""
    gamma, k_max, t = laplace_grid(epsilon, clip)
    x = np.asarray(x, np.float64).reshape(-1)
    x = _prescale(x, float(np.abs(np.nan_to_num(x)).sum()), clip / 2)
    k = _clip_l1_int(_to_grid(x, gamma), k_max)
    return (k + discrete_laplace(t, k.size)).astype(np.float64) * float(gamma)


def secure_gaussian(x: np.ndarray, std: float, clip: float) -> np.ndarray:
    """The float-safe GaussianMechanism on a 1-D array: L2 clip to `clip` on the grid, add
    discrete Gaussian noise of variance ⌈(std/γ)²⌉ grid steps²; returns k·γ as float64."""
    gamma, k_max, s2 = gaussian_grid(std, clip)
    x = np.asarray(x, np.float64).reshape(-1)
    x = _prescale(x, float(np.linalg.norm(np.nan_to_num(x))), clip)
    k = _clip_l2_int(_to_grid(x, gamma), k_max)
    return (k + discrete_gaussian(s2, k.size)).astype(np.float64) * float(gamma)


def secure_gaussian_sum(rows: np.ndarray, std: float, clip: float) -> np.ndarray:
    """The float-safe DP-SGD sum on per-example rows (B, d): each row L2-clipped to `clip` on
    the grid in integers, summed exactly, plus discrete Gaussian noise; returns k·γ."""
    gamma, k_max, s2 = gaussian_grid(std, clip)
    rows = np.asarray(rows, np.float64)
    total = np.zeros(rows.shape[1], np.int64)
    for row in rows:
        row = _prescale(row, float(np.linalg.norm(np.nan_to_num(row))), clip)
        total += _clip_l2_int(_to_grid(row, gamma), k_max)
    return (total + discrete_gaussian(s2, total.size)).astype(np.float64) * float(gamma)
