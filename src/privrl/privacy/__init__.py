"""Privacy core: mechanisms that turn raw agent data into `Report`s, and the ledger."""

from privrl.privacy.accounting import (
    Accountant,
    CalibrationError,
    PrivacyEvent,
    calibrate_noise_multiplier,
    gaussian_epsilon,
)
from privrl.privacy.clipping import clip_elementwise, clip_l1, clip_l2
from privrl.privacy.distributed import (
    DistributedGaussianMechanism,
    RoundBudget,
    Share,
    secure_aggregate,
)
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
from privrl.privacy.plan import PlanError, PrivacyPlan, PrivacyRequest, plan_gaussian, plan_pure
from privrl.privacy.report import Guarantee, Report

__all__ = [
    "Accountant",
    "BoxGaussianMechanism",
    "BudgetExceededError",
    "CalibrationError",
    "DistributedGaussianMechanism",
    "GPNoiseFunction",
    "GPNoiseState",
    "GaussianMechanism",
    "GaussianSumMechanism",
    "Guarantee",
    "IdentityMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "PlanError",
    "PrivacyEvent",
    "PrivacyLedger",
    "PrivacyPlan",
    "PrivacyRequest",
    "ProjectedRandomSignMechanism",
    "Report",
    "RoundBudget",
    "Share",
    "Theorem5",
    "UnboundedGaussianNoise",
    "calibrate_noise_multiplier",
    "clip_elementwise",
    "clip_l1",
    "clip_l2",
    "default_d_hat",
    "gaussian_epsilon",
    "gp_noise_init",
    "gp_noise_query",
    "gp_noise_reset",
    "plan_gaussian",
    "plan_pure",
    "secure_aggregate",
]
