"""The vertical two-party exchange of FedRL (paper 002, Figure 2, Algorithms 1-2).

Parties α and β observe the same episodes through different features; only α receives rewards.
Each party is an object holding only its own things (its Q-network and target, its replay
memory, its copy of the shared MLP θ_g and its optimizer state); a party never holds a reference
to the other. Everything that passes between them goes through a `Channel`, which logs every
message (sender, receiver, kind, shape, and the value when it is concrete). What may pass:

  β → α  "C_beta"       β's Q outputs, released by β's mechanism (Report values)
  α → β  "C_alpha"      α's Q outputs, released by α's mechanism
  α → β  "batch_ids"    the indices j of the sampled transitions (paper assumption A2: IDs)
  α → β  "actions"      the joint actions a_j taken (public: both agents executed them)
  α → β  "Y"            the TD targets Y_j = r_j + γ max_a Q_f^α(s'_j, a) (paper eq. 7)
  α ↔ β  "theta_g"      the shared MLP's parameters

plus what the environment delivers to each party ("obs" to both, "reward" to α only), logged
with sender "env". Nothing else: no observation, local parameter or (for β) reward is ever sent.

The parties' methods are pure JAX functions of (their own state, their own observations, the
messages they received), so a whole training step can be jitted and vmapped; under `jit` the
channel logs each message once per trace with its shape (its value is abstract), unless the step
is compiled by `Channel.recorded`, which logs every message with the value the compiled step
sent, each time it runs. Each party
updates its own Q-network and θ_g with the other's released output held constant (eq. 4-7).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from privrl.nets.flat import FlatModel
from privrl.privacy.clipping import clip_l2
from privrl.privacy.mechanisms import Mechanism
from privrl.privacy.noise import secret_fold, secret_keys

ALLOWED = {
    ("beta", "alpha"): {"C_beta", "theta_g"},
    ("alpha", "beta"): {"C_alpha", "batch_ids", "actions", "Y", "theta_g"},
    ("env", "alpha"): {"obs", "reward", "terminal"},
    ("env", "beta"): {"obs"},
    ("alpha", "env"): {"action"},
}


@dataclass
class Message:
    sender: str
    receiver: str
    kind: str
    shape: tuple[int, ...]
    value: Any = None  # the payload when concrete (eager runs); None under jit tracing


class ProtocolError(RuntimeError):
    """A message outside the FedRL protocol (e.g. a reward to β) was about to be sent."""


@dataclass
class Channel:
    """Carries and logs messages; refuses any (sender, receiver, kind) outside `ALLOWED`."""

    log: list[Message] = field(default_factory=list)
    keep_values: bool = True
    # While `recorded` traces a step: the messages it sends, their payloads still traced.
    _tracing: list[tuple[str, str, str, Any]] | None = field(default=None, repr=False)

    def send(self, sender: str, receiver: str, kind: str, payload: Any) -> Any:
        if kind not in ALLOWED.get((sender, receiver), set()):
            raise ProtocolError(f"{sender} may not send {kind!r} to {receiver}")
        if self._tracing is not None:
            self._tracing.append((sender, receiver, kind, payload))
            return payload
        concrete = not any(isinstance(x, jax.core.Tracer)
                           for x in jax.tree_util.tree_leaves(payload))
        self._log(sender, receiver, kind, payload, concrete and self.keep_values)
        return payload

    def _log(self, sender: str, receiver: str, kind: str, payload: Any, keep: bool) -> None:
        leaves = jax.tree_util.tree_leaves(payload)
        shape = tuple(getattr(leaves[0], "shape", ())) if leaves else ()
        self.log.append(Message(sender, receiver, kind, shape, payload if keep else None))

    def recorded(self, step: Callable[..., Any]) -> Callable[..., Any]:
        """`step` compiled once, its messages logged as it runs, each with the value it sent:
        the log an eager run keeps (`keep_values`), at a compiled run's speed. The sent values
        are outputs of the compiled program, so `step` must send at its own level, not inside a
        `scan`, `vmap` or `cond` of its own (JAX refuses to return such a value)."""
        sent: list[tuple[str, str, str]] = []

        def traced(*args: Any) -> tuple[Any, list[Any]]:
            self._tracing = messages = []
            try:
                out = step(*args)
            finally:
                self._tracing = None
            sent[:] = [m[:3] for m in messages]
            return out, [m[3] for m in messages]

        compiled = jax.jit(traced)

        def run(*args: Any) -> Any:
            out, values = compiled(*args)
            for (sender, receiver, kind), value in zip(sent, values, strict=True):
                self._log(sender, receiver, kind, value, keep=True)
            return out

        return run

    def kinds(self, receiver: str) -> set[str]:
        return {m.kind for m in self.log if m.receiver == receiver}


# --- party states ------------------------------------------------------------------------------

class AlphaMemory(NamedTuple):
    obs: Array  # (C, H, va, va)
    next_obs: Array
    action: Array  # (C,) int32 joint actions
    reward: Array  # (C,)
    terminal: Array  # (C,) float32: 1 when s' ended the episode by a meeting
    size: Array
    ptr: Array


class BetaMemory(NamedTuple):
    obs: Array  # (C, H, vb, vb)
    next_obs: Array
    size: Array
    ptr: Array


class AlphaState(NamedTuple):
    theta: Array
    target: Array
    theta_g: Array
    target_g: Array
    opt: Any
    memory: AlphaMemory
    key: Array
    # α's secret noise root (secret keys; privrl.privacy.noise), or None: seeded. It stays in
    # α's state: nothing sends it (the channel has no kind for it).
    noise: Array | None = None


class BetaState(NamedTuple):
    theta: Array
    target: Array
    theta_g: Array
    opt: Any
    memory: BetaMemory
    key: Array
    noise: Array | None = None  # β's secret noise root, or None (as AlphaState.noise)


def _write(buf: Array, ptr: Array, rows: Array) -> Array:
    """Write rows (E, ...) at ptr, ptr+1, ... (mod capacity): the ring buffer both parties keep
    in the same order, so that index j names the same transition for both (assumption A2)."""
    idx = (ptr + jnp.arange(rows.shape[0])) % buf.shape[0]
    return buf.at[idx].set(rows)


@dataclass(frozen=True)
class PartySpec:
    """What a party is built from (the same for α and β, each with its own network)."""

    q_net: FlatModel  # local Q-network: observation -> 16 outputs
    head: FlatModel  # the shared MLP θ_g: 32 -> 16
    release: Mechanism  # the mechanism its released Q outputs go through
    clip: float | None  # bounded mode: Q outputs are L2-clipped to this before release
    capacity: int
    learning_rate: float
    gamma: float = 0.9


@jax.custom_jvp
def _released_as(q: Array, released: Array) -> Array:
    """`released` exactly (the float-safe release, not rebuilt from q in floats, which would
    bring q's low-order bits back), differentiated as q: the float mechanism's derivative,
    its noise being independent of the parameters and q already clipped."""
    return released


@_released_as.defjvp
def _released_as_jvp(primals: tuple[Array, Array], tangents: tuple[Any, Any]
                     ) -> tuple[Array, Any]:
    return primals[1], tangents[0]


class _Party:
    name = "party"

    def __init__(self, spec: PartySpec, channel: Channel) -> None:
        self.spec = spec
        self.channel = channel
        self.optimizer = optax.adam(spec.learning_rate)

    def q(self, theta: Array, obs: Array) -> Array:
        """The local Q outputs (clipped to B in bounded mode: the function both parties learn)."""
        out = self.spec.q_net.apply(theta, obs)
        return out if self.spec.clip is None else jax.vmap(
            lambda v: clip_l2(v, self.spec.clip))(out.reshape(-1, out.shape[-1])).reshape(
                out.shape)

    def released(self, key: Array, theta: Array, obs: Array, mechanism: Mechanism | None = None,
                 root: Array | None = None) -> Array:
        """Q̂ for a batch of observations: each row through the mechanism (a Report each).
        `root`: the party's secret noise root (the noise keys become `secret_fold(root, key)`);
        None: the seeded keys."""
        mech = mechanism or self.spec.release
        key = secret_fold(root, key)
        q = self.q(theta, obs)
        keys = jax.random.split(key, q.shape[0])
        if getattr(mech, "secure", False):  # host sampler: no derivative; see _released_as
            return _released_as(q, jax.vmap(mech.privatize)(keys, jax.lax.stop_gradient(q)).value)
        return jax.vmap(mech.privatize)(keys, q).value

    def send(self, receiver: str, kind: str, payload: Any) -> Any:
        return self.channel.send(self.name, receiver, kind, payload)


class AlphaParty(_Party):
    """Holds rewards; computes TD targets; chooses the joint action."""

    name = "alpha"

    def init(self, key: Array, example_obs: Array) -> tuple[AlphaState, Array]:
        k_q, k_g, key = jax.random.split(key, 3)
        theta, theta_g = self.spec.q_net.init(k_q), self.spec.head.init(k_g)
        c = self.spec.capacity
        mem = AlphaMemory(jnp.zeros((c, *example_obs.shape)), jnp.zeros((c, *example_obs.shape)),
                          jnp.zeros((c,), jnp.int32), jnp.zeros((c,)), jnp.zeros((c,)),
                          jnp.int32(0), jnp.int32(0))
        opt = self.optimizer.init((theta, theta_g))
        state = AlphaState(theta, theta, theta_g, theta_g, opt, mem, key)
        return state, self.send("beta", "theta_g", theta_g)

    def federated_q(self, theta_g: Array, q_alpha: Array, c_beta: Array) -> Array:
        return self.spec.head.apply(theta_g, jnp.concatenate([q_alpha, c_beta], -1))

    def act(self, s: AlphaState, obs: Array, c_beta: Array, epsilon: Array,
            mechanism: Mechanism | None = None) -> tuple[AlphaState, Array]:
        """ε-greedy joint actions for a batch of envs from Q_f^α(s^α, ·, C^β) (Alg. 1, step 8-9)."""
        key, k_noise, k_eps, k_rand = jax.random.split(s.key, 4)
        qf = self.federated_q(s.theta_g, self.released(k_noise, s.theta, obs, mechanism, s.noise),
                              c_beta)
        n, num = qf.shape
        explore = jax.random.uniform(k_eps, (n,)) < epsilon
        action = jnp.where(explore, jax.random.randint(k_rand, (n,), 0, num),
                           jnp.argmax(qf, -1))
        return s._replace(key=key), self.send("env", "action", action)

    def store(self, s: AlphaState, obs: Array, action: Array, reward: Array, next_obs: Array,
              terminal: Array) -> AlphaState:
        m = s.memory
        cap = m.obs.shape[0]
        mem = AlphaMemory(_write(m.obs, m.ptr, obs), _write(m.next_obs, m.ptr, next_obs),
                          _write(m.action, m.ptr, action), _write(m.reward, m.ptr, reward),
                          _write(m.terminal, m.ptr, terminal),
                          jnp.minimum(m.size + obs.shape[0], cap), (m.ptr + obs.shape[0]) % cap)
        return s._replace(memory=mem)

    def sample_ids(self, s: AlphaState, batch: int) -> tuple[AlphaState, Array]:
        key, k = jax.random.split(s.key)
        ids = jax.random.randint(k, (batch,), 0, jnp.maximum(s.memory.size, 1))
        return s._replace(key=key), self.send("beta", "batch_ids", ids)

    def update(self, s: AlphaState, ids: Array, c_beta: Array, c_beta_next: Array
               ) -> tuple[AlphaState, tuple[Array, Array, Array, Array]]:
        """Eq. 4 and 6: Y_j from the targets, then a step on (θα, θg) with C^β held constant.
        Sends Y_j, the actions, the released C^α_j and θ_g to β."""
        sp, m = self.spec, s.memory
        key, k_next, k_cur, k_rel = jax.random.split(s.key, 4)
        obs, next_obs, a = m.obs[ids], m.next_obs[ids], m.action[ids]
        q_next = self.federated_q(s.target_g,
                                  self.released(k_next, s.target, next_obs, root=s.noise),
                                  c_beta_next)
        y = m.reward[ids] + sp.gamma * (1.0 - m.terminal[ids]) * jnp.max(q_next, -1)
        y = jax.lax.stop_gradient(y)
        c_beta = jax.lax.stop_gradient(c_beta)

        def loss(params: tuple[Array, Array]) -> Array:
            theta, theta_g = params
            qf = self.federated_q(theta_g, self.released(k_cur, theta, obs, root=s.noise),
                                  c_beta)
            return jnp.mean(jnp.square(y - jnp.take_along_axis(qf, a[:, None], 1)[:, 0]))

        params = (s.theta, s.theta_g)
        grads = jax.grad(loss)(params)
        upd, opt = self.optimizer.update(grads, s.opt, params)
        theta, theta_g = optax.apply_updates(params, upd)
        c_alpha = self.released(k_rel, theta, obs, root=s.noise)
        s = s._replace(theta=theta, theta_g=theta_g, opt=opt, key=key)
        out = (self.send("beta", "Y", y), self.send("beta", "actions", a),
               self.send("beta", "C_alpha", c_alpha), self.send("beta", "theta_g", theta_g))
        return s, out

    def receive_theta_g(self, s: AlphaState, theta_g: Array) -> AlphaState:
        return s._replace(theta_g=theta_g)

    def sync_targets(self, s: AlphaState) -> AlphaState:
        return s._replace(target=s.theta, target_g=s.theta_g)


class BetaParty(_Party):
    """No rewards: releases its Q outputs and learns from α's TD targets."""

    name = "beta"

    def init(self, key: Array, example_obs: Array, theta_g: Array) -> BetaState:
        k_q, key = jax.random.split(key)
        theta = self.spec.q_net.init(k_q)
        c = self.spec.capacity
        mem = BetaMemory(jnp.zeros((c, *example_obs.shape)), jnp.zeros((c, *example_obs.shape)),
                         jnp.int32(0), jnp.int32(0))
        return BetaState(theta, theta, theta_g, self.optimizer.init((theta, theta_g)), mem, key)

    def release_q(self, s: BetaState, obs: Array, mechanism: Mechanism | None = None
                  ) -> tuple[BetaState, Array]:
        """C^β for the current observations (Alg. 2, ComputeQBeta())."""
        key, k = jax.random.split(s.key)
        return s._replace(key=key), self.send("alpha", "C_beta",
                                              self.released(k, s.theta, obs, mechanism,
                                                            s.noise))

    def store(self, s: BetaState, obs: Array, next_obs: Array) -> BetaState:
        m = s.memory
        cap = m.obs.shape[0]
        mem = BetaMemory(_write(m.obs, m.ptr, obs), _write(m.next_obs, m.ptr, next_obs),
                         jnp.minimum(m.size + obs.shape[0], cap), (m.ptr + obs.shape[0]) % cap)
        return s._replace(memory=mem)

    def release_batch(self, s: BetaState, ids: Array) -> tuple[BetaState, tuple[Array, Array]]:
        """C^β_j (online net) and C^β at s'_j (target net) for α's batch (ComputeQBeta(j))."""
        key, k1, k2 = jax.random.split(s.key, 3)
        m = s.memory
        c = self.released(k1, s.theta, m.obs[ids], root=s.noise)
        c_next = self.released(k2, s.target, m.next_obs[ids], root=s.noise)
        return s._replace(key=key), (self.send("alpha", "C_beta", c),
                                     self.send("alpha", "C_beta", c_next))

    def update(self, s: BetaState, ids: Array, y: Array, a: Array, c_alpha: Array,
               theta_g: Array) -> tuple[BetaState, Array]:
        """Eq. 5 and 7 (UpdateQ): a step on (θβ, θg) with C^α held constant; sends θ_g back."""
        key, k = jax.random.split(s.key)
        obs = s.memory.obs[ids]
        c_alpha = jax.lax.stop_gradient(c_alpha)

        def loss(params: tuple[Array, Array]) -> Array:
            theta, tg = params
            q_b = self.released(k, theta, obs, root=s.noise)
            qf = self.spec.head.apply(tg, jnp.concatenate([c_alpha, q_b], -1))
            return jnp.mean(jnp.square(y - jnp.take_along_axis(qf, a[:, None], 1)[:, 0]))

        params = (s.theta, theta_g)
        grads = jax.grad(loss)(params)
        upd, opt = self.optimizer.update(grads, s.opt, params)
        theta, theta_g = optax.apply_updates(params, upd)
        s = s._replace(theta=theta, theta_g=theta_g, opt=opt, key=key)
        return s, self.send("alpha", "theta_g", theta_g)

    def sync_targets(self, s: BetaState) -> BetaState:
        return s._replace(target=s.theta)


def train_exchange(alpha: AlphaParty, beta: BetaParty, sa: AlphaState, sb: BetaState,
                   batch: int) -> tuple[AlphaState, BetaState]:
    """One federated update (Figure 2): ids → C^β → α's step → (Y, a, C^α, θ_g) → β's step →
    θ_g back to α. The function only forwards what each party's method returns."""
    sa, ids = alpha.sample_ids(sa, batch)
    sb, (c_beta, c_beta_next) = beta.release_batch(sb, ids)
    sa, (y, a, c_alpha, theta_g) = alpha.update(sa, ids, c_beta, c_beta_next)
    sb, theta_g = beta.update(sb, ids, y, a, c_alpha, theta_g)
    return alpha.receive_theta_g(sa, theta_g), sb



def with_secret_roots(state: Any, count: int | None = None) -> Any:
    """`state` (vmapped over `count` runs, or one run: None; party states `alpha`, `beta`)
    with a fresh secret noise root per party and run from the OS CSPRNG. Each root goes into its own
    party's state only; in a deployment each party would draw its own in its own process."""
    return state._replace(alpha=state.alpha._replace(noise=secret_keys(count)),
                          beta=state.beta._replace(noise=secret_keys(count)))
