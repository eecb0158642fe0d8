"""Ray, the optional extra: a clear error when it is missing, and one way to start or join a
cluster that every system's Ray runtime shares."""

from __future__ import annotations

import os
from typing import Any

from privrl.config import ConfigError, RayNotInstalledError

INSTALL_HINT = "--runtime ray needs the optional Ray extra: pip install 'privrl[ray]'"
# A local cluster's raylet prestarts a Python worker per CPU for its first driver. A run's
# actors carry the job's runtime_env (the JAX settings), which those workers lack, so Ray
# starts new workers for the actors and the prestarted ones sit idle to the end, each a Python
# start importing Ray (about 1.2 CPU-s: benchmarks/log/34-procs.md). Ray's setting (pinned
# 2.60) that turns that prestart off, for the clusters privrl starts (not one it joins).
NO_IDLE_WORKERS = {"prestart_worker_first_driver": False}


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayNotInstalledError(INSTALL_HINT) from None
    return ray


def ray_address(address: str | None) -> str | None:
    """The cluster a run joins: `address` (`--address`), else Ray's own RAY_ADDRESS, else
    None (a local cluster started for the run)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def start_ray(ray: Any, address: str | None) -> tuple[bool, dict[str, Any]]:
    """Join the cluster at `address` (or RAY_ADDRESS), or start a local one sized to this
    machine (unless Ray is already initialized, as in tests). Actors inherit the JAX cache
    settings and run one XLA host device each. Returns (whether this call started Ray, the
    cluster's description). A cluster that cannot be joined is one ConfigError on `address`."""
    address = ray_address(address)
    env = {k: v for k, v in os.environ.items()
           if k in ("JAX_COMPILATION_CACHE_DIR", "JAX_PLATFORMS", "PRIVRL_CACHE_DIR")}
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, num_cpus=None if address else os.cpu_count(),
                     include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {**env, "XLA_FLAGS": ""}},
                     **({} if address else {"_system_config": NO_IDLE_WORKERS}))
        except (ConnectionError, RuntimeError, ValueError) as e:
            what = f"join the Ray cluster at {address}" if address else "start a local Ray"
            first = (str(e).splitlines() or [""])[0]
            hint = ("; a cluster started with token authentication needs RAY_AUTH_MODE=token "
                    "and its token in this process too (docs/ray.md)" if address else "")
            raise ConfigError("address", f"cannot {what}: {type(e).__name__}: {first}{hint}"
                              ) from None
    return started_here, {"address": address or "local", "resources": ray.cluster_resources()}
