"""Threefry compiled unrolled on CPU (privrl/prng.py): the same bits, no loop in the program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

import privrl.envs.rollout  # noqa: F401  (registers the lowering, as every system does)
from privrl import prng

# Random123's known-answer vectors for Threefry-2x32 with 20 rounds: (key, counter, output).
KNOWN = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


def test_registered_for_the_pinned_jax() -> None:
    assert prng.threefry_unrolled()


@pytest.mark.parametrize("key,count,expected", KNOWN)
def test_unrolled_hash_gives_the_known_answers(key, count, expected) -> None:
    out = jax.jit(threefry_2x32)(jnp.array(key, jnp.uint32), jnp.array(count, jnp.uint32))
    assert [int(x) for x in np.asarray(out)] == list(expected)


def test_no_while_loop_in_a_compiled_draw() -> None:
    text = jax.jit(lambda k: jax.random.uniform(k, (8,))).lower(jax.random.key(0)).compile(
    ).as_text()
    assert " while(" not in text and "while." not in text


def test_opt_out_keeps_jax_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prng, "_state", {"unrolled": False})
    monkeypatch.setenv("PRIVRL_THREEFRY", "rolled")
    assert prng.unroll_threefry() is False
    assert prng.threefry_unrolled() is False
