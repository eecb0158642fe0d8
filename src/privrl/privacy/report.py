"""The privacy boundary: `Guarantee` (what a mechanism promises) and `Report` (what it releases).

A `Report` is the only object that crosses from an agent to aggregator-side code. It cannot be
built by calling its constructor: only a `Mechanism` (privrl.privacy.mechanisms) mints one, so
every value that reaches an aggregator has passed through a mechanism that declared its guarantee.
Reports are JAX pytrees (the guarantee rides along as static data), so they flow through
`jit`, `vmap` and `lax.scan` unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import jax

from privrl.prng import unroll_threefry

unroll_threefry()  # every mechanism's noise: privrl/prng.py

__all__ = ["Guarantee", "Report"]


@dataclass(frozen=True)
class Guarantee:
    """What one release of a mechanism promises.

    epsilon, delta: the privacy parameters of one release (epsilon = inf means no guarantee).
    notion: e.g. "ε-LDP"; "none" for the non-private baseline.
    unit: what is protected (e.g. "one agent's gradient report").
    neighbouring: the neighbouring relation the guarantee is stated for.
    sensitivity, norm: the sensitivity bound the mechanism enforces and the norm it is measured in.
    """

    epsilon: float
    delta: float
    notion: str
    unit: str
    neighbouring: str
    sensitivity: float | None = None
    norm: str | None = None

    @property
    def is_private(self) -> bool:
        return math.isfinite(self.epsilon)

    def describe(self) -> str:
        if not self.is_private:
            return "NO PRIVACY GUARANTEE (ε = ∞, non-private baseline)"
        d = f", δ = {self.delta:g}" if self.delta else ""
        return f"{self.notion} with ε = {self.epsilon:g}{d} per {self.unit}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon if self.is_private else "inf",
            "delta": self.delta,
            "notion": self.notion,
            "unit": self.unit,
            "neighbouring": self.neighbouring,
            "sensitivity": self.sensitivity,
            "norm": self.norm,
            "private": self.is_private,
        }

    def to_state(self) -> dict[str, Any]:
        """Every field by name, for run files (privrl.runfile); `from_state` inverts it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Guarantee:
        """The guarantee a run file recorded; ValueError if a field is missing or ill-typed."""
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(state, dict) or set(state) - set(names):
            raise ValueError(f"a guarantee has the fields {names}")
        for name in ("epsilon", "delta", "sensitivity"):
            v = state.get(name)
            if not ((isinstance(v, int | float) and not isinstance(v, bool))
                    or (v is None and name == "sensitivity")):
                raise ValueError(f"guarantee {name} must be a number, got {v!r}")
            # ε may be ∞ (no guarantee); NaN, a negative value or δ > 1 is no guarantee at all
            if v is not None and not (v >= 0 and (name == "epsilon" or math.isfinite(v))
                                      and (name != "delta" or v <= 1)):
                raise ValueError(f"guarantee {name} must be "
                                 f"{'in [0, 1]' if name == 'delta' else '>= 0'}, got {v!r}")
        for name in ("notion", "unit", "neighbouring", "norm"):
            v = state.get(name)
            if not (isinstance(v, str) or (v is None and name == "norm")):
                raise ValueError(f"guarantee {name} must be a string, got {v!r}")
        try:
            return cls(**{k: state[k] for k in names if k in state})
        except TypeError as e:
            raise ValueError(f"not a guarantee: {e}") from None


_MINT = object()  # capability held by privrl.privacy.mechanisms only


@jax.tree_util.register_pytree_node_class
class Report:
    """A randomized release from one agent: `.value` (1-D array) and the `.guarantee` it carries.

    Not constructible directly: use a mechanism's `privatize(key, x)`.
    """

    __slots__ = ("guarantee", "value")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "Report cannot be constructed directly; a privacy mechanism's privatize(key, x) "
            "is the only way to turn agent data into a Report"
        )

    @classmethod
    def _mint(cls, token: object, value: jax.Array, guarantee: Guarantee) -> Report:
        if token is not _MINT:
            raise TypeError("only privrl.privacy mechanisms may create a Report")
        report = object.__new__(cls)
        object.__setattr__(report, "value", value)
        object.__setattr__(report, "guarantee", guarantee)
        return report

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Report is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Report is immutable")

    def __repr__(self) -> str:
        shape = getattr(self.value, "shape", None)
        return f"Report(shape={shape}, {self.guarantee.describe()})"

    def __reduce__(self) -> tuple:
        # Pickling (e.g. to send a Report between processes) keeps it a Report.
        return (_unpickle_report, (self.value, self.guarantee))

    # pytree protocol: unflattening rebuilds the same (already-minted) kind of object.
    def tree_flatten(self) -> tuple[tuple[jax.Array], Guarantee]:
        return (self.value,), self.guarantee

    @classmethod
    def tree_unflatten(cls, guarantee: Guarantee, children: tuple[jax.Array]) -> Report:
        return cls._mint(_MINT, children[0], guarantee)


def _unpickle_report(value: jax.Array, guarantee: Guarantee) -> Report:
    return Report._mint(_MINT, value, guarantee)


def restore_report(value: Any, guarantee: Guarantee) -> Report:
    """A Report that was already released and logged, re-materialized from the log.

    Only for recovery and replay: the value left its agent through a mechanism the first time,
    and its privacy was charged then; re-reading it from the log releases nothing new.
    """
    return Report._mint(_MINT, jax.numpy.asarray(value), guarantee)
