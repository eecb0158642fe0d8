"""The canary swap shared by the end-to-end audits: an agent's own mechanism, whose input is
replaced by the auditor's canary in one of the two worlds."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array

__all__ = ["CanaryAgentBase", "CanarySwap", "canary_direction"]


@dataclass(frozen=True)
class CanarySwap:
    """`inner` applied to `canary` instead of the agent's vector when `on` > 0 (world 1), to the
    agent's own vector otherwise (world 0): the same clip and noise either way."""

    inner: Any
    on: Array
    canary: Array

    @property
    def guarantee(self) -> Any:
        return self.inner.guarantee

    def privatize(self, key: Array, g: Array) -> Any:
        return self.inner.privatize(key, jnp.where(self.on > 0, self.canary, g))

    def privatize_with(self, args: Any, key: Array, g: Array) -> Any:
        """The same swap for a program of settings' mechanism (`args`: the trial's setting)."""
        return self.inner.privatize_with(args, key, jnp.where(self.on > 0, self.canary, g))


def canary_direction(dim: int, clip: float) -> tuple[Array, Array]:
    """(u, canary): the public direction e₁ and a canary 2·clip along it, beyond any clip (so an
    agent whose pipeline skips clipping is caught too)."""
    u = jnp.zeros((dim,), jnp.float32).at[0].set(1.0)
    return u, 2.0 * clip * u


class CanaryAgentBase:
    """What the end-to-end canary audits share: a system built for one agent, the public θ,
    the canary along e₁ and the attacker's statistic. Subclasses implement
    `privatize(key, [c])` with `self.swapped(c)`, the system whose mechanism sees the canary
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
        system = copy.copy(self.system)
        system.mechanism = CanarySwap(self.system.mechanism, on, self.canary)
        return system

    def statistic(self, y: np.ndarray) -> np.ndarray:
        """The attacker's score: the report's component along the canary direction."""
        return y @ np.asarray(self.direction)
