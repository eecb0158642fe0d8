"""ε-LDP vector mean estimation with small uploads: ProjUnit and seed-compressed PrivUnitG.

PrivUnitG (privrl.privacy.ldp_vector) uploads d floats per report. These two mechanisms reach
nearly the same error with a few dozen bytes. Both start like PrivUnitG: x in the L2 ball of
radius `clip` is lifted onto the unit sphere of R^D, D = d + 1 (`ldp_vector.lift`), so norm and
direction are released together under the one ε.

**ProjUnit** (Asi, Feldman, Nelson, Nguyen & Talwar, NeurIPS 2023, "Fast optimal locally
private mean estimation via random projections", Algorithm 1). The agent draws a seed s from its
own key, builds W = √(D/k)·Qᵀ with Q the orthonormal factor of a D × k Gaussian matrix (a
uniformly random k-dimensional subspace), randomizes v = Wu/‖Wu‖ with PrivUnitG in R^k at ε, and
uploads (s, z): 8 + 4k bytes. The aggregator rebuilds W from s and estimates u by Wᵀz / c.
*Privacy:* W depends on the seed only, never on the data, and z is PrivUnitG of a unit vector
of R^k, so the pair (s, z) is ε-LDP exactly, with PrivUnitG's ε split (no assumption on the
generator: any W, however drawn, leaves z ε-LDP). *Unbiasedness:* E[z | W] = v, and by the
rotation invariance of the subspace E[Wᵀ Wu / ‖Wu‖] = c·u with
c = √(D/k)·E‖Pu‖ = √(D/k)·B((k+1)/2, (D−k)/2) / B(k/2, (D−k)/2) (‖Pu‖² ~ Beta(k/2, (D−k)/2)
for the projection P onto the subspace). The paper's estimator is Wᵀz (bias factor c < 1);
dividing by the public constant c makes it exactly unbiased, with
E‖û − u‖² = (D/k)(mse_k + 1)/c² − 1, mse_k PrivUnitG's error in R^k (`ProjUnitMechanism.mse`).
(FastProjUnit replaces Q by a subsampled randomized Hadamard transform for O(d log d) client
time; its bias then depends on the input, so it is not used here: at d ≈ 130 Gram–Schmidt is
cheap enough, benchmarks/RESULTS.md.)

**Seed-compressed PrivUnitG** (Feldman & Talwar 2021, "Lossless compression of efficient
private local randomizers", Algorithm 1). PrivUnitG's output V ~ N(0, I_D) reweighted: its
density relative to N(0, I) is p/P(cap) on the cap ⟨V, u⟩ ≥ γ and (1−p)/(1 − P(cap)) off it, a
ratio e^ε apart. The agent draws candidate seeds s₁, s₂, … from its own key; candidate j is
G(s_j) = N(0, I_D) generated from s_j by JAX's threefry generator; it is accepted with
probability 1 on the cap and e^{−ε} off it; the first accepted seed is uploaded (8 bytes), and
after T − 1 rejections the T-th seed is uploaded unconditionally. The aggregator regenerates
G(s) and estimates u by G(s) / ((1 − β)·m), m = PrivUnitG's E⟨V, u⟩ and β = (1 − α)^{T−1} the
chance that every acceptance failed (α = P(cap)/p, the acceptance rate of one candidate).

*What its guarantee is, precisely.* Write π(s) ∈ {1, e^{−ε}} for a seed's acceptance probability
and α_x for its mean over a uniform seed. The uploaded seed has probability
2^{−64}·[π(s)·Σ_{j<T−1}(1 − α_x)^j + (1 − α_x)^{T−1}] (`_seed_density`), so:

* **with an ideal generator** (G(s) of a uniform seed puts each cap's Gaussian probability on it,
  so α_x = α for every input) the ratio for two inputs is at most e^{ε_ideal} ≤ e^ε, i.e.
  ε-LDP: the stated ε. This is the model in which Feldman & Talwar's compression is lossless;
  for a real pseudorandom generator it is a *computational* guarantee (an efficient test of a
  cap's probability would distinguish G from Gaussian; the statement is ε + the generator's
  cap-probability error, `SeedPrivUnitGMechanism.epsilon_for(d, eta)`), and threefry is not
  proven secure;
* **for any generator whatsoever** (α_x anywhere in [e^{−ε}, 1]) the seed is
  ε_any-LDP, ε_any = 2ε + log(1 − (1 − e^{−ε})^T) < 2ε, exactly.

The record states both (`params()`); the ledger charges the stated ε, which rests on the
ideal-generator model. Where that model is not acceptable, calibrate at ε/2: ε_any < ε then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array
from scipy import special

from privrl.config import ConfigError
from privrl.privacy.ldp_vector import (
    PrivUnitGMechanism,
    UnitCalibration,
    calibrate,
    lift,
    sphere_release,
)

__all__ = ["FLOAT_BYTES", "SEED_BYTES", "ProjUnitMechanism", "SeedPrivUnitGMechanism",
           "compact_mechanism", "generator_condition"]

SEED_BYTES = 8  # one threefry key: two uint32
FLOAT_BYTES = 4  # float32
# Seed compression draws up to T ≈ e^ε·log(1/β) candidates of D floats each: beyond this ε the
# agent's work (and an audit's) grows past a few hundred thousand normals per report.
MAX_SEED_EPSILON = 6.0


def _draw_seed(key: Array) -> Array:
    """A fresh seed (the raw data of a threefry key) from the agent's own key."""
    return jax.random.bits(key, (2,), jnp.uint32)


def _gaussian(seed: Array, dim: int) -> Array:
    """G(s): N(0, I_dim) from a seed, the same on the agent and the aggregator."""
    return jax.random.normal(jax.random.wrap_key_data(seed, impl="threefry2x32"), (dim,),
                             jnp.float32)


# --- ProjUnit --------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def projection_bias(dim: int, k: int) -> float:
    """c = E⟨Wᵀ Wu/‖Wu‖, u⟩ for W = √(D/k)·(a uniform k-subspace's orthonormal basis)ᵀ."""
    if k >= dim:
        return 1.0
    log_e = special.betaln(k / 2 + 0.5, (dim - k) / 2) - special.betaln(k / 2, (dim - k) / 2)
    return math.sqrt(dim / k) * math.exp(log_e)


def projection(seed: Array, dim: int, k: int) -> Array:
    """W (k × D) from the seed: √(D/k)·Qᵀ, Q the orthonormal factor of a k × D Gaussian's
    rows (Gram–Schmidt, each row orthogonalized twice for float32 accuracy: the Q of a QR
    with positive diagonal; its span is a uniformly random k-subspace). Not `jnp.linalg.qr`:
    XLA CPU's QR stalled inside PGC-A3C's sharded program of 10 trials."""
    g = jax.random.normal(jax.random.wrap_key_data(seed, impl="threefry2x32"), (k, dim),
                          jnp.float32)

    def row(i: Array, q: Array) -> Array:  # rows ≥ i of q are still zero
        v = g[i]
        v = v - q.T @ (q @ v)
        v = v - q.T @ (q @ v)
        return q.at[i].set(v / jnp.linalg.norm(v))

    return math.sqrt(dim / k) * jax.lax.fori_loop(0, k, row, jnp.zeros_like(g))


class ProjUnitParams(NamedTuple):
    """`projunit_release`'s numbers (host-side)."""

    clip: float
    k: int  # the projected dimension (≤ D)
    cal: UnitCalibration  # PrivUnitG's calibration in R^k
    bias: float  # c, the projection's bias factor


def projunit_encode(p: ProjUnitParams, key: Array, u: Array) -> tuple[Array, Array]:
    """What the agent uploads for the unit vector u: (seed, z), z = PrivUnitG(Wu/‖Wu‖) in R^k."""
    k_seed, k_z = jax.random.split(key)
    seed = _draw_seed(k_seed)
    w = projection(seed, u.shape[0], p.k) @ u
    v = w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(jnp.float32).tiny)
    return seed, sphere_release("privunitg", p.cal, k_z, v)


def projunit_decode(p: ProjUnitParams, dim: int, seed: Array, z: Array) -> Array:
    """The aggregator's unbiased estimate of u (in R^dim) from an upload: Wᵀz/c."""
    return projection(seed, dim, p.k).T @ z / p.bias


def projunit_release(p: ProjUnitParams, key: Array, x: Array) -> Array:
    """ProjUnit (module docstring): lift x, encode at the agent, decode as the aggregator
    would, scale back and drop the lift coordinate."""
    u = lift(x, p.clip)
    return p.clip * projunit_decode(p, u.shape[0], *projunit_encode(p, key, u))[:-1]


@dataclass(frozen=True)
class ProjUnitMechanism(PrivUnitGMechanism):
    """ProjUnit (module docstring): PrivUnitG on a random k-dimensional projection; uploads a
    seed and k floats. ε-LDP per release, exactly; unbiased."""

    k: int = 16
    name = "projunit"

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.k, bool) or int(self.k) != self.k or self.k < 1:
            raise ValueError(f"k must be an integer >= 1, got {self.k!r}")
        object.__setattr__(self, "k", int(self.k))

    def projected_dim(self, d: int) -> int:
        """k, or D = d + 1 if that is smaller (then W is a scaled rotation and c = 1)."""
        return min(self.k, d + 1)

    def release_params(self, dim: int) -> ProjUnitParams:
        if dim < 1:
            raise ValueError(f"the input must have length >= 1, got {dim}")
        k = self.projected_dim(dim)
        return ProjUnitParams(self.clip, k, calibrate("privunitg", self.epsilon, k,
                                                      self.cap_epsilon),
                              projection_bias(dim + 1, k))

    def release(self, params: ProjUnitParams, key: Array, x: Array) -> Array:
        return projunit_release(params, key, x)

    def encode(self, key: Array, u: Array) -> tuple[Array, Array]:
        """The upload for a unit vector u of R^D: (seed, z)."""
        return projunit_encode(self.release_params(u.shape[0] - 1), key, u)

    def decode(self, dim: int, upload: tuple[Array, Array]) -> Array:
        """The aggregator's estimate of u ∈ R^dim from an upload."""
        return projunit_decode(self.release_params(dim - 1), dim, *upload)

    def sphere(self, key: Array, u: Array) -> Array:
        """Encode and decode a unit vector u of R^D: an unbiased estimate of u."""
        return self.decode(u.shape[0], self.encode(key, u))

    def mse(self, d: int) -> float:
        """E‖û − u‖² on the sphere of R^{d+1} (module docstring), exact."""
        p = self.release_params(d)
        return (d + 1) / p.k * (p.cal.mse + 1.0) / p.bias**2 - 1.0

    def mse_bound(self, d: int) -> float:
        return self.clip**2 * self.mse(d)

    def upload_bytes(self, dim: int) -> int:
        return SEED_BYTES + FLOAT_BYTES * self.projected_dim(dim)

    def params(self) -> dict[str, Any]:
        return {**super().params(), "k": self.k,
                "upload": "a seed (8 bytes) and min(k, d + 1) float32"}


# --- seed-compressed PrivUnitG ---------------------------------------------------------------
def _seed_density(pi: float, alpha: float, tries: int) -> float:
    """A seed's output probability over 2^{−64} for acceptance π and mean acceptance α."""
    n = tries - 1
    head = float(n) if alpha == 0 else (1.0 - (1.0 - alpha) ** n) / alpha
    return pi * head + (1.0 - alpha) ** n


class SeedParams(NamedTuple):
    """`seed_release`'s numbers (host-side)."""

    clip: float
    cal: UnitCalibration  # PrivUnitG's calibration in R^D
    tries: int  # T
    reject: float  # e^{−ε}: the acceptance probability off the cap
    scale: float  # 1 / ((1 − β)·m)


def seed_encode(p: SeedParams, key: Array, u: Array) -> Array:
    """What the agent uploads for the unit vector u: the first accepted candidate seed."""
    dim = u.shape[0]
    k_seed, k_coin = jax.random.split(key)

    def trial(j: Array) -> tuple[Array, Array]:
        seed = _draw_seed(jax.random.fold_in(k_seed, j))
        on_cap = jnp.dot(_gaussian(seed, dim), u) >= p.cal.gamma
        coin = jax.random.uniform(jax.random.fold_in(k_coin, j))
        return seed, (coin < jnp.where(on_cap, 1.0, p.reject)) | (j == p.tries - 1)

    def cond(state: tuple[Array, Array, Array]) -> Array:
        return ~state[2]

    def body(state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        j, _, _ = state
        seed, accept = trial(j)
        return j + 1, seed, accept

    _, seed, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.zeros(2, jnp.uint32),
                                                 jnp.bool_(False)))
    return seed


def seed_decode(p: SeedParams, dim: int, seed: Array) -> Array:
    """The aggregator's unbiased estimate of u (in R^dim) from the uploaded seed."""
    return p.scale * _gaussian(seed, dim)


def seed_release(p: SeedParams, key: Array, x: Array) -> Array:
    """Seed-compressed PrivUnitG: lift x, encode at the agent, decode as the aggregator would,
    scale back and drop the lift coordinate."""
    u = lift(x, p.clip)
    return p.clip * seed_decode(p, u.shape[0], seed_encode(p, key, u))[:-1]


@dataclass(frozen=True)
class SeedPrivUnitGMechanism(PrivUnitGMechanism):
    """Seed-compressed PrivUnitG (module docstring): uploads one 8-byte seed. ε-LDP with an
    ideal generator (computational for a real one); 2ε-LDP at most for any generator."""

    failure: float = 1e-6  # β bound: the chance that all T − 1 acceptances fail
    name = "privunitg-seed"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epsilon > MAX_SEED_EPSILON:
            raise ValueError(f"epsilon must be <= {MAX_SEED_EPSILON:g} for {self.name}, got "
                             f"{self.epsilon:g}: it draws about e^ε candidates per report")
        if not 0 < self.failure < 1:
            raise ValueError(f"failure must be in (0, 1), got {self.failure!r}")

    def acceptance(self, d: int) -> float:
        """α = P(cap)/p: one candidate's acceptance rate under the Gaussian."""
        cal = self.calibration(d)
        return (1.0 / (1.0 + math.exp(cal.size_epsilon))) / cal.p

    def tries(self, d: int) -> int:
        """T: the fewest candidates with (1 − α)^{T−1} ≤ failure."""
        a = self.acceptance(d)
        return 1 + max(1, math.ceil(math.log(self.failure) / math.log1p(-a)))

    def failed(self, d: int) -> float:
        """β = (1 − α)^{T−1}."""
        return (1.0 - self.acceptance(d)) ** (self.tries(d) - 1)

    def epsilon_for(self, d: int, eta: float | None) -> float:
        """ε of the upload when each cap's probability under the generator is within ±eta of
        the Gaussian's (0: ideal generator, ≤ the stated ε; None: any generator, < 2ε)."""
        t, reject, a = self.tries(d), math.exp(-self.epsilon), self.acceptance(d)
        # α = P(cap)·1 + (1 − P(cap))·e^{−ε} lies in [e^{−ε}, 1] whatever the generator; both
        # densities decrease in α, so the worst pair has the least α above, the most below
        spread = math.inf if eta is None else eta * (1.0 - reject)
        lo, hi = max(reject, a - spread), min(1.0, a + spread)
        return math.log(_seed_density(1.0, lo, t) / _seed_density(reject, hi, t))

    def release_params(self, dim: int) -> SeedParams:
        cal = self.calibration(dim)
        return SeedParams(self.clip, cal, self.tries(dim), math.exp(-self.epsilon),
                          1.0 / ((1.0 - self.failed(dim)) * cal.scale))

    def release(self, params: SeedParams, key: Array, x: Array) -> Array:
        return seed_release(params, key, x)

    def encode(self, key: Array, u: Array) -> Array:
        """The upload for a unit vector u of R^D: one seed."""
        return seed_encode(self.release_params(u.shape[0] - 1), key, u)

    def decode(self, dim: int, upload: Array) -> Array:
        """The aggregator's estimate of u ∈ R^dim from the seed."""
        return seed_decode(self.release_params(dim - 1), dim, upload)

    def sphere(self, key: Array, u: Array) -> Array:
        """Encode and decode a unit vector u of R^D: an unbiased estimate of u (ideal
        generator)."""
        return self.decode(u.shape[0], self.encode(key, u))

    def mse(self, d: int) -> float:
        """E‖û − u‖² on the sphere of R^D, ideal generator: a fraction 1 − β of outputs are
        PrivUnitG's V, the rest N(0, I_D); scaled by 1/((1 − β)m)."""
        cal, b = self.calibration(d), self.failed(d)
        second = (cal.mse + 1.0) * cal.scale**2  # E‖V‖²
        return ((1 - b) * second + b * (d + 1)) / ((1 - b) * cal.scale) ** 2 - 1.0

    def mse_bound(self, d: int) -> float:
        return self.clip**2 * self.mse(d)

    def upload_bytes(self, dim: int) -> int:
        return SEED_BYTES

    def params(self) -> dict[str, Any]:
        return {**super().params(), "failure": self.failure, "upload": "one seed (8 bytes)",
                "guarantee_model": generator_condition(self.name),
                "epsilon_any_generator_below": 2.0 * self.epsilon}


def generator_condition(name: str) -> str:
    """What a run's guarantee rests on beyond the mechanism (privacy.json's condition,
    `privrl.privacy.record.Facts`): for seed compression, the generator; "" otherwise."""
    if name != SeedPrivUnitGMechanism.name:
        return ""
    return ("an ideal seed-to-Gaussian generator (a computational assumption on JAX's threefry, "
            "which is not proven secure); with any generator each upload is below 2ε-LDP")


def compact_mechanism(name: str, epsilon: float, clip: float, k: int = 16
                      ) -> ProjUnitMechanism | SeedPrivUnitGMechanism:
    """"projunit" or "privunitg-seed" for a run's config: a bad ε is one ConfigError."""
    try:
        if name == "projunit":
            return ProjUnitMechanism(epsilon, clip, k=k)
        return SeedPrivUnitGMechanism(epsilon, clip)
    except ValueError as e:
        raise ConfigError("epsilon", str(e)) from None
