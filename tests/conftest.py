"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One real local Ray cluster (2 CPUs) for every Ray test of the session; its actors share
    one JAX compilation cache."""
    ray = pytest.importorskip("ray")
    cache = tmp_path_factory.mktemp("jax-cache")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"JAX_COMPILATION_CACHE_DIR": str(cache),
                                       "XLA_FLAGS": ""}})
    yield
    ray.shutdown()
