"""How a learner's pieces are composed around its episode source: one program, or the host.

A system writes its round or episode once, as pure pieces (plan, update, finish, ...) around
the episodes it is given. Where those episodes come from decides how the pieces run:
- `JittedPieces`: a gymnax task's episodes are traced with everything else, so the pieces are
  traced where they are called and the loops are `lax.while_loop` and `lax.map`: one jitted
  program;
- `HostPieces`: a Gymnasium task's episodes are played on the host (they cannot be traced), so
  each piece is jitted on its own (compiled once per source) and the loops run in Python.

Each system's episode source extends one of these with how it samples its episodes
(privrl.systems.fedpg.source, privrl.systems.dpsgd_rl.source).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp


class Pieces(Protocol):
    """What a round or episode needs to compose its pieces, wherever its episodes are played."""

    host: bool  # True: the episodes are played on the host, outside any jitted program

    def piece(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` (a pure piece of the round) as it runs with this source."""
        ...

    def while_loop(self, cond: Callable[[Any], Any], body: Callable[[Any], Any],
                   init: Any) -> Any:
        """`lax.while_loop`'s meaning: `body` while `cond` holds, from `init`."""
        ...

    def map(self, fn: Callable[[Any], Any], xs: Any) -> Any:
        """`lax.map`'s meaning: `fn` of each member of `xs` (leading axis), stacked."""
        ...


class JittedPieces:
    """Pieces traced where they are called; the loops of `jax.lax`."""

    host = False

    def piece(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A piece as it runs here: traced where it is called."""
        return fn

    def while_loop(self, cond: Callable[[Any], Any], body: Callable[[Any], Any],
                   init: Any) -> Any:
        return jax.lax.while_loop(cond, body, init)

    def map(self, fn: Callable[[Any], Any], xs: Any) -> Any:
        """`fn` of each member of `xs` (leading axis), one at a time, stacked."""
        return jax.lax.map(fn, xs)


class HostPieces:
    """Pieces jitted one by one (each compiled once per source); the loops run here."""

    host = True

    def __init__(self) -> None:
        self._pieces: dict[Callable[..., Any], Callable[..., Any]] = {}

    def piece(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A piece as it runs here: jitted on its own (a bound method is one piece per
        object: `algo.update` is the same piece at every call)."""
        if fn not in self._pieces:
            self._pieces[fn] = jax.jit(fn)
        return self._pieces[fn]

    def while_loop(self, cond: Callable[[Any], Any], body: Callable[[Any], Any],
                   init: Any) -> Any:
        carry = init
        while bool(cond(carry)):
            carry = body(carry)
        return carry

    def map(self, fn: Callable[[Any], Any], xs: Any) -> Any:
        """`fn` of each member of `xs` (leading axis), one at a time, stacked."""
        n = jax.tree_util.tree_leaves(xs)[0].shape[0]
        outs = [fn(jax.tree_util.tree_map(lambda a, i=i: a[i], xs)) for i in range(n)]
        return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *outs)
