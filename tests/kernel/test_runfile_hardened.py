"""Issue 53, item 13: every run-file reader refuses symbolic links, reads a bounded amount
whatever the input (a 1 GiB sparse service.npz, a log of a million records), and turns every
malformed value (ε = NaN included) into one line naming the file."""

from __future__ import annotations

import contextlib
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from privrl import runfile
from privrl.federation.service import LOG, SETUP, read_log, replay
from privrl.runfile import RunFileError

from .federation.test_service import _finished_run

GIB = 1 << 30


def _peak_mib(fn: Callable[[], object]) -> float:
    """The peak of the Python-level allocations (numpy's included) while `fn` runs."""
    tracemalloc.start()
    with contextlib.suppress(RunFileError):
        fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def test_a_sparse_gib_setup_is_refused_unread(tmp_path: Path) -> None:
    _finished_run(tmp_path)
    with open(tmp_path / SETUP, "r+b") as f:
        f.truncate(GIB)  # sparse: the original bytes, then a GiB of zeros
    assert _peak_mib(lambda: replay(tmp_path)) < 10  # it was read whole: 1 GiB
    with pytest.raises(RunFileError, match=r"over the .* a run file may have"):
        replay(tmp_path)


def test_a_million_record_log_is_not_read_whole(tmp_path: Path) -> None:
    svc = _finished_run(tmp_path)
    dim = svc.aggregator.dim
    log = tmp_path / LOG
    size = log.stat().st_size
    record = (size - 32) // 5
    with open(log, "r+b") as f:
        f.truncate(32 + 1_000_000 * record)  # sparse records of zeros after the five
    records = read_log(tmp_path, dim)
    assert len(records) == 1_000_000
    # replay refuses at the first bad record (a repeated (agent 0, index 0)), having read
    # no more than it checked (the whole log was 46 MiB read, before the first record)
    assert _peak_mib(lambda: replay(tmp_path)) < 10
    with pytest.raises(RunFileError, match=r"record 5: .* repeated"):
        replay(tmp_path)


@pytest.mark.parametrize("name", [SETUP, LOG])
def test_a_symbolic_link_is_not_followed(tmp_path: Path, name: str) -> None:
    _finished_run(tmp_path)
    target = tmp_path / "elsewhere"
    os.replace(tmp_path / name, target)
    (tmp_path / name).symlink_to(target)
    with pytest.raises(RunFileError, match="symbolic link, which is not followed"):
        replay(tmp_path)


def test_read_npy_checks_before_it_reads(tmp_path: Path) -> None:
    path = tmp_path / "theta_final.npy"
    np.save(path, np.arange(8, dtype=np.float32))
    assert runfile.read_npy(path, np.float32, (8,)).tolist() == list(range(8))
    with pytest.raises(RunFileError, match=r"holds float32 of shape \(8,\); expected"):
        runfile.read_npy(path, np.float32, (9,))
    link = tmp_path / "link.npy"
    link.symlink_to(path)
    with pytest.raises(RunFileError, match="symbolic link"):
        runfile.read_npy(link, np.float32, (8,))


@pytest.mark.parametrize(("field", "value"), [("epsilon", float("nan")),
                                              ("epsilon", -1.0), ("delta", float("nan")),
                                              ("delta", 2.0)])
def test_a_malformed_guarantee_is_one_line(tmp_path: Path, field: str, value: float) -> None:
    _finished_run(tmp_path)
    setup = runfile.read(tmp_path / SETUP, "aggregator-setup")
    setup["guarantee"][field] = value
    runfile.write(tmp_path / SETUP, "aggregator-setup", setup)
    with pytest.raises(RunFileError) as e:
        replay(tmp_path)
    assert str(e.value).startswith(str(tmp_path / SETUP)) and f"guarantee {field}" in str(
        e.value) and "\n" not in str(e.value)


def test_privrl_replay_on_a_nan_epsilon_is_one_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    """It was a 50-line traceback (the ledger's ValueError while charging)."""
    from privrl.main import main

    from ..systems.pgc_a3c.test_ray_files import _finished_ray_dir

    _finished_ray_dir(tmp_path)
    path = tmp_path / "aggregator" / SETUP
    setup = runfile.read(path, "aggregator-setup")
    setup["guarantee"]["epsilon"] = float("nan")
    runfile.write(path, "aggregator-setup", setup)
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"privrl: error: {path}: ") and "epsilon" in err, err
    assert len(err.splitlines()) == 1
