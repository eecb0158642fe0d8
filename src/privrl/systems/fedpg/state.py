"""What a FedPG trial carries from round to round (`FedPGState`) and what a round reports
(`RoundInfo`); `keep` leaves a finished trial as it was."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from privrl.federation.pushsum import PushSumState


class FedPGState(NamedTuple):
    """One trial. Cen: x is θ (1, d) and w = 1; Dec: push-sum (x, w) per node."""

    gossip: PushSumState
    opt_state: Any  # per learner (leading axis M)
    key: Array
    used: Array  # (K,) episodes each agent has sampled
    rounds: Array
    # Secret noise root (privrl.privacy.noise.secret_keys), or None: noise keys derive from
    # `key` (seeded). An argument of the jitted program, never a constant of it.
    noise: Array | None = None
    clip: Array | None = None  # adaptive clipping: the clip C_t of the next round; else None
    # Run as a member of a program of settings (`FedPG.for_settings`): the trial's mechanism
    # as data (SettingParams); None: the config's mechanism, compiled in.
    setting: Any = None
    # FedPG-BR's filter: the mean length of the server's own episodes last round (its σ's
    # scale, privrl.systems.fedpg.byzantine); None without the filter.
    length: Array | None = None


class RoundInfo(NamedTuple):
    """What a round reports of one trial (the runner's metrics)."""

    mean_return: Array  # mean return of this round's B_t-batches (at θ₀ᵗ, or each z_k)
    used_before: Array  # mean episodes per agent before this round
    batch: Array  # B_t (mean over nodes for Dec)
    inner_steps: Array  # N_t (mean over nodes for Dec)
    participants: Array  # agents that played B_t episodes (K; fewer under agent sampling)
    clip: Array | None = None  # adaptive clipping: the clip C_t this round's shares used
    kept: Array | None = None  # a robust rule: (K,) the agents whose reports it kept


def keep(live: Array, new: FedPGState, old: FedPGState) -> FedPGState:
    """`new` for a live trial, `old` (unchanged) for a finished one."""
    return jax.tree_util.tree_map(lambda a, o: jnp.where(live, a, o), new, old)


def node_noise_key(root: Array, node: Array, round_: Array) -> Array:
    """A node's (or agent's) mechanism key for one round under secret noise."""
    return jax.random.fold_in(jax.random.fold_in(root, node), round_)
