"""FedPG-Cen's round (Algorithm 1; FedPG-BR, its Byzantine filter optional), read top to bottom.

Round t: the server broadcasts θ₀ᵗ; each of K agents samples B_t ~ U{12..20} episodes with it
and computes its policy-gradient estimate μ_tᵏ; what it sends passes through the mechanism
(default: none, as in the paper) and becomes a `Report`. The server averages the reports into
μ_t, draws N_t ~ Geom(b/(B_t+b)) on {1, 2, ...} (mean (B_t+b)/b, as FedPG-BR's code) and takes
N_t SCSG steps on b episodes it samples itself with θ_n (the server is also a learner, with
its own environment, as in FedPG-BR): privrl.systems.fedpg.scsg.

The round is `plan` → the agents' episodes → `mu` → the server's SCSG loop → `finish`, each
episode from the episode source it is given (privrl.systems.fedpg.source): inside one jitted
program for a gymnax task, piece by piece around a host rollout for a Gymnasium task. The K
agents (and the episodes of each) are vectorized; under distributed-gaussian-continuous only
the Poisson-sampled agents' lanes are computed (`participant_slots`). Under
distributed-gaussian every agent's message is the deployment's (privrl.privacy.discrete_sum:
clipped, rounded to integers, its discrete Gaussian share added, modulo 2^b, drawn from its
mechanism key inside the round) and the server decodes their sum modulo 2^b, as SecAgg+
delivers it to a Flower deployment's server.

Byzantine agents (`byzantine`, `attack`; privrl.systems.fedpg.byzantine) choose what enters
their mechanism (random-action ones also play uniformly random actions); the server replaces
the plain average by a robust rule over the K reports (`robust`; privrl.federation.robust),
FedPG-BR's filter with its threshold widened by the mechanism's noise. With Byzantine agents
the round's return is the honest agents'.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from privrl.federation.pushsum import PushSumState
from privrl.federation.robust import robust_mean
from privrl.federation.star import average_reports, mean_from_sum
from privrl.privacy.discrete_sum import DiscreteGaussianSum, share
from privrl.privacy.distributed import DistributedGaussianMechanism, secure_aggregate
from privrl.privacy.noise import secret_fold
from privrl.privacy.report import Report
from privrl.systems.fedpg.byzantine import (
    attack,
    byzantine_mask,
    filter_radii,
    forge,
    uniform_act,
)
from privrl.systems.fedpg.config import participant_slots
from privrl.systems.fedpg.scsg import Learner
from privrl.systems.fedpg.source import Episodes, EpisodeSource, episode_source, mean_return
from privrl.systems.fedpg.state import FedPGState, RoundInfo, node_noise_key


class CenPlan(NamedTuple):
    """A FedPG-Cen round before any episode is played (`CenRound.plan`)."""

    theta_0: Array  # (1, d) the server's θ₀ᵗ
    thetas: Array  # (P, d) θ₀ᵗ per agent lane (P = K, or the sampled lanes)
    env_params: Any  # each lane's private environment
    live: Array  # (P, batch_max) the episodes each lane plays (its first B_t)
    k_ep: Array
    batch: Array  # B_t
    mech_keys: Array  # (K,) each agent's mechanism key
    ids: Array  # (P,) the agent of each lane
    valid: Array | None  # (P,) distributed-gaussian-continuous: the lane's agent was sampled
    steps: Array  # (1,) N_t (0 for a finished trial)
    server_env: Any
    k_inner: Array
    key: Array  # the round's key


class CenRound:
    """FedPG-Cen's round for one learner `algo` (the server) and its K agents."""

    def __init__(self, algo: Learner) -> None:
        self.algo = algo
        # Lanes computed per round: K, or under agent sampling the sampled agents' bound.
        self.slots = participant_slots(algo.config.agents, algo.config.sampling_rate)
        cfg = algo.config
        self.byzantine = jnp.asarray(byzantine_mask(cfg)) if cfg.byzantine else None
        # random-action attackers' episodes: the task's own source with a uniform policy
        self.uniform = (episode_source(algo.task, uniform_act(algo.head),
                                       cfg.max_episode_steps)
                        if cfg.attack == "random-action" else None)

    def round(self, source: EpisodeSource, state: FedPGState, mixing: Array, key: Array,
              live: Array) -> tuple[FedPGState, RoundInfo]:
        """One round of one trial from its round key, its episodes from `source` (`mixing`:
        unused, the star has no graph); a trial with `live` False plays no episode."""
        del mixing
        plan = source.piece(self.plan)(state, key, live)
        ep = self.episodes(source, plan)
        mu, new_clip, kept = source.piece(self.mu)(state, plan, ep)
        out = self.algo.scsg(source, plan.theta_0, mu, state.opt_state, plan.steps,
                             plan.server_env, plan.k_inner, lengths=state.length is not None)
        return source.piece(self.finish)(state, plan, ep, *out[:2], new_clip, kept, *out[2:])

    def episodes(self, source: EpisodeSource, plan: CenPlan) -> Episodes:
        """The agents' B_t episodes each with θ₀ᵗ; random-action attackers' lanes are played
        instead with uniformly random actions (their own private environments)."""
        ep = source.sample(plan.thetas, plan.env_params, plan.live, plan.k_ep)
        if self.uniform is None:
            return ep
        byz = source.piece(self.byzantine_lanes)(plan)
        rand = self.uniform.sample(plan.thetas, plan.env_params,
                                   source.piece(jnp.logical_and)(plan.live, byz[:, None]),
                                   source.piece(jax.random.fold_in)(plan.k_ep, 0xAC7))
        return source.piece(_lanes_from)(byz, rand, ep)

    def byzantine_lanes(self, plan: CenPlan) -> Array:
        """(P,) bool: the lane holds a (sampled) Byzantine agent."""
        byz = self.byzantine[plan.ids]
        return byz if plan.valid is None else byz & plan.valid

    def plan(self, state: FedPGState, key: Array, live: Array) -> CenPlan:
        """Who plays what in a FedPG-Cen round: B_t, the agents' lanes (all K, or under
        distributed-gaussian-continuous the Poisson-sampled ones), their environments and
        keys, N_t."""
        algo, cfg = self.algo, self.algo.config
        k, b_max = cfg.agents, cfg.batch_max
        k_b, k_ep, k_mech, k_n, k_inner = jax.random.split(key, 5)
        batch = jax.random.randint(k_b, (), cfg.batch_min, cfg.batch_max + 1)
        theta_0 = state.gossip.x  # (1, d): the server's θ₀ᵗ
        mech_keys = (jax.random.split(k_mech, k) if state.noise is None else
                     jax.vmap(node_noise_key, (None, 0, None))(state.noise, jnp.arange(k),
                                                              state.rounds))
        agent_live = (jnp.arange(b_max)[None, :] < batch) & live
        if isinstance(algo.mechanism, DistributedGaussianMechanism):
            # Only `self.slots` lanes are computed (the first sampled agents by id): see `mu`.
            sampled = algo.mechanism.sample(mech_keys)  # each agent's own (secret) key
            (ids,) = jnp.nonzero(sampled, size=self.slots, fill_value=k)
            valid = ids < k
            ids = jnp.where(valid, ids, 0)
            agent_live = agent_live & valid[:, None]
        else:
            ids, valid = jnp.arange(k), None
            agent_live = jnp.broadcast_to(agent_live, (k, b_max))
        thetas = jnp.broadcast_to(theta_0, (ids.shape[0], algo.dim))
        steps = algo.draw_steps(k_n, batch[None]) * live
        # Secret noise: the root also keys the agents' private environments and episodes
        # (`secret_fold` over the seeded keys); the server's own environment stays seeded.
        agents_env = algo.env_params_of(secret_fold(state.noise, state.key), ids)
        return CenPlan(theta_0, thetas, agents_env, agent_live, secret_fold(state.noise, k_ep),
                       batch, mech_keys, ids, valid, steps,
                       algo.env_params_of(state.key, jnp.array([k])), k_inner, key)

    def mu(self, state: FedPGState, plan: CenPlan, ep: Episodes
           ) -> tuple[Array, Array | None, Array | None]:
        """The agents' μ_tᵏ from their episodes (a Byzantine agent's: its attack), through the
        mechanism, as the server's μ_t (1, d): their average or the robust rule's; the next
        clip (adaptive clipping; else `state.clip`); and which agents' reports the robust
        rule kept ((K,) bool; None without a rule).

        distributed-gaussian: every agent's message (`discrete_sum.share` with its mechanism
        key), their sum modulo 2^b decoded (`DiscreteGaussianSum.aggregate`), divided by K.
        distributed-gaussian-continuous: the sampled agents in a lane have played B_t
        episodes; all K agents send a Share (unsampled: noise only); the server gets the secure
        sum and
        divides it by the public expected count q·K. Adaptive clipping: the shares also carry
        the clip bits at C_t = state.clip, and the server returns C_{t+1} from their noised
        fraction (else the clip returned is None). A sampled agent beyond the lanes
        (probability below 1e-8 per round by the 6-std margin) sends its noise share only:
        its exclusion is data-independent and can only lower its inclusion probability, so
        the guarantee holds as stated (it costs utility, not privacy)."""
        algo, cfg = self.algo, self.algo.config
        mech, k = algo.mechanism, cfg.agents
        if isinstance(mech, DiscreteGaussianSum):
            mu_k = self.estimates(state, plan, ep)  # every agent in a lane of its own
            messages = jax.vmap(share, (None, 0, 0))(mech.sum_params, plan.mech_keys, mu_k)
            return mean_from_sum(mech.aggregate(messages), k)[None], None, None
        if not isinstance(mech, DistributedGaussianMechanism):
            reports = self.reports(state, plan, ep)
            order = jnp.arange(k)
            if cfg.shuffle:  # the shuffler (simulated, seeded): a random order, no identities
                order = jax.random.permutation(jax.random.fold_in(plan.key, 0x5F1E), k)
                reports = jax.tree_util.tree_map(lambda a: a[order], reports)
            if cfg.robust == "none":
                # Server: average (then N_t SCSG steps on its own episodes).
                return self.noised(average_reports(reports), plan)[None], state.clip, None
            # Server: the robust rule over the reports (post-processing of the reports only);
            # `kept` back in agent order is the simulation's bookkeeping, not the server's.
            mu, kept = robust_mean(reports, cfg.robust,
                                   *(filter_radii(cfg, algo.dim, plan.batch,
                                                  self.length_scale(state))
                                     if cfg.robust == "fedpg-br" else ()),
                                   alpha=cfg.byzantine_alpha)
            return (self.noised(mu, plan)[None], state.clip,
                    jnp.zeros((k,), bool).at[order].set(kept))
        # Back to the K agents: a sampled agent in a lane holds its μ, every other one 0.
        mu_k = self.estimates(state, plan, ep)
        ids, valid = plan.ids, plan.valid
        included = jnp.zeros((k,), bool).at[ids].max(valid)
        mu_k = jnp.zeros((k, algo.dim), mu_k.dtype).at[ids].add(mu_k * valid[:, None])
        count = cfg.sampling_rate * k
        # in a program of settings (ONE_PROGRAM_SUMS) the trial's σ, or z_Δ and σ_b, as data
        setting, stated = state.setting, self.algo.sum_guarantee()
        if mech.adaptive is None:
            shares = jax.vmap(lambda key, x, s: mech.share(key, x, s, None, setting, stated))(
                plan.mech_keys, mu_k, included)
            return mean_from_sum(secure_aggregate(shares), count)[None], None, None
        shares = jax.vmap(lambda key, x, s: mech.share(key, x, s, state.clip, setting, stated))(
            plan.mech_keys, mu_k, included)
        update, bit_fraction = mech.unpack(secure_aggregate(shares), state.clip, count, setting)
        new_clip = mech.adaptive.next_clip(state.clip, bit_fraction)
        return mean_from_sum(update, count)[None], new_clip, None

    def estimates(self, state: FedPGState, plan: CenPlan, ep: Episodes) -> Array:
        """Each lane's μ_tᵏ (P, d) from its episodes (a Byzantine agent's: its attack)."""
        cfg = self.algo.config
        mu_k = self.algo.gradients(plan.thetas, ep)
        if self.byzantine is None:
            return mu_k
        return attack(cfg, mu_k, self.byzantine_lanes(plan), plan.batch,
                      self.length_scale(state), jax.random.fold_in(plan.key, 0xA77))

    def reports(self, state: FedPGState, plan: CenPlan, ep: Episodes) -> Report:
        """The agents' side of a round under a local mechanism: each lane's μ_tᵏ released
        through the mechanism with its agent's key, a batch of P Reports. The local runner
        computes every lane here; an agent on Flower computes its own (`own_lanes`), and the
        server averages what arrives (privrl.federation.star.average_reports). A simulated
        attacker that bypasses the mechanism (`bypass_mechanism`) sends its attack vector
        itself (`byzantine.forge`)."""
        mu_k = self.estimates(state, plan, ep)
        reports = jax.vmap(self.algo.release, (None, 0, 0))(state.setting, plan.mech_keys, mu_k)
        if self.algo.config.bypass_mechanism:
            reports = forge(reports, self.byzantine_lanes(plan), mu_k)
        return reports

    def noised(self, mu: Array, plan: CenPlan) -> Array:
        """central-gaussian: the trusted server's noise on its aggregate (its own key)."""
        central = self.algo.central
        return mu if central is None else central.release(jax.random.fold_in(plan.key, 0xCE17),
                                                          mu)

    def length_scale(self, state: FedPGState) -> Array:
        """L̄: the scale of FedPG-BR's σ (the mean length of the server's own episodes last
        round; 1 without the filter, for the adaptive attack against another rule)."""
        return jnp.ones(()) if state.length is None else state.length

    def finish(self, state: FedPGState, plan: CenPlan, ep: Episodes, theta: Array,
               opt_state: Any, new_clip: Array | None, kept: Array | None = None,
               length: Array | None = None) -> tuple[FedPGState, RoundInfo]:
        """The round's new state and what it reports, from the server's new θ (with Byzantine
        agents, the return of the honest agents' episodes)."""
        used = state.used + plan.batch + self.algo.config.minibatch * plan.steps[0]
        honest = ep if self.byzantine is None else ep._replace(
            live=ep.live & ~self.byzantine_lanes(plan)[:, None])
        info = RoundInfo(mean_return(honest), jnp.mean(state.used),
                         plan.batch.astype(jnp.float32), plan.steps[0].astype(jnp.float32),
                         jnp.sum(jnp.any(ep.live, axis=1)), state.clip, kept)
        new = FedPGState(PushSumState(theta, state.gossip.w), opt_state, state.key, used,
                         state.rounds + 1, state.noise, new_clip, state.setting,
                         # no server episode this round (inner_steps = 0): keep the last
                         None if length is None else jnp.where(length[0] > 0, length[0],
                                                               state.length))
        return new, info



def _lanes_from(which: Array, a: Episodes, b: Episodes) -> Episodes:
    """Episodes of lane p from `a` where which[p], else from `b`."""
    return jax.tree_util.tree_map(
        lambda x, y: jnp.where(which.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)


def own_lanes(plan: CenPlan, lanes: Array) -> CenPlan:
    """The plan of `lanes` only (lane k holds agent k: a local mechanism's plan, or
    distributed-gaussian's): what the agents of one Flower
    SuperNode play under secret noise."""
    pick = lambda a: a[lanes]  # noqa: E731
    return plan._replace(thetas=pick(plan.thetas),
                         env_params=jax.tree_util.tree_map(pick, plan.env_params),
                         live=pick(plan.live), mech_keys=pick(plan.mech_keys),
                         ids=pick(plan.ids),
                         valid=None if plan.valid is None else pick(plan.valid))
