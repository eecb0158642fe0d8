"""Norm clipping: the step that bounds a mechanism's sensitivity before noise is added."""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array


def clip_l1(x: Array, bound: float) -> Array:
    """Scale x so that ||x||_1 <= bound (paper 000, eq. 19: x / max(1, ||x||_1 / bound))."""
    norm = jnp.sum(jnp.abs(x))
    return x / jnp.maximum(1.0, norm / bound)


def clip_l2(x: Array, bound: float) -> Array:
    """Scale x so that ||x||_2 <= bound (DP-SGD style per-sample clipping)."""
    norm = jnp.sqrt(jnp.sum(jnp.square(x)))
    return x / jnp.maximum(1.0, norm / bound)


def clip_elementwise(x: Array, bound: float) -> Array:
    """Clamp every coordinate to [-bound, bound] (paper 000, eq. 23)."""
    return jnp.clip(x, -bound, bound)
