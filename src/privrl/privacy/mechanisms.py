"""Local randomizers for gradient reports (paper 000, section 3).

Each mechanism is a small immutable object with a pure `privatize(key, x) -> Report` and a
`guarantee`. Parameters are validated on construction, so a bad ε or clip fails before any
data is touched. The mechanisms are jit/vmap friendly: `privatize` uses only jax.numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from privrl.privacy.clipping import clip_elementwise, clip_l1
from privrl.privacy.report import _MINT, Guarantee, Report

__all__ = [
    "IdentityMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "ProjectedRandomSignMechanism",
    "default_d_hat",
]

LDP_UNIT = "agent report (one randomized gradient submission)"
LDP_NEIGHBOURS = (
    "any two inputs (local DP): any two gradient vectors, hence any two private environments "
    "ψ, ψ′ of the reporting agent"
)


def _check_positive(name: str, value: Any, hint: str = "") -> float:
    """A finite number > 0, or a ValueError naming the parameter and the allowed range."""
    try:
        if isinstance(value, bool):
            raise TypeError
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, inf), got {value!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise ValueError(
            f"{name} must be finite and > 0 (allowed range: 0 < {name} < inf), got {value!r}"
            + hint
        )
    return x


def _check_epsilon(epsilon: Any) -> float:
    hint = "; use IdentityMechanism for the non-private (ε = ∞) baseline"
    return _check_positive("epsilon", epsilon, hint)


def _check_clip(clip: Any) -> float:
    return _check_positive("clip", clip)


def _ldp_guarantee(epsilon: float, sensitivity: float, norm: str) -> Guarantee:
    """Pure ε-LDP for one agent report (δ = 0), as both gradient randomizers promise."""
    return Guarantee(epsilon=epsilon, delta=0.0, notion="ε-LDP", unit=LDP_UNIT,
                     neighbouring=LDP_NEIGHBOURS, sensitivity=sensitivity, norm=norm)


def _as_vector(x: Any) -> Array:
    x = jnp.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"a mechanism takes a 1-D array, got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x


class Mechanism:
    """Base class: subclasses implement `_randomize(key, x)` and `guarantee`."""

    name: str = "mechanism"

    @property
    def guarantee(self) -> Guarantee:  # pragma: no cover - abstract
        raise NotImplementedError

    def _randomize(self, key: Array, x: Array) -> Array:  # pragma: no cover - abstract
        raise NotImplementedError

    def privatize(self, key: Array, x: Any) -> Report:
        """Randomize the 1-D array x with the PRNG key and return the releasable Report."""
        x = _as_vector(x)
        value = self._randomize(key, x)
        return Report._mint(_MINT, value, self.guarantee)

    def params(self) -> dict[str, Any]:
        """The mechanism's parameters, for config and privacy records."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"mechanism": self.name, "params": self.params(), **self.guarantee.to_dict()}


@dataclass(frozen=True)
class IdentityMechanism(Mechanism):
    """No randomization: ε = ∞. The non-private baseline; it gives NO privacy guarantee.

    With `clip`, the input is L1-clipped to clip/2 first and no noise is added: the ε → ∞ limit
    of `LaplaceMechanism(ε, clip)`, which is how a clipped non-private baseline is compared
    with the private runs. Clipping here is optimization, not privacy.
    """

    clip: float | None = None
    name = "none"

    def __post_init__(self) -> None:
        if self.clip is not None:
            object.__setattr__(self, "clip", _check_clip(self.clip))

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(
            epsilon=math.inf,
            delta=0.0,
            notion="none",
            unit=LDP_UNIT,
            neighbouring="none: the (clipped) gradient is released as it is",
        )

    def params(self) -> dict[str, Any]:
        return {"clip": self.clip}

    def _randomize(self, key: Array, x: Array) -> Array:
        del key
        return x if self.clip is None else clip_l1(x, self.clip / 2.0)


@dataclass(frozen=True)
class LaplaceMechanism(Mechanism):
    """Clip ||x||_1 to clip/2, add i.i.d. Laplace(clip/ε) noise (paper 000, eq. 19-21, Alg. 2).

    Any two clipped inputs differ by at most `clip` in L1, so each release is ε-LDP.
    """

    epsilon: float
    clip: float
    name = "laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        object.__setattr__(self, "clip", _check_clip(self.clip))

    @property
    def scale(self) -> float:
        return self.clip / self.epsilon

    @property
    def guarantee(self) -> Guarantee:
        return _ldp_guarantee(self.epsilon, self.clip, "L1")

    def params(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "clip": self.clip, "laplace_scale": self.scale}

    def clip_input(self, x: Array) -> Array:
        return clip_l1(x, self.clip / 2.0)

    def _randomize(self, key: Array, x: Array) -> Array:
        noise = jax.random.laplace(key, x.shape, dtype=x.dtype) * self.scale
        return self.clip_input(x) + noise


def default_d_hat(epsilon: float, d: int) -> int:
    """Paper 000's reduced dimension max(1, min(d, ⌊ε/2.5⌋)) (after Wang et al., ICDE'19)."""
    return max(1, min(d, math.floor(epsilon / 2.5)))


@dataclass(frozen=True)
class ProjectedRandomSignMechanism(Mechanism):
    """Projected Random Sign (paper 000, Alg. 3): project, clip, bit-flip, project back.

    u = M g with M ∈ {−√3, 0, +√3}^{d̂×d} (probabilities 1/6, 2/3, 1/6; eq. 5), ū = clip(u, ±C)
    (eq. 23), ũ_i = +C with probability 1/(e^{ε/d̂}+1) + (ū_i+C)/(2C)·(e^{ε/d̂}−1)/(e^{ε/d̂}+1)
    and −C otherwise (eq. 24, the paper's "k" read as d̂), output Mᵀũ. Each of the d̂ coordinates
    is (ε/d̂)-LDP, so a release is ε-LDP. M is drawn afresh per release and never sent.

    d_hat=None uses `default_d_hat(ε, d)` for the input's length d. Pass `dim` to validate an
    explicit d_hat against the input length on construction.
    """

    epsilon: float
    clip: float
    d_hat: int | None = None
    dim: int | None = None
    name = "prs"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        object.__setattr__(self, "clip", _check_clip(self.clip))
        if self.dim is not None and (isinstance(self.dim, bool) or int(self.dim) != self.dim
                                     or self.dim < 1):
            raise ValueError(f"dim must be an integer >= 1, got {self.dim!r}")
        if self.d_hat is not None:
            upper = "d" if self.dim is None else str(self.dim)
            if isinstance(self.d_hat, bool) or int(self.d_hat) != self.d_hat or self.d_hat < 1:
                raise ValueError(f"d_hat must be an integer with 1 <= d_hat <= {upper}, "
                                 f"got {self.d_hat!r}")
            if self.dim is not None and self.d_hat > self.dim:
                raise ValueError(f"d_hat must satisfy 1 <= d_hat <= d = {self.dim}, "
                                 f"got {self.d_hat!r}")
            object.__setattr__(self, "d_hat", int(self.d_hat))

    def resolved_d_hat(self, d: int) -> int:
        """d̂ used for inputs of length d (validated: 1 <= d̂ <= d)."""
        if self.d_hat is None:
            return default_d_hat(self.epsilon, d)
        if self.d_hat > d:
            raise ValueError(f"d_hat must satisfy 1 <= d_hat <= d = {d}, got {self.d_hat}")
        return self.d_hat

    @property
    def guarantee(self) -> Guarantee:
        norm = "L∞ of the projected, clipped vector (ε/d̂ per coordinate)"
        return _ldp_guarantee(self.epsilon, 2.0 * self.clip, norm)

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"epsilon": self.epsilon, "clip": self.clip}
        p["d_hat"] = self.d_hat if self.d_hat is not None else "default: max(1, min(d, ⌊ε/2.5⌋))"
        if self.dim is not None:
            p["d_hat_resolved"] = self.resolved_d_hat(self.dim)
        return p

    def projection(self, key: Array, d: int) -> Array:
        """The random matrix M (d̂ × d) that `privatize(key, x)` uses for an input of length d."""
        k_proj, _ = jax.random.split(key)
        d_hat = self.resolved_d_hat(d)
        values = jnp.array([-math.sqrt(3.0), 0.0, math.sqrt(3.0)], dtype=jnp.float32)
        idx = jax.random.choice(k_proj, 3, shape=(d_hat, d), p=jnp.array([1 / 6, 2 / 3, 1 / 6]))
        return values[idx]

    def flip_probability(self, u_bar: Array, d_hat: int) -> Array:
        """P(ũ_i = +C | ū_i) of eq. 24 with per-coordinate budget ε/d̂."""
        e = self.epsilon / d_hat
        # 1/(e^e+1) = sigmoid(-e) and (e^e-1)/(e^e+1) = tanh(e/2), both stable for large e.
        return jax.nn.sigmoid(-e) + (u_bar + self.clip) / (2.0 * self.clip) * jnp.tanh(e / 2.0)

    def _randomize(self, key: Array, x: Array) -> Array:
        d = x.shape[0]
        d_hat = self.resolved_d_hat(d)
        m = self.projection(key, d).astype(x.dtype)
        _, k_flip = jax.random.split(key)
        u_bar = clip_elementwise(m @ x, self.clip)
        plus = jax.random.uniform(k_flip, (d_hat,), dtype=x.dtype) < self.flip_probability(
            u_bar, d_hat
        )
        u_tilde = jnp.where(plus, self.clip, -self.clip).astype(x.dtype)
        return m.T @ u_tilde
