"""Paper 002's Grid-World baselines (section 5): DQN-alpha, DQN-full, FCN-alpha, FCN-full.

* DQN-alpha: a DQN on α's observation only (α alone could build it: it has the rewards).
* DQN-full: a DQN on both observations put together (one conv tower each, as the authors'
  code): no privacy between the parties, the upper reference.
* FCN-alpha / FCN-full: the same networks trained by supervised imitation (cross-entropy) of
  the optimal path's joint actions (α walks the optimal path forward, β backward), then played
  greedily.

All share FedRL's Grid-World settings (GridConfig): Adam 1e-3, ReLU, replay, ε-greedy, target
networks copied every `target_period` updates, epochs with validation-based model selection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from privrl.config import fail
from privrl.envs import gridworld as gw
from privrl.nets.grid import conv_q, full_conv_q
from privrl.privacy.qoutput import baseline_privacy
from privrl.replay import (
    DQNState,
    FCNState,
    dqn_update,
    empty_memory,
    epsilon_greedy,
    store,
    supervised_update,
    zeroed,
)
from privrl.systems.fedrl.algorithm import (
    env_advance,
    env_reset_random,
    zero_stats,
)
from privrl.systems.fedrl.config import MODELS, BaselineConfig


def _net(cfg: BaselineConfig) -> Any:
    spec = cfg.spec()
    if cfg.full:
        return full_conv_q(spec.history, spec.alpha_view, spec.beta_view)
    return conv_q(spec.history, spec.alpha_view)


def _inputs(full: bool, obs_a: Array, obs_b: Array) -> Any:
    return (obs_a, obs_b) if full else obs_a


class GridDQN:
    """DQN-alpha / DQN-full: same interface as FedRL (init, train_chunk, params, evaluate)."""

    variants = ("greedy",)
    noise_free = "greedy"

    def __init__(self, config: BaselineConfig) -> None:
        self.config = cfg = config.resolved()
        if not cfg.model.startswith("dqn"):
            fail("model", f"{cfg.model} is not a DQN model")
        self.name = cfg.model
        self.spec = cfg.spec()
        self.net = _net(cfg)
        self.optimizer = optax.adam(cfg.learning_rate)

    def prepare(self, maps: gw.GridMaps) -> gw.GridMaps:
        return maps

    def init(self, key: Array, maps: gw.GridMaps) -> DQNState:
        cfg = self.config
        k_q, k_env, key = jax.random.split(key, 3)
        theta = self.net.init(k_q)
        env = env_reset_random(self.spec, maps, k_env, cfg.num_envs)
        mem = empty_memory(_inputs(cfg.full, env.obs_alpha[0], env.obs_beta[0]),
                           cfg.buffer_size)
        return DQNState(theta, theta, self.optimizer.init(theta), mem, env,
                        jnp.zeros(cfg.num_envs), jnp.int32(0), key, zero_stats())

    def train_step(self, s: DQNState, maps: gw.GridMaps) -> DQNState:
        cfg, net = self.config, self.net
        key, k_eps, k_rand, k_env, k_ids = jax.random.split(s.key, 5)
        x = _inputs(cfg.full, s.env.obs_alpha, s.env.obs_beta)
        action = epsilon_greedy(k_eps, k_rand, net.apply(s.theta, x), cfg.epsilon(s.steps))
        stepped, env, r, met, ep_return, stats = env_advance(
            self.spec, maps, s.env, action, s.ep_return, s.stats, k_env)
        mem = store(s.memory, x, _inputs(cfg.full, stepped.obs_alpha, stepped.obs_beta),
                    action, r, met.astype(jnp.float32))
        ids = jax.random.randint(k_ids, (cfg.batch_size,), 0, mem.size)
        theta, opt = dqn_update(net, self.optimizer, s.theta, s.target, s.opt, mem, ids,
                                cfg.gamma)
        sync = (s.steps + 1) % cfg.target_period == 0
        return DQNState(theta, jnp.where(sync, theta, s.target), opt, mem, env, ep_return,
                        s.steps + 1, key, stats)

    def train_chunk(self, s: DQNState, maps: gw.GridMaps) -> DQNState:
        s = s._replace(stats=zeroed(s.stats))
        return jax.lax.scan(lambda st, _: (self.train_step(st, maps), None), s, None,
                            length=self.config.updates_per_epoch)[0]

    @staticmethod
    def params(s: Any) -> Array:
        return s.theta

    def policy_networks(self) -> list[tuple[str, list[str], Any]]:
        """`params`' network: (name, who holds it, FlatModel); a -full model is a central
        learner's, over both parties' views."""
        return [(self.name, ["central"] if self.config.full else ["alpha"], self.net)]

    def greedy(self, theta: Array, variant: str = "greedy"
               ) -> Callable[[Array, Array, Array], Array]:
        """(key, α's observations (M, ...), β's (M, ...)) -> greedy actions (M,): what
        `evaluate` plays (a -alpha model never looks at β's)."""
        full, net = self.config.full, self.net
        return lambda k, oa, ob: jnp.argmax(net.apply(theta, _inputs(full, oa, ob)), -1)

    def evaluate(self, theta: Array, maps: gw.GridMaps, key: Array,
                 variant: str = "greedy") -> gw.EvalResult:
        return gw.evaluate(self.spec, maps, self.greedy(theta, variant), key)

    def releases(self, *args: Any) -> dict[str, int]:
        return {}

    def privacy_record(self, *args: Any) -> dict[str, Any]:
        what = ("α's observations and rewards only (a single party: nothing is exchanged)"
                if not self.config.full else "both parties' observations pooled in one place")
        return baseline_privacy(self.name, what)


class Demos(NamedTuple):
    """The optimal joint action (label) at every step of the expert's episodes on the maps."""

    x: Any  # (D, ...) network inputs
    label: Array  # (D,) int32


def expert_demos(cfg: BaselineConfig, maps: gw.GridMaps) -> Demos:
    """Roll the expert (privrl.envs.gridworld.expert_action) on every map until the agents meet;
    keep every step that happened."""
    spec = cfg.spec()
    steps = int((int(jnp.max(maps.path_len)) + 1) // 2) + 1

    def run(i: Array) -> tuple[Any, Array, Array]:
        def body(carry: tuple, t: Array) -> tuple:
            s, done = carry
            a = gw.expert_action(maps, i, t)
            s2, _, met, _ = gw.step(spec, s, a)
            return (s2, done | met), ((s.obs_alpha, s.obs_beta), a, ~done)

        _, (obs, a, live) = jax.lax.scan(body, (gw.reset(spec, maps, i), jnp.bool_(False)),
                                         jnp.arange(steps))
        return obs, a, live

    obs, labels, live = jax.jit(jax.vmap(run))(jnp.arange(maps.count))
    keep = np.asarray(live).reshape(-1)

    def flat(v: Array) -> Array:
        v = np.asarray(v)
        return jnp.asarray(v.reshape((-1, *v.shape[2:]))[keep])

    x = _inputs(cfg.full, flat(obs[0]), flat(obs[1]))
    return Demos(x, flat(labels).astype(jnp.int32))


class GridFCN:
    """FCN-alpha / FCN-full: supervised imitation of the optimal path, then greedy play."""

    variants = ("greedy",)
    noise_free = "greedy"

    def __init__(self, config: BaselineConfig) -> None:
        self.config = cfg = config.resolved()
        if not cfg.model.startswith("fcn"):
            fail("model", f"{cfg.model} is not an FCN model")
        self.name = cfg.model
        self.spec = cfg.spec()
        self.net = _net(cfg)
        self.optimizer = optax.adam(cfg.learning_rate)

    def prepare(self, maps: gw.GridMaps) -> Demos:
        return expert_demos(self.config, maps)

    def init(self, key: Array, demos: Demos) -> FCNState:
        k_q, key = jax.random.split(key)
        theta = self.net.init(k_q)
        return FCNState(theta, self.optimizer.init(theta), jnp.int32(0), key, zero_stats())

    def train_chunk(self, s: FCNState, demos: Demos) -> FCNState:
        cfg, net = self.config, self.net
        n = demos.label.shape[0]

        def step(st: FCNState, _: None) -> tuple[FCNState, None]:
            key, k = jax.random.split(st.key)
            ids = jax.random.randint(k, (cfg.batch_size,), 0, n)
            x = jax.tree_util.tree_map(lambda v: v[ids], demos.x)
            theta, opt = supervised_update(net, self.optimizer, st.theta, st.opt, x,
                                           demos.label[ids])
            return FCNState(theta, opt, st.steps + 1, key, st.stats), None

        return jax.lax.scan(step, s, None, length=cfg.updates_per_epoch)[0]

    params = staticmethod(GridDQN.params)
    policy_networks = GridDQN.policy_networks
    greedy = GridDQN.greedy
    evaluate = GridDQN.evaluate
    releases = GridDQN.releases
    privacy_record = GridDQN.privacy_record


def make_baseline(config: BaselineConfig) -> GridDQN | GridFCN:
    cfg = config.resolved()
    return GridDQN(cfg) if cfg.model.startswith("dqn") else GridFCN(cfg)


__all__ = ["MODELS", "BaselineConfig", "GridDQN", "GridFCN", "make_baseline"]
