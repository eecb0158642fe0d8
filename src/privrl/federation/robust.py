"""Byzantine-robust aggregation of K released reports (aggregator side: Reports in, a mean out).

Every rule here reads only the reports' values and public numbers (the filter's thresholds,
the assumed Byzantine fraction α), so it is post-processing: an agent's privacy guarantee is
what its mechanism declared, whatever the rule keeps or drops.

- `fedpg_br_keep`: FedPG-BR's Byzantine filter (Fan et al., NeurIPS 2021, Algorithm 1 and its
  released code): R1 finds a "median of means" report μ_mom among the reports that are within
  the threshold 𝔗 of more than K/2 others (the one nearest their mean) and keeps every report
  within 𝔗 of it; if that keeps fewer than (1 − α)K (or none), R2 does the same at the wider
  radius `fallback`. What the threshold must be under a mechanism's noise:
  privrl.systems.fedpg.byzantine and docs/byzantine.md.
- `coordinate_median`, `trimmed_mean`: the coordinate-wise rules (Yin et al. 2018), for
  comparison.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

from privrl.privacy.report import Report

__all__ = ["coordinate_median", "fedpg_br_keep", "robust_mean", "trimmed_mean"]


def _pairwise(values: Array) -> Array:
    """‖v_i − v_j‖ for every pair (K, K), computed directly (no cancellation)."""
    diff = values[:, None, :] - values[None, :, :]
    return jnp.sqrt(jnp.sum(diff * diff, axis=-1))


def _mom_keep(values: Array, dist: Array, radius: Array) -> Array:
    """One rule (R1 or R2) at `radius`: the candidates are the reports within `radius` of more
    than K/2 reports (themselves included); μ_mom is the candidate nearest the candidates'
    mean; keep the reports within `radius` of μ_mom (no candidate: keep none)."""
    k = values.shape[0]
    candidate = jnp.sum(dist <= radius, axis=1) > k / 2
    weight = candidate.astype(values.dtype)
    mean = jnp.sum(values * weight[:, None], axis=0) / jnp.maximum(jnp.sum(weight), 1.0)
    to_mean = jnp.where(candidate, jnp.linalg.norm(values - mean, axis=1), jnp.inf)
    mom = values[jnp.argmin(to_mean)]
    keep = jnp.linalg.norm(values - mom, axis=1) <= radius
    return keep & jnp.any(candidate)


def fedpg_br_keep(values: Array, threshold: Array, fallback: Array, alpha: float) -> Array:
    """FedPG-BR's filter over K report values (K, d): which reports it keeps, (K,) bool.
    R1 at `threshold` (𝔗 = 2σ√(V/B_t), plus the noise term under a mechanism); if it keeps
    fewer than (1 − α)K or none, R2 at `fallback` (2σ in the released code, plus the noise
    term)."""
    k = values.shape[0]
    dist = _pairwise(values)
    r1 = _mom_keep(values, dist, threshold)
    n1 = jnp.sum(r1)
    r2 = _mom_keep(values, dist, fallback)
    return jnp.where((n1 < (1 - alpha) * k) | (n1 == 0), r2, r1)


def coordinate_median(values: Array) -> Array:
    """The coordinate-wise median of the K values (d,)."""
    return jnp.median(values, axis=0)


def trimmed_mean(values: Array, trim: int) -> Array:
    """The coordinate-wise mean after dropping the `trim` largest and `trim` smallest values
    of each coordinate (2·trim < K)."""
    k = values.shape[0]
    return jnp.mean(jnp.sort(values, axis=0)[trim:k - trim], axis=0)


def robust_mean(reports: Report, rule: str, threshold: Array | None = None,
                fallback: Array | None = None, alpha: float = 0.4) -> tuple[Array, Array]:
    """The server's μ from a batch of K Reports (value (K, d)) under `rule`, and which reports
    it kept ((K,) bool; the coordinate-wise rules keep all). fedpg-br averages the kept
    reports; if it keeps none, μ = 0 (the released code then steps on the server's own
    gradient; with σ set for the task this does not happen). trimmed-mean drops ⌊αK⌋ values
    at each end of every coordinate."""
    values = reports.value
    k = values.shape[0]
    everyone = jnp.ones((k,), bool)
    if rule == "none":
        return jnp.mean(values, axis=0), everyone
    if rule == "median":
        return coordinate_median(values), everyone
    if rule == "trimmed-mean":
        return trimmed_mean(values, int(alpha * k)), everyone
    if rule != "fedpg-br":
        raise ValueError(f"unknown robust rule {rule!r}")
    if threshold is None or fallback is None:
        raise ValueError("fedpg-br needs its threshold and fallback radius")
    keep = fedpg_br_keep(values, threshold, fallback, alpha)
    weight = keep.astype(values.dtype)
    return jnp.sum(values * weight[:, None], axis=0) / jnp.maximum(jnp.sum(weight), 1.0), keep
