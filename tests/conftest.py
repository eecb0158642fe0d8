"""Shared fixtures, and how the suite is split over pytest-xdist workers.

`make test` runs `pytest -n auto --dist loadgroup --no-loadscope-reorder`: every test runs
(the `slow` marker only names the long ones, for `make test-fast`). Here:

- each xdist worker asks XLA for one host device (the workers already use every core; a worker
  with one device per core would oversubscribe them);
- one JAX persistent compilation cache for the whole run, shared by the workers and the Ray
  actors, so a program compiled by one test is not compiled again by another (it starts
  empty on every run: nothing is carried over between runs);
- tests that share a module- or session-scoped fixture run in one worker (an xdist group),
  so the fixture is computed once; the Ray tests share the session's Ray cluster;
- the long tests are sent out first so that no worker is left with one at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_CACHE_ENV = "PRIVRL_TEST_JAX_CACHE"

if _WORKER is not None:
    # Before anything imports JAX (this conftest is imported before every test module).
    from privrl.runtime.devices import use_host_devices

    use_host_devices(1)


def pytest_configure(config: pytest.Config) -> None:
    if _CACHE_ENV not in os.environ:
        # The controller (or a run without xdist): workers inherit the environment.
        os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="privrl-test-jax-cache-")
        config._privrl_cache_owner = True  # type: ignore[attr-defined]
    if os.environ[_CACHE_ENV] == "off":  # PRIVRL_TEST_JAX_CACHE=off: compile everything
        return
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "_privrl_cache_owner", False) and os.environ[_CACHE_ENV] != "off":
        shutil.rmtree(os.environ.pop(_CACHE_ENV), ignore_errors=True)


def _shared_scope(item: pytest.Item) -> str | None:
    """The widest scope among the fixtures `item` uses that outlive one test."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    scopes = {d.scope for defs in info.name2fixturedefs.values() for d in defs
              if d.scope != "function" and d.baseid.startswith("tests")}
    for scope in ("session", "package", "module", "class"):
        if scope in scopes:
            return scope
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray-cluster"))
        elif _shared_scope(item) is not None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))

    def weight(item: pytest.Item) -> int:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=weight)  # stable: the collection order within each weight


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One real local Ray cluster (2 CPUs) for every Ray test of the session; its actors share
    the session's JAX compilation cache."""
    ray = pytest.importorskip("ray")
    cache = os.environ[_CACHE_ENV]
    if cache == "off":
        cache = str(tmp_path_factory.mktemp("jax-cache"))  # the actors' own, as before
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"JAX_COMPILATION_CACHE_DIR": cache, "XLA_FLAGS": ""}})
    yield
    ray.shutdown()
