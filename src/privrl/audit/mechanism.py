"""Black-box audit of one release of a mechanism: an empirical lower bound on its ε.

The audit only calls the mechanism's release function on two neighbouring inputs (a worst-case
pair for its declared sensitivity, placed *beyond* the clip so that a mechanism that forgets to
clip is caught too), draws many outputs from each, reduces each output to a scalar statistic and
runs the held-out threshold test of `privrl.audit.stats`. The result is a lower bound on the true
ε that holds with the stated confidence; it can never prove a mechanism private.

What a mechanism must offer (the minimal protocol, met by every `privrl.privacy` mechanism):

* `guarantee`: an object with `epsilon` and `delta` (a `privrl.privacy.Guarantee`);
* `privatize(key, x)`: one release for the PRNG key and input x, returning a `Report` or an array,
  traceable by `jax.vmap` over the key (the audit draws all outputs in one vectorized call);
* the neighbouring pair: `audit_pair(dim)` returning (x, x′), or pass `pair=` to the audit;
  built-in mechanisms have default pairs (`default_pair`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.audit.stats import held_out_bound, scored_threshold
from privrl.config import ConfigError
from privrl.privacy.mechanisms import (
    BoxGaussianMechanism,
    GaussianMechanism,
    GaussianSumMechanism,
    IdentityMechanism,
    LaplaceMechanism,
    ProjectedRandomSignMechanism,
    UnboundedGaussianNoise,
)

__all__ = ["AuditResult", "Auditable", "PoissonSampledSum", "audit_mechanism", "default_pair",
           "default_statistics"]


class Auditable(Protocol):
    """What `audit_mechanism` needs of a mechanism (see the module docstring)."""

    @property
    def guarantee(self) -> Any: ...

    def privatize(self, key: Array, x: Any) -> Any: ...


@dataclass(frozen=True)
class AuditResult:
    """One audit: the lower bound, what it is compared with, and how it was obtained."""

    mechanism: str
    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    confidence: float
    samples: int  # draws per input in all (half select the threshold, half bound ε)
    test: str
    threshold: float
    side: str
    null_input: int
    count_null: int  # held-out draws of the null input in the rejection set (FPR = this / n)
    count_other: int  # held-out draws of the other input in it (TPR = this / n)

    @property
    def violated(self) -> bool:
        """The audit refutes the claim: the true ε exceeds the claimed one (at `confidence`)."""
        return self.epsilon_lower > self.epsilon_claimed

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "violated": self.violated}


@dataclass(frozen=True)
class PoissonSampledSum:
    """`GaussianSumMechanism` with the Poisson sampling its guarantee assumes made explicit.

    The mechanism's `privatize` does not sample (its caller zeroes the rows of examples left out
    of the batch); its guarantee for q < 1 counts on that sampling. This adapter keeps row 0 (the
    audited example) with probability q, independently per release, then calls `privatize`.
    """

    mechanism: GaussianSumMechanism

    @property
    def guarantee(self) -> Any:
        return self.mechanism.guarantee

    @property
    def name(self) -> str:
        return self.mechanism.name

    def privatize(self, key: Array, x: Array) -> Array:
        k_sample, k_noise = jax.random.split(key)
        q = float(self.mechanism.sampling_probability)
        keep = jax.random.bernoulli(k_sample, q) if q < 1 else jnp.array(True)
        x = x.at[0].set(jnp.where(keep, x[0], 0.0))
        return self.mechanism.privatize(k_noise, x).value

    def audit_pair(self, dim: int) -> tuple[Array, Array]:
        """Add/remove one example: a batch of 4 zero rows, and the same with row 0 at 2·clip."""
        x0 = jnp.zeros((4, dim), jnp.float32)
        return x0, x0.at[0, 0].set(2.0 * self.mechanism.clip)


def default_pair(mechanism: Any, dim: int = 1) -> tuple[Array, Array]:
    """A worst-case neighbouring pair for a built-in mechanism, twice as far apart as its clip
    allows (so a correct mechanism is audited at its sensitivity, one that skips clipping beyond).
    """
    pair = getattr(mechanism, "audit_pair", None)
    if callable(pair):
        return pair(dim)
    e1 = jnp.zeros((dim,), jnp.float32).at[0].set(1.0)
    if isinstance(mechanism, LaplaceMechanism | ProjectedRandomSignMechanism | GaussianMechanism):
        # Laplace clips ||x||_1 to clip/2; PRS clips each projected coordinate to clip;
        # the Gaussian clips ||x||_2 to clip. ±2·clip·e1 is beyond all three.
        return 2.0 * mechanism.clip * e1, -2.0 * mechanism.clip * e1
    if isinstance(mechanism, BoxGaussianMechanism):
        low, high = np.asarray(mechanism.low), np.asarray(mechanism.high)
        w = high - low
        return jnp.asarray(low - w / 2, jnp.float32), jnp.asarray(high + w / 2, jnp.float32)
    if isinstance(mechanism, GaussianSumMechanism):
        return PoissonSampledSum(mechanism).audit_pair(dim)
    raise ConfigError("pair", f"no default neighbouring pair for {type(mechanism).__name__}; "
                              "pass pair=(x, x′) or give the mechanism an audit_pair(dim) method")


def _release_fn(mechanism: Any) -> Callable[[Array, Array], Array]:
    def release(key: Array, x: Array) -> Array:
        out = mechanism.privatize(key, x)
        return jnp.ravel(getattr(out, "value", out))
    return release


def _draw(batched: Callable[[Array, Array], Array], key: Array, x: Array, n: int,
          chunk: int) -> np.ndarray:
    """n outputs for input x, `batched` = jit(vmap(release)) over keys, in chunks."""
    keys = jax.random.split(key, n)
    parts = [np.asarray(batched(keys[i:i + chunk], x)) for i in range(0, n, chunk)]
    return np.concatenate(parts).reshape(n, -1)


Statistic = Callable[[np.ndarray], np.ndarray]
COORDINATES = 4  # single-coordinate statistics tried: the coordinates whose means differ most
MODE_ROWS = 2000  # selection draws searched for an output that repeats exactly


def default_statistics(sel0: np.ndarray, sel1: np.ndarray) -> list[tuple[str, Statistic]]:
    """The statistics an audit tries, each fitted on the selection half only.

    Fisher's linear discriminant Σ⁻¹(m′ − m) (for additive Gaussian noise the likelihood-ratio
    statistic) is blind where Σ is singular: a coordinate without noise has no variance, so the
    pseudo-inverse gives it weight 0 and a mechanism that adds no noise audits at ε = 0. So the
    audit also tries the coordinates whose means differ most relative to their spread (a
    deterministic one first), and exact equality with an output that repeats in the selection
    draws (a whole output, or one coordinate): no continuous noise repeats a value, a mechanism
    that sometimes releases a fixed value does.
    """
    m0, m1 = sel0.mean(0), sel1.mean(0)
    cov = np.atleast_2d(np.cov(np.concatenate([sel0 - m0, sel1 - m1]), rowvar=False))
    w = np.linalg.pinv(cov) @ (m1 - m0)
    centre = (m0 + m1) / 2
    stats: list[tuple[str, Statistic]] = [
        ("Fisher discriminant fitted on the selection half",
         lambda y: (y - centre) @ w)]
    spread = np.sqrt((sel0.var(0) + sel1.var(0)) / 2)
    gap = np.abs(m1 - m0)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(gap > 0, gap / spread, 0.0)
    for j in np.argsort(-score, kind="stable")[:COORDINATES]:
        if score[j] > 0:
            stats.append((f"coordinate {int(j)} of the output",
                          lambda y, j=int(j): y[:, j]))
    for which, sel in ((1, sel1), (0, sel0)):
        rows, counts = np.unique(sel[:MODE_ROWS], axis=0, return_counts=True)
        if counts.max() > 1:
            mode = rows[np.argmax(counts)]
            stats.append((f"exact equality with the output input {which} repeats",
                          lambda y, mode=mode: np.all(y == mode, axis=1).astype(float)))
    for j in np.argsort(-score, kind="stable")[:COORDINATES]:
        values, counts = np.unique(sel1[:MODE_ROWS, j], return_counts=True)
        if score[j] > 0 and counts.max() > 1:
            v = values[np.argmax(counts)]
            stats.append((f"exact equality of coordinate {int(j)} with a value input 1 repeats",
                          lambda y, j=int(j), v=v: (y[:, j] == v).astype(float)))
    return stats


def check_audit_settings(samples: int, confidence: float) -> None:
    """An audit's own settings, checked before anything is drawn: at least 20 samples per
    input (half select the threshold, half bound ε) and a confidence in (0, 1)."""
    if isinstance(samples, bool) or int(samples) != samples or samples < 20:
        raise ConfigError("samples", f"must be an integer >= 20, got {samples!r}")
    if not 0 < confidence < 1:
        raise ConfigError("confidence", f"must be in (0, 1), got {confidence!r}")


def audit_mechanism(
    mechanism: Auditable,
    *,
    key: Array,
    samples: int = 200_000,
    confidence: float = 0.95,
    pair: tuple[Any, Any] | None = None,
    dim: int = 1,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
    chunk: int = 100_000,
) -> AuditResult:
    """An empirical lower bound on `mechanism`'s ε for one release, at `confidence`.

    samples: draws per input (split evenly: threshold selection / held-out bound).
    pair: the neighbouring inputs (x, x′); default `default_pair(mechanism, dim)`.
    statistic: maps outputs (n, k) to scalars (n,); default: the best on the selection half of
    `default_statistics` (Fisher's discriminant, single coordinates, exact equality).
    Assumptions: the draws are independent (distinct PRNG keys of a sound generator), and δ is
    the claimed one. The bound holds with probability ≥ `confidence` whatever the threshold.
    """
    check_audit_settings(samples, confidence)
    guarantee = mechanism.guarantee
    claimed, delta = float(guarantee.epsilon), float(guarantee.delta)
    if isinstance(mechanism, IdentityMechanism | UnboundedGaussianNoise) or not math.isfinite(
            claimed):
        raise ConfigError("mechanism", "it claims no guarantee (ε = ∞); there is nothing to audit")
    if isinstance(mechanism, GaussianSumMechanism):
        mechanism = PoissonSampledSum(mechanism)
    x0, x1 = default_pair(mechanism, dim) if pair is None else pair
    x0, x1 = jnp.asarray(x0), jnp.asarray(x1)
    alpha = 1.0 - confidence
    samples = int(samples) - int(samples) % 2
    half = samples // 2
    batched = jax.jit(jax.vmap(_release_fn(mechanism), in_axes=(0, None)))
    k0, k1 = jax.random.split(key)
    y0 = _draw(batched, k0, x0, samples, chunk)
    y1 = _draw(batched, k1, x1, samples, chunk)
    sel0, out0, sel1, out1 = y0[:half], y0[half:], y1[:half], y1[half:]
    if statistic is None:
        candidates = default_statistics(sel0, sel1)
    else:
        candidates = [(getattr(statistic, "__name__", "user statistic"), statistic)]
    # the statistic, threshold, side and order: all chosen on the selection half only
    scored = [(scored_threshold(fn(sel0), fn(sel1), delta, alpha), test, fn)
              for test, fn in candidates]
    (threshold, _), test, statistic = max(scored, key=lambda s: s[0][1])
    eps, ka, kb = held_out_bound(threshold, statistic(out0), statistic(out1), delta, alpha)
    tried = f" (best of {len(candidates)} statistics on that half)" if len(candidates) > 1 else ""
    name = getattr(mechanism, "name", type(mechanism).__name__)
    return AuditResult(
        mechanism=name, epsilon_lower=eps, epsilon_claimed=claimed, delta=delta,
        confidence=confidence, samples=samples,
        test=f"{test}{tried}; threshold chosen on {half} draws per input, Clopper–Pearson bounds "
             f"(each at {alpha / 2:g}) on {half} held-out draws per input",
        threshold=threshold.tau, side=threshold.side, null_input=threshold.null,
        count_null=ka, count_other=kb)
