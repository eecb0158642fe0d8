"""Empirical privacy audits: lower bounds on a mechanism's true ε (docs/audit.md).

Analysis tooling over `privrl.privacy`: it may import mechanisms; nothing on the aggregator side
(`privrl.federation`) may import it. Names load lazily, so `privrl.audit.cli` (imported by
`privrl.main`) starts no JAX.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_API = {
    "AuditResult": "privrl.audit.mechanism",
    "Auditable": "privrl.audit.mechanism",
    "PoissonSampledSum": "privrl.audit.mechanism",
    "audit_mechanism": "privrl.audit.mechanism",
    "default_pair": "privrl.audit.mechanism",
    "FunctionalNoiseRelease": "privrl.audit.functional",
    "OneRunResult": "privrl.audit.one_run",
    "one_run_audit": "privrl.audit.one_run",
    "epsilon_lower_one_run": "privrl.audit.one_run",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'privrl.audit' has no attribute {name!r}")
