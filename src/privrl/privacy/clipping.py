"""Norm clipping: the step that bounds a mechanism's sensitivity before noise is added."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array


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
