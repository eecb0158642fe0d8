"""Independent trials, vmapped and split over the host's XLA devices (one device per core; see
privrl.compute.devices). Every system's local runner uses these two pieces; `host_scan` is
their stand-in for trials whose steps run on the host (Gymnasium environments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def trial_devices(trials: int, devices: int | None = None) -> int:
    """How many host devices `trials` independent trials are split over."""
    return max(1, min(devices or jax.local_device_count(), jax.local_device_count(), trials))


def own_padded(trials: int, devices: int | None = None) -> int:
    """How many trials a run of `trials` computes: padded to a multiple of its devices."""
    n = trial_devices(trials, devices)
    return -(-trials // n) * n


def setting_trial_keys(seed: int, trials: int, settings: int, padded: int,
                       devices: int | None = None) -> jax.Array:
    """Root keys of `settings` settings × `trials` trials run as one program of `padded`
    trials: trial k of each setting gets the key it gets in its setting's own run (the seed
    split over that run's padded trials); padding trials get others."""
    own = own_padded(trials, devices)
    if 0 <= seed < _SEED_AS_DATA:  # seed and seed + 1 as int32 data: the same key data
        return _trial_keys(np.int32(seed), trials, settings, padded, own)
    return _trial_keys_any_seed(seed, trials, settings, padded, own)


# Below it a seed is passed as int32 data (one program for every seed); other seeds (negative,
# or wider than 31 bits: `jax.random.key` takes any Python int) are compiled in.
_SEED_AS_DATA = np.iinfo(np.int32).max


def _keys(seed: Any, trials: int, settings: int, padded: int, own: int) -> jax.Array:
    """`setting_trial_keys` as one program (op by op, JAX compiled each operation as a program
    of its own)."""
    keys = jax.random.split(jax.random.key(seed), own)
    if settings == 1:
        return keys
    keys = jax.numpy.concatenate([keys[:trials]] * settings)
    extra = padded - keys.shape[0]
    if extra == 0:
        return keys
    return jax.numpy.concatenate([keys, jax.random.split(jax.random.key(seed + 1), extra)])


_trial_keys = jax.jit(_keys, static_argnums=(1, 2, 3, 4))
_trial_keys_any_seed = jax.jit(_keys, static_argnums=(0, 1, 2, 3, 4))


def trial_sharding(devices: int) -> NamedSharding:
    """Axis 0 (trials) split over the first `devices` host devices: how `shard_vmap`'s
    programs take and return their arguments. Putting a state there before the first call
    (`jax.device_put`) spares a second compilation: a program first called with host arrays
    is compiled again for its own, sharded, outputs."""
    return NamedSharding(Mesh(np.array(jax.local_devices()[:devices]), ("trials",)),
                         PartitionSpec("trials"))


def shard_vmap(fn: Callable[..., Any], devices: int, sequential: bool = False,
               batched: bool = False) -> Callable[..., Any]:
    """vmap `fn` over a leading trials axis and split that axis over `devices` host devices.

    Trials are independent, so no collectives: every argument and output is sharded on axis 0,
    whose length must be a multiple of `devices`. `sequential`: `lax.map` instead of vmap, for
    programs that call the host (float-safe noise) inside a `while_loop`, which JAX cannot
    batch over trials (an io_callback under a batched loop predicate).
    `batched`: `fn` already takes a batch of trials (each device's share), so it is not vmapped.
    """
    sharding = trial_sharding(devices)
    mesh, spec = sharding.mesh, sharding.spec
    if batched:
        per_device = fn
    elif sequential:
        per_device = lambda *a: jax.lax.map(lambda t: fn(*t), a)  # noqa: E731
    else:
        per_device = jax.vmap(fn)
    return jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)


def in_blocks(fn: Callable[..., Any], block: int) -> Callable[..., Any]:
    """`fn` of arguments with a leading batch axis, computed `block` rows at a time, each block
    behind an optimization barrier (`lax.map` over the blocks; the batch is padded with copies
    of its first row to a multiple of `block`, and those rows dropped).

    Why: XLA CPU compiles element-wise code and reductions differently by batch size and by
    what they fuse with, so float32 results can differ in their last bits between programs.
    A row computed here gets the same compiled arithmetic in any batch and any program, which
    is what lets several settings in one program give each its own run's floats.
    """

    def one(*a: Any) -> Any:
        return jax.lax.optimization_barrier(fn(*jax.lax.optimization_barrier(a)))

    def run(*args: Any) -> Any:
        n = jax.tree_util.tree_leaves(args)[0].shape[0]
        m = -(-n // block)
        args = jax.tree_util.tree_map(lambda x: pad_rows(x, m * block), args)
        if m == 1:
            return one(*args)
        out = jax.lax.map(lambda a: one(*a), jax.tree_util.tree_map(
            lambda x: x.reshape(m, block, *x.shape[1:]), args))
        return jax.tree_util.tree_map(lambda x: x.reshape(m * block, *x.shape[2:])[:n], out)

    return run


def pad_rows(x: Any, n: int) -> Any:
    """x with its leading axis padded to n rows by copies of its first row."""
    if x.shape[0] == n:
        return x
    return jax.numpy.concatenate([x, jax.numpy.repeat(x[:1], n - x.shape[0], axis=0)])


def host_scan(step: Callable[[Any], tuple[Any, Any]], length: int) -> Callable[[Any], Any]:
    """What `shard_vmap` of a `lax.scan` of `step` computes, for a `step` that runs on the host
    (a Gymnasium rollout cannot be jitted): each trial of the stacked state (leading axis) in
    turn, `length` steps each. Returns (stacked state, outputs of shape (trials, length, ...))."""

    def run(state: Any) -> tuple[Any, Any]:
        trials, outputs = [], []
        for k in range(jax.tree_util.tree_leaves(state)[0].shape[0]):
            s = jax.tree_util.tree_map(lambda x, k=k: x[k], state)
            steps = []
            for _ in range(length):
                s, out = step(s)
                steps.append(out)
            trials.append(s)
            outputs.append(jax.tree_util.tree_map(lambda *x: np.stack(x), *steps))
        stack = lambda *x: jax.numpy.stack(x)  # noqa: E731
        return (jax.tree_util.tree_map(stack, *trials),
                jax.tree_util.tree_map(lambda *x: np.stack(x), *outputs))

    return run
