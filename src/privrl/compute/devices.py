"""Use every core: XLA's CPU backend runs one device per core only when asked to.

One XLA CPU device computes on one core here, so the runner splits independent trials over
host devices. The flag must be set before JAX initializes its backend, so `privrl.cli` calls
`use_host_devices()` before importing anything that imports JAX. The same process setup also
holds the compilation cache (`use_compilation_cache`), the garbage collector's settings
(`tune_garbage_collector`) and where a CPU computation runs (`run_cpu_inline`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

_FLAG = "--xla_force_host_platform_device_count"
# The persistent cache keeps programs that took at least this long to compile (seconds); a
# smaller one is cheaper to compile again than to read back.
CACHE_MIN_COMPILE_SECONDS = 0.2


def use_host_devices(count: int | None = None) -> int:
    """Ask XLA for `count` CPU devices (default: PRIVRL_DEVICES or the number of cores).

    Does nothing if the flag is already set or JAX's backend is already initialized.
    Returns the device count requested.
    """
    if count is None:
        raw = os.environ.get("PRIVRL_DEVICES")
        count = os.cpu_count() or 1
        if raw is not None:
            count = int(raw) if raw.strip().isdigit() else 0
            if count < 1:
                raise ValueError(f"PRIVRL_DEVICES must be a whole number >= 1, got {raw!r}")
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG in flags:
        m = re.search(_FLAG + r"=(\d+)", flags)
        return int(m.group(1)) if m else count
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={max(1, count)}".strip()
    return count


def use_compilation_cache(path: str | None = None) -> str | None:
    """Keep XLA's compiled programs on disk so that later runs skip compilation.

    Compiling a run's jitted program takes a few seconds on this CPU, often longer than the
    training itself; JAX's persistent cache makes every later run with the same shapes start
    at once. Default location: $PRIVRL_CACHE_DIR or ~/.cache/privrl/jax; PRIVRL_CACHE_DIR=off
    disables it. Must run before JAX is imported; an explicit JAX_COMPILATION_CACHE_DIR wins.
    Programs that compiled in at least CACHE_MIN_COMPILE_SECONDS are kept (JAX's default, 1 s,
    left a run's initial state and random baseline out on a quiet machine: compiled again on
    every run), unless JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS says otherwise.
    """
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                          str(CACHE_MIN_COMPILE_SECONDS))
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    path = path or os.environ.get("PRIVRL_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "privrl", "jax")
    if path.lower() in ("off", "0", "none", ""):
        return None
    problem = _unsafe_cache_dir(path)
    if problem is not None:
        print(f"privrl: warning: not using the compilation cache {path}: {problem}",
              file=sys.stderr)
        return None
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path
    return path


def _unsafe_cache_dir(path: str) -> str | None:
    """Why the cache at `path` must not be used, or None. A cached program is machine code
    that runs when loaded: a directory someone else owns or may write into could hold a
    planted one. The directory is created private (0700) if missing."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        return f"cannot be created ({e.strerror or e})"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "it belongs to another user"
    if st.st_mode & 0o022:
        return "others may write into it (chmod go-w, or set PRIVRL_CACHE_DIR)"
    return None


def tune_garbage_collector() -> None:
    """For a process that traces and compiles JAX programs: the objects alive now (the imported
    modules, above all) are frozen, never scanned again, and collections run less often.
    JAX's tracing and lowering allocate container objects by the million, and Python's default
    thresholds made each full collection walk every object the process held; everything is
    still collected (measured in benchmarks/RESULTS.md). Call it once, after the imports."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)


class _AfterImport:
    """A one-shot import hook (`sys.meta_path`): once `name` is imported, `action()` runs."""

    def __init__(self, name: str, action: Callable[[], Any]) -> None:
        self.name, self.action = name, action

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)  # the real one, this hook out of the way
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            loader_exec(module)
            self.action()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def run_cpu_inline_once_imported() -> None:
    """`run_cpu_inline` as soon as JAX is imported (now, if it is): the `privrl` process asks
    for it before its command runs, and a command refuses a bad value before it imports JAX."""
    if "jax" in sys.modules:
        run_cpu_inline()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("jax", run_cpu_inline))


def run_cpu_inline() -> bool:
    """JAX's CPU client runs each single-device computation in the calling thread instead of
    queueing it onto a worker thread; True if it now does.

    Why: a task stepped on the host (a Gymnasium environment) calls a tiny jitted policy once
    per step. Queued, each call costs two thread hand-offs (the launch and the wait for its
    result): about 30 µs of CPU on top of the program's 13 µs, and on a busy machine a wait
    for a free core at each hand-off (benchmarks/log/19-gymnasium-at-speed.md). The programs,
    and so every result, are the same; a computation over several devices (the local runner's
    sharded trials) is queued as before. JAX reads the setting when it creates its CPU
    client: after that (the backend initialized) this does nothing and returns False, as it
    does with PRIVRL_CPU_DISPATCH=queued (JAX's default, for comparison)."""
    import jax
    from jax._src import xla_bridge

    if not jax.config.read("jax_cpu_enable_async_dispatch"):
        return True
    if (os.environ.get("PRIVRL_CPU_DISPATCH", "").lower() == "queued"
            or xla_bridge.backends_are_initialized()):
        return False
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    return True
