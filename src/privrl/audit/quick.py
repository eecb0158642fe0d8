"""The quick audit of a user's mechanism at the start of a run (docs/ldp-mechanisms.md).

A user's mechanism (`privrl.privacy.user`) declares its ε; privrl cannot prove it. Before a run
releases anything through it, `audited` tests the declaration with `audit_mechanism` on the
run's own release (its ε, δ, clip and input length): enough draws per input that a release
without noise is refuted at the declared ε (`quick_samples`), seconds.
A lower bound above the declared ε refutes it, and the run stops before anything is computed
(ConfigError naming the mechanism); otherwise the bound is recorded beside the claim (the
mechanism's params, privacy.json's guarantee). It can refute a declaration, never prove one.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp

from privrl.audit.mechanism import audit_mechanism
from privrl.config import ConfigError
from privrl.privacy.user import DeclaredMechanism

__all__ = ["QUICK_CONFIDENCE", "QUICK_SAMPLES", "audited", "quick_samples"]

QUICK_SAMPLES = 20_000  # the fewest draws per input (half held out)
MAX_VALUES = 20_000_000  # the most output values drawn per input (memory: 80 MB of float32)
# An honest mechanism is refuted with probability at most 1e-6 (a run refused by chance would
# be a false accusation); the seed is fixed, so one mechanism's verdict is reproducible.
QUICK_CONFIDENCE = 1 - 1e-6


def quick_samples(epsilon: float, dim: int) -> int:
    """Draws per input: enough that a release without noise is refuted at the declared ε
    (n held-out draws bound it at about log(n / 14.5) at 1 − 1e-6; 40·e^ε of them give
    ε + 1), at least QUICK_SAMPLES, at most MAX_VALUES output values."""
    want = 2 * 40 * math.exp(min(epsilon, 30.0))
    return int(max(QUICK_SAMPLES, min(want, MAX_VALUES // max(dim, 1))))
_DONE: dict[tuple[Any, ...], tuple[tuple[str, Any], ...]] = {}  # one audit per process


def audited(mechanism: DeclaredMechanism, dim: int, clip: float) -> DeclaredMechanism:
    """`mechanism` with the quick audit's result in its params; ConfigError("mechanism") if
    the audit refutes the declared ε. The pair is the mechanism's own `audit_pair(dim)`, else
    ±clip·e₁ (any two inputs are neighbours under local DP)."""
    g = mechanism.guarantee
    key = (mechanism.source, mechanism.inner.params().__repr__(), g.epsilon, g.delta, dim, clip)
    if key not in _DONE:
        own = callable(getattr(mechanism.inner, "audit_pair", None))
        e1 = jnp.zeros((dim,), jnp.float32).at[0].set(clip)
        pair = mechanism.audit_pair(dim) if own else (e1, -e1)
        n = quick_samples(g.epsilon, dim)
        r = audit_mechanism(mechanism, key=jax.random.key(0), samples=n,
                            confidence=QUICK_CONFIDENCE, pair=pair, chunk=min(n, 100_000))
        if r.violated:
            raise ConfigError("mechanism", (
                f"{mechanism.source} declares ε = {r.epsilon_claimed:g} per release, but privrl's "
                f"quick audit of it found ε ≥ {r.epsilon_lower:.3g} (confidence "
                f"{r.confidence:.6g}, {r.samples:,} draws per input): the declaration is "
                "false; nothing was run (audit_plugin off skips the audit)"))
        _DONE[key] = (
            ("epsilon_lower", round(r.epsilon_lower, 4)),
            ("epsilon_declared", r.epsilon_claimed),
            ("confidence", r.confidence),
            ("samples_per_input", r.samples),
            ("pair", "the mechanism's audit_pair(dim)" if own else "±clip·e₁"),
            ("note", "privrl's quick audit of one release at the start of the run: a lower "
                     "bound on its true ε, which can refute the declared ε, never prove it"))
    return replace(mechanism, audit=_DONE[key])
