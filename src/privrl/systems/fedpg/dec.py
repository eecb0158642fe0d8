"""FedPG-Dec's round (Algorithm 2, with push-sum as in Kempe et al. / Assran et al.), read top
to bottom.

Round t: every node k runs the SCSG round of privrl.systems.fedpg.scsg from its de-biased z_k
with its own μ_tᵏ (nothing is sent for it): B_t episodes, μ_tᵏ, N_t SCSG steps; it releases its
update Δ_k = θ_{N}ᵏ − z_k through the mechanism, steps x_k ← x_k + w_k Δ̃_k (a step on z), and
gossips (x_k, w_k) along the round's directed graph (privrl.federation).

A node's part (`DecRound.node_update`) uses its own z_k, optimizer state, private environment
and keys only: the local runner computes it for each node in turn, the Ray runner inside each
node's actor. Its episodes come from the episode source it is given
(privrl.systems.fedpg.source): inside one jitted program for a gymnax task, piece by piece
around a host rollout for a Gymnasium task.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from privrl.federation.pushsum import push_sum_apply, push_sum_mix, push_sum_z
from privrl.privacy.noise import secret_fold
from privrl.privacy.report import Report
from privrl.systems.fedpg.scsg import Learner
from privrl.systems.fedpg.source import Episodes, EpisodeSource, mean_return
from privrl.systems.fedpg.state import FedPGState, RoundInfo, node_noise_key


class NodePlan(NamedTuple):
    """A FedPG-Dec node's draws for a round, before it plays any episode."""

    batch: Array  # B_t
    live: Array  # (batch_max,) the episodes it plays (its first B_t)
    k_ep: Array
    mech_key: Array  # its mechanism key (its own secret key under secret noise)
    steps: Array  # N_t (0 for a finished trial)
    k_inner: Array


class NodeUpdate(NamedTuple):
    """What one FedPG-Dec node computes in a round; only `report` leaves the node."""

    report: Report  # Δ̃_k, the randomized update
    opt_state: Any
    batch: Array  # B_t
    steps: Array  # N_t
    mean_return: Array  # of its B_t episodes


class DecRound:
    """FedPG-Dec's round for K nodes, each a learner like `algo`."""

    def __init__(self, algo: Learner) -> None:
        self.algo = algo

    def round(self, source: EpisodeSource, state: FedPGState, mixing: Array, key: Array,
              live: Array) -> tuple[FedPGState, RoundInfo]:
        """Every node's `node_update`, one node at a time (`source.map`), then the gossip
        along the round's graph (`mixing`); a trial with `live` False plays no episode.

        Why not vmapped over the nodes: each node's SCSG loop runs its own N_t steps, and
        vmapped the loop runs until the node with the largest N_t is done (about 3 × the mean
        N_t for K = 10), each step rolling out every node's episodes. On CPU one node at a time
        is the faster (benchmarks/RESULTS.md); on an accelerator, where a step costs about the
        same for 4 or 400 episodes, vmapping would likely pay (not measured)."""
        z, env, keys, noise = source.piece(self.inputs)(state, key)

        def node(a: tuple[Any, ...]) -> NodeUpdate:
            z_k, opt_k, env_k, key_k, noise_k = a
            return self.node_update(source, z_k, opt_k, env_k, key_k, live, noise_k,
                                    state.setting)

        upd = source.map(node, (z, state.opt_state, env, keys, noise))
        return source.piece(self.finish)(state, upd, mixing)

    def inputs(self, state: FedPGState, key: Array) -> tuple[Array, Any, Array, Array | None]:
        """Every node's z_k, private environment, round key and (secret noise) noise key.

        Under secret noise the root also keys each node's private environment and its round
        (episodes, B_t, N_t, SCSG draws: `secret_fold` over the seeded keys), so config.json
        and the messages do not let anyone re-simulate a node's data."""
        nodes = jnp.arange(self.algo.config.agents)
        z = push_sum_z(state.gossip)  # θ_{t,0}ᵏ
        root = state.noise
        env = self.algo.env_params_of(secret_fold(root, state.key), nodes)
        keys = jax.vmap(jax.random.fold_in, (None, 0))(key, nodes)
        if root is None:
            return z, env, keys, None
        keys = jax.vmap(secret_fold, (None, 0))(root, keys)
        return z, env, keys, jax.vmap(node_noise_key, (None, 0, None))(root, nodes, state.rounds)

    def node_update(self, source: EpisodeSource, z: Array, opt_state: Any, env_params: Any,
                    key: Array, live: Array, noise_key: Array | None = None,
                    setting: Any = None) -> NodeUpdate:
        """One node's part of a round, from its own z_k, optimizer state, private environment
        and key only: B_t episodes from `source`, its own μ_tᵏ (never sent), N_t SCSG steps,
        and its update Δ_k = θ_N − z_k released through the mechanism (with `noise_key`, the
        node's own secret key, else a key derived from `key`). `setting`: the trial's
        mechanism as data (`FedPGState.setting`), or None."""
        algo = self.algo
        plan = source.piece(self.node_plan)(key, live, noise_key)
        one = lambda tree: jax.tree_util.tree_map(lambda a: a[None], tree)  # noqa: E731
        env = one(env_params)
        ep = source.sample(z[None], env, plan.live[None], plan.k_ep)
        mu = source.piece(algo.gradients)(z[None], ep)
        theta, opt_state = algo.scsg(source, z[None], mu, one(opt_state), plan.steps[None], env,
                                     plan.k_inner)
        return source.piece(self.node_release)(
            z, plan, ep, theta[0], jax.tree_util.tree_map(lambda a: a[0], opt_state), setting)

    def node_plan(self, key: Array, live: Array, noise_key: Array | None = None) -> NodePlan:
        """One node's draws from its round key: B_t, its episodes' keys, its mechanism key
        (`noise_key` under secret noise), N_t and its SCSG loop's key."""
        cfg = self.algo.config
        k_b, k_ep, k_mech, k_n, k_inner = jax.random.split(key, 5)
        batch = jax.random.randint(k_b, (), cfg.batch_min, cfg.batch_max + 1)
        steps = self.algo.draw_steps(k_n, batch[None]) * live
        return NodePlan(batch, (jnp.arange(cfg.batch_max) < batch) & live, k_ep,
                        k_mech if noise_key is None else noise_key, steps[0], k_inner)

    def node_release(self, z: Array, plan: NodePlan, ep: Episodes, theta: Array,
                     opt_state: Any, setting: Any = None) -> NodeUpdate:
        """A node's update Δ_k = θ_N − z_k through the mechanism, and what it keeps."""
        return NodeUpdate(self.algo.release(setting, plan.mech_key, theta - z), opt_state,
                          plan.batch, plan.steps, mean_return(ep))

    def finish(self, state: FedPGState, upd: NodeUpdate, mixing: Array
               ) -> tuple[FedPGState, RoundInfo]:
        """Every node steps x_k ← x_k + w_k Δ̃_k, the (x, w) gossip along the round's graph;
        the new state and what the round reports."""
        cfg = self.algo.config
        gossip = push_sum_mix(push_sum_apply(state.gossip, upd.report), mixing)
        used = state.used + upd.batch + cfg.minibatch * upd.steps
        info = round_info(upd.mean_return, upd.batch, upd.steps, state.used)
        return (FedPGState(gossip, upd.opt_state, state.key, used, state.rounds + 1,
                           state.noise, state.clip, state.setting), info)


def round_info(mean_return: Array, batch: Array, steps: Array, used_before: Array) -> RoundInfo:
    """What a Dec round reports from its nodes' numbers (each of shape (K,)): the batch-weighted
    mean return, the means of B_t, N_t and the episodes used before it, in float32. The local
    round and the Ray driver (from its nodes' answers) both report through it."""
    b = batch.astype(jnp.float32)
    return RoundInfo(jnp.sum(mean_return * b) / jnp.sum(b), jnp.mean(used_before), jnp.mean(b),
                     jnp.mean(steps.astype(jnp.float32)), jnp.asarray(batch.shape[0]))
