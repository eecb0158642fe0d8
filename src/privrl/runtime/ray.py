"""Ray, the optional extra: a clear error when it is missing, and one way to start or join a
cluster that every system's Ray runtime shares."""

from __future__ import annotations

import os
from typing import Any

from privrl.config import RayNotInstalledError

INSTALL_HINT = "--runtime ray needs the optional Ray extra: pip install 'privrl[ray]'"


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayNotInstalledError(INSTALL_HINT) from None
    return ray


def start_ray(ray: Any, address: str | None) -> tuple[bool, dict[str, Any]]:
    """Join the cluster at `address`, or start a local one sized to this machine (unless Ray is
    already initialized, as in tests). Actors inherit the JAX cache settings and run one XLA
    host device each. Returns (whether this call started Ray, the cluster's description)."""
    env = {k: v for k, v in os.environ.items()
           if k in ("JAX_COMPILATION_CACHE_DIR", "JAX_PLATFORMS", "PRIVRL_CACHE_DIR")}
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, num_cpus=None if address else os.cpu_count(),
                 include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {**env, "XLA_FLAGS": ""}})
    return started_here, {"address": address or "local", "resources": ray.cluster_resources()}
