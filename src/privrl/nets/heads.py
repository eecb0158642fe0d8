"""Policy heads: how a network's output becomes actions, chosen from the task's action space.

A policy network maps one observation to `head.outputs` numbers; the head turns them into a
sampled action (training), a greedy action (evaluation) and the log-probability the policy
gradient needs. A `Discrete(n)` space takes the `Categorical` head (n logits: the algorithms'
behaviour before heads existed, unchanged), a `Box` of shape (d,) the `Gaussian` head.

The Gaussian head (issue 39): the network's 2d outputs are the mean and the log standard
deviation of a diagonal Gaussian, the log-std clipped to [LOG_STD_MIN, LOG_STD_MAX] so σ stays
in [e^−5, e^2]. **What the log-std depends on is the network's choice**: privrl's networks
compute it from the state by default (the second half of their outputs), or, with
`log_std="parameter"` (`StateFreeLogStd`, the `continuous` presets), it is a learned vector
that does not depend on the state (PPO's and A2C's usual choice: a state-dependent σ
collapsed on Pendulum). The
mean is squashed into the Box: μ(s) = (high + low)/2 + (high − low)/2 · tanh(first half), so it
can never leave the bounds (a mean past a bound, where every sample clips to the same action,
gets no gradient back: REINFORCE on a clipped mean stalled there). **Samples are clipped, not
squashed**: a ~ N(μ, σ²) is clipped to [low, high] before the environment sees it (greedy: μ);
the log-probability is the Gaussian's at the unclipped sample, which the rollout records beside
the clipped action (as Stable-Baselines3 and CleanRL do), so it stays exact and cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax import Array

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class StateFreeLogStd(nn.Module):
    """A Gaussian policy network whose log-std does not depend on the state: `inner` maps an
    observation to the d means (or to (means, value), an actor-critic), and a learned vector
    `log_std` (d,), starting at `log_std_init`, completes the head's 2d outputs."""

    inner: nn.Module
    dim: int
    log_std_init: float | tuple[float, ...] = 0.0  # one for every component, or each its own

    @nn.compact
    def __call__(self, obs: Array, *args: Any) -> Any:
        out = self.inner(obs, *args)
        means = out[0] if isinstance(out, tuple) else out
        start = jnp.asarray(self.log_std_init, jnp.float32)
        log_std = self.param("log_std", lambda key, shape: jnp.broadcast_to(start, shape),
                             (self.dim,))
        both = jnp.concatenate([means, jnp.broadcast_to(log_std, means.shape)], axis=-1)
        return (both, *out[1:]) if isinstance(out, tuple) else both


@dataclass(frozen=True)
class Categorical:
    """`n` logits; actions are int32 indices."""

    n: int
    continuous = False

    @property
    def outputs(self) -> int:
        return self.n

    def sample(self, key: Array, out: Array) -> tuple[Array, Array]:
        """(the action the environment gets, the action the log-probability is of)."""
        a = jax.random.categorical(key, out)
        return a, a

    def greedy(self, out: Array) -> Array:
        return jnp.argmax(out, axis=-1)

    def log_prob(self, out: Array, action: Array) -> Array:
        return jnp.take_along_axis(jax.nn.log_softmax(out), action[..., None], axis=-1)[..., 0]

    def entropy(self, out: Array) -> Array:
        logp = jax.nn.log_softmax(out)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    def uniform(self, key: Array, n: int) -> Array:
        """`n` actions drawn uniformly (exploration, random-action attackers)."""
        return jax.random.randint(key, (n,), 0, self.n, jnp.int32)


@dataclass(frozen=True)
class Gaussian:
    """A diagonal Gaussian over a Box of shape (d,): 2d outputs (μ, log σ); see the module
    docstring for the bounds and the log-std."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    continuous = True

    @property
    def dim(self) -> int:
        return len(self.low)

    @property
    def outputs(self) -> int:
        return 2 * self.dim

    def _split(self, out: Array) -> tuple[Array, Array]:
        """(μ, log σ): μ squashed into the Box by tanh, log σ clipped."""
        raw_mean, log_std = jnp.split(out, 2, axis=-1)
        low, high = jnp.asarray(self.low, jnp.float32), jnp.asarray(self.high, jnp.float32)
        mean = (high + low) / 2 + (high - low) / 2 * jnp.tanh(raw_mean)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def _clip(self, a: Array) -> Array:
        return jnp.clip(a, jnp.asarray(self.low, jnp.float32), jnp.asarray(self.high, jnp.float32))

    def sample(self, key: Array, out: Array) -> tuple[Array, Array]:
        """(the clipped action the environment gets, the unclipped sample)."""
        mean, log_std = self._split(out)
        raw = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
        return self._clip(raw), raw

    def greedy(self, out: Array) -> Array:
        return self._split(out)[0]

    def log_prob(self, out: Array, raw: Array) -> Array:
        """log N(raw; μ, σ²), summed over the d components."""
        mean, log_std = self._split(out)
        z = (raw - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi), axis=-1)

    def entropy(self, out: Array) -> Array:
        """The Gaussian's differential entropy, Σ_i (log σ_i + ½ log 2πe) (of the unclipped
        sample, as the log-probability)."""
        _, log_std = self._split(out)
        return jnp.sum(log_std + 0.5 * math.log(2 * math.pi * math.e), axis=-1)

    def uniform_log_std(self) -> tuple[float, ...]:
        """log σ of the uniform distribution over the Box, σ = (high − low)/√12 per component:
        the start of a policy meant to begin close to a uniformly random one (a Gaussian at
        the Box's centre with the uniform's spread; σ = 1 on a Box of width 2, the network's
        default start, clips a third of its samples to a bound, whose actions on a task with an
        action cost or a drift are worse than random's)."""
        return tuple(math.log((h - lo) / math.sqrt(12.0)) for lo, h in zip(self.low, self.high,
                                                                           strict=True))

    def uniform(self, key: Array, n: int) -> Array:
        """`n` actions drawn uniformly from the Box, (n, d)."""
        return jax.random.uniform(key, (n, self.dim), jnp.float32,
                                  jnp.asarray(self.low, jnp.float32),
                                  jnp.asarray(self.high, jnp.float32))


Head = Categorical | Gaussian


def head_for(space: Any) -> Head | None:
    """The head for a gymnax or Gymnasium action space: `Discrete(n)` → Categorical, a
    one-dimensional `Box` with finite bounds → Gaussian; None for anything else."""
    n = getattr(space, "n", None)
    if n is not None and tuple(getattr(space, "shape", ())) == ():
        return Categorical(int(n))
    shape = tuple(getattr(space, "shape", ()) or ())
    if type(space).__name__ == "Box" and len(shape) == 1:
        low = np.broadcast_to(np.asarray(space.low, np.float64), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float64), shape)
        if np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high):
            return Gaussian(tuple(low.tolist()), tuple(high.tolist()))
    return None
