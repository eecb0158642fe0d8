"""ε-LDP mean estimation for vectors: PrivUnit2 and PrivUnitG.

Both release an unbiased estimate of a vector x in the L2 ball of radius `clip` with pure ε-LDP,
with error within a constant of optimal for mean estimation (Bhowmick et al. 2018, "Protection
against reconstruction and its applications in private federated learning", Algorithm 1;
Asi, Feldman & Talwar 2022, "Optimal algorithms for mean estimation under local differential
privacy", PrivUnitG), far below Laplace's or PRS's error for a d-dimensional gradient.

**Norm and direction.** Both mechanisms randomize a unit vector. A vector x of any norm ≤ clip
is first lifted onto the unit sphere of R^{d+1}: u = (x/clip, √(1 − ‖x/clip‖²)). The estimate
of u is unbiased, so its first d coordinates times clip are an unbiased estimate of x. The norm
is carried by the extra coordinate and privatized with the direction, by the same release:
**the whole ε covers norm and direction together** (no budget is set aside for the norm).

**The ε split, exactly.** With probability p the output lies in a "cap" around u, otherwise
outside it; the output density is constant on each part (PrivUnit2: on the sphere; PrivUnitG:
relative to a standard Gaussian), so for any output y and inputs u, u′ the likelihood ratio is
at most [p/P(cap)] / [(1 − p)/P(not cap)] = e^{ε₀}·e^{ε₁}, where ε₀ = logit(p) and
ε₁ = logit(P(not cap)) is fixed by the cap's size. Hence each release is exactly
(ε₀ + ε₁)-LDP; `cap_epsilon` = ε₀ is chosen to minimize the estimate's variance unless given.
(Bhowmick et al. state sufficient conditions on γ; here γ is solved from ε₁ exactly.)

Sampling: the component t = ⟨V, u⟩ is drawn by inverting its truncated CDF in float64 on the
host (scipy's `betaincinv` / `ndtri`, a deterministic function of a JAX uniform, so runs stay
reproducible from their keys); the rest of V is a Gaussian direction orthogonal to u.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from scipy import optimize, special

from privrl.config import ConfigError
from privrl.privacy.clipping import clip_l2
from privrl.privacy.mechanisms import (
    LDP_NEIGHBOURS,
    LDP_UNIT,
    Mechanism,
    _check_clip,
    _check_epsilon,
)
from privrl.privacy.report import Guarantee

__all__ = ["MAX_UNIT_EPSILON", "PrivUnitGMechanism", "PrivUnitMechanism", "UnitCalibration",
           "UnitParams", "unit_mechanism", "unit_release"]


class UnitCalibration(NamedTuple):
    """One calibration on the sphere of R^D (D = d + 1)."""

    dim: int  # D
    cap_epsilon: float  # ε₀ = logit(p)
    size_epsilon: float  # ε₁ = logit(P(outside the cap))
    p: float  # probability of the cap
    gamma: float  # cap threshold on t = ⟨V, u⟩
    scale: float  # m = E⟨V, u⟩: the estimate is V/m
    mse: float  # E‖V/m − u‖² (for a unit u; times clip² for x)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def _unit_cal(dim: int, eps0: float, eps1: float) -> UnitCalibration:
    """PrivUnit2 on S^{D−1}: t = ⟨V, u⟩ has density ∝ (1 − t²)^{(D−3)/2}, i.e. (1 + t)/2 ~
    Beta(a, a) with a = (D − 1)/2; the cap is t ≥ γ with P(t ≥ γ) = σ(−ε₁)."""
    a = (dim - 1) / 2.0
    one_minus_tau = float(special.betaincinv(a, a, _sigmoid(-eps1)))  # 1 − τ, τ = (1 + γ)/2
    tau = 1.0 - one_minus_tau
    gamma = 1.0 - 2.0 * one_minus_tau
    # c = E[t·1{t ≥ γ}] = (1 − γ²)^a / ((D − 1)·2^{D−2}·B(a, a)), and 1 − γ² = 4τ(1 − τ)
    log_c = (a * (math.log(4.0) + math.log(tau) + math.log(one_minus_tau))
             - math.log(dim - 1) - (dim - 2) * math.log(2.0) - special.betaln(a, a))
    c = math.exp(log_c)
    p = _sigmoid(eps0)
    # E[t | cap] = c / P(cap), E[t | not cap] = −c / P(not cap) (E t = 0)
    m = c * (p / _sigmoid(-eps1) - (1.0 - p) / _sigmoid(eps1))
    return UnitCalibration(dim, eps0, eps1, p, gamma, m, 1.0 / m**2 - 1.0)


def _gauss_cal(dim: int, eps0: float, eps1: float) -> UnitCalibration:
    """PrivUnitG in R^D: W = ⟨V, u⟩ ~ N(0, 1) truncated to [γ, ∞) (the cap) or (−∞, γ), the
    rest of V ~ N(0, I − uuᵀ); Φ(γ) = σ(ε₁)."""
    gamma = float(special.ndtri(_sigmoid(eps1)))
    phi = math.exp(-gamma * gamma / 2.0) / math.sqrt(2.0 * math.pi)
    p = _sigmoid(eps0)
    up, down = _sigmoid(-eps1), _sigmoid(eps1)  # P(W ≥ γ), P(W < γ)
    m = phi * (p / up - (1.0 - p) / down)
    w2 = p * (1.0 + gamma * phi / up) + (1.0 - p) * (1.0 - gamma * phi / down)  # E W²
    return UnitCalibration(dim, eps0, eps1, p, gamma, m, (w2 + dim - 1) / m**2 - 1.0)


_CALIBRATORS = {"privunit": _unit_cal, "privunitg": _gauss_cal}
# The largest ε a PrivUnit mechanism accepts: PrivUnitG's calibration divides by a cap
# probability that underflows in float64 from about ε = 40 (and an ε this large protects little).
MAX_UNIT_EPSILON = 30.0


@lru_cache(maxsize=256)
def calibrate(kind: str, epsilon: float, dim: int, cap_epsilon: float | None = None
              ) -> UnitCalibration:
    """The calibration for ε on the sphere of R^dim; `cap_epsilon` None: the ε₀ ∈ (0, ε) of
    least variance (a bounded 1-D search; the variance is smooth in ε₀)."""
    cal = _CALIBRATORS[kind]
    if cap_epsilon is not None:
        return cal(dim, cap_epsilon, epsilon - cap_epsilon)
    res = optimize.minimize_scalar(lambda e0: cal(dim, e0, epsilon - e0).mse,
                                   bounds=(1e-6 * epsilon, (1 - 1e-6) * epsilon),
                                   method="bounded", options={"xatol": 1e-6 * epsilon})
    return cal(dim, float(res.x), epsilon - float(res.x))


def _t_quantile(kind: str, cal: UnitCalibration, u: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """t = ⟨V, u⟩ at uniform quantile u ∈ (0, 1), inside the cap or outside it (float64)."""
    u = np.asarray(u, np.float64)
    cap = np.asarray(cap, bool)
    e1 = cal.size_epsilon
    if kind == "privunit":
        a = (cal.dim - 1) / 2.0
        y = special.betaincinv(a, a, u * _sigmoid(-e1))  # 1 − s, s = (1 + t)/2 ≥ τ
        s = special.betaincinv(a, a, u * _sigmoid(e1))  # s < τ
        t = np.where(cap, 1.0 - 2.0 * y, 2.0 * s - 1.0)
    else:
        t = np.where(cap, -special.ndtri(u * special.ndtr(-cal.gamma)),
                     special.ndtri(u * special.ndtr(cal.gamma)))
    return t.astype(np.float32)


class UnitParams(NamedTuple):
    """`unit_release`'s numbers: host-side floats (t's quantile is computed on the host in
    float64 from the calibration)."""

    kind: str  # "privunit" or "privunitg"
    clip: float  # the L2 ball's radius
    cal: UnitCalibration  # on the sphere of R^{d+1}


def lift(x: Array, clip: Any) -> Array:
    """x ↦ u = (x/clip, √(1 − ‖x/clip‖²)) on the unit sphere of R^{d+1} (x clipped first)."""
    z = clip_l2(x, clip) / clip
    return jnp.concatenate([z, jnp.sqrt(jnp.maximum(1.0 - jnp.sum(z * z), 0.0))[None]])


def sphere_release(kind: str, cal: UnitCalibration, key: Array, u: Array) -> Array:
    """The mechanism on a unit vector u of R^D: V/m, an unbiased estimate of u."""
    k_cap, k_t, k_dir = jax.random.split(key, 3)
    cap = jax.random.bernoulli(k_cap, cal.p)
    q = jax.random.uniform(k_t, (), jnp.float32, jnp.finfo(jnp.float32).tiny, 1.0)
    t = jax.pure_callback(
        lambda q_, c_: _t_quantile(kind, cal, q_, c_),
        jax.ShapeDtypeStruct((), jnp.float32), q, cap, vmap_method="expand_dims")
    g = jax.random.normal(k_dir, u.shape, u.dtype)
    g = g - jnp.dot(g, u) * u  # orthogonal to u
    if kind == "privunit":  # uniform on the sphere: a unit direction ⟂ u
        g = jnp.sqrt(jnp.maximum(1.0 - t * t, 0.0)) * g / jnp.linalg.norm(g)
    return (t * u + g) / cal.scale


def unit_release(p: UnitParams, key: Array, x: Array) -> Array:
    """PrivUnit2 / PrivUnitG's release of x (the module docstring): lift x onto the sphere,
    release it there, scale back and drop the lift coordinate."""
    return p.clip * sphere_release(p.kind, p.cal, key, lift(x, p.clip))[:-1]


@dataclass(frozen=True)
class _UnitMechanism(Mechanism):
    """Shared by PrivUnit2 and PrivUnitG (the module docstring)."""

    family = "privunit"
    epsilon: float
    clip: float
    cap_epsilon: float | None = None  # ε₀; None: the split of least variance

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        object.__setattr__(self, "clip", _check_clip(self.clip))
        if self.epsilon > MAX_UNIT_EPSILON:
            raise ValueError(f"epsilon must be <= {MAX_UNIT_EPSILON:g} for {self.name}, got "
                             f"{self.epsilon:g}: beyond, the calibration's cap probabilities "
                             "underflow in float64")
        if self.cap_epsilon is not None:
            e0 = float(self.cap_epsilon)
            if not 0 <= e0 < self.epsilon:
                raise ValueError(f"cap_epsilon must satisfy 0 <= cap_epsilon < epsilon = "
                                 f"{self.epsilon}, got {self.cap_epsilon!r}")
            object.__setattr__(self, "cap_epsilon", e0)

    def calibration(self, d: int) -> UnitCalibration:
        """The calibration used for inputs of length d (on the sphere of R^{d+1})."""
        if d < 1:
            raise ValueError(f"the input must have length >= 1, got {d}")
        return calibrate(self.family, self.epsilon, d + 1, self.cap_epsilon)

    def mse_bound(self, d: int) -> float:
        """E‖x̂ − x‖² ≤ clip²·E‖V/m − u‖² (equal up to the dropped lift coordinate)."""
        return self.clip**2 * self.calibration(d).mse

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(epsilon=self.epsilon, delta=0.0, notion="ε-LDP", unit=LDP_UNIT,
                         neighbouring=LDP_NEIGHBOURS, sensitivity=2.0 * self.clip,
                         norm="L2 (any two inputs in the ball of radius clip; norm and "
                              "direction released together)")

    def params(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "clip": self.clip,
                "cap_epsilon": self.cap_epsilon if self.cap_epsilon is not None else
                "default: the split of least variance (ε₀ + ε₁ = ε, exact)"}

    def audit_pair(self, dim: int) -> tuple[Array, Array]:
        """±2·clip·e₁: beyond the clip, opposite (the worst pair is any two antipodal inputs)."""
        e1 = jnp.zeros((dim,), jnp.float32).at[0].set(2.0 * self.clip)
        return e1, -e1

    def lift(self, x: Array) -> Array:
        """`lift` at this mechanism's clip."""
        return lift(x, self.clip)

    def sphere(self, key: Array, u: Array) -> Array:
        """`sphere_release` on a unit vector u of R^D, calibrated for this ε."""
        return sphere_release(self.family, calibrate(self.family, self.epsilon, u.shape[0],
                                                     self.cap_epsilon), key, u)

    def release_params(self, dim: int) -> UnitParams:
        return UnitParams(self.family, self.clip, self.calibration(dim))

    def release(self, params: UnitParams, key: Array, x: Array) -> Array:
        return unit_release(params, key, x)


@dataclass(frozen=True)
class PrivUnitMechanism(_UnitMechanism):
    """PrivUnit2 (Bhowmick et al. 2018): a uniform point of the sphere, in a cap around the
    input with probability p, scaled to be unbiased. ε-LDP per release, exactly (see module)."""

    name = "privunit"
    family = "privunit"  # the calibration (`calibrate`'s kind)


@dataclass(frozen=True)
class PrivUnitGMechanism(_UnitMechanism):
    """PrivUnitG (Asi, Feldman & Talwar 2022): a Gaussian whose component along the input is
    truncated above or below γ, scaled to be unbiased. ε-LDP per release, exactly."""

    name = "privunitg"
    family = "privunitg"  # the calibration; ldp_compact's mechanisms build on it too


def unit_mechanism(name: str, epsilon: float, clip: float) -> _UnitMechanism:
    """PrivUnit2 ("privunit") or PrivUnitG ("privunitg") for a run's config: an ε it cannot
    take is one ConfigError on the config's `epsilon`, not a traceback."""
    cls = PrivUnitMechanism if name == "privunit" else PrivUnitGMechanism
    try:
        return cls(epsilon, clip)
    except ValueError as e:
        raise ConfigError("epsilon", str(e)) from None
