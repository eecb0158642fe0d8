"""FedRL (paper 002, Zhuo et al.): vertical federated DQN between two parties on Grid-World.

Per vector step (`num_envs` Grid-World episodes at once, each on its own map):

1. the environment hands α its window history s^α and β its s^β (logged on the channel);
2. β releases C^β = Q̂β(s^β) through its mechanism; α picks the joint action ε-greedily from
   Q_f^α = MLP_θg([Q̂α(s^α) | C^β]) (16 joint actions);
3. the environment moves both agents; α alone receives the reward; both store their side of the
   transition at the same replay index;
4. one federated update (privrl.federation.vertical.train_exchange): α samples ids j, β releases
   C^β_j and C^β(s'_j) (target network), α computes Y_j with its target networks and steps
   (θα, θg), sends Y_j, a_j, C^α_j and θ_g; β steps (θβ, θg) and sends θ_g back;
5. every `target_period` updates each party copies its online networks into its targets (the
   authors' code never did in the federated modes).

Noise: paper mode adds N(0, σ²) to unbounded Q outputs (no formal ε; privacy.json says so);
bounded mode (`bounded` = B) L2-clips each released Q vector to B first, making each release a
Gaussian mechanism whose releases the accountant composes per party.

Training runs in epochs of `updates_per_epoch` steps; after each epoch the greedy policy is
evaluated on the validation maps, the best epoch's networks are kept, and training stops after
`patience` epochs without improvement (the authors' code: 100 episodes per epoch, early stop
after 10). Settings the paper leaves open are read from the authors' code; docs/fedrl.md lists
every choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.config import (
    ConfigError,
)
from privrl.envs import gridworld as gw
from privrl.federation.vertical import (
    AlphaParty,
    AlphaState,
    BetaParty,
    BetaState,
    Channel,
    PartySpec,
    train_exchange,
)
from privrl.nets.grid import conv_q, federated_head
from privrl.privacy.qoutput import UnboundedQNoise, q_mechanism, q_release_privacy
from privrl.replay import zeroed
from privrl.systems.fedrl.config import FedRLConfig, GridConfig

SPLIT = (6400, 7200, 8000)  # train [0, 6400), validation [6400, 7200), test [7200, 8000)


@dataclass
class Splits:
    train: gw.GridMaps
    valid: gw.GridMaps
    test: gw.GridMaps
    info: dict[str, Any]


def load_splits(cfg: GridConfig) -> Splits:
    """The paper's split of the data set (by domain index), or an 8:1:1 split of generated maps
    (a run's and its saved policy's: privrl.systems.fedrl.played)."""
    if cfg.maps is not None:
        maps, keep = gw.load_maps(cfg.maps, cfg.size)
        parts = [(keep >= lo) & (keep < hi) for lo, hi in
                 ((0, SPLIT[0]), (SPLIT[0], SPLIT[1]), (SPLIT[1], SPLIT[2]))]
        source = str(gw._maps_file(cfg.maps, cfg.size))
        dropped = int(max(SPLIT[2], len(keep)) - len(keep))
    else:
        maps = gw.generate_maps(cfg.generated_maps, cfg.size, seed=cfg.seed)
        n = cfg.generated_maps
        idx = np.arange(n)
        a, b = int(0.8 * n), int(0.9 * n)
        parts = [idx < a, (idx >= a) & (idx < b), idx >= b]
        source, dropped = f"generated (seed {cfg.seed}, {n} maps, split 8:1:1)", 0
    train, valid, test = (maps.take(np.flatnonzero(p)) for p in parts)
    if min(train.count, valid.count, test.count) == 0:
        raise ConfigError("maps", f"{source}: the train/validation/test split left a part "
                                  "empty")
    return Splits(train, valid, test, {
        "source": source, "train": train.count, "valid": valid.count, "test": test.count,
        "domains_without_usable_path": dropped})


class Stats(NamedTuple):
    """Training episodes finished in the current chunk, and how they went."""

    episodes: Array
    successes: Array
    return_sum: Array


class FedRLState(NamedTuple):
    alpha: AlphaState
    beta: BetaState
    env: gw.GridState  # (E, ...)
    ep_return: Array  # (E,)
    steps: Array  # vector steps taken
    key: Array
    stats: Stats


def env_reset_random(spec: gw.GridSpec, maps: gw.GridMaps, key: Array, n: int) -> gw.GridState:
    idx = jax.random.randint(key, (n,), 0, maps.count)
    return jax.vmap(lambda i: gw.reset(spec, maps, i))(idx)


def env_advance(spec: gw.GridSpec, maps: gw.GridMaps, env: gw.GridState, action: Array,
                ep_return: Array, stats: Stats, key: Array
                ) -> tuple[gw.GridState, gw.GridState, Array, Array, Array, Stats]:
    """Step E episodes; finished ones restart on random training maps. Returns (stepped state
    before restarts, next state, reward, met, episode returns, stats)."""
    stepped, r, met, done = jax.vmap(lambda s, a: gw.step(spec, s, a))(env, action)
    ret = ep_return + r
    stats = Stats(stats.episodes + jnp.sum(done), stats.successes + jnp.sum(met),
                  stats.return_sum + jnp.sum(jnp.where(done, ret, 0.0)))
    fresh = env_reset_random(spec, maps, key, action.shape[0])
    nxt = jax.tree_util.tree_map(
        lambda f, o: jnp.where(done.reshape((-1,) + (1,) * (o.ndim - 1)), f, o), fresh, stepped)
    return stepped, nxt, r, met, jnp.where(done, 0.0, ret), stats


def zero_stats() -> Stats:
    return Stats(jnp.int32(0), jnp.int32(0), jnp.float32(0.0))


class FedRL:
    """init(key, maps) -> state; train_chunk(state, maps) -> state; evaluate(params, maps, key,
    variant) -> gw.EvalResult. Pure functions: jit them and vmap over seeds."""

    name = "fedrl"
    variants = ("test-noise", "test-clean")
    noise_free = "test-clean"  # the variant a saved policy plays (privrl.systems.fedrl.played)

    def __init__(self, config: FedRLConfig, channel: Channel | None = None) -> None:
        self.config = cfg = config.resolved()
        self.spec = cfg.spec()
        self.channel = channel if channel is not None else Channel(keep_values=False)
        head = federated_head()
        self.mechanism = q_mechanism(cfg)
        self.clean = UnboundedQNoise(0.0)  # test-clean: outputs sent without noise (no ε)

        def party(view: int) -> PartySpec:
            return PartySpec(conv_q(self.spec.history, view), head, self.mechanism, cfg.bounded,
                             cfg.buffer_size, cfg.learning_rate, cfg.gamma)

        self.alpha = AlphaParty(party(self.spec.alpha_view), self.channel)
        self.beta = BetaParty(party(self.spec.beta_view), self.channel)

    def prepare(self, maps: gw.GridMaps) -> gw.GridMaps:
        return maps

    def init(self, key: Array, maps: gw.GridMaps) -> FedRLState:
        k_a, k_b, k_env, key = jax.random.split(key, 4)
        env = env_reset_random(self.spec, maps, k_env, self.config.num_envs)
        sa, theta_g = self.alpha.init(k_a, env.obs_alpha[0])
        sb = self.beta.init(k_b, env.obs_beta[0], theta_g)
        return FedRLState(sa, sb, env, jnp.zeros(self.config.num_envs), jnp.int32(0), key,
                          zero_stats())

    def train_step(self, s: FedRLState, maps: gw.GridMaps) -> FedRLState:
        cfg, ch, alpha, beta = self.config, self.channel, self.alpha, self.beta
        key, k_env = jax.random.split(s.key)
        obs_a = ch.send("env", "alpha", "obs", s.env.obs_alpha)
        obs_b = ch.send("env", "beta", "obs", s.env.obs_beta)
        sb, c_beta = beta.release_q(s.beta, obs_b)
        sa, action = alpha.act(s.alpha, obs_a, c_beta, cfg.epsilon(s.steps))
        stepped, env, r, met, ep_return, stats = env_advance(
            self.spec, maps, s.env, action, s.ep_return, s.stats, k_env)
        reward = ch.send("env", "alpha", "reward", r)
        terminal = ch.send("env", "alpha", "terminal", met.astype(jnp.float32))
        sa = alpha.store(sa, obs_a, action, reward, ch.send("env", "alpha", "obs",
                                                            stepped.obs_alpha), terminal)
        sb = beta.store(sb, obs_b, ch.send("env", "beta", "obs", stepped.obs_beta))
        sa, sb = train_exchange(alpha, beta, sa, sb, cfg.batch_size)
        sync = (s.steps + 1) % cfg.target_period == 0
        sa = sa._replace(target=jnp.where(sync, sa.theta, sa.target),
                         target_g=jnp.where(sync, sa.theta_g, sa.target_g))
        sb = sb._replace(target=jnp.where(sync, sb.theta, sb.target))
        return FedRLState(sa, sb, env, ep_return, s.steps + 1, key, stats)

    def train_chunk(self, s: FedRLState, maps: gw.GridMaps) -> FedRLState:
        s = s._replace(stats=zeroed(s.stats))
        return jax.lax.scan(lambda st, _: (self.train_step(st, maps), None), s, None,
                            length=self.config.updates_per_epoch)[0]

    @staticmethod
    def params(s: FedRLState) -> tuple[Array, Array, Array]:
        return s.alpha.theta, s.beta.theta, s.alpha.theta_g

    def policy_networks(self) -> list[tuple[str, list[str], Any]]:
        """`params`' networks in order: (name, the parties holding it, FlatModel); θ_g is
        α's copy (β holds the same after each update)."""
        return [("q_alpha", ["alpha"], self.alpha.spec.q_net),
                ("q_beta", ["beta"], self.beta.spec.q_net),
                ("federated_head", ["alpha", "beta"], self.alpha.spec.head)]

    def greedy(self, params: tuple[Array, Array, Array], variant: str = "test-noise"
               ) -> Callable[[Array, Array, Array], Array]:
        """The greedy joint policy (key, α's observations (M, ...), β's (M, ...)) -> joint
        actions (M,) that `evaluate` plays: test-noise releases through the training
        mechanism (the paper's FedRL with noise at test time), test-clean sends outputs
        without noise (the key then changes nothing)."""
        theta_a, theta_b, theta_g = params
        mech = self.mechanism if variant == "test-noise" else self.clean
        alpha, beta = self.alpha, self.beta

        def policy(k: Array, oa: Array, ob: Array) -> Array:
            k1, k2 = jax.random.split(k)
            c_beta = self.channel.send("beta", "alpha", "C_beta",
                                       beta.released(k1, theta_b, ob, mech))
            qf = alpha.federated_q(theta_g, alpha.released(k2, theta_a, oa, mech), c_beta)
            return jnp.argmax(qf, -1)

        return policy

    def evaluate(self, params: tuple[Array, Array, Array], maps: gw.GridMaps, key: Array,
                 variant: str = "test-noise") -> gw.EvalResult:
        """Greedy play (`greedy`) on every map."""
        return gw.evaluate(self.spec, maps, self.greedy(params, variant), key)

    # --- privacy ---------------------------------------------------------------------------
    def releases(self, steps: int, evaluations: int, valid_maps: int, test_maps: int
                 ) -> dict[str, int]:
        """Q-output vectors each party released through its mechanism: training (β: one per
        env per step for acting + 2 per batch row per update; α: 1 per batch row per update),
        plus β's and α's outputs in every validation and noisy-test evaluation (Tm steps per
        map, counted for every step of the fixed-length evaluation)."""
        cfg, tm = self.config, self.spec.horizon
        evals = evaluations * valid_maps * tm + test_maps * tm
        return {"beta": steps * cfg.num_envs + 2 * steps * cfg.batch_size + evals,
                "alpha": steps * cfg.batch_size + evals}

    def privacy_record(self, steps: int, evaluations: int, valid_maps: int,
                       test_maps: int) -> dict[str, Any]:
        return q_release_privacy(self.config, self.mechanism,
                                 self.releases(steps, evaluations, valid_maps, test_maps))
