"""Run files that cannot run code: saved state is plain arrays plus a JSON header in one .npz.

Checkpoints and service state were pickles, and unpickling a tampered run directory runs any
code the file names on the machine that replays or recovers it. A run file is a zip of .npy
arrays of numeric dtypes, read with `np.load(..., allow_pickle=False)`, and one JSON document
(`__header__`: the format, its version, the kind of file and the state's structure, arrays as
references). Reading builds only dicts, lists, numbers, strings and arrays; callers rebuild
their objects from those and check them. A missing, truncated, tampered or foreign file (a
pickle included) raises `RunFileError`, one line naming the file; nothing is executed.
"""

from __future__ import annotations

import io
import json
import math
import os
import platform
import secrets
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import json_safe

__all__ = ["FORMAT", "VERSION", "RunFileError", "atomic_write", "checked", "dumps", "opened",
           "read", "read_npy", "tree_from_leaves", "write"]

FORMAT = "privrl-run-file"
VERSION = 1
_HEADER = "__header__"
_ARRAY, _FLOAT = "__array__", "__float__"  # markers in the JSON structure
_ZIP_MAGIC = b"PK\x03\x04"


class RunFileError(ValueError):
    """A run file that cannot be used: missing, truncated, tampered with or not a privrl run
    file of the expected kind. The message is one line and names the file."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


def dumps(kind: str, state: Any) -> bytes:
    """`state` (dicts with str keys, lists, tuples, None, bools, ints, floats, strings, numeric
    arrays) as the bytes of a run file of this `kind`."""
    arrays: dict[str, np.ndarray] = {}
    header = {"format": FORMAT, "version": VERSION, "kind": kind,
              "state": _encode(state, arrays)}
    text = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
    buf = io.BytesIO()
    np.savez(buf, **{_HEADER: np.frombuffer(text, np.uint8)}, **arrays)
    return buf.getvalue()


def write(path: str | os.PathLike, kind: str, state: Any) -> None:
    """Write a run file atomically (a temp file, then rename: a crash leaves the old one)."""
    atomic_write(Path(path), dumps(kind, state))


# The bounds of what `read` accepts: a run file's size, its JSON header's, and the header's
# nesting. Reading costs at most about the file's size in memory (its arrays): never a copy of
# the whole file beside them.
MAX_BYTES = 256 << 20
MAX_HEADER_BYTES = 8 << 20
MAX_DEPTH = 64


@contextmanager
def opened(path: str | os.PathLike, max_bytes: int | None) -> Iterator[tuple[Any, int]]:
    """A run file opened for reading, and its size: never through a symbolic link
    (O_NOFOLLOW), only a regular file, at most `max_bytes` (None: any size, for a reader that
    streams); otherwise one RunFileError naming it. Every reader of run files opens them here."""
    import stat

    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))  # a FIFO in its place does not block
    except OSError as e:
        what = "is a symbolic link, which is not followed" if path.is_symlink() else (
            f"cannot be read ({e.strerror or e})")
        raise RunFileError(path, f"{what}; nothing was loaded") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise RunFileError(path, f"cannot be read ({what}); nothing was loaded")
    with os.fdopen(fd, "rb") as f:
        if max_bytes is not None and info.st_size > max_bytes:
            raise RunFileError(path, f"is {info.st_size:,} bytes, over the {max_bytes:,} a run "
                                     "file may have; nothing was loaded")
        yield f, info.st_size


def read(path: str | os.PathLike, kind: str) -> Any:
    """The state a run file of this `kind` holds, or RunFileError; never runs code, and
    bounded: no symbolic link is followed, no file over MAX_BYTES is read (nor a header over
    MAX_HEADER_BYTES), the arrays are read from the file (no copy of it is held beside them),
    no compressed member is inflated (privrl writes none: a decompression bomb is refused
    unread), and the header's nesting is at most MAX_DEPTH."""
    path = Path(path)
    with opened(path, MAX_BYTES) as (f, size):
        try:
            magic = f.read(len(_ZIP_MAGIC))
        except OSError as e:  # a directory, a device...
            raise RunFileError(path, f"cannot be read ({e.strerror or e})") from None
        if magic != _ZIP_MAGIC:
            what = ("is a Python pickle, which is refused because loading one can run code"
                    if magic[:1] == b"\x80" else "is not a privrl run file")
            raise RunFileError(path, f"{what}; nothing was loaded")
        try:
            f.seek(0)
            with zipfile.ZipFile(f) as zf:
                declared = 0
                for info in zf.infolist():
                    declared += info.file_size
                    if (info.compress_type != zipfile.ZIP_STORED or info.file_size > size
                            or declared > size):
                        raise RunFileError(path, f"member {info.filename!r} is compressed or "
                                                 "larger than the file; nothing was loaded")
                    if info.filename == _HEADER + ".npy" and info.file_size > MAX_HEADER_BYTES:
                        raise RunFileError(path, f"its header is {info.file_size:,} bytes, "
                                                 f"over the {MAX_HEADER_BYTES:,} allowed; "
                                                 "nothing was loaded")
            f.seek(0)
            with np.load(f, allow_pickle=False) as z:
                header = json.loads(z[_HEADER].tobytes().decode())
                arrays = {name: z[name] for name in z.files if name != _HEADER}
        except RunFileError:
            raise
        except Exception as e:  # any failure to parse is one kind of error: a bad file
            raise RunFileError(path, f"truncated or corrupt ({type(e).__name__}: "
                                     f"{' '.join(str(e).split())[:200]}); nothing was loaded"
                               ) from None
    if _depth(header) > MAX_DEPTH:
        raise RunFileError(path, f"its header nests deeper than {MAX_DEPTH} levels; nothing "
                                 "was loaded")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RunFileError(path, "is not a privrl run file; nothing was loaded")
    if header.get("version") != VERSION:
        raise RunFileError(path, f"has format version {header.get('version')!r}; this privrl "
                                 f"reads version {VERSION}")
    if header.get("kind") != kind:
        raise RunFileError(path, f"is a {header.get('kind')!r} file, expected {kind!r}")
    try:
        return _decode(header.get("state"), arrays)
    except (KeyError, TypeError, ValueError) as e:
        raise RunFileError(path, f"tampered or corrupt structure ({e})") from None


def read_npy(path: str | os.PathLike, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A .npy file that must hold an array of this dtype and shape (a run's saved θ), read
    only once its header says so: no symbolic link followed, no pickle, nothing allocated for
    a declared shape other than the one expected; otherwise one RunFileError naming it."""
    fmt = np.lib.format
    with opened(path, None) as (f, _size):
        try:
            version = fmt.read_magic(f)
            read_header = fmt.read_array_header_1_0 if version == (1, 0) else (
                fmt.read_array_header_2_0)
            got_shape, fortran, got = read_header(f)
        except Exception as e:
            raise RunFileError(path, f"not a float array ({type(e).__name__}: "
                                     f"{' '.join(str(e).split())[:200]}); nothing was loaded"
                               ) from None
        if got != np.dtype(dtype) or tuple(got_shape) != tuple(shape) or fortran:
            raise RunFileError(path, f"holds {got} of shape {tuple(got_shape)}; expected "
                                     f"{np.dtype(dtype)} of shape {tuple(shape)}")
        want = int(np.prod(shape)) * np.dtype(dtype).itemsize
        data = f.read(want)
        if len(data) != want:
            raise RunFileError(path, "is truncated; nothing was loaded")
    return np.frombuffer(data, dtype).reshape(shape).copy()


def atomic_write(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Write bytes via a temp file, fsync and rename, so readers see the old or the new file.

    The temp file gets a fresh random name and is created exclusively, never through a
    symlink (O_EXCL | O_NOFOLLOW): a link planted in the run directory (shared storage, for a
    Ray run) cannot redirect the write outside it, and the rename replaces a link at `path`
    itself, not the file it points to. Its mode is `mode` less the umask (by default what
    `open` would give; a node's own state: 0600)."""
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def checked(path: str | os.PathLike) -> Iterator[None]:
    """Turn the errors of rebuilding objects from a run file's plain values (KeyError,
    TypeError, ValueError) into one RunFileError naming the file."""
    try:
        yield
    except RunFileError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise RunFileError(path, f"tampered or inconsistent ({type(e).__name__}: {e}); "
                                 "nothing was loaded") from None


def tree_from_leaves(template: Any, leaves: Any) -> Any:
    """`template`'s pytree with `leaves` read from a run file, each of the template leaf's
    shape and dtype: the structure (and every type in it) comes from code, never from a file."""
    import jax  # lazily: privrl.main imports this module and must not start JAX

    want, treedef = jax.tree_util.tree_flatten(template)
    if not isinstance(leaves, list) or len(leaves) != len(want):
        raise ValueError(f"expected a list of {len(want)} state arrays")
    out = []
    for have, w in zip(leaves, want, strict=True):
        have, w = np.asarray(have), np.asarray(w)
        if have.shape != w.shape or have.dtype != w.dtype:
            raise ValueError(f"a state array has shape {have.shape} and dtype {have.dtype}, "
                             f"expected {w.shape} and {w.dtype}")
        out.append(jax.numpy.asarray(have))
    return jax.tree_util.tree_unflatten(treedef, out)


# --- the structure -----------------------------------------------------------------------------
def _encode(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return f if math.isfinite(f) else {_FLOAT: repr(f)}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj) or _ARRAY in obj or _FLOAT in obj:
            raise TypeError("run-file dicts need str keys other than the markers")
        return {k: _encode(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_encode(v, arrays) for v in obj]
    a = np.asarray(obj)  # numpy and JAX arrays
    if a.dtype.kind not in "biufc":
        raise TypeError(f"run files hold numeric arrays only, got dtype {a.dtype}")
    name = f"a{len(arrays)}"
    arrays[name] = a
    return {_ARRAY: name}


def _decode(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    if isinstance(obj, dict):
        if set(obj) == {_ARRAY}:
            return arrays[obj[_ARRAY]]
        if set(obj) == {_FLOAT}:
            if obj[_FLOAT] not in ("inf", "-inf", "nan"):
                raise ValueError(f"bad float {obj[_FLOAT]!r}")
            return float(obj[_FLOAT])
        return {k: _decode(v, arrays) for k, v in obj.items()}
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    raise TypeError(f"unexpected {type(obj).__name__} in the structure")


def _depth(obj: Any) -> int:
    """How deeply lists and dicts nest in a parsed JSON value (without recursion)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


# --- JSON run files (config.json, summary.json, ...) and the versions they record ---------------

PACKAGES = ("privrl", "jax", "jaxlib", "flax", "optax", "gymnax", "numpy", "dp-accounting")


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def json_text(obj: Any) -> str:
    """Strict JSON (non-finite floats as strings; anything else non-finite is an error)."""
    return json.dumps(json_safe(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json_text(obj))
