"""Mironov's low-bit attack (2012) on the float Laplace mechanism, and the secure sampler.

The float mechanism releases y = fl(x + n), n = fl(log-transform of a 23-bit uniform): only
2^23 noise values exist, so the floats reachable from x = 0 and from x = 2^-10 are two sparse,
nearly disjoint sets. Replaying the sampler's arithmetic on the mantissas near y − x, an
observer checks which set y lies in and names the input. On the secure mechanism (discrete
Laplace on a grid) the same check, and a parity check on the lowest mantissa bit, see the same
statistics under both inputs.

Statistics: 4096 coordinates per input; every "at chance" assertion allows 6 standard errors
of a difference of two means of ±1 / 0-1 scores (false failure ≈ 2e-9 each). The float
assertions are far from their thresholds (accuracy ≈ 1).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from privrl.privacy import LaplaceMechanism
from privrl.privacy.secure import laplace_grid as secure_grid

D = 4096
X1 = 2.0**-10
CLIP = 8.0  # ε = clip = 8: Laplace scale 1 (the noise is the sampler's output exactly), and an
# input of D coordinates equal to X1 has L1 norm 4 = clip/2: nothing is clipped


@jax.jit
def _float_laplace(bits: jax.Array) -> jax.Array:
    """jax.random.laplace's output for every 23-bit mantissa (its own arithmetic, replayed)."""
    one = np.array(1.0, np.float32).view(np.uint32)
    floats = jax.lax.bitcast_convert_type((bits << 9 >> 9) | one, jnp.float32) - 1.0
    lo = jnp.float32(-1.0 + float(jnp.finfo(jnp.float32).epsneg))
    u = jnp.maximum(lo, floats * (jnp.float32(1.0) - lo) + lo)
    return jnp.sign(u) * jnp.log1p(-jnp.abs(u))


def _near(target: np.ndarray) -> np.ndarray:
    """The sampler's outputs for the 9 mantissas around the one whose noise is `target`
    (n = sign(u)·log1p(−|u|) inverted in float64, u ≈ k·2^-22 − 1): every output near the
    target, where fl(x + n) could be y."""
    u = -np.sign(target) * -np.expm1(-np.abs(target))
    k = np.rint((u + 1.0) * 2.0**22)[:, None] + np.arange(-4, 5)
    return np.asarray(_float_laplace(jnp.asarray(np.clip(k, 0, 2**23 - 1), jnp.uint32)))


def _reachable(y: np.ndarray, x: float) -> np.ndarray:
    """Whether some noise value n of the float sampler gives fl32(x + n) = y (y − x is exact in
    float64; fl(x + n) is monotone in n, so the outputs around y − x decide it)."""
    n = _near(y.astype(np.float64) - x)
    return ((np.float32(x) + n).astype(np.float32) == y[:, None]).any(axis=1)


def _releases(mech: LaplaceMechanism, x: float) -> np.ndarray:
    """One release of the D-vector (x, ..., x): D independent noisy coordinates."""
    return np.asarray(mech.privatize(jax.random.key(11), jnp.full((D,), x, jnp.float32)).value)


def _scores(y: np.ndarray) -> np.ndarray:
    """+1: y is reachable from x = 2^-10 only; −1: from x = 0 only; 0: both or neither."""
    return _reachable(y, X1).astype(int) - _reachable(y, 0.0).astype(int)


def test_low_bits_name_the_input_of_float_laplace_but_not_of_secure_laplace() -> None:
    plain = LaplaceMechanism(CLIP, CLIP)
    y0, y1 = _releases(plain, 0.0), _releases(plain, X1)
    # the replay reaches every release (else the attack below would be meaningless)
    assert _reachable(y0, 0.0).all() and _reachable(y1, X1).all()
    s0, s1 = _scores(y0), _scores(y1)
    # never named wrongly; named right unless y is reachable from both (|y| tiny, dense floats)
    assert (s0 == 1).sum() == 0 and (s1 == -1).sum() == 0
    assert (s0 == -1).mean() > 0.8 and (s1 == 1).mean() > 0.8  # measured: 0.90 each

    secure = LaplaceMechanism(CLIP, CLIP, secure=True)
    z0, z1 = _releases(secure, 0.0), _releases(secure, X1)
    t0, t1 = _scores(z0), _scores(z1)
    assert abs(t1.mean() - t0.mean()) < 6 * math.sqrt(2 / D)  # |score| <= 1: var <= 1
    # the lowest bit that varies (the grid index's parity): the same frequency under both
    gamma = float(secure_grid(CLIP, CLIP)[0])
    b0 = np.rint(z0 / gamma).astype(np.int64) & 1
    b1 = np.rint(z1 / gamma).astype(np.int64) & 1
    assert abs(b1.mean() - b0.mean()) < 6 * math.sqrt(2 * 0.25 / D)
