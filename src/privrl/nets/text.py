"""Paper 002's Text2Action Q-networks: the Text-CNN of Feng et al. (2018), as flat-θ FlatModels.

Input: one observation (W, c+1) per text: c feature-id columns ('pos': a POS embedding trained
with the network; 'word': fixed word vectors, held in θ behind a stop-gradient) and the tags
so far. As in the authors' code a tag i ∈ {0, 1, 2} enters as a `tag_dim`-wide vector filled
with i (a fixed embedding), concatenated with the word features: each row is
[features | tag embedding], K = features + tag_dim wide. Four convolutions of n × K (n = 2..5,
32 kernels, ReLU) run over the W rows, each is max-pooled over all W−n+1 positions, the 4·32
maxima go through a 128-unit ReLU layer and a linear layer with 2 outputs (select / neglect).

Because the tag embedding is constant along its width, the tag part of each kernel acts through
its sum over that width: the code computes exactly the same function (and gradients) with a
1-channel convolution over the tags, which is cheaper. `feature_maps` / `from_maps` split the
forward pass so that a greedy pass over a text convolves the fixed features once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import Array
from jax.flatten_util import ravel_pytree

from privrl.choices import TEXT_HEAD_ACTIVATIONS
from privrl.nets.flat import FlatModel

WIDTHS = (2, 3, 4, 5)


def _conv(x: Array, kernel: Array) -> Array:
    """Valid 1-D convolution over rows: x (..., W, C), kernel (n, C, F) -> (..., W-n+1, F),
    as a sum of n shifted matrix products (XLA on CPU runs these far faster than a batched
    convolution inside the training loop)."""
    n = kernel.shape[0]
    length = x.shape[-2] - n + 1
    return sum(x[..., i:i + length, :] @ kernel[i] for i in range(n))


class TextCNN(nn.Module):
    """columns: the feature columns of the observation, in order ('pos' and/or 'word')."""

    columns: tuple[str, ...] = ("pos",)
    num_pos: int = 64
    pos_dim: int = 50
    num_words: int = 1  # rows of the word-vector table (a 'word' column)
    word_dim: int = 50
    tag_dim: int = 50
    filters: int = 32
    widths: tuple[int, ...] = WIDTHS
    hidden: int = 128
    num_outputs: int = 2

    def setup(self) -> None:
        feat = 0
        for c in self.columns:
            feat += self.pos_dim if c == "pos" else self.word_dim
        if "word" in self.columns:  # set by TextModel.with_vectors, never trained
            self.word_vectors = self.param("word_vectors", nn.initializers.zeros,
                                           (self.num_words, self.word_dim))
        if "pos" in self.columns:
            self.pos_emb = self.param("pos_emb", nn.initializers.normal(1.0),
                                      (self.num_pos, self.pos_dim))
        glorot = nn.initializers.glorot_uniform()
        self.kernels = [self.param(f"conv{n}", glorot, (n, feat + self.tag_dim, self.filters))
                        for n in self.widths]
        self.biases = [self.param(f"conv{n}_b", nn.initializers.constant(0.1), (self.filters,))
                       for n in self.widths]
        dense = dict(kernel_init=nn.initializers.truncated_normal(0.1),
                     bias_init=nn.initializers.constant(0.1))
        self.fc = nn.Dense(self.hidden, **dense)
        self.out = nn.Dense(self.num_outputs, **dense)
        self.feat = feat

    def _features(self, obs: Array) -> Array:
        parts = []
        for j, c in enumerate(self.columns):
            ids = obs[..., j].astype(jnp.int32)
            table = self.pos_emb if c == "pos" else jax.lax.stop_gradient(self.word_vectors)
            parts.append(table[ids])
        return jnp.concatenate(parts, -1)

    def feature_maps(self, obs: Array) -> list[Array]:
        """The convolutions of the feature part (no tags, no bias): fixed along an episode."""
        x = self._features(obs)
        return [_conv(x, k[:, : self.feat]) for k in self.kernels]

    def from_maps(self, maps: list[Array], tags: Array) -> Array:
        """Add the tags' part and finish the forward pass: tags (..., W) -> Q (..., 2)."""
        tg = tags[..., None].astype(jnp.float32)
        pooled = []
        for m, k, b in zip(maps, self.kernels, self.biases, strict=True):
            tag_kernel = jnp.sum(k[:, self.feat:], axis=1, keepdims=True)  # (n, 1, F)
            pooled.append(jnp.max(nn.relu(m + _conv(tg, tag_kernel) + b), axis=-2))
        h = nn.relu(self.fc(jnp.concatenate(pooled, -1)))
        return self.out(h)

    def __call__(self, obs: Array) -> Array:
        return self.from_maps(self.feature_maps(obs), obs[..., -1])


class TextModel(FlatModel):
    """A TextCNN as a function of flat θ, plus the split forward pass for greedy episodes."""

    module: TextCNN

    def maps(self, theta: Array, obs: Array) -> list[Array]:
        return self.module.apply({"params": self.unravel(theta)}, obs,
                                 method=TextCNN.feature_maps)

    def q_from_maps(self, theta: Array, maps: list[Array], tags: Array) -> Array:
        return self.module.apply({"params": self.unravel(theta)}, maps, tags,
                                 method=TextCNN.from_maps)

    def with_vectors(self, theta: Array, table: Array) -> Array:
        """θ with the fixed word vectors in place (their gradient is zero, so Adam never moves
        them; keeping them in θ lets one compiled program serve every fold)."""
        params = self.unravel(theta)
        if "word_vectors" not in params:
            return theta
        params = {**params, "word_vectors": jnp.asarray(table, params["word_vectors"].dtype)}
        return ravel_pytree(params)[0]

    def stepper(self, theta: Array, obs: Array) -> Callable[[Array], Array]:
        """Q as a function of the tags only, for one text whose features are `obs`."""
        maps = self.maps(theta, obs)
        return lambda tags: self.q_from_maps(theta, maps, tags)


def text_cnn(columns: tuple[str, ...], width: int, num_pos: int, num_words: int = 1,
             **kw: Any) -> TextModel:
    module = TextCNN(tuple(columns), num_pos=num_pos, num_words=num_words, **kw)
    return TextModel(module, jnp.zeros((width, len(columns) + 1), jnp.float32))


class FederatedHead(nn.Module):
    """The shared MLP θ_g: [Q̂α | Q̂β] (4) -> 4 ReLU -> 2, with the authors' initializers
    (truncated normal σ 0.1 weights, 0.1 biases: every hidden unit starts alive for small
    inputs)."""

    hidden: int = 4
    num_outputs: int = 2
    activation: str = "relu"  # or "leaky_relu" (slope 0.01: a unit pushed negative recovers)

    @nn.compact
    def __call__(self, x: Array) -> Array:
        dense = dict(kernel_init=nn.initializers.truncated_normal(0.1),
                     bias_init=nn.initializers.constant(0.1))
        act = HEAD_ACTIVATIONS[self.activation]
        return nn.Dense(self.num_outputs, **dense)(act(nn.Dense(self.hidden, **dense)(x)))


HEAD_ACTIVATIONS = dict(zip(TEXT_HEAD_ACTIVATIONS, (nn.relu, nn.leaky_relu), strict=True))


def federated_text_head(hidden: int = 4, num_actions: int = 2,
                        activation: str = "relu") -> FlatModel:
    return FlatModel(FederatedHead(hidden, num_actions, activation),
                     jnp.zeros((2 * num_actions,)))
