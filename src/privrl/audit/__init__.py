"""Empirical privacy audits: lower bounds on a mechanism's true ε (docs/audit.md).

Analysis tooling over `privrl.privacy`: it may import mechanisms; nothing on the aggregator side
(`privrl.federation`) may import it.
"""

from privrl.audit.functional import FunctionalNoiseRelease
from privrl.audit.mechanism import (
    Auditable,
    AuditResult,
    PoissonSampledSum,
    audit_mechanism,
    default_pair,
)

__all__ = ["AuditResult", "Auditable", "FunctionalNoiseRelease", "PoissonSampledSum",
           "audit_mechanism", "default_pair"]
