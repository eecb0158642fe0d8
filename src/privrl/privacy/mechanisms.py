"""Local randomizers for gradient reports (paper 000, section 3), one release per family.

A mechanism family is ONE pure release function over a parameter pytree (a NamedTuple of its
numbers, traced data): `identity_release`, `laplace_release`, `prs_release`,
`gaussian_release`, `box_gaussian_release`, `unbounded_gaussian_release`,
`gaussian_sum_release` / `gaussian_sum_dense_release`, and the float-safe `secure_*_release`
(PrivUnit2/G: `privrl.privacy.ldp_vector.unit_release`). The objects users hold
(`LaplaceMechanism(ε, C)`, its `privatize`, `guarantee`, `describe`) are views over their
family: `release_params(d)` builds the pytree, `privatize` calls the family. A batch of
settings is a batched parameter pytree (`SettingParams` stacked along a trials axis,
`setting_release`); programs of settings, the Ray runtime and `privrl audit` call the same
functions, so what is audited is what runs.
Parameters are validated on construction, so a bad ε or clip fails before any data is touched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.privacy.accounting import DEFAULT_ACCOUNTANT, Accountant, PrivacyEvent, gaussian_epsilon
from privrl.privacy.box import check_box
from privrl.privacy.clipping import clip_l1_inverse, clip_l2, clip_l2_inverse, float32_inverse
from privrl.privacy.dpsgd import add_raveled, clipped_grads
from privrl.privacy.report import _MINT, Guarantee, Report

SECURE_NOTE = ("secure: exact discrete noise on a power-of-two grid from the OS CSPRNG "
               "(privrl.privacy.secure), input rounded and clipped in integers")


def _host(fn: Callable[..., Any], key: Array, x: Array, *args: Any) -> Array:
    """Run the float-safe sampler `fn(x_np, *args)` on the host, also from jitted/vmapped code.

    io_callback (not pure_callback): JAX may neither drop nor repeat it, so one release draws
    its noise exactly once. The key's bits go along unused, so that under vmap a batch of keys
    makes a batch of calls even when x is shared (otherwise all would share one noise draw)."""
    from jax.experimental import io_callback

    out = jax.ShapeDtypeStruct(x.shape[-1:], x.dtype)

    def call(v: Any, _key_bits: Any) -> Any:
        import numpy as np
        return np.asarray(fn(np.asarray(v), *args), dtype=out.dtype)

    return io_callback(call, out, x, jax.random.key_data(key), ordered=False)


def _secure_gaussian_epsilon(z: float, delta: float) -> float:
    """ε at δ of one discrete Gaussian release with std/sensitivity z: the discrete Gaussian is
    (1/(2z²))-zCDP like the continuous one (CKS20, Thm. 4 and its multivariate form), i.e. the
    same Rényi curve, so RDP's conversion (not the analytic Gaussian's exact ε) is stated."""
    return Accountant("rdp").epsilon_if(PrivacyEvent("gaussian", z), 1, delta)

# --- one pure release function per family, over its parameters as data ---------------------
class ClipL1Params(NamedTuple):
    """`identity_release`'s numbers."""

    inverse_half_clip: Any  # 1/(C/2), the L1 clip radius's inverse (0: no clip, x released)


class LaplaceParams(NamedTuple):
    """`laplace_release`'s numbers."""

    inverse_half_clip: Any  # 1/(C/2), the L1 clip radius's inverse (`float32_inverse`)
    scale: Any  # the noise scale C/ε


class PRSParams(NamedTuple):
    """`prs_release`'s numbers (`ProjectedRandomSignMechanism.constants`)."""

    clip: Any  # C
    low: Any  # 1/(e^{ε/d̂}+1)
    slope: Any  # tanh(ε/(2d̂))/(2C)
    d_hat: Any  # d̂ (rows of a padded draw past it are masked)


class GaussianParams(NamedTuple):
    """`gaussian_release`'s numbers."""

    inverse_clip: Any  # 1/C, the L2 clip's inverse (`float32_inverse`)
    std: Any  # the noise std σ·C


class BoxGaussianParams(NamedTuple):
    """`box_gaussian_release`'s numbers."""

    low: Any  # (d,) the box's lower corner
    high: Any  # (d,) its upper corner
    std: Any  # the noise std z·diag


class UnboundedGaussianParams(NamedTuple):
    """`unbounded_gaussian_release`'s numbers."""

    scale: Any  # () or (d,): the noise std per coordinate


class GaussianSumParams(NamedTuple):
    """`gaussian_sum_release`'s numbers (the clip C itself is shared, a constant)."""

    clip: Any  # bool: rows are clipped to C (False: a non-private trial's raw rows)
    std: Any  # the noise std σ·C (0: no noise)


class SecureParams(NamedTuple):
    """A float-safe release's numbers: host-side floats (its sampler runs on the host)."""

    spread: float  # laplace: ε; the Gaussians: the noise std
    clip: float  # laplace: C (L1 diameter); the Gaussians: the L2 clip radius


def gaussian_noise(std: Any, key: Array, shape: tuple[int, ...], dtype: Any) -> Array:
    """std·N(0, I): the noise every Gaussian family draws."""
    return std * jax.random.normal(key, shape, dtype)


def add_gaussian_noise(base: Array, std: Any, key: Array) -> Array:
    """base + std·N(0, I): the noise step every Gaussian family shares."""
    return base + gaussian_noise(std, key, base.shape, base.dtype)


def identity_release(p: ClipL1Params, key: Array, x: Array) -> Array:
    """No noise: x L1-clipped to C/2 (an inverse radius 0: x as it is), in x's dtype (a
    report keeps its input's dtype, which the aggregator checks)."""
    del key
    return clip_l1_inverse(x, p.inverse_half_clip).astype(x.dtype)


def laplace_release(p: LaplaceParams, key: Array, x: Array) -> Array:
    """x L1-clipped to C/2 plus i.i.d. Laplace(C/ε) noise (paper 000, eq. 19-21)."""
    clipped = clip_l1_inverse(x, p.inverse_half_clip)
    return clipped + jax.random.laplace(key, x.shape, dtype=x.dtype) * p.scale


def prs_release(p: PRSParams, key: Array, x: Array, rows: int) -> Array:
    """One PRS release Mᵀũ (paper 000, Alg. 3) with M drawn with `rows` rows (static, ≥ d̂):
    only the first d̂ are used; the others are zero in M and ũ, so they add exact zeros: the
    same floats as a draw of d̂ rows."""
    k_proj, k_flip = jax.random.split(key)
    m = _prs_projection(k_proj, rows, x.shape[0]).astype(x.dtype)
    used = jnp.arange(rows) < p.d_hat
    m = jnp.where(used[:, None], m, 0.0)
    u_bar = jnp.clip(m @ x, -p.clip, p.clip)  # eq. 23
    p_plus = _prs_flip_probability(u_bar, p.clip, p.low, p.slope)
    plus = jax.random.uniform(k_flip, (rows,), dtype=x.dtype) < p_plus
    u_tilde = jnp.where(used, jnp.where(plus, p.clip, -p.clip).astype(x.dtype), 0.0)
    return m.T @ u_tilde


def gaussian_release(p: GaussianParams, key: Array, x: Array) -> Array:
    """x L2-clipped to C plus N(0, std² I): the local Gaussian randomizer."""
    return add_gaussian_noise(clip_l2_inverse(x, p.inverse_clip), p.std, key)


def clip_box(x: Array, low: Any, high: Any) -> Array:
    """x clipped into the box [low, high], coordinate by coordinate."""
    return jnp.clip(x, jnp.asarray(low, x.dtype), jnp.asarray(high, x.dtype))


def box_gaussian_release(p: BoxGaussianParams, key: Array, x: Array) -> Array:
    """x clipped into the box [low, high] plus N(0, std² I)."""
    return add_gaussian_noise(clip_box(x, p.low, p.high), p.std, key)


def unbounded_gaussian_release(p: UnboundedGaussianParams, key: Array, x: Array) -> Array:
    """x plus N(0, diag(scale)²), unclipped: no sensitivity bound, NO formal guarantee."""
    return add_gaussian_noise(x, jnp.asarray(p.scale).astype(x.dtype), key)


def gaussian_sum_release(p: GaussianSumParams, key: Array, rows: Array, clip: float) -> Array:
    """DP-SGD's step: the rows (B, d), each L2-clipped to `clip` if p.clip, summed, plus
    N(0, std² I)."""
    clipped = jax.vmap(lambda row: clip_l2(row, clip))(rows)
    return add_gaussian_noise(jnp.where(p.clip, clipped, rows).sum(axis=0), p.std, key)


def gaussian_sum_dense_release(p: GaussianSumParams, key: Array, params: Any, x: Array,
                               loss_of_outputs: Callable[[Array], Array], clip: float,
                               rows: Array | None = None) -> Array:
    """`gaussian_sum_release` for a dense ReLU network (privrl.nets.flat.MLP) without
    materializing per-example gradients: `privacy.dpsgd.clipped_grad_sum` clips exactly
    (every row is clipped). The sum is added into the noise (`add_raveled`): the same draw
    and sum, the noise's hash kept out of the ravel's unvectorized loop."""
    return _gaussian_sum_dense(p, key, params, x, loss_of_outputs, clip, rows)[0]


def _gaussian_sum_dense(p: GaussianSumParams, key: Array, params: Any, x: Array,
                        loss_of_outputs: Callable[[Array], Array], clip: float,
                        rows: Array | None) -> tuple[Array, Array]:
    """`gaussian_sum_dense_release` and the per-example gradient norms of its backward pass."""
    grads, norms = clipped_grads(params, x, loss_of_outputs, clip, rows)
    leaves = jax.tree_util.tree_leaves(grads)
    dim, dtype = sum(leaf.size for leaf in leaves), leaves[0].dtype
    return add_raveled(gaussian_noise(p.std, key, (dim,), dtype), grads), norms


def secure_laplace_release(p: SecureParams, key: Array, x: Array) -> Array:
    """Float-safe Laplace: discrete Laplace on a grid from the OS CSPRNG (privrl.privacy.secure),
    on the host; the key only keeps vmapped calls apart."""
    from privrl.privacy.secure import secure_laplace
    return _host(secure_laplace, key, x, p.spread, p.clip)


def secure_gaussian_release(p: SecureParams, key: Array, x: Array) -> Array:
    """Float-safe Gaussian: the discrete Gaussian on a grid, x clipped to L2 radius p.clip in
    integers (privrl.privacy.secure), on the host."""
    from privrl.privacy.secure import secure_gaussian
    return _host(secure_gaussian, key, x, p.spread, p.clip)


def secure_gaussian_sum_release(p: SecureParams, key: Array, rows: Array) -> Array:
    """Float-safe `gaussian_sum_release`: rows clipped in integers, discrete Gaussian noise."""
    from privrl.privacy.secure import secure_gaussian_sum
    return _host(secure_gaussian_sum, key, rows, p.spread, p.clip)


__all__ = [
    "SETTING_RELEASES",
    "BoxGaussianMechanism",
    "GaussianMechanism",
    "GaussianSumMechanism",
    "IdentityMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "ProjectedRandomSignMechanism",
    "SettingParams",
    "UnboundedGaussianNoise",
    "default_d_hat",
    "privatize_setting",
    "setting_params",
    "setting_release",
    "settings_guarantee",
    "stack_params",
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


def no_guarantee(unit: str, why: str) -> Guarantee:
    """The guarantee of a release that has none (ε = ∞): the unit it would protect, and why
    (the `neighbouring` text starts "none: ")."""
    return Guarantee(epsilon=math.inf, delta=0.0, notion="none", unit=unit,
                     neighbouring=f"none: {why}")


def noise_scales(name: str, values: Any) -> tuple[float, ...]:
    """Noise stds (one, or one per coordinate) as floats, each finite and >= 0, else a
    ValueError naming them."""
    scales = tuple(float(v) for v in np.atleast_1d(np.asarray(values, np.float64)))
    if not scales or not all(math.isfinite(v) and v >= 0 for v in scales):
        raise ValueError(f"{name} must be finite and >= 0 in every coordinate, got {values!r}")
    return scales


def _as_vector(x: Any) -> Array:
    x = jnp.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"a mechanism takes a 1-D array, got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x


class Mechanism:
    """Base class, a view over one release family: subclasses implement `release_params(d)`
    (the family's parameter pytree for inputs of length d), `release(params, key, x)` (a call
    of the family's function) and `guarantee`."""

    name: str = "mechanism"

    @property
    def guarantee(self) -> Guarantee:  # pragma: no cover - abstract
        raise NotImplementedError

    def release_params(self, dim: int) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def release(self, params: Any, key: Array, x: Array) -> Array:  # pragma: no cover
        raise NotImplementedError

    def _randomize(self, key: Array, x: Array) -> Array:
        return self.release(self.release_params(x.shape[-1]), key, x)

    def privatize(self, key: Array, x: Any) -> Report:
        """Randomize the 1-D array x with the PRNG key and return the releasable Report."""
        x = _as_vector(x)
        value = self._randomize(key, x)
        return Report._mint(_MINT, value, self.guarantee)

    def upload_bytes(self, dim: int) -> int:
        """Bytes one report uploads for an input of length `dim`: by default the released
        value as float32 (mechanisms with a compact encoding say less, privacy.ldp_compact)."""
        out = jax.eval_shape(lambda k, x: self._randomize(k, x), jax.random.key(0),
                             jax.ShapeDtypeStruct((dim,), jnp.float32))
        return 4 * math.prod(out.shape)

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
        return no_guarantee(LDP_UNIT, "the (clipped) gradient is released as it is")

    def params(self) -> dict[str, Any]:
        return {"clip": self.clip}

    def release_params(self, dim: int) -> ClipL1Params:
        return ClipL1Params(np.float32(0.0) if self.clip is None
                            else float32_inverse(self.clip / 2.0))

    def release(self, params: ClipL1Params, key: Array, x: Array) -> Array:
        return identity_release(params, key, x)


@dataclass(frozen=True)
class LaplaceMechanism(Mechanism):
    """Clip ||x||_1 to clip/2, add i.i.d. Laplace(clip/ε) noise (paper 000, eq. 19-21, Alg. 2).

    Any two clipped inputs differ by at most `clip` in L1, so each release is ε-LDP.
    `secure=True` samples float-safely (discrete Laplace on a grid, CSPRNG, on the host; see
    privrl.privacy.secure): the same ε, exactly, and the key is ignored.
    """

    epsilon: float
    clip: float
    secure: bool = False
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
        p = {"epsilon": self.epsilon, "clip": self.clip, "laplace_scale": self.scale}
        return {**p, "secure": SECURE_NOTE} if self.secure else p

    def clip_input(self, x: Array) -> Array:
        """The clip step of `laplace_release` (L1 to C/2), on its own."""
        return clip_l1_inverse(x, float32_inverse(self.clip / 2.0))

    def release_params(self, dim: int) -> LaplaceParams | SecureParams:
        if self.secure:
            return SecureParams(self.epsilon, self.clip)
        return LaplaceParams(float32_inverse(self.clip / 2.0), np.float32(self.scale))

    def release(self, params: LaplaceParams | SecureParams, key: Array, x: Array) -> Array:
        if isinstance(params, SecureParams):
            return secure_laplace_release(params, key, x)
        return laplace_release(params, key, x)


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

    def constants(self, d_hat: int) -> tuple[np.float32, np.float32]:
        """eq. 24 as P(+C) = low + (ū_i + C)·slope for per-coordinate budget e = ε/d̂: low =
        1/(e^e+1) and slope = tanh(e/2)/(2C), as float32. 1/(e^e+1) and tanh(e/2) are computed
        in float64 and rounded once; slope is float32(1/(2C))·float32(tanh(e/2)) in float32,
        the one constant XLA would fold the two into (so a slope passed as data gives the same
        floats as one compiled in)."""
        e = self.epsilon / d_hat
        low = math.exp(-e) / (1.0 + math.exp(-e))  # 1/(e^e+1), no overflow for large e
        return np.float32(low), float32_inverse(2.0 * self.clip) * np.float32(math.tanh(e / 2))

    def projection(self, key: Array, d: int) -> Array:
        """The random matrix M (d̂ × d) that `privatize(key, x)` uses for an input of length d."""
        k_proj, _ = jax.random.split(key)
        return _prs_projection(k_proj, self.resolved_d_hat(d), d)

    def flip_probability(self, u_bar: Array, d_hat: int) -> Array:
        """P(ũ_i = +C | ū_i) of eq. 24 with per-coordinate budget ε/d̂."""
        return _prs_flip_probability(u_bar, self.clip, *self.constants(d_hat))

    def release_params(self, dim: int) -> PRSParams:
        d_hat = self.resolved_d_hat(dim)
        return PRSParams(np.float32(self.clip), *self.constants(d_hat), np.int32(d_hat))

    def release(self, params: PRSParams, key: Array, x: Array) -> Array:
        """PRS's family with exactly d̂ rows (d̂ is a number here, not traced)."""
        return prs_release(params, key, x, int(params.d_hat))


def _prs_projection(key: Array, rows: int, d: int) -> Array:
    """PRS's M: `rows` × d entries in {−√3, 0, +√3} with probabilities 1/6, 2/3, 1/6 (eq. 5).
    Entry (i, j) depends on the key and its position only, so the first d̂ rows of a padded
    draw are the d̂-row draw (JAX's partitionable threefry, checked by the tests)."""
    values = jnp.array([-math.sqrt(3.0), 0.0, math.sqrt(3.0)], dtype=jnp.float32)
    idx = jax.random.choice(key, 3, shape=(rows, d), p=jnp.array([1 / 6, 2 / 3, 1 / 6]))
    return values[idx]


def _prs_flip_probability(u_bar: Array, clip: Any, low: Any, slope: Any) -> Array:
    """eq. 24: 1/(e^e+1) + (ū_i+C)/(2C)·(e^e−1)/(e^e+1), from `constants`' float32 values."""
    return low + (u_bar + clip) * slope


# --- settings as data: a batch of settings is a batched parameter pytree ---------------------
class SettingParams(NamedTuple):
    """One setting's mechanism (none, laplace, prs or gaussian) as data, for a program that
    runs settings of several of these (`setting_release`): `kind` names its release (an index
    into SETTING_RELEASES), the other fields are its release's parameters (zeros for the
    other releases'). none and laplace share their L1 clip's leaf, so that a program computing
    both clips once, as a run of either does. A batch of settings is these stacked along a
    leading trials axis (`stack_params`), vmapped with the data."""

    kind: Any  # int32: the index of the setting's release in SETTING_RELEASES
    inverse_half_clip: Any  # none, laplace: 1/(C/2) (none without a clip: 0, x as it is)
    scale: Any  # laplace: the noise scale C/ε
    prs: PRSParams
    gaussian: GaussianParams


SETTING_RELEASES = ("none", "laplace", "prs", "gaussian")  # what `setting_release` can compute


def setting_params(mechanism: Mechanism, dim: int) -> SettingParams:
    """`mechanism` (none, laplace, prs or gaussian, not float-safe) as one trial's data, for
    inputs of length `dim`: its `release_params` in its release's fields, zeros elsewhere."""
    if type(mechanism) not in (IdentityMechanism, LaplaceMechanism,
                               ProjectedRandomSignMechanism, GaussianMechanism):
        raise ValueError(f"{type(mechanism).__name__} cannot take its parameters as data: "
                         "only none, laplace, prs and gaussian can")
    if getattr(mechanism, "secure", False):
        raise ValueError(f"secure {mechanism.name} samples on the host; run it on its own")
    zero = np.float32(0.0)
    own = mechanism.release_params(dim)
    inv_half = own.inverse_half_clip if isinstance(own, ClipL1Params | LaplaceParams) else zero
    return SettingParams(
        np.int32(SETTING_RELEASES.index(mechanism.name)), inv_half,
        own.scale if isinstance(own, LaplaceParams) else zero,
        own if isinstance(own, PRSParams) else PRSParams(zero, zero, zero, np.int32(0)),
        own if isinstance(own, GaussianParams) else GaussianParams(zero, zero))


def stack_params(each: Sequence[Any]) -> Any:
    """Parameter pytrees of one trial each, stacked leaf by leaf along a leading trials axis."""
    return jax.tree_util.tree_map(lambda *v: np.stack(v), *each)


def setting_release(p: SettingParams, key: Array, x: Array, releases: Sequence[str],
                    rows: int = 0) -> Array:
    """What the setting `p` (traced) releases, in a program that computes `releases` (static:
    names in SETTING_RELEASES, which must include p's; a run and every program it can join
    name the same, so they compile the same arithmetic and give the same floats): each
    release through its own function, the trial's selected. PRS's draw has `rows` rows
    (static: the program's largest d̂; rows past the trial's d̂ are masked). An identity
    without a clip releases x exactly, a non-finite x as NaN."""
    unknown = set(releases) - set(SETTING_RELEASES)
    if not releases or unknown:
        raise ValueError(f"releases must name some of {SETTING_RELEASES}, got {tuple(releases)}")
    computed = []
    if "none" in releases:  # no clip: 1/(C/2) = 0, and x / max(1, 0) is x
        computed.append((0, identity_release(ClipL1Params(p.inverse_half_clip), key, x)))
    if "laplace" in releases:
        computed.append((1, laplace_release(LaplaceParams(p.inverse_half_clip, p.scale), key,
                                            x)))
    if "prs" in releases:
        computed.append((2, prs_release(p.prs, key, x, rows)))
    if "gaussian" in releases:
        computed.append((3, gaussian_release(p.gaussian, key, x)))
    *rest, (_, value) = computed
    for kind, release in rest:
        value = jnp.where(p.kind == kind, release, value)
    return value


def settings_guarantee(mechanisms: Sequence[Mechanism]) -> Guarantee:
    """A guarantee true of every release of a program of settings `mechanisms`: one setting's
    own; for several, the largest ε and δ (none if any setting has none). Each trial's exact
    guarantee is its own setting's, which the runners' ledgers charge."""
    gs = [m.guarantee for m in mechanisms]
    if len(gs) == 1:
        return gs[0]
    if not all(g.is_private for g in gs):
        return replace(next(g for g in gs if not g.is_private),
                       neighbouring="none: some trials of this program release without a "
                       "guarantee; each private trial's guarantee is its own setting's")
    epsilon, delta = max(g.epsilon for g in gs), max(g.delta for g in gs)
    notion = _common(g.notion for g in gs) or ("(ε, δ)-LDP" if delta else "ε-LDP")
    sensitivity, norm = _common(g.sensitivity for g in gs), _common(g.norm for g in gs)
    return Guarantee(epsilon=epsilon, delta=delta, notion=notion, unit=LDP_UNIT,
                     neighbouring=LDP_NEIGHBOURS + "; each report is also private at its "
                     "own setting's (ε, δ) (these are the largest)", sensitivity=sensitivity,
                     norm=norm)


def privatize_setting(mechanisms: Sequence[Mechanism], releases: Sequence[str],
                      p: SettingParams, key: Array, x: Any) -> Report:
    """Release x as the trial's setting `p` (one of `mechanisms`, the program's settings, as
    `setting_params`; `releases`: what the program computes, as `setting_release`): the floats
    that setting's own run releases, in a Report whose static guarantee (shared by the batch)
    is `settings_guarantee(mechanisms)`."""
    if not mechanisms:
        raise ValueError("a program of settings needs at least one mechanism")
    missing = {m.name for m in mechanisms} - set(releases)
    if missing:
        raise ValueError(f"the program computes {tuple(releases)}, not {sorted(missing)}")
    x = _as_vector(x)
    rows = max((m.resolved_d_hat(x.shape[-1]) for m in mechanisms
                if isinstance(m, ProjectedRandomSignMechanism)), default=0)
    return Report._mint(_MINT, setting_release(p, key, x, releases, rows),
                        settings_guarantee(mechanisms))


def _common(values: Any) -> Any:
    """The value all of `values` share, else None."""
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None

def _check_delta(delta: Any) -> float:
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}") from None
    if not 0 < d < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return d


def _gaussian_ldp_guarantee(z: float, delta: float, sensitivity: float, unit: str,
                            neighbouring: str, secure: bool = False) -> Guarantee:
    """(ε, δ)-LDP of one Gaussian release whose std is z times the L2 sensitivity: the exact
    analytic ε, or for the secure (discrete) sampler RDP's (`_secure_gaussian_epsilon`)."""
    eps = _secure_gaussian_epsilon(z, delta) if secure else gaussian_epsilon(z, delta)
    return Guarantee(epsilon=eps, delta=delta, notion="(ε, δ)-LDP", unit=unit,
                     neighbouring=neighbouring, sensitivity=sensitivity, norm="L2")


@dataclass(frozen=True)
class GaussianMechanism(Mechanism):
    """Clip ||x||_2 to `clip`, add N(0, (noise_multiplier·clip)² I): a local Gaussian randomizer.

    Any two clipped inputs differ by at most 2·clip in L2 (the ball's diameter), so one release
    is a Gaussian mechanism with std / sensitivity = noise_multiplier / 2; its ε at `delta` is
    exact (analytic Gaussian). Compose many releases with `privrl.privacy.accounting` via
    `event`, not by adding ε's.
    """

    noise_multiplier: float
    clip: float
    delta: float = 1e-5
    secure: bool = False
    name = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier",
                           _check_positive("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "clip", _check_clip(self.clip))
        object.__setattr__(self, "delta", _check_delta(self.delta))

    @property
    def std(self) -> float:
        return self.noise_multiplier * self.clip

    @property
    def event(self) -> PrivacyEvent:
        return PrivacyEvent("gaussian", self.noise_multiplier / 2.0)

    @property
    def guarantee(self) -> Guarantee:
        return _gaussian_ldp_guarantee(self.event.noise_multiplier, self.delta, 2.0 * self.clip,
                                       LDP_UNIT, LDP_NEIGHBOURS, secure=self.secure)

    def params(self) -> dict[str, Any]:
        p = {"noise_multiplier": self.noise_multiplier, "clip": self.clip,
             "noise_std": self.std, "delta": self.delta}
        return {**p, "secure": SECURE_NOTE} if self.secure else p

    def release_params(self, dim: int) -> GaussianParams | SecureParams:
        if self.secure:
            return SecureParams(self.std, self.clip)
        return GaussianParams(float32_inverse(self.clip), np.float32(self.std))

    def release(self, params: GaussianParams | SecureParams, key: Array, x: Array) -> Array:
        if isinstance(params, SecureParams):
            return secure_gaussian_release(params, key, x)
        return gaussian_release(params, key, x)


STATE_UNIT = "one observed state (one environment step's observation)"
STATE_NEIGHBOURS = "any two states inside the declared box (local DP)"


@dataclass(frozen=True)
class BoxGaussianMechanism(Mechanism):
    """Clip x into the box [low, high]; add N(0, (z·diag)² I), z the noise multiplier.

    diag = ||high − low||_2 is the box's diagonal.
    Any two points of the box differ by at most its diagonal in L2, so one release is
    (ε, δ)-LDP with std / sensitivity = noise_multiplier. Used to perturb each observed state
    before a learner sees it (paper 003's LDP, made formal by the box).

    `secure=True`: float-safe (privrl.privacy.secure): the box-clipped state, centred, lies in
    the L2 ball of radius diag/2, so the secure Gaussian with clip diag/2 (clipped again in
    integers on its grid: sensitivity ≤ diag/γ) and the same std releases it; the centre is
    added back afterwards (post-processing). ε: RDP's, as for GaussianMechanism(secure=True).
    """

    low: tuple[float, ...]
    high: tuple[float, ...]
    noise_multiplier: float
    delta: float = 1e-5
    secure: bool = False
    name = "box-gaussian"

    def __post_init__(self) -> None:
        low, high = check_box(self.low, self.high)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "noise_multiplier",
                           _check_positive("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "delta", _check_delta(self.delta))

    @property
    def diagonal(self) -> float:
        return math.sqrt(sum((b - a) ** 2 for a, b in zip(self.low, self.high, strict=True)))

    @property
    def std(self) -> float:
        return self.noise_multiplier * self.diagonal

    @property
    def event(self) -> PrivacyEvent:
        return PrivacyEvent("gaussian", self.noise_multiplier)

    @property
    def guarantee(self) -> Guarantee:
        return _gaussian_ldp_guarantee(self.noise_multiplier, self.delta, self.diagonal,
                                       STATE_UNIT, STATE_NEIGHBOURS, secure=self.secure)

    def params(self) -> dict[str, Any]:
        p = {"low": list(self.low), "high": list(self.high),
             "noise_multiplier": self.noise_multiplier, "box_diagonal": self.diagonal,
             "noise_std": self.std, "delta": self.delta}
        return {**p, "secure": SECURE_NOTE} if self.secure else p

    def clip_input(self, x: Array) -> Array:
        return clip_box(x, self.low, self.high)

    def release_params(self, dim: int) -> BoxGaussianParams:
        if dim != len(self.low):
            raise ValueError(f"the box has {len(self.low)} coordinates, the input {dim}")
        return BoxGaussianParams(np.asarray(self.low, np.float32),
                                 np.asarray(self.high, np.float32), np.float32(self.std))

    def release(self, params: BoxGaussianParams, key: Array, x: Array) -> Array:
        if x.shape != (len(self.low),):
            raise ValueError(f"the box has {len(self.low)} coordinates, the input shape {x.shape}")
        if self.secure:  # the centred box lies in the L2 ball of radius diag/2
            centre = (jnp.asarray(self.low, x.dtype) + jnp.asarray(self.high, x.dtype)) / 2
            return centre + secure_gaussian_release(SecureParams(self.std, self.diagonal / 2),
                                                    key, self.clip_input(x) - centre)
        return box_gaussian_release(params, key, x)


@dataclass(frozen=True)
class UnboundedGaussianNoise(Mechanism):
    """Add N(0, diag(scale)²) to an unbounded input: paper 003's σ·IQR observation noise.

    The input is not bounded, so its sensitivity is infinite and NO formal guarantee holds:
    the guarantee says ε = ∞. It is offered for fidelity with the paper; use
    `BoxGaussianMechanism` for a guarantee.
    """

    scale: tuple[float, ...]
    name = "unbounded-gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", noise_scales("scale", self.scale))

    @property
    def guarantee(self) -> Guarantee:
        return no_guarantee(STATE_UNIT, "the input is unbounded, so no noise level gives a "
                                        "formal guarantee")

    def params(self) -> dict[str, Any]:
        return {"scale": list(self.scale)}

    def release_params(self, dim: int) -> UnboundedGaussianParams:
        if dim != len(self.scale):
            raise ValueError(f"scale has {len(self.scale)} coordinates, the input {dim}")
        return UnboundedGaussianParams(np.asarray(self.scale, np.float32))

    def release(self, params: UnboundedGaussianParams, key: Array, x: Array) -> Array:
        return unbounded_gaussian_release(params, key, x)


@dataclass(frozen=True)
class GaussianSumMechanism(Mechanism):
    """DP-SGD's step (Abadi et al. 2016): clip each row to L2 norm `clip`, sum, add N(0, σ²C² I).

    Input: per-example gradients (B, d); rows of examples not in the batch must be zero (they
    then contribute nothing). Adding or removing one example moves the sum by at most `clip`,
    so with `sampling_probability` q < 1 (Poisson sampling, each example included independently)
    one release is a Poisson-subsampled Gaussian with noise multiplier σ, and without sampling a
    plain Gaussian. This is central DP: the learner holding the examples is trusted, the
    released model is what is protected. The Report is the noisy SUM; dividing by a public
    batch size is post-processing left to the caller.

    `secure=True`: rows clipped in integers on a grid, discrete Gaussian noise from the CSPRNG
    (privrl.privacy.secure). Only without subsampling (q = 1): the subsampled discrete
    Gaussian's Rényi curve is not the one dp-accounting computes for the continuous one.
    """

    noise_multiplier: float
    clip: float
    sampling_probability: float = 1.0
    delta: float = 1e-5
    unit: str = "one training example"
    secure: bool = False
    name = "gaussian-sum"

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier",
                           _check_positive("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "clip", _check_clip(self.clip))
        q = self.sampling_probability
        if not (isinstance(q, int | float) and 0 < q <= 1):
            raise ValueError(f"sampling probability q must be in (0, 1], got {q!r}")
        object.__setattr__(self, "delta", _check_delta(self.delta))
        if self.secure and q < 1:
            raise ValueError("secure (discrete Gaussian) noise needs sampling probability q = 1: "
                             "no accountant here covers the subsampled discrete Gaussian")

    @property
    def event(self) -> PrivacyEvent:
        q = float(self.sampling_probability)
        return PrivacyEvent("gaussian", self.noise_multiplier, "poisson" if q < 1 else "none", q)

    @cached_property
    def guarantee(self) -> Guarantee:
        """(ε, δ)-DP of ONE step at `delta`; a run's ε composes its steps with the accountant."""
        # secure: the discrete Gaussian's ε is established only through RDP (its own or the
        # continuous one's, which it never exceeds); otherwise the tight default accountant
        eps = Accountant("rdp" if self.secure else DEFAULT_ACCOUNTANT).epsilon_if(
            self.event, 1, self.delta)
        return Guarantee(epsilon=eps, delta=self.delta, notion="(ε, δ)-DP (central, one step)",
                         unit=self.unit, neighbouring="add or remove one example",
                         sensitivity=self.clip, norm="L2")

    def params(self) -> dict[str, Any]:
        p = {"noise_multiplier": self.noise_multiplier, "clip": self.clip,
             "sampling_probability": self.sampling_probability, "delta": self.delta,
             "unit": self.unit}
        return {**p, "secure": SECURE_NOTE} if self.secure else p

    def release_params(self, dim: int) -> GaussianSumParams | SecureParams:
        std = self.noise_multiplier * self.clip
        return SecureParams(std, self.clip) if self.secure else GaussianSumParams(
            np.bool_(True), np.float32(std))

    def release(self, params: GaussianSumParams | SecureParams, key: Array, x: Array
                ) -> Array:
        if isinstance(params, SecureParams):
            return secure_gaussian_sum_release(params, key, x)
        return gaussian_sum_release(params, key, x, self.clip)

    def privatize(self, key: Array, x: Any) -> Report:
        x = jnp.asarray(x)
        if x.ndim != 2:
            raise ValueError(f"GaussianSumMechanism takes per-example rows (B, d), got {x.shape}")
        return Report._mint(_MINT, self._randomize(key, x), self.guarantee)

    def privatize_dense(self, key: Array, params: Any, x: Array,
                        loss_of_outputs: Callable[[Array], Array],
                        rows: Array | None = None) -> Report:
        """The same release for a dense ReLU network (privrl.nets.flat.MLP) without materializing
        per-example gradients: clipping is done by `privacy.dpsgd.clipped_grad_sum`, exactly.
        Secure mode materializes them (`privacy.dpsgd.per_example_grads`) to clip in integers."""
        if self.secure:
            from privrl.privacy.dpsgd import per_example_grads
            grads = per_example_grads(params, x, loss_of_outputs)
            if rows is not None:
                grads = grads * rows[:, None]
            return self.privatize(key, grads)
        value = gaussian_sum_dense_release(self.release_params(0), key, params, x,
                                           loss_of_outputs, self.clip, rows)
        return Report._mint(_MINT, value, self.guarantee)

    def privatize_dense_norms(self, key: Array, params: Any, x: Array,
                              loss_of_outputs: Callable[[Array], Array],
                              rows: Array | None = None) -> tuple[Report, Array]:
        """`privatize_dense` (not secure) and, from the same backward pass, each example's
        gradient norm ‖∇ℓ_i‖: raw data, for the caller's own mechanism to release a function
        of (an adaptive clip's count: privrl.systems.dpsgd_rl.levers)."""
        if self.secure:
            raise ValueError("privatize_dense_norms has no float-safe (secure) form")
        value, norms = _gaussian_sum_dense(self.release_params(0), key, params, x,
                                           loss_of_outputs, self.clip, rows)
        return Report._mint(_MINT, value, self.guarantee), norms
