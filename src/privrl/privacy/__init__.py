"""Privacy core: mechanisms that turn raw agent data into `Report`s, and the ledger."""

from privrl.privacy.clipping import clip_elementwise, clip_l1, clip_l2
from privrl.privacy.functional import (
    GPNoiseFunction,
    GPNoiseState,
    Theorem5,
    gp_noise_init,
    gp_noise_query,
    gp_noise_reset,
)
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
    "GPNoiseFunction",
    "GPNoiseState",
    "Guarantee",
    "IdentityMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "PrivacyLedger",
    "ProjectedRandomSignMechanism",
    "Report",
    "Theorem5",
    "clip_elementwise",
    "clip_l1",
    "clip_l2",
    "default_d_hat",
    "gp_noise_init",
    "gp_noise_query",
    "gp_noise_reset",
]
