"""The buffered, validating aggregator of paper 000 (eq. 22), in optax's init/update style.

Reports are buffered until |B| have arrived; then the aggregator applies their mean through an
optax optimizer (the paper: plain SGD, θ ← θ − η·mean(B)) and empties the buffer. The buffer is
kept as the running sum of its reports (with their count), which is all the mean needs and keeps
the per-report cost O(d) whatever |B| is.
Everything here is post-processing of Reports, so the optimizer choice never affects privacy.

Two entry points:
- `submit(state, report)` (host side): validates the report and raises `InvalidReportError`
  for anything malformed (not a Report, wrong length, wrong dtype, NaN/inf). State is immutable,
  so a rejected report leaves θ and the buffer bit-identical.
- `receive(state, report)` (pure, jittable, used inside the vectorized runner): shape and dtype
  are fixed at trace time; a non-finite report is dropped (state unchanged except `rejected`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from privrl.compute.programs import per_process
from privrl.privacy.report import Report


class InvalidReportError(ValueError):
    """A report the aggregator refuses; the aggregator's state is unchanged."""


@per_process
def named_optimizer(name: str, learning_rate: Any) -> optax.GradientTransformation:
    """optax's `name` ("sgd" | "adam") at `learning_rate`, one object per pair: optax makes new
    functions on every call, and `submit`'s program is cached under its aggregator, so two
    aggregators built alike share one compiled program only if they share the optimizer (a
    rate that cannot be hashed, an array, gets its own)."""
    if name not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")
    return {"sgd": optax.sgd, "adam": optax.adam}[name](learning_rate)


class AggregatorState(NamedTuple):
    theta: Array  # (d,) global parameters
    opt_state: Any
    buffer_sum: Array  # (d,) sum of the reports now in the buffer
    count: Array  # reports now in the buffer
    updates: Array  # θ updates applied
    accepted: Array  # reports accepted
    rejected: Array  # reports dropped by `receive` (non-finite)


@dataclass(frozen=True)
class BufferedAggregator:
    dim: int
    buffer_size: int = 1
    learning_rate: float = 0.5
    optimizer: optax.GradientTransformation | None = None
    dtype: Any = jnp.float32

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise ValueError(f"dim must be >= 1, got {self.dim}")
        if self.buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {self.buffer_size}")
        if self.optimizer is None:
            if not (np.isfinite(self.learning_rate) and self.learning_rate > 0):
                raise ValueError(f"learning_rate must be finite and > 0, got {self.learning_rate}")
            object.__setattr__(self, "optimizer", named_optimizer("sgd", self.learning_rate))

    def init(self, theta: Array) -> AggregatorState:
        theta = jnp.asarray(theta, self.dtype)
        if theta.shape != (self.dim,):
            raise ValueError(f"theta must have shape ({self.dim},), got {theta.shape}")
        zero = jnp.zeros((), jnp.int32)
        return AggregatorState(
            theta=theta,
            opt_state=self.optimizer.init(theta),
            buffer_sum=jnp.zeros((self.dim,), self.dtype),
            count=zero,
            updates=zero,
            accepted=zero,
            rejected=zero,
        )

    # --- host side -----------------------------------------------------------------------
    def check(self, report: Any) -> None:
        """Raise InvalidReportError unless `report` is a well-formed Report for this model."""
        check_report(report, self.dim, self.dtype)

    def submit(self, state: AggregatorState, report: Any) -> AggregatorState:
        """Validate, then accept: returns the new state or raises (old state untouched)."""
        self.check(report)
        return _receive_jit(self, state, report)

    # --- pure, jittable ------------------------------------------------------------------
    def receive(self, state: AggregatorState, report: Report) -> AggregatorState:
        """Buffer one report; when the buffer is full, apply its mean and empty it."""
        value = report.value.astype(self.dtype)
        ok = jnp.all(jnp.isfinite(value))
        buffer_sum = state.buffer_sum + value
        count = state.count + 1
        full = count >= self.buffer_size
        updates, opt_state = self.optimizer.update(
            buffer_sum / self.buffer_size, state.opt_state, state.theta
        )
        flushed = AggregatorState(
            theta=optax.apply_updates(state.theta, updates),
            opt_state=opt_state,
            buffer_sum=jnp.zeros_like(buffer_sum),
            count=jnp.zeros_like(count),
            updates=state.updates + 1,
            accepted=state.accepted + 1,
            rejected=state.rejected,
        )
        buffered = state._replace(buffer_sum=buffer_sum, count=count,
                                  accepted=state.accepted + 1)
        new = _select(full, flushed, buffered)
        dropped = state._replace(rejected=state.rejected + 1)
        return _select(ok, new, dropped)


def _select(pred: Array, a: Any, b: Any) -> Any:
    return jax.tree_util.tree_map(lambda x, y: jnp.where(pred, x, y), a, b)


@jax.jit(static_argnums=0)
def _receive_jit(
    agg: BufferedAggregator, state: AggregatorState, report: Report
) -> AggregatorState:
    return agg.receive(state, report)


def check_report(report: Any, dim: int, dtype: Any = jnp.float32) -> None:
    """Raise InvalidReportError unless `report` is a Report whose value is finite, of shape
    (dim,) and of `dtype`: what every aggregator checks before it uses a report."""
    if not isinstance(report, Report):
        raise InvalidReportError(
            f"expected a privrl Report (made by a privacy mechanism), got "
            f"{type(report).__name__}"
        )
    value = report.value
    shape = getattr(value, "shape", None)
    if shape != (dim,):
        raise InvalidReportError(f"report has shape {shape}, expected ({dim},)")
    if value.dtype != jnp.dtype(dtype):
        raise InvalidReportError(f"report has dtype {value.dtype}, expected {jnp.dtype(dtype)}")
    if not bool(jnp.all(jnp.isfinite(value))):
        raise InvalidReportError("report contains NaN or inf values")
