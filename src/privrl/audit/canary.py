"""The canary swap shared by the end-to-end audits: an agent's own release, whose input is
replaced by the auditor's canary in one of the two worlds."""

from __future__ import annotations

import copy
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array

__all__ = ["CanaryAgentBase", "canary_direction"]


def canary_direction(dim: int, clip: float) -> tuple[Array, Array]:
    """(u, canary): the public direction e₁ and a canary 2·clip along it, beyond any clip (so an
    agent whose pipeline skips clipping is caught too)."""
    u = jnp.zeros((dim,), jnp.float32).at[0].set(1.0)
    return u, 2.0 * clip * u


class CanaryAgentBase:
    """What the end-to-end canary audits share: a system built for one agent, the public θ,
    the canary along e₁ and the attacker's statistic. Subclasses implement
    `privatize(key, [c])` with `self.swapped(c)`, the system whose release sees the canary
    when c = 1."""

    def __init__(self, system: Any, theta_key: Array, name: str) -> None:
        self.system = system
        self.theta = system.model.init(theta_key)
        self.direction, self.canary = canary_direction(system.dim, system.config.clip)
        self.name = name

    @property
    def guarantee(self) -> Any:
        return self.system.mechanism.guarantee

    def swapped(self, on: Array) -> Any:
        """The system whose `release(setting, key, x)` releases the canary instead of x when
        `on` > 0 (world 1), x otherwise (world 0): the same release, clip and noise either
        way."""
        system = copy.copy(self.system)
        release = self.system.release
        system.release = lambda setting, key, x: release(  # type: ignore[method-assign]
            setting, key, jnp.where(on > 0, self.canary, x))
        return system

    def statistic(self, y: np.ndarray) -> np.ndarray:
        """The attacker's score: the report's component along the canary direction."""
        return y @ np.asarray(self.direction)
