"""End-to-end audit of PGC-A3C: a canary agent, and an attacker who sees only its report.

The agent runs the real agent-side code of a local run (`lone_agent`, `PGCA3C.agent_reports`:
one CartPole episode in its private environment from the public θ, the A3C gradient, the
mechanism's release with the setting as data, as `privrl run` releases). In world 1 the agent is
a canary: its gradient is replaced by 2·clip along a public direction u (beyond any clip); in
world 0 it is the agent's own gradient. The attacker knows θ, u and the mechanism, sees one
report and thresholds ⟨report, u⟩ (`privrl.audit.audit_mechanism` chooses the threshold on
held-out data and bounds ε with Clopper–Pearson). The claim audited is the report's own ε
(ε/T per report); gravity, episode and noise are fresh per draw, as for a new agent.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from privrl.audit.canary import CanaryAgentBase
from privrl.audit.config import EPSILONS, Progress, SampledAudit
from privrl.audit.mechanism import AuditResult, audit_mechanism
from privrl.config import fail, option, positive
from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig, lone_agent
from privrl.systems.pgc_a3c.choices import MECHANISMS
from privrl.systems.pgc_a3c.config import PRESETS

__all__ = ["CanaryAgent", "audit_pgc_a3c"]


class CanaryAgent(CanaryAgentBase):
    """`privatize(key, [c])`: one PGC-A3C agent's report; c = 1 makes it the canary. The agent
    is a local run's (`lone_agent`): its report goes through the release a run uses."""

    def __init__(self, config: PGCA3CConfig, theta_key: Array) -> None:
        system, self.setting = lone_agent(config)
        self.own_mechanism = system.settings[0].mechanism  # the setting's own mechanism and claim
        super().__init__(system, theta_key, f"pgc-a3c {system.config.mechanism} canary agent")

    @property
    def guarantee(self) -> Any:
        return self.own_mechanism.guarantee

    def swapped(self, on: Array) -> PGCA3C:
        """The agent whose gradient is the canary when `on` > 0 (its own otherwise): the swap
        happens before the mechanism, which is the run's, untouched."""
        system = copy.copy(self.system)
        grads = self.system.episode_grads
        system.episode_grads = lambda theta, traj: jnp.where(  # type: ignore[method-assign]
            on > 0, self.canary, grads(theta, traj))
        return system

    def privatize(self, key: Array, x: Array) -> Array:
        k_agent, k_env = jax.random.split(key)
        reports, _ = self.swapped(x[0]).agent_reports(
            self.theta, jnp.zeros((), jnp.int32), k_agent, k_env, jnp.zeros((1,), jnp.int32),
            jnp.ones((1,), bool), setting=self.setting)
        return reports.value[0]


def audit_pgc_a3c(config: PGCA3CConfig, epsilons: Sequence[float], *, seed: int = 0,
                  samples: int = 100_000, confidence: float = 0.95,
                  progress: Callable[[int, int], None] | None = None) -> list[AuditResult]:
    """One end-to-end audit per agent budget ε (T = config.submissions_per_agent)."""
    keys = jax.random.split(jax.random.key(seed), 2 * len(epsilons))
    configs = [replace(config, epsilon=float(e)).resolved() for e in epsilons]
    for c in configs:
        c.validate()
    results = []
    for i, cfg in enumerate(configs):
        agent = CanaryAgent(cfg, keys[2 * i])
        results.append(audit_mechanism(agent, key=keys[2 * i + 1], samples=samples,
                                       confidence=confidence,
                                       pair=(jnp.zeros(1), jnp.ones(1)),
                                       statistic=agent.statistic, chunk=20_000))
        if progress is not None:
            progress(i + 1, len(configs))
    return results


@dataclass(frozen=True)
class PGCA3CAudit(SampledAudit):
    """`privrl audit pgc-a3c`: `audit_pgc_a3c` at each agent budget ε."""

    mechanism: str = option("laplace", choices=MECHANISMS, user_callable=True,
                            help="The agents' mechanism: laplace, prs, privunit, privunitg, "
                            "projunit, privunitg-seed or your own module:callable.")
    epsilons: tuple[float, ...] = option(EPSILONS, flag="--epsilon", help="Agent budgets ε to "
                                         "audit (comma-separated; one report per agent).")
    preset: str = option("paper", choices=tuple(PRESETS), help="The run's preset whose "
                         "clip, network and levers the canary agent uses.")

    def validate(self) -> None:
        super().validate()
        if self.mechanism == "none":
            fail("mechanism", "the non-private baseline claims no ε; nothing to audit")
        for e in self.epsilons:
            positive("epsilons", e)
            self.config(e).resolved().validate()

    def config(self, epsilon: float = 1.0) -> PGCA3CConfig:
        """The audited run's config (its ε replaced by each audited one)."""
        return PGCA3CConfig.from_preset(self.preset, mechanism=self.mechanism, epsilon=epsilon)

    def claim_notes(self) -> list[str]:
        """With --adaptive-clip a report also carries the clip bit, its own release: the
        canary tests the gradient's, so the table's claim is that part of the report's ε."""
        notes = []
        for e in self.epsilons:
            cfg = self.config(e).resolved()
            eps_update, eps_bit = cfg.release_epsilons()
            if eps_bit is not None:
                notes.append(
                    f"ε = {e:g}: each report's ε {eps_update + eps_bit:.4g} is the gradient's "
                    f"{eps_update:.4g} (the claim audited above) plus adaptive_clip's clip bit, "
                    f"{eps_bit:.4g} (randomized response on whether the norm is within the "
                    "clip, released in the same report and charged by the ledger; not tested "
                    "by this canary).")
        return notes

    def run(self, progress: Progress = None) -> list[AuditResult]:
        return audit_pgc_a3c(self.config(), self.epsilons, seed=self.seed, samples=self.samples,
                             confidence=self.confidence, progress=progress)
