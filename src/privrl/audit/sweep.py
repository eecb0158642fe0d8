"""Audited vs claimed ε over a range of claims, for one built-in mechanism: the table and plot
that `privrl audit mechanism` writes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
from scipy.optimize import brentq

from privrl.audit.mechanism import AuditResult, audit_mechanism
from privrl.choices import AUDIT_MECHANISMS as MECHANISMS
from privrl.config import ConfigError, positive
from privrl.privacy.accounting import calibrate_noise_multiplier, gaussian_epsilon

__all__ = ["MECHANISMS", "build_mechanism", "plot_audits", "plot_sweep", "run_audit_sweep",
           "write_sweep"]



def _analytic_z(epsilon: float, delta: float) -> float:
    """The noise multiplier whose single Gaussian release has exactly ε at δ (analytic)."""
    return float(math.exp(brentq(lambda lz: gaussian_epsilon(math.exp(lz), delta) - epsilon,
                                 math.log(1e-3), math.log(1e4), xtol=1e-10)))


def build_mechanism(name: str, epsilon: float, delta: float = 1e-5,
                    sampling_probability: float = 1.0) -> Any:
    """The named mechanism calibrated to claim `epsilon` for one release (clip 1); a user's
    `module:callable` is asked for (ε, δ) on inputs of length 1 (privrl.privacy.user)."""
    from privrl.audit.broken import HalfNoiseLaplace
    from privrl.audit.functional import FunctionalNoiseRelease
    from privrl.privacy import mechanisms as m
    from privrl.privacy.user import MechanismRequest, is_user_mechanism, user_mechanism

    positive("epsilons", epsilon)
    if is_user_mechanism(name):
        return user_mechanism(name, MechanismRequest(epsilon, delta, 1.0, 1))
    if name == "laplace":
        return m.LaplaceMechanism(epsilon, 1.0)
    if name == "broken-laplace":
        return HalfNoiseLaplace(epsilon, 1.0)
    if name == "prs":
        return m.ProjectedRandomSignMechanism(epsilon, 1.0)
    if name in ("privunit", "privunitg"):
        from privrl.privacy.ldp_vector import PrivUnitGMechanism, PrivUnitMechanism

        cls = PrivUnitMechanism if name == "privunit" else PrivUnitGMechanism
        return cls(epsilon, 1.0)
    if name in ("projunit", "privunitg-seed"):
        from privrl.privacy.ldp_compact import compact_mechanism

        return compact_mechanism(name, epsilon, 1.0)
    if name == "gaussian":
        return m.GaussianMechanism(2.0 * _analytic_z(epsilon, delta), 1.0, delta)
    if name == "box-gaussian":
        return m.BoxGaussianMechanism((0.0, 0.0), (1.0, 1.0), _analytic_z(epsilon, delta), delta)
    if name == "gaussian-sum":
        if not 0 < sampling_probability <= 1:
            raise ConfigError("sampling_probability", f"must be in (0, 1], got "
                                                      f"{sampling_probability}")
        z = calibrate_noise_multiplier(epsilon, delta, 1, sampling_probability)
        return m.GaussianSumMechanism(z, 1.0, sampling_probability, delta)
    if name == "functional":
        probe = FunctionalNoiseRelease(sigma=1.0, delta=delta)
        return FunctionalNoiseRelease(sigma=_analytic_z(epsilon, delta) * probe._worst[0],
                                      delta=delta)
    raise ConfigError("mechanism", f"unknown mechanism {name!r}; one of {', '.join(MECHANISMS)}")


def run_audit_sweep(name: str, epsilons: Sequence[float], *, seed: int = 0,
                    samples: int = 1_000_000, confidence: float = 0.95, delta: float = 1e-5,
                    sampling_probability: float = 1.0,
                    progress: Callable[[int, int], None] | None = None) -> list[AuditResult]:
    """One audit per claimed ε (validated first, before any draw)."""
    if not epsilons:
        raise ConfigError("epsilons", "give at least one ε")
    mechs = [build_mechanism(name, e, delta, sampling_probability) for e in epsilons]
    keys = jax.random.split(jax.random.key(seed), len(mechs))
    results = []
    for i, (mech, key) in enumerate(zip(mechs, keys, strict=True)):
        results.append(audit_mechanism(mech, key=key, samples=samples, confidence=confidence))
        if progress is not None:
            progress(i + 1, len(mechs))
    return results


def _markdown(results: list[AuditResult], notes: Sequence[str] = ()) -> str:
    conf = results[0].confidence
    lines = [f"| mechanism | claimed ε | δ | audited lower bound ({conf:.0%}) | refuted |",
             "|---|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r.mechanism} | {r.epsilon_claimed:.3f} | {r.delta:g} | "
                     f"{r.epsilon_lower:.3f} | {'YES' if r.violated else 'no'} |")
    return "\n".join(lines + [f"\n{n}" for n in notes]) + "\n"


def write_sweep(path: Path, results: list[AuditResult], settings: dict[str, Any]) -> None:
    """audit.json, audit.csv, audit.md and plots/audit.png into the (new) run directory."""
    from privrl.output import versions, write_json

    write_json(path / "audit.json", {"settings": settings, "versions": versions(),
                                     "results": [r.to_dict() for r in results]})
    with (path / "audit.csv").open("w") as f:
        f.write("mechanism,epsilon_claimed,delta,epsilon_lower,confidence,samples,violated\n")
        for r in results:
            f.write(f"{r.mechanism},{r.epsilon_claimed:.6g},{r.delta:g},{r.epsilon_lower:.6g},"
                    f"{r.confidence:g},{r.samples},{int(r.violated)}\n")
    (path / "audit.md").write_text(_markdown(results, settings.get("claim_notes", ())))
    plot_sweep(path / "plots" / "audit.png", results)


def plot_sweep(path: Path, results: list[AuditResult]) -> None:
    """Audited lower bound vs claimed ε for one mechanism's sweep."""
    r0 = results[0]
    plot_audits(path, {r0.mechanism: ([r.epsilon_claimed for r in results],
                                      [r.epsilon_lower for r in results])},
                f"{r0.mechanism}, {r0.samples:,} draws per input", r0.confidence)


def plot_audits(path: Path, series: dict[str, tuple[Sequence[float], Sequence[float]]],
                title: str, confidence: float) -> None:
    """label -> (claimed ε's, audited lower bounds): one line each beside the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    hi = max(max(max(c), max(lo)) for c, lo in series.values()) * 1.1
    ax.plot([0, hi], [0, hi], "k--", lw=0.8, label="audited = claimed")
    for label, (claimed, lower) in series.items():
        ax.plot(claimed, lower, "o-", ms=4, lw=1.2, label=label)
    ax.set_xlabel("claimed ε (one release)")
    ax.set_ylabel(f"audited ε lower bound ({confidence:.0%} confidence)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
