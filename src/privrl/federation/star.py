"""The star (server) side of FedPG-Cen: average the agents' released gradient reports."""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

from privrl.privacy.report import Report

__all__ = ["average_reports", "mean_from_sum"]


def average_reports(reports: Report, live: Array | None = None) -> Array:
    """μ = mean of the K reports (a batch of Reports, value (K, d)); with `live` (K,) bool,
    the mean over the live ones. Post-processing of the reports only."""
    values = reports.value
    if live is None:
        return jnp.mean(values, axis=0)
    weight = live.astype(values.dtype)
    return jnp.sum(values * weight[:, None], axis=0) / jnp.maximum(jnp.sum(weight), 1.0)


def mean_from_sum(report: Report, count: float) -> Array:
    """μ = the securely aggregated sum (one Report) divided by a public count (the expected
    number of participants q·K, not the realized one, which would tell the server who took
    part). Post-processing of the one released sum."""
    return report.value / count
