"""Central DP for a robust aggregate: a server trusted with every agent's clipped update applies
a coordinate-wise rule (mean, trimmed mean, median) and adds Gaussian noise scaled to the
rule's own sensitivity.

Sensitivity (replace one agent's update; every update clipped so that any two are at most
`diameter` apart in L2). In one coordinate, changing one input by Δ moves every order
statistic by between 0 and Δ (the same sign) and all K of them by Δ in total, so the sum of
any K − 2t middle ones moves by at most |Δ|: the coordinate-wise trimmed mean (t dropped at
each end) moves by at most |Δ_i|/(K − 2t) per coordinate, hence by at most
‖v − v′‖/(K − 2t) ≤ diameter/(K − 2t) in L2. The mean is t = 0; the median t = ⌊(K − 1)/2⌋
(K − 2t = 1 for odd K, 2 for even K: the mean of the middle two).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
from jax import Array

from privrl.privacy.accounting import PrivacyEvent

__all__ = ["CentralGaussian", "kept_per_coordinate"]

# The neighbouring relation the account is stated for.
CENTRAL_NEIGHBOURS = ("user level, replace one: one agent's whole data (every clipped update "
                      "it sends over the run) replaced by any other")


def kept_per_coordinate(rule: str, agents: int, trim: int = 0) -> int:
    """How many values per coordinate the rule averages: K (mean), K − 2·trim (trimmed mean),
    1 or 2 (median of an odd or even K)."""
    if rule == "none":
        return agents
    if rule == "trimmed-mean":
        if not 0 <= 2 * trim < agents:
            raise ValueError(f"trim {trim} leaves nothing of K = {agents}")
        return agents - 2 * trim
    if rule == "median":
        return 2 - agents % 2
    raise ValueError(f"no central sensitivity for rule {rule!r}: none, trimmed-mean or median")


@dataclass(frozen=True)
class CentralGaussian:
    """N(0, (z·S)² I) added by the trusted server to its robust aggregate, S = diameter / kept
    (module docstring); z = `noise_multiplier` (std / sensitivity), one Gaussian event per
    round for the accountant."""

    noise_multiplier: float
    diameter: float
    kept: int

    @property
    def sensitivity(self) -> float:
        return self.diameter / self.kept

    @property
    def std(self) -> float:
        return self.noise_multiplier * self.sensitivity

    @property
    def event(self) -> PrivacyEvent:
        return PrivacyEvent("gaussian", self.noise_multiplier)

    def release(self, key: Array, aggregate: Array) -> Array:
        """The aggregate plus its noise (the server's own key)."""
        return aggregate + self.std * jax.random.normal(key, aggregate.shape, aggregate.dtype)
