"""An audit's settings, declared once as config fields: `privrl audit` generates its options
from them (privrl.cli.config_command), as `privrl run` does from a run's config.

Each audit config validates itself before anything is drawn, records itself (audit.json's
settings) and runs its audit (`run(progress)`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from privrl.choices import AUDIT_MECHANISMS
from privrl.config import Config, fail, in_range, option

Progress = Callable[[int, int], None] | None
EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(frozen=True)
class AuditConfig(Config):
    """What every audit takes: the confidence of its lower bounds and its seed."""

    confidence: float = option(0.95, help="Confidence of each lower bound.")
    seed: int = option(0, help="Random seed (shared by all settings).")

    def validate(self) -> None:
        in_range("confidence", self.confidence, 0, 1, low_open=True, high_open=True)

    def record(self) -> dict[str, Any]:
        """audit.json's settings: every field and the ε audited (`epsilons`: a field or, where
        two fields give them, a property)."""
        return {**self.to_dict(), "epsilons": list(self.epsilons)}  # type: ignore[attr-defined]

    def run(self, progress: Progress = None) -> list[Any]:
        """The audits' results, one per ε (`progress(done, total)` after each)."""
        raise NotImplementedError

    def claim_notes(self) -> list[str]:
        """What the audited claim leaves out of the run's own ε (a lever's separate release in
        the same report, say): audit.json's `claim_notes`, printed under the table. An audit
        that tests a run's whole per-report ε has none."""
        return []


@dataclass(frozen=True)
class SampledAudit(AuditConfig):
    """An audit that draws reports in two neighbouring worlds."""

    samples: int = option(20_000, help="Reports per world (half choose the attack's threshold, "
                                       "half bound ε).")

    def validate(self) -> None:
        from privrl.audit.mechanism import check_audit_settings

        check_audit_settings(self.samples, self.confidence)


@dataclass(frozen=True)
class MechanismAudit(SampledAudit):
    """`privrl audit mechanism`: one mechanism at several claimed ε (privrl.audit.sweep)."""

    mechanism: str = option(
        "laplace", choices=AUDIT_MECHANISMS, user_callable=True,
        help="laplace, prs, privunit, privunitg (PrivUnit2 / PrivUnitG), projunit, "
        "privunitg-seed (ProjUnit, seed-compressed PrivUnitG), gaussian (local, L2 clip), "
        "box-gaussian (LDP states), gaussian-sum (DP-SGD's noisy sum, add/remove one example), "
        "functional (paper 001's GP noise at 4 fixed states), broken-laplace (a deliberately "
        "broken Laplace with half its noise, to show the audit refutes it), or your own "
        "module:callable (asked for each ε on inputs of length 1; docs/ldp-mechanisms.md).")
    epsilons: tuple[float, ...] = option(
        EPSILONS, flag="--epsilon", help="Claimed ε values (comma-separated); each mechanism "
        "is calibrated to claim each one for a single release.")
    samples: int = option(1_000_000, help="Draws per neighbouring input (half choose the "
                                          "test's threshold, half bound ε).")
    delta: float = option(1e-5, help="δ of the (ε, δ) mechanisms.")
    sampling_probability: float = option(
        1.0, help="gaussian-sum: Poisson sampling probability q (the audit samples the "
        "example).")

    def validate(self) -> None:
        from privrl.audit.sweep import build_mechanism

        super().validate()
        if not 0 < self.delta < 1:
            fail("delta", f"must be in (0, 1), got {self.delta}")
        for e in self.epsilons:  # every setting built (a user's mechanism imported) first
            build_mechanism(self.mechanism, e, self.delta, self.sampling_probability)

    def run(self, progress: Progress = None) -> list[Any]:
        from privrl.audit.sweep import run_audit_sweep

        return run_audit_sweep(self.mechanism, self.epsilons, seed=self.seed,
                               samples=self.samples, confidence=self.confidence,
                               delta=self.delta, sampling_probability=self.sampling_probability,
                               progress=progress)
