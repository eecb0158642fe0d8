"""Privacy core: mechanisms that turn raw agent data into `Report`s, and the ledger."""

from privrl.privacy.accounting import (
    Accountant,
    CalibrationError,
    PrivacyEvent,
    calibrate_noise_multiplier,
    gaussian_epsilon,
)
from privrl.privacy.clipping import clip_elementwise, clip_l1, clip_l2
from privrl.privacy.ledger import BudgetExceededError, PrivacyLedger
from privrl.privacy.mechanisms import (
    BoxGaussianMechanism,
    GaussianMechanism,
    GaussianSumMechanism,
    IdentityMechanism,
    LaplaceMechanism,
    Mechanism,
    ProjectedRandomSignMechanism,
    UnboundedGaussianNoise,
    default_d_hat,
)
from privrl.privacy.report import Guarantee, Report

__all__ = [
    "Accountant",
    "BoxGaussianMechanism",
    "BudgetExceededError",
    "CalibrationError",
    "GaussianMechanism",
    "GaussianSumMechanism",
    "Guarantee",
    "IdentityMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "PrivacyEvent",
    "PrivacyLedger",
    "ProjectedRandomSignMechanism",
    "Report",
    "UnboundedGaussianNoise",
    "calibrate_noise_multiplier",
    "clip_elementwise",
    "clip_l1",
    "clip_l2",
    "default_d_hat",
    "gaussian_epsilon",
]
