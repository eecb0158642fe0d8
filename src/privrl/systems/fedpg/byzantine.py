"""Byzantine agents of FedPG-Cen (agent side): who they are, what they send, and the numbers the
server's FedPG-BR filter needs (its threshold, widened by the mechanism's noise).

Which agents are Byzantine is fixed for a run: `byzantine_agents` draws N of the K ids from the
seed (the same for every trial), and the summary records them. A Byzantine agent chooses the
mechanism's *input*; the mechanism itself still runs (it clips and randomizes), so under a
mechanism an attack is bounded by the clip like any honest message. The attacks
(docs/byzantine.md), following FedPG-BR's released code where it has one:
- random-noise: μ + U(−1, 1)·3·(max μ − min μ) per coordinate (the code does this per
  parameter tensor; here over the flat vector);
- random-action: the agent plays uniformly random actions and sends the honest estimate of
  those episodes (the code fixes action 0 instead; we follow the paper's "random action");
- sign-flip: −2.5 μ;
- zero-gradient: 0;
- adaptive: every Byzantine agent sends μ̄_B − (𝔗/2)·μ̄_B/‖μ̄_B‖, μ̄_B the Byzantine agents'
  mean honest estimate and 𝔗 = 2σL̄√(V/B_t) the filter's threshold (the attacker is assumed
  to know it): it pulls against the gradient by the honest reports' own radius, to stay
  inside R1;
- fedscspg: FedPG-BR's own adaptive attack (its code's "FedScsPG-attack"): every Byzantine
  agent sends μ̄_B + u·(3/2)·max_{i,j∈B} ‖μ_i − μ_j‖, u a uniform random unit direction;
- normalized: after Fang, Wang and Gong's "Normalized" attack (WWW 2025), which maximizes the
  *angle* between the aggregate before and after the attack rather than their distance. Every
  Byzantine agent sends −n̄_B·μ̄_B/‖μ̄_B‖, n̄_B the Byzantine agents' mean honest norm: the
  direction opposite to their estimate of the aggregate (180°, the largest angle), at an
  honest report's length, so that no norm check can tell it apart. The paper's own
  optimisation was not available here; this is our reading of its stated objective
  (docs/byzantine.md).

An attacker is not bound by the mechanism: with `bypass_mechanism` a Byzantine agent's report
is its message itself (`forge`), unclipped and without noise, and `attack_norm` rescales every
message to one L2 norm (a loud attacker far outside the honest reports, or one at an honest
report's own norm). The privacy guarantee is each honest agent's: the forged reports carry no
honest agent's data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.config import fail
from privrl.nets.heads import Head
from privrl.privacy.ldp_vector import unit_mechanism
from privrl.privacy.report import Report

if TYPE_CHECKING:
    from privrl.systems.fedpg.config import FedPGConfig

# The seed stream of the Byzantine ids (not any key the run uses).
_BYZANTINE_STREAM = 0xB7A


def byzantine_agents(cfg: FedPGConfig) -> tuple[int, ...]:
    """The ids of the run's `byzantine` Byzantine agents (sorted), drawn from its seed."""
    if cfg.byzantine == 0:
        return ()
    rng = np.random.default_rng([cfg.seed, _BYZANTINE_STREAM])
    return tuple(sorted(int(i) for i in rng.choice(cfg.agents, cfg.byzantine, replace=False)))


def byzantine_mask(cfg: FedPGConfig) -> np.ndarray:
    """(K,) bool: the agent is Byzantine."""
    mask = np.zeros(cfg.agents, bool)
    mask[list(byzantine_agents(cfg))] = True
    return mask


def variance_bound(cfg: FedPGConfig) -> float:
    """V = 2 log(2K/δ) (FedPG-BR), δ = `filter_delta`."""
    return 2.0 * math.log(2.0 * cfg.agents / cfg.filter_delta)


def honest_radius(cfg: FedPGConfig, batch: Array, scale: Array) -> Array:
    """σ·L̄·√(V/B_t): how far one honest estimate of B_t episodes is from the true gradient,
    with probability ≥ 1 − δ/(2K) (FedPG-BR's assumption, σ = `filter_sigma`). FedPG-BR's σ
    is per step (its code averages the loss over all steps of a batch); privrl's estimate
    sums an episode's steps, so σ is scaled by L̄ = `scale`, the mean length of the server's
    own episodes in the previous round (its own data: no agent can move it)."""
    return cfg.filter_sigma * scale * jnp.sqrt(variance_bound(cfg) / batch.astype(jnp.float32))


def attack(cfg: FedPGConfig, mu: Array, byz: Array, batch: Array, scale: Array, key: Array
           ) -> Array:
    """What each lane sends into the mechanism (P, d): its honest μ, or, if `byz`, the attack's
    message. `batch` B_t and `scale` L̄: the adaptive attack reads the filter's threshold."""
    name = cfg.attack
    if name in (None, "random-action"):  # random-action acts on the episodes (`CenRound`)
        return mu
    w = byz.astype(mu.dtype)[:, None]
    mean_b = jnp.sum(mu * w, axis=0) / jnp.maximum(jnp.sum(w), 1.0)
    if name == "zero-gradient":
        bad = jnp.zeros_like(mu)
    elif name == "sign-flip":
        bad = -2.5 * mu
    elif name == "random-noise":
        spread = (jnp.max(mu, axis=1) - jnp.min(mu, axis=1))[:, None]
        bad = mu + jax.random.uniform(key, mu.shape, mu.dtype, -1.0, 1.0) * 3.0 * spread
    elif name == "adaptive":
        unit = mean_b / jnp.maximum(jnp.linalg.norm(mean_b), 1e-12)
        bad = jnp.broadcast_to(mean_b - honest_radius(cfg, batch, scale) * unit, mu.shape)
    elif name == "fedscspg":
        diff = mu[:, None, :] - mu[None, :, :]
        pair = jnp.sqrt(jnp.sum(diff * diff, axis=-1)) * (w * w.T)
        u = jax.random.uniform(key, mean_b.shape, mu.dtype, -1.0, 1.0)
        u = u / jnp.maximum(jnp.linalg.norm(u), 1e-12)
        bad = jnp.broadcast_to(mean_b + u * 1.5 * jnp.max(pair), mu.shape)
    elif name == "normalized":
        norm_b = jnp.sum(jnp.linalg.norm(mu, axis=1) * w[:, 0]) / jnp.maximum(jnp.sum(w), 1.0)
        unit = mean_b / jnp.maximum(jnp.linalg.norm(mean_b), 1e-12)
        bad = jnp.broadcast_to(-norm_b * unit, mu.shape)
    else:
        raise ValueError(f"unknown attack {name!r}")
    if cfg.attack_norm is not None:  # the same direction at the chosen length
        norm = jnp.linalg.norm(bad, axis=1, keepdims=True)
        bad = bad * (cfg.attack_norm / jnp.maximum(norm, 1e-12))
    return jnp.where(byz[:, None], bad, mu)


def forge(reports: Report, byz: Array, message: Array) -> Report:
    """The reports as the server receives them when Byzantine agents bypass the mechanism:
    lane p's report is `message[p]` itself where `byz[p]` (an attacker can put any finite
    vector of the right shape on the wire, and the server checks only that), else the
    mechanism's release. A forged report carries the honest reports' guarantee label only
    because the server cannot tell it apart; it holds no honest agent's data."""
    return jax.tree_util.tree_map(
        lambda v: jnp.where(byz[:, None], message.astype(v.dtype), v), reports)


def uniform_act(head: Head) -> Callable[[Array, Array, Array], Array]:
    """The random-action attacker's policy: uniform over the task's actions (the head's: the
    discrete actions, or the Box), θ ignored."""

    def act(theta_env: Array, key: Array, obs: Array) -> Array:
        del theta_env
        return head.uniform(key, obs.shape[0])

    return act


# --- the filter's threshold under a mechanism -------------------------------------------------
def noise_radius(cfg: FedPGConfig, dim: int) -> float:
    """r: the mechanism's noise ‖x̂ − x‖ on one report is at most r with probability
    ≥ 1 − δ/(2K) (δ = `filter_delta`), so that with probability ≥ 1 − δ/2 no honest report is
    moved further than r. Derivations: docs/byzantine.md.
    - none: 0.
    - gaussian (std s = σ_n·C per coordinate): ‖n‖ is 1-Lipschitz in a standard normal, so
      P(‖n‖ ≥ s(√d + t)) ≤ exp(−t²/2); t = √V gives δ/(2K): r = s(√d + √V).
    - laplace (scale b = C/ε per coordinate): ‖n‖² has mean 2db² and variance 20db⁴ (E n⁴ =
      24b⁴); Cantelli's inequality at δ/(2K): r = b·√(2d + √(20d(2K/δ − 1))).
    - privunit: the release has norm at most C/m (m the calibration's scale) and the clipped
      input at most C: r = C(1/m + 1), always.
    ConfigError for a mechanism with no bound here (privunitg, a user's)."""
    mech = cfg.mechanism
    k, delta, v = cfg.agents, cfg.filter_delta, variance_bound(cfg)
    if mech == "none":
        return 0.0
    if mech == "gaussian":
        return cfg.noise_multiplier * cfg.clip * (math.sqrt(dim) + math.sqrt(v))
    if mech == "laplace":
        b = cfg.clip / cfg.epsilon_per_report
        return b * math.sqrt(2 * dim + math.sqrt(20 * dim * (2 * k / delta - 1)))
    if mech == "privunit":
        return cfg.clip * (1.0 / _privunit_scale(cfg, dim) + 1.0)
    fail("robust", f"fedpg-br's threshold needs a bound on the mechanism's noise; none is "
                   f"derived for mechanism={cfg.mechanism!r} (use median or trimmed-mean)")


def input_diameter(cfg: FedPGConfig) -> float:
    """How far apart two clipped mechanism inputs can be in L2: ∞ without a mechanism; 2C for
    the L2 clip (gaussian, privunit); C for laplace (L1 ball of radius C/2)."""
    if cfg.mechanism == "none":
        return math.inf
    return cfg.clip if cfg.mechanism == "laplace" else 2.0 * cfg.clip


def filter_radii(cfg: FedPGConfig, dim: int, batch: Array, scale: Array
                 ) -> tuple[Array, Array]:
    """FedPG-BR's R1 threshold and R2 radius this round, widened by the noise:
    𝔗 = min(2σL̄√(V/B_t), D) + 2r and min(2σL̄, D) + 2r (D `input_diameter`, r `noise_radius`,
    L̄ = `scale`: `honest_radius`).
    The honest part holds for the clipped inputs as for the raw ones: the L2 clip is a
    projection (it brings no two points further apart) and no two inputs are further than D;
    for laplace (an L1 clip, not an L2 projection) only D is used."""
    r, diam = noise_radius(cfg, dim), input_diameter(cfg)
    honest = 2.0 * honest_radius(cfg, batch, scale)
    wide = 2.0 * cfg.filter_sigma * jnp.asarray(scale, jnp.float32)
    if cfg.mechanism == "laplace":
        honest = wide = jnp.asarray(diam, jnp.float32)
    thr, fallback = jnp.minimum(honest, diam) + 2 * r, jnp.minimum(wide, diam) + 2 * r
    if cfg.mechanism == "privunit":
        # Every PrivUnit release has norm at most C/m, so two honest releases are at most
        # 2C/m apart whatever their inputs: a tighter radius than D + 2r = 2C/m + 4C.
        span = 2.0 * cfg.clip / _privunit_scale(cfg, dim)
        thr, fallback = jnp.minimum(thr, span), jnp.minimum(fallback, span)
    return thr, fallback


def _privunit_scale(cfg: FedPGConfig, dim: int) -> float:
    """m, PrivUnit's calibration scale at ε in d = `dim` (a release's norm is at most C/m)."""
    return unit_mechanism("privunit", cfg.epsilon_per_report, cfg.clip).calibration(dim).scale
