"""Run files cannot run code: plain arrays and JSON round-trip exactly; a pickle, a truncated,
foreign, newer or mislabelled file is refused with one line naming it."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from privrl import runfile
from privrl.runfile import RunFileError


class _Reducer:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


def test_state_round_trips_exactly(tmp_path: Path) -> None:
    state = {"a": np.arange(5, dtype=np.int64), "b": [1, 2.5, math.inf, None, True, "x"],
             "c": {"d": np.float32(1.5), "e": np.zeros((2, 3), np.float32), "f": (1, 2)},
             "g": np.array(3, np.int32)}
    runfile.write(tmp_path / "s.npz", "demo", state)
    back = runfile.read(tmp_path / "s.npz", "demo")
    assert back["b"] == [1, 2.5, math.inf, None, True, "x"] and back["c"]["f"] == [1, 2]
    assert back["c"]["d"] == 1.5
    for got, want in ((back["a"], state["a"]), (back["c"]["e"], state["c"]["e"]),
                      (back["g"], state["g"])):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_objects_are_not_written() -> None:
    with pytest.raises(TypeError):
        runfile.dumps("demo", {"x": np.array([object()])})
    with pytest.raises(TypeError):
        runfile.dumps("demo", {1: 2})


def test_a_malicious_pickle_is_refused_and_never_run(tmp_path: Path, plant_pickle) -> None:
    marker = plant_pickle(tmp_path / "s.npz")
    with pytest.raises(RunFileError, match="pickle") as e:
        runfile.read(tmp_path / "s.npz", "demo")
    assert str(tmp_path / "s.npz") in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists()


def test_a_pickle_inside_an_npz_is_refused(tmp_path: Path, plant_pickle) -> None:
    """An npz whose array is an object array (a pickle) is not loaded: allow_pickle=False."""
    marker = plant_pickle(tmp_path / "evil.pkl")  # (only to get a marker path)
    path = tmp_path / "s.npz"
    path.write_bytes(runfile.dumps("demo", {"a": np.zeros(2)}))
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    payload = np.empty(1, dtype=object)
    payload[0] = _Reducer(marker)
    np.savez(path, **{**arrays, "a0": payload})
    with pytest.raises(RunFileError, match="corrupt"):
        runfile.read(path, "demo")
    assert not marker.exists()
    with np.load(path, allow_pickle=True) as z:  # the control: a pickling reader runs it
        z["a0"]
    assert marker.exists()


@pytest.mark.parametrize(("damage", "match"), [
    (lambda raw: raw[: len(raw) // 2], "truncated or corrupt"),
    (lambda raw: b"", "not a privrl run file"),
    (lambda raw: b'{"format": "privrl-run-file"}', "not a privrl run file"),
])
def test_damaged_files_are_refused(tmp_path: Path, damage, match: str) -> None:
    path = tmp_path / "s.npz"
    path.write_bytes(damage(runfile.dumps("demo", {"a": np.zeros(100)})))
    with pytest.raises(RunFileError, match=match):
        runfile.read(path, "demo")


def test_foreign_npz_newer_version_and_wrong_kind_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    np.savez(tmp_path / "foreign.npz", x=np.zeros(2))
    with pytest.raises(RunFileError, match="truncated or corrupt"):
        runfile.read(tmp_path / "foreign.npz", "demo")
    runfile.write(tmp_path / "s.npz", "other", {})
    with pytest.raises(RunFileError, match="'other' file, expected 'demo'"):
        runfile.read(tmp_path / "s.npz", "demo")
    with monkeypatch.context() as m:
        m.setattr(runfile, "VERSION", 9)  # written by a future privrl
        runfile.write(tmp_path / "v.npz", "demo", {})
    raw = bytearray((tmp_path / "s.npz").read_bytes())  # a flipped byte fails the zip CRC
    raw[raw.index(b'"kind"') + 2] ^= 1
    (tmp_path / "flipped.npz").write_bytes(bytes(raw))
    with pytest.raises(RunFileError, match="truncated or corrupt"):
        runfile.read(tmp_path / "flipped.npz", "other")
    with pytest.raises(RunFileError, match="version 9"):
        runfile.read(tmp_path / "v.npz", "demo")
    with pytest.raises(RunFileError, match="cannot be read"):
        runfile.read(tmp_path / "missing.npz", "demo")


def test_tree_from_leaves_takes_the_structure_from_code() -> None:
    template = {"a": np.zeros(3, np.float32), "b": (np.zeros((), np.int32),)}
    tree = runfile.tree_from_leaves(template, [np.ones(3, np.float32), np.array(4, np.int32)])
    assert float(tree["a"].sum()) == 3 and int(tree["b"][0]) == 4
    with pytest.raises(ValueError, match="shape"):
        runfile.tree_from_leaves(template, [np.ones(4, np.float32), np.array(4, np.int32)])
    with pytest.raises(ValueError, match="2 state arrays"):
        runfile.tree_from_leaves(template, [np.ones(3, np.float32)])


def test_a_planted_symlink_never_redirects_a_write(tmp_path: Path) -> None:
    """A link at the old fixed temp name, or at the file itself, pointing outside the run
    directory: the write lands in the run directory, the outside file is untouched, and the
    run file is a regular file afterwards (issue 43, item 10)."""
    from privrl.runfile import atomic_write

    run, outside = tmp_path / "run", tmp_path / "outside.txt"
    run.mkdir()
    outside.write_text("precious")
    (run / "checkpoint.npz.tmp").symlink_to(outside)  # what the old writer followed
    (run / "theta.npz").symlink_to(outside)
    for name in ("checkpoint.npz", "theta.npz"):
        atomic_write(run / name, b"new state")
        assert (run / name).read_bytes() == b"new state" and not (run / name).is_symlink()
    assert outside.read_text() == "precious"
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.npz", "checkpoint.npz.tmp",
                                                     "theta.npz"]  # no temp file left behind


def _valid(path: Path) -> Path:
    runfile.write(path, "probe", {"theta": np.arange(4, dtype=np.float32), "step": 3})
    return path


def test_a_compressed_member_is_refused_unread(tmp_path: Path) -> None:
    """A deflated member (1 MiB of zeros in a few KB) added to a valid file: refused by its
    zip entry, before anything is inflated (issue 43, item 3)."""
    import zipfile

    path = _valid(tmp_path / "service.npz")
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb.npy", b"\0" * (1 << 20))
    with pytest.raises(RunFileError, match=r"service\.npz: member 'bomb\.npy' is compressed"):
        runfile.read(path, "probe")


def test_a_symlink_is_not_followed_on_read(tmp_path: Path) -> None:
    target = _valid(tmp_path / "elsewhere.npz")
    (tmp_path / "run.npz").symlink_to(target)
    with pytest.raises(RunFileError, match=r"run\.npz: is a symbolic link"):
        runfile.read(tmp_path / "run.npz", "probe")


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = _valid(tmp_path / "run.npz")
    monkeypatch.setattr(runfile, "MAX_BYTES", path.stat().st_size - 1)
    with pytest.raises(RunFileError, match=r"run\.npz: is [\d,]+ bytes, over the"):
        runfile.read(path, "probe")


def test_a_deeply_nested_header_is_one_error(tmp_path: Path) -> None:
    """A header nested 900 levels deep gave ~3,000 lines of RecursionError."""
    deep: object = 1
    for _ in range(900):
        deep = [deep]
    path = tmp_path / "run.npz"
    header = json.dumps({"format": runfile.FORMAT, "version": runfile.VERSION, "kind": "probe",
                         "state": deep}).encode()
    buf = io.BytesIO()
    np.savez(buf, __header__=np.frombuffer(header, np.uint8))
    path.write_bytes(buf.getvalue())
    with pytest.raises(RunFileError, match="nests deeper than"):
        runfile.read(path, "probe")
