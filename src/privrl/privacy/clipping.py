"""Norm clipping: the step that bounds a mechanism's sensitivity before noise is added."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.privacy.report import _MINT, Guarantee, Report


def clip_l1(x: Array, bound: float) -> Array:
    """Scale x so that ||x||_1 <= bound (paper 000, eq. 19: x / max(1, ||x||_1 / bound))."""
    norm = jnp.sum(jnp.abs(x))
    return x / jnp.maximum(1.0, norm / bound)


def clip_l1_inverse(x: Array, inverse_bound: Any) -> Array:
    """`clip_l1` given 1/bound (a float32 computed once, `float32_inverse`): the arithmetic XLA
    compiles `clip_l1` with a constant bound to (it turns ÷ constant into × its reciprocal),
    written out, so a bound passed as data (one program for many settings) gives the same
    floats as a bound compiled in."""
    norm = jnp.sum(jnp.abs(x))
    return x / jnp.maximum(1.0, norm * inverse_bound)


def float32_inverse(value: float) -> np.float32:
    """1/value in float32 arithmetic, as XLA inverts a float32 constant divisor."""
    return np.float32(1.0) / np.float32(value)


def clip_l2(x: Array, bound: float) -> Array:
    """Scale x so that ||x||_2 <= bound (DP-SGD style per-sample clipping)."""
    norm = jnp.sqrt(jnp.sum(jnp.square(x)))
    return x / jnp.maximum(1.0, norm / bound)


def clip_l2_inverse(x: Array, inverse_bound: Any) -> Array:
    """`clip_l2` given 1/bound (`float32_inverse`), for a bound passed as data: see
    `clip_l1_inverse`."""
    norm = jnp.sqrt(jnp.sum(jnp.square(x)))
    return x / jnp.maximum(1.0, norm * inverse_bound)


def clip_elementwise(x: Array, bound: float) -> Array:
    """Clamp every coordinate to [-bound, bound] (paper 000, eq. 23)."""
    return jnp.clip(x, -bound, bound)


# --- adaptive clipping (Andrew, Thakkar, McMahan & Ramaswamy 2021) ----------------------------
# The clip follows a quantile γ of the agents' norms: each round every agent releases, privately,
# whether its norm was within the clip (b = 1[‖x‖ <= C_t]); the aggregator estimates the fraction
# b̄_t of agents within it from those releases and moves the clip geometrically,
#     C_{t+1} = C_t·exp(−η_C (b̄_t − γ)),
# a function of released data only (post-processing). The bits cost privacy: under central DP
# (FedPG-Cen) their noised sum shares the round's Gaussian noise (privrl.privacy.distributed);
# under local DP (PGC-A3C) each agent's bit goes through randomized response at its own ε_b,
# split off the report's ε by privrl.privacy.plan.split_clip_bit.


def geometric_clip_update(clip: Any, bit_fraction: Any, quantile: float, learning_rate: float
                          ) -> Any:
    """C_{t+1} = C_t·exp(−η_C (b̄_t − γ)) (Andrew et al. 2021, eq. 2): the one update of every
    adaptive clip. b̄_t above γ (too many agents within the clip) shrinks it, below grows it."""
    return clip * jnp.exp(-learning_rate * (bit_fraction - quantile))


def randomized_response_keep(epsilon: float) -> float:
    """The probability e^ε/(1 + e^ε) that ε-DP randomized response reports a bit as it is."""
    return float(1.0 / (1.0 + math.exp(-epsilon)))


def debiased_bit_fraction(released: Array, live: Array, epsilon: float) -> Array:
    """The unbiased estimate of the fraction of live agents whose bit is 1, from their
    randomized-response releases (`released`, 0/1; `live`, who released): (r̄ − (1 − p))/(2p − 1)
    with p = `randomized_response_keep(ε)`, clamped to [0, 1]. No live agent: γ-neutral ½ is
    not assumed; the caller keeps the clip (NaN is returned)."""
    p = randomized_response_keep(epsilon)
    n = jnp.sum(live)
    mean = jnp.sum(jnp.where(live, released, 0.0)) / jnp.maximum(n, 1)
    est = jnp.clip((mean - (1.0 - p)) / (2.0 * p - 1.0), 0.0, 1.0)
    return jnp.where(n > 0, est, jnp.nan)


@dataclass(frozen=True)
class ClipBitRelease:
    """An agent's adaptive-clip bit b = 1[‖x‖ <= C_t] released by randomized response at
    `epsilon` (pure ε-LDP for the agent's bit: it is kept with probability e^ε/(1 + e^ε),
    flipped otherwise). The `Report` carries 0.0 or 1.0."""

    epsilon: float

    def __post_init__(self) -> None:
        e = self.epsilon
        if isinstance(e, bool) or not isinstance(e, int | float) or not (
                math.isfinite(e) and e > 0):
            raise ValueError(f"the clip bit's ε must be finite and > 0, got {e!r}")

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(epsilon=float(self.epsilon), delta=0.0, notion="ε-LDP",
                         unit="one agent's adaptive-clip bit (is its norm within the clip?)",
                         neighbouring="replace-one: the bit of any other input", sensitivity=1.0,
                         norm="bit")

    def privatize(self, key: Array, within: Array) -> Report:
        """The released bit (a Report) for `within` (bool): kept w.p. e^ε/(1 + e^ε)."""
        keep = jax.random.uniform(key) < randomized_response_keep(self.epsilon)
        bit = jnp.where(keep, within, ~within).astype(jnp.float32)
        return Report._mint(_MINT, bit, self.guarantee)
