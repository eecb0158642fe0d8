"""Per-example clipped gradient sums for dense ReLU networks without per-example gradients.

DP-SGD needs Σ_i clip_C(∇ℓ_i). Materializing every ∇ℓ_i (B × d numbers) is what makes it slow.
For a dense layer z = a W + b the per-example gradients are outer products, ∇_W ℓ_i = a_iᵀ δ_i and
∇_b ℓ_i = δ_i with δ_i = ∂ℓ_i/∂z_i, so (Goodfellow 2015; "ghost clipping", Li et al. 2022):

* ||∇ℓ_i||² = Σ_layers (||a_i||² + 1) ||δ_i||²  — per-example norms from one backward pass;
* Σ_i c_i ∇_W ℓ_i = Aᵀ (c ⊙ Δ)                   — the clipped sum is one matmul per layer,

with c_i = 1 / max(1, ||∇ℓ_i|| / C). The δ's come from a single backward pass of Σ_i ℓ_i with
respect to zero "probes" added to every pre-activation (row i of a probe's gradient is δ_i,
because ℓ_i depends on row i only). The result equals vmap(grad) + clip + sum exactly (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array
from jax.flatten_util import ravel_pytree


def _layers(params: dict[str, Any]) -> list[str]:
    names = sorted(params, key=lambda n: int(n.rsplit("_", 1)[1]))
    if not names or any(not n.startswith("Dense_") for n in names):
        raise ValueError(f"expected a dense network with layers Dense_0..Dense_k, got {names}")
    return names


def mlp_forward(params: dict[str, Any], x: Array, probes: list[Array] | None = None
                ) -> tuple[Array, list[Array]]:
    """privrl.nets.flat.MLP's forward pass (ReLU between layers) on a batch, returning the outputs
    and each layer's input; `probes` are added to the pre-activations."""
    inputs = []
    names = _layers(params)
    for i, name in enumerate(names):
        inputs.append(x)
        x = x @ params[name]["kernel"] + params[name]["bias"]
        if probes is not None:
            x = x + probes[i]
        if i < len(names) - 1:
            x = jax.nn.relu(x)
    return x, inputs


def _backward(params: dict[str, Any], x: Array, loss_of_outputs: Callable[[Array], Array]
              ) -> tuple[list[str], list[Array], list[Array]]:
    """One forward and one backward pass: each layer's name, its inputs a_i and the gradients
    δ_i of the summed loss at zero probes added to its pre-activations (per example, since
    example i's loss depends only on its own row)."""
    names = _layers(params)
    probes = [jnp.zeros((x.shape[0], params[n]["bias"].shape[0]), x.dtype) for n in names]

    def total(probes: list[Array]) -> tuple[Array, list[Array]]:
        out, inputs = mlp_forward(params, x, probes)
        return jnp.sum(loss_of_outputs(out)), inputs

    deltas, inputs = jax.grad(total, has_aux=True)(probes)
    return names, inputs, deltas


def clipped_grad_sum(
    params: dict[str, Any],
    x: Array,
    loss_of_outputs: Callable[[Array], Array],
    clip: float,
    rows: Array | None = None,
) -> tuple[Array, Array]:
    """Σ_i rows_i · clip_C(∇_θ ℓ_i) as a flat vector (ravel_pytree order of `params`), and the
    per-example gradient norms ||∇ℓ_i||.

    `loss_of_outputs(outputs (B, k)) -> (B,)` gives each example's loss from its own row of
    network outputs only. `rows` (B,) masks examples out (0) of the sum.
    """
    grads, norms = clipped_grads(params, x, loss_of_outputs, clip, rows)
    flat, _ = ravel_pytree(grads)
    return flat, norms


def clipped_grads(
    params: dict[str, Any],
    x: Array,
    loss_of_outputs: Callable[[Array], Array],
    clip: float,
    rows: Array | None = None,
) -> tuple[dict[str, Any], Array]:
    """`clipped_grad_sum` before the ravel: the sum as a pytree like `params`, and the norms."""
    names, inputs, deltas = _backward(params, x, loss_of_outputs)
    sq = sum((jnp.sum(jnp.square(a), 1) + 1.0) * jnp.sum(jnp.square(d), 1)
             for a, d in zip(inputs, deltas, strict=True))
    norms = jnp.sqrt(sq)
    scale = 1.0 / jnp.maximum(1.0, norms / clip)
    if rows is not None:
        scale = scale * rows
    grads = {n: {"bias": jnp.sum(scale[:, None] * d, 0),
                 "kernel": transposed_matmul(a, scale[:, None] * d)}
             for n, a, d in zip(names, inputs, deltas, strict=True)}
    return grads, norms


@jax.custom_jvp
def transposed_matmul(a: Array, b: Array) -> Array:
    """aᵀ b, the batch's rows contracted: each layer's clipped kernel sum Aᵀ (c ⊙ Δ).

    Why not `a.T @ b`: XLA's CPU pipeline folds the transpose into the dot, and that
    lhs-transposed dot does not go to YNNPACK but to a fallback kernel 2-3× slower (the
    largest kernel of a single ghost-clipping step); an `optimization_barrier` keeps the
    transpose a copy, so the dot is the standard form. Under vmap (seeds, trials) XLA already
    copies the transpose, and this computes `a.T @ b` as before, the same program and floats
    (benchmarks/RESULTS.md, "DP-SGD per-example clipping"). Differentiable (the plain rule)."""
    return _transposed_matmul(a, b)


@transposed_matmul.defjvp
def _transposed_matmul_jvp(primals: tuple[Array, Array], tangents: tuple[Array, Array]
                           ) -> tuple[Array, Array]:
    (a, b), (da, db) = primals, tangents
    return transposed_matmul(a, b), da.T @ b + a.T @ db


@jax.custom_batching.custom_vmap
def _transposed_matmul(a: Array, b: Array) -> Array:
    return jax.lax.optimization_barrier(a.T) @ b


@_transposed_matmul.def_vmap
def _transposed_matmul_batched(size: int, batched: Any, a: Array, b: Array
                               ) -> tuple[Array, bool]:
    del size
    axes = tuple(0 if x else None for x in batched)
    return jax.vmap(lambda a, b: a.T @ b, in_axes=axes)(a, b), True


def add_raveled(base: Array, tree: Any) -> Array:
    """base + ravel_pytree(tree)[0], the same floats, written slice by slice into `base`.

    Why: with a concatenate, XLA's CPU pipeline fuses base's producer (DP-SGD's Gaussian
    noise, an unrolled Threefry hash) into the concatenation's loop, which it does not
    vectorize; updating base's slices in place keeps the noise in its own vectorized fusion.
    Under vmap the concatenate (along the batch's rows) is its own fusion already and the
    in-place form was slower, so a batch concatenates (benchmarks/log/26-speed.md). Not
    differentiable (custom_vmap): a release is not differentiated."""
    leaves = jax.tree_util.tree_leaves(tree)
    size = sum(leaf.size for leaf in leaves)
    if base.shape != (size,):
        raise ValueError(f"base {base.shape} does not match the tree's {size} numbers")
    return _add_flat(base, [leaf.ravel() for leaf in leaves])


@jax.custom_batching.custom_vmap
def _add_flat(base: Array, pieces: list[Array]) -> Array:
    offset = 0
    for piece in pieces:
        part = jax.lax.slice(base, (offset,), (offset + piece.size,))
        base = jax.lax.dynamic_update_slice(base, part + piece.astype(base.dtype), (offset,))
        offset += piece.size
    return base


@_add_flat.def_vmap
def _add_flat_batched(size: int, batched: Any, base: Array, pieces: list[Array]
                      ) -> tuple[Array, bool]:
    rows = [p if b else jnp.broadcast_to(p, (size, *p.shape))
            for p, b in zip(pieces, batched[1], strict=True)]
    return base + jnp.concatenate(rows, axis=1).astype(base.dtype), True


def per_example_grads(params: dict[str, Any], x: Array,
                      loss_of_outputs: Callable[[Array], Array]) -> Array:
    """Every example's gradient ∇_θ ℓ_i as rows (B, d), flattened like `clipped_grad_sum`.

    The same single backward pass (δ_i from the probes), then the outer products a_iᵀ δ_i are
    materialized: what the float-safe (secure) DP-SGD sum needs to clip each row in integers."""
    names, inputs, deltas = _backward(params, x, loss_of_outputs)
    grads = {n: {"bias": d, "kernel": a[:, :, None] * d[:, None, :]}
             for n, a, d in zip(names, inputs, deltas, strict=True)}
    return jax.vmap(lambda g: ravel_pytree(g)[0])(grads)
