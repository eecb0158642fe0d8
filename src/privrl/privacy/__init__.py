"""Privacy core: mechanisms that turn raw agent data into `Report`s, and the ledger."""

from privrl.privacy.clipping import clip_elementwise, clip_l1, clip_l2
from privrl.privacy.ledger import BudgetExceededError, PrivacyLedger
from privrl.privacy.mechanisms import (
    IdentityMechanism,
    LaplaceMechanism,
    Mechanism,
    ProjectedRandomSignMechanism,
    default_d_hat,
)
from privrl.privacy.report import Guarantee, Report

__all__ = [
    "BudgetExceededError",
    "Guarantee",
    "IdentityMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "PrivacyLedger",
    "ProjectedRandomSignMechanism",
    "Report",
    "clip_elementwise",
    "clip_l1",
    "clip_l2",
    "default_d_hat",
]
