"""Deep Q-learning pieces shared by paper 002's learners on every domain (FedRL and its
baselines on Grid-World and on Text2Action): the DQN settings, a ring-buffer replay memory,
ε-greedy actions, and one optimizer step on the TD error or on a supervised cross-entropy."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from privrl.replay_options import ReplayOptions as ReplayOptions


class Memory(NamedTuple):
    x: Any  # the network input pytree, (C, ...)
    next_x: Any
    action: Array
    reward: Array
    terminal: Array
    size: Array
    ptr: Array


def _write(buf: Any, ptr: Array, rows: Any) -> Any:
    def one(b: Array, r: Array) -> Array:
        return b.at[(ptr + jnp.arange(r.shape[0])) % b.shape[0]].set(r)
    return jax.tree_util.tree_map(one, buf, rows)


def epsilon_greedy(k_eps: Array, k_rand: Array, q: Array, epsilon: Array) -> Array:
    """Per row of q (n, actions): a uniform random action with probability ε, else argmax."""
    n, num = q.shape
    explore = jax.random.uniform(k_eps, (n,)) < epsilon
    return jnp.where(explore, jax.random.randint(k_rand, (n,), 0, num),
                     jnp.argmax(q, -1)).astype(jnp.int32)


def empty_memory(example_x: Any, capacity: int) -> Memory:
    zeros = jax.tree_util.tree_map(lambda v: jnp.zeros((capacity, *v.shape)), example_x)
    return Memory(zeros, zeros, jnp.zeros((capacity,), jnp.int32), jnp.zeros((capacity,)),
                  jnp.zeros((capacity,)), jnp.int32(0), jnp.int32(0))


def store(m: Memory, x: Any, next_x: Any, action: Array, reward: Array, terminal: Array
          ) -> Memory:
    """Write a vector step's n transitions into the ring buffer."""
    n, cap = action.shape[0], m.action.shape[0]
    return Memory(_write(m.x, m.ptr, x), _write(m.next_x, m.ptr, next_x),
                  _write(m.action, m.ptr, action), _write(m.reward, m.ptr, reward),
                  _write(m.terminal, m.ptr, terminal), jnp.minimum(m.size + n, cap),
                  (m.ptr + n) % cap)


def dqn_update(net: Any, optimizer: Any, theta: Array, target: Array, opt: Any, mem: Memory,
               ids: Array, gamma: float) -> tuple[Array, Any]:
    """One Adam step on the mean squared TD error of the transitions `ids` (target network
    for the bootstrap, no bootstrap after a terminal transition)."""
    bx = jax.tree_util.tree_map(lambda v: v[ids], mem.x)
    bnext = jax.tree_util.tree_map(lambda v: v[ids], mem.next_x)
    y = mem.reward[ids] + gamma * (1 - mem.terminal[ids]) * jnp.max(net.apply(target, bnext), -1)
    a = mem.action[ids]

    def loss(th: Array) -> Array:
        qa = jnp.take_along_axis(net.apply(th, bx), a[:, None], 1)[:, 0]
        return jnp.mean(jnp.square(jax.lax.stop_gradient(y) - qa))

    upd, opt = optimizer.update(jax.grad(loss)(theta), opt, theta)
    return optax.apply_updates(theta, upd), opt


def supervised_update(net: Any, optimizer: Any, theta: Array, opt: Any, x: Any, label: Array
                      ) -> tuple[Array, Any]:
    """One Adam step on the cross-entropy of the network's logits against `label` (FCN)."""
    def loss(th: Array) -> Array:
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(net.apply(th, x), label))

    upd, opt = optimizer.update(jax.grad(loss)(theta), opt, theta)
    return optax.apply_updates(theta, upd), opt


class DQNState(NamedTuple):
    """One DQN learner's state; `env` and `stats` are the domain's own."""

    theta: Array
    target: Array
    opt: Any
    memory: Memory
    env: Any
    ep_return: Array
    steps: Array
    key: Array
    stats: Any


class FCNState(NamedTuple):
    """One supervised (FCN) learner's state; `stats` is the domain's own."""

    theta: Array
    opt: Any
    steps: Array
    key: Array
    stats: Any


def zeroed(stats: Any) -> Any:
    """Zero stats (a NamedTuple of scalars) shaped as `stats` are, a vmapped batch's
    included: a chunk's `scan` under `vmap` then carries them batched from the start and
    traces its step once, not twice (JAX re-batches a scan whose carry becomes batched
    inside)."""
    return type(stats)(*(jnp.where(True, jnp.zeros((), x.dtype), x) for x in stats))
