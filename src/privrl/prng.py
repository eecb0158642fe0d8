"""JAX's Threefry hash compiled unrolled on CPU, as it is on every other platform.

Why: on CPU, JAX lowers each Threefry-2x32 call (every `split`, `fold_in`, `uniform`,
`randint`, `laplace`, ...) as a rolled loop of 5 iterations, an XLA `while` with about 20 tiny
kernels per iteration. Inside a rollout's step loop these loops are most of the work:
profiling a PGC-A3C round (`benchmarks/profile_round.py`) puts most of its kernel time in
the hash's loops and most of the rest in scheduling kernels, little in the environment and
the network (benchmarks/log/01-*.md, "Where a round's time goes").
JAX's other lowering of the same hash (the one it uses on GPU and TPU) is straight-line code:
the same 32-bit integer operations in the same order, so every random bit, and so every
result, is unchanged; only the compiled program differs (larger, faster).

`unroll_threefry()` registers that lowering for CPU. It is called when `privrl.envs.rollout`
and `privrl.privacy.report` are imported (every system imports both; this module imports
nothing of privrl, so the aggregator side may load it), affects only programs compiled
afterwards, and does nothing if JAX's internals moved (privrl pins jax in constraints.txt;
tests/kernel/test_prng.py checks that it takes effect there).
`PRIVRL_THREEFRY=rolled` keeps JAX's own CPU lowering.
"""

from __future__ import annotations

import os

__all__ = ["threefry_unrolled", "unroll_threefry"]

_state = {"unrolled": False}


def unroll_threefry() -> bool:
    """Compile Threefry unrolled on CPU from now on (idempotent); True if it is."""
    if _state["unrolled"] or os.environ.get("PRIVRL_THREEFRY", "").lower() == "rolled":
        return _state["unrolled"]
    try:
        from jax._src.random import threefry2x32 as threefry
        from jax.interpreters import mlir

        rule = threefry._threefry2x32_lowering_rule  # JAX's unrolled, platform-default rule
        primitive = threefry.threefry2x32_p
    except (ImportError, AttributeError):  # another JAX: keep its own lowering
        return False
    mlir.register_lowering(primitive, rule, platform="cpu")
    _state["unrolled"] = True
    return True


def threefry_unrolled() -> bool:
    """Whether programs compiled from now on hash unrolled on CPU."""
    return _state["unrolled"]
