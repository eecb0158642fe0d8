"""Paper 002's Grid-World Q-networks (flat-θ FlatModels, as privrl.nets.flat).

A local Q-network is one 3×3 convolution with 32 filters (SAME padding, ReLU) over the stack of
the last H observation windows, a 256-unit ReLU layer and a linear layer with the 16 joint
actions: the paper's "3×3 conv + fully connected", with the layer widths of the authors' code.
The two-party reference (DQN-full) runs one such conv tower per observation and concatenates
their features before the 256-unit layer, as the authors' code. The federated head is the
paper's MLP, 32 hidden units and 16 outputs (privrl.nets.flat.mlp((32,), 16, 32)).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jax import Array

from privrl.nets.flat import FlatModel, mlp


class _Tower(nn.Module):
    filters: int = 32
    kernel: int = 3

    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = jnp.moveaxis(x, -3, -1)  # (..., H, v, v) -> (..., v, v, H): history as channels
        x = nn.relu(nn.Conv(self.filters, (self.kernel, self.kernel), padding="SAME")(x))
        return x.reshape((*x.shape[:-3], -1))


class ConvQ(nn.Module):
    """One party's Q-network: conv tower, 256 ReLU, 16 outputs."""

    num_outputs: int = 16
    filters: int = 32
    kernel: int = 3
    hidden: int = 256

    @nn.compact
    def __call__(self, x: Array) -> Array:
        h = nn.relu(nn.Dense(self.hidden)(_Tower(self.filters, self.kernel)(x)))
        return nn.Dense(self.num_outputs)(h)


class FullConvQ(nn.Module):
    """DQN-full / FCN-full: both observations, one tower each, features concatenated."""

    num_outputs: int = 16
    filters: int = 32
    kernel: int = 3
    hidden: int = 256

    @nn.compact
    def __call__(self, x: tuple[Array, Array]) -> Array:
        fa = _Tower(self.filters, self.kernel, name="alpha")(x[0])
        fb = _Tower(self.filters, self.kernel, name="beta")(x[1])
        h = nn.relu(nn.Dense(self.hidden)(jnp.concatenate([fa, fb], -1)))
        return nn.Dense(self.num_outputs)(h)


def conv_q(history: int, view: int, num_outputs: int = 16) -> FlatModel:
    return FlatModel(ConvQ(num_outputs), jnp.zeros((history, view, view)))


def full_conv_q(history: int, alpha_view: int, beta_view: int,
                num_outputs: int = 16) -> FlatModel:
    example = (jnp.zeros((history, alpha_view, alpha_view)),
               jnp.zeros((history, beta_view, beta_view)))
    return FlatModel(FullConvQ(num_outputs), example)  # type: ignore[arg-type]


def federated_head(num_actions: int = 16, hidden: int = 32) -> FlatModel:
    """The shared MLP θ_g: [Q̂α | Q̂β] (2·16 inputs) -> 32 ReLU -> 16 federated Q-values."""
    return mlp((hidden,), num_actions, 2 * num_actions)
