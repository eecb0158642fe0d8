"""Small Flax networks, and the flat-vector view of their parameters that mechanisms need."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.flatten_util import ravel_pytree


class ActorCritic(nn.Module):
    """Paper 000's A3C network: shared ReLU layer θ(c), policy head θ(p), value head θ(v).

    No biases, so with 4 inputs, 16 hidden units and 2 actions d = 64 + 32 + 16 = 112.
    Kernels start Glorot-uniform, the default of the paper's TensorFlow 1.14 Dense layers.
    """

    hidden: int = 16
    num_actions: int = 2
    use_bias: bool = False

    @nn.compact
    def __call__(self, obs: Array) -> tuple[Array, Array]:
        dense = lambda n, name: nn.Dense(  # noqa: E731
            n, use_bias=self.use_bias, kernel_init=nn.initializers.glorot_uniform(), name=name
        )
        h = nn.relu(dense(self.hidden, "common")(obs))
        logits = dense(self.num_actions, "policy")(h)
        value = dense(1, "value")(h)[..., 0]
        return logits, value


class FlatModel:
    """A Flax module seen as a function of one flat parameter vector θ ∈ R^d."""

    def __init__(self, module: nn.Module, example_input: Array) -> None:
        self.module = module
        # The parameter structure only: eval_shape runs no computation (an eager module.init
        # would compile dozens of tiny ops, about a second on this CPU).
        shapes = jax.eval_shape(module.init, jax.random.key(0), example_input)["params"]
        template = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)
        flat, self._unravel = ravel_pytree(template)
        self.dim = int(flat.size)
        self._example = example_input

    def init(self, key: Array) -> Array:
        """A fresh flat θ drawn with the module's initializers."""
        flat, _ = ravel_pytree(self.module.init(key, self._example)["params"])
        return flat

    def unravel(self, theta: Array) -> Any:
        return self._unravel(theta)

    def apply(self, theta: Array, x: Array) -> Any:
        return self.module.apply({"params": self._unravel(theta)}, x)

    def bind(self, theta: Array) -> Callable[[Array], Any]:
        params = self._unravel(theta)
        return lambda x: self.module.apply({"params": params}, x)


def actor_critic(
    hidden: int = 16, num_actions: int = 2, obs_dim: int = 4, use_bias: bool = False
) -> FlatModel:
    module = ActorCritic(hidden, num_actions, use_bias)
    return FlatModel(module, jnp.zeros((obs_dim,), jnp.float32))


class QNetwork(nn.Module):
    """Paper 001's Q-network: obs → 16 → 16 → actions, ReLU, with biases.

    Initialized as PyTorch's nn.Linear (the authors' code): weights and biases U(±1/√fan_in).
    """

    hidden: int = 16
    num_actions: int = 2

    @nn.compact
    def __call__(self, obs: Array) -> Array:
        h = obs
        for i, n in enumerate((self.hidden, self.hidden, self.num_actions)):
            bound = 1.0 / np.sqrt(h.shape[-1])
            h = nn.Dense(
                n,
                kernel_init=nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"),
                bias_init=lambda key, shape, dtype=jnp.float32, b=bound: jax.random.uniform(
                    key, shape, dtype, -b, b),
                name=f"dense{i}",
            )(h)
            if i < 2:
                h = nn.relu(h)
        return h


def q_network(hidden: int = 16, num_actions: int = 2, obs_dim: int = 1) -> FlatModel:
    return FlatModel(QNetwork(hidden, num_actions), jnp.zeros((obs_dim,), jnp.float32))
