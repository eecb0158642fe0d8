"""Fuzzing every run-file reader with a seeded generator (issue 43): truncations, bit flips,
inserted bytes and oversize declarations of a real run's files give either a file that loads or
one RunFileError naming it: never another exception, never a traceback, never code run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.federation import AggregatorService, replay
from privrl.federation.service import CHECKPOINT, LOG, SETUP
from privrl.runfile import RunFileError

from .federation.test_service import _finished_run

CASES = 60  # per file: each case is a fresh mutation of the original bytes


def _mutations(raw: bytes, rng: np.random.Generator) -> list[bytes]:
    out = []
    for _ in range(CASES):
        b = bytearray(raw)
        kind = rng.integers(4)
        if kind == 0:  # truncated anywhere
            b = b[: rng.integers(len(b))]
        elif kind == 1:  # a few bits flipped
            for pos in rng.integers(len(b), size=rng.integers(1, 8)):
                b[pos] ^= 1 << int(rng.integers(8))
        elif kind == 2:  # bytes inserted
            pos = int(rng.integers(len(b)))
            b[pos:pos] = rng.integers(256, size=rng.integers(1, 64), dtype=np.uint8).tobytes()
        else:  # a large integer written over 8 bytes (sizes, counts, ids, shapes)
            pos = int(rng.integers(max(1, len(b) - 8)))
            b[pos:pos + 8] = int(rng.integers(1 << 62)).to_bytes(8, "little")
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("name", [SETUP, CHECKPOINT, LOG])
def test_every_mutation_loads_or_is_one_run_file_error(tmp_path: Path, name: str) -> None:
    run = tmp_path / "run"
    _finished_run(run)
    original = (run / name).read_bytes()
    rng = np.random.default_rng(sum(name.encode()))
    outcomes = {"loaded": 0, "refused": 0}
    load = AggregatorService.restore if name == CHECKPOINT else replay
    for i, mutated in enumerate(_mutations(original, rng)):
        (run / name).write_bytes(mutated)
        try:
            result = load(run)
            if isinstance(result, AggregatorService):
                result.close()
            outcomes["loaded"] += 1
        except RunFileError as e:
            message = str(e)
            assert "\n" not in message and str(run) in message, (i, message)
            outcomes["refused"] += 1
    assert outcomes["refused"] > CASES // 4, outcomes  # the mutations do hit the checks


def test_every_mutation_of_a_policy_loads_or_is_one_run_file_error(tmp_path: Path) -> None:
    """policy.npz (issue 39): the same mutations, read by `load_policy`."""
    from privrl.envs.task import make_task
    from privrl.nets.flat import mlp
    from privrl.policy import FILE, load_policy, saved_policy

    model = mlp((8,), 2, 4)
    theta = np.random.default_rng(0).normal(size=(2, model.dim)).astype(np.float32)
    saved_policy("fedpg-cen", model, make_task("gymnax:CartPole-v1"), "logits", theta, 500
                 ).write(tmp_path / FILE)
    original = (tmp_path / FILE).read_bytes()
    outcomes = {"loaded": 0, "refused": 0}
    for i, mutated in enumerate(_mutations(original, np.random.default_rng(39))):
        (tmp_path / FILE).write_bytes(mutated)
        try:
            load_policy(tmp_path)
            outcomes["loaded"] += 1
        except RunFileError as e:
            assert "\n" not in str(e) and str(tmp_path / FILE) in str(e), (i, str(e))
            outcomes["refused"] += 1
    assert outcomes["refused"] > CASES // 4, outcomes
