"""The box of box-mode observation LDP (`mechanisms.BoxGaussianMechanism`), checked without
JAX or NumPy, so a config refuses a bad box before they are imported (issue 53, item 10)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["check_box"]


def check_box(low: Sequence[float], high: Sequence[float]
              ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(low, high) as float tuples: the same length >= 1, finite, low < high in every
    coordinate (the box's diagonal is the sensitivity: it must be finite and positive);
    ValueError otherwise."""
    try:
        lows, highs = tuple(float(v) for v in low), tuple(float(v) for v in high)
    except (TypeError, ValueError):
        raise ValueError(f"the box's bounds must be numbers, got low={low!r}, "
                         f"high={high!r}") from None
    if len(lows) != len(highs) or not lows:
        raise ValueError(f"the box needs low and high of the same length >= 1, got "
                         f"{len(lows)} and {len(highs)}")
    if not all(math.isfinite(a) and math.isfinite(b) and a < b
               for a, b in zip(lows, highs, strict=True)):
        raise ValueError(f"the box needs finite low < high in every coordinate, got "
                         f"low={lows}, high={highs}")
    return lows, highs
