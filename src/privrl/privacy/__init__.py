"""Privacy core: mechanisms that turn raw agent data into `Report`s, and the ledger.

Its names are imported on first use (PEP 562), so that importing one light module of the
package (`privrl.privacy.plan`, which a config's validation reads) does not import JAX: a bad
command-line value is refused before JAX starts (issue 53).
"""

from __future__ import annotations

from privrl.lazy import lazy_names

# name -> the module of privrl.privacy that defines it
_WHERE = {
    **dict.fromkeys(("Accountant", "CalibrationError", "PrivacyEvent",
                     "calibrate_noise_multiplier", "gaussian_epsilon"), "accounting"),
    **dict.fromkeys(("clip_elementwise", "clip_l1", "clip_l2"), "clipping"),
    **dict.fromkeys(("DistributedGaussianMechanism", "RoundBudget", "Share",
                     "secure_aggregate"), "distributed"),
    **dict.fromkeys(("GPNoiseFunction", "GPNoiseState", "gp_noise_init", "gp_noise_query",
                     "gp_noise_reset"), "functional"),
    "Theorem5": "theorem5",
    **dict.fromkeys(("BudgetExceededError", "PrivacyLedger"), "ledger"),
    **dict.fromkeys(("BoxGaussianMechanism", "GaussianMechanism", "GaussianSumMechanism",
                     "IdentityMechanism", "LaplaceMechanism", "Mechanism",
                     "ProjectedRandomSignMechanism", "UnboundedGaussianNoise",
                     "default_d_hat"), "mechanisms"),
    **dict.fromkeys(("PlanError", "PrivacyPlan", "PrivacyRequest", "plan_gaussian",
                     "plan_pure"), "plan"),
    **dict.fromkeys(("Guarantee", "Report"), "report"),
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
