"""Use every core: XLA's CPU backend runs one device per core only when asked to.

One XLA CPU device computes on one core here, so the runner splits independent trials over
host devices. The flag must be set before JAX initializes its backend, so `privrl.cli` calls
`use_host_devices()` before importing anything that imports JAX.
"""

from __future__ import annotations

import os
import re

_FLAG = "--xla_force_host_platform_device_count"


def use_host_devices(count: int | None = None) -> int:
    """Ask XLA for `count` CPU devices (default: PRIVRL_DEVICES or the number of cores).

    Does nothing if the flag is already set or JAX's backend is already initialized.
    Returns the device count requested.
    """
    if count is None:
        count = int(os.environ.get("PRIVRL_DEVICES", os.cpu_count() or 1))
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG in flags:
        m = re.search(_FLAG + r"=(\d+)", flags)
        return int(m.group(1)) if m else count
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={max(1, count)}".strip()
    return count
