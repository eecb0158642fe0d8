"""End-to-end audit of FedPG: a canary agent, and an attacker who sees only its report.

The agent runs a local run's agent-side code (`settings_algorithm`: the mechanism's release
with the setting as data, as `privrl run fedpg-*` releases) for one round from the public
initial θ: in
FedPG-Cen it plays B_t episodes in its private CartPole and sends its gradient estimate μ
through the mechanism (`FedPG.sample`, `FedPG.gradients`); in FedPG-Dec it is a node running
`FedPG.dec_node_update` (episodes, its own μ, N_t SCSG steps) and releasing its update Δ. In
world 1 the agent is a canary: what it sends is replaced by 2·clip along a public direction u,
beyond any clip; in world 0 it is its own vector. The attacker (the server, or a peer that
receives the report) knows θ, u and the mechanism and thresholds ⟨report, u⟩;
`privrl.audit.audit_mechanism` chooses the threshold on held-out draws and bounds ε with
Clopper–Pearson. The claim audited is one report's guarantee (Laplace: ε per release; Gaussian:
the per-release (ε, δ) of the calibrated σ); composition over rounds is the accountant's job.

Under a robust rule (`robust`, FedPG-Cen): all K agents play the round (the canary is agent 0,
the other K − 1 honest agents play their own private CartPole), release through the mechanism,
and the server's rule (`privrl.federation.robust.robust_mean`, FedPG-BR's filter at its first
round's thresholds) turns the K reports into μ_t; the attacker sees μ_t. The filter only reads
reports, so the claim audited is unchanged: one report's ε bounds what μ_t reveals.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from privrl.audit.canary import CanaryAgentBase
from privrl.audit.config import EPSILONS, Progress, SampledAudit
from privrl.audit.mechanism import AuditResult, audit_mechanism, check_audit_settings
from privrl.config import ConfigError, fail, field_flag, option, positive
from privrl.federation.robust import robust_mean
from privrl.systems.fedpg.algorithm import FedPGConfig, settings_algorithm
from privrl.systems.fedpg.byzantine import filter_radii
from privrl.systems.fedpg.choices import ALGORITHMS, ROBUST

__all__ = ["CanaryFedPGAgent", "audit_fedpg"]


class CanaryFedPGAgent(CanaryAgentBase):
    """`privatize(key, [c])`: one FedPG agent's first report; c = 1 makes it the canary."""

    def __init__(self, config: FedPGConfig, theta_key: Array) -> None:
        if config.mechanism == "none":
            raise ConfigError("mechanism", "the non-private run claims no ε; nothing to audit")
        system = settings_algorithm([replace(config, trials=1)])  # a local run's release path
        self.setting = (jax.tree_util.tree_map(lambda a: jnp.asarray(a[0]),
                                               system.setting_data([0]))
                        if system.setting_mechanisms is not None else None)
        rule = "" if config.robust == "none" else f" under robust {config.robust}"
        super().__init__(system, theta_key,
                         f"fedpg-{system.config.algorithm} {config.mechanism} canary agent{rule}")

    def swapped(self, on: Array) -> Any:
        """The base swap (`release`'s input), reached by Dec's node update too: Dec's round
        object calls its own algorithm's `release`, so the copy gets a round of its own."""
        system = super().swapped(on)
        variant = copy.copy(system.variant)
        variant.algo = system
        system.variant = variant
        return system

    def privatize(self, key: Array, x: Array) -> Array:
        system = self.swapped(x[0])
        cfg = system.config
        k_env, k_agent = jax.random.split(key)
        env = system.env_params_of(k_env, jnp.zeros((1,), jnp.int32))  # a fresh private env
        if cfg.algorithm == "dec":
            one = jax.tree_util.tree_map(lambda a: a[0], env)
            update = system.dec_node_update(self.theta, system.optimizer.init(self.theta), one,
                                            k_agent, jnp.bool_(True), setting=self.setting)
            return update.report.value
        k_b, k_ep, k_mech = jax.random.split(k_agent, 3)
        batch = jax.random.randint(k_b, (), cfg.batch_min, cfg.batch_max + 1)
        live = (jnp.arange(cfg.batch_max) < batch)[None]
        if cfg.robust != "none":
            return self.robust_mu(x[0], k_env, k_ep, k_mech, batch, live)
        ep = system.sample(self.theta[None], env, live, k_ep)
        mu = system.gradients(self.theta[None], ep)[0]
        return system.release(self.setting, k_mech, mu).value

    def robust_mu(self, on: Array, k_env: Array, k_ep: Array, k_mech: Array, batch: Array,
                  live: Array) -> Array:
        """The server's μ_t under the robust rule from K reports: agent 0 the canary (when
        `on`), agents 1..K−1 honest, each with its own private environment and key. The
        filter's σ scale is the first round's (the longest episode, as `FedPG.init`)."""
        cfg, k = self.system.config, self.system.config.agents
        env = self.system.env_params_of(k_env, jnp.arange(k))
        thetas = jnp.broadcast_to(self.theta, (k, self.system.dim))
        ep = self.system.sample(thetas, env, jnp.broadcast_to(live, (k, cfg.batch_max)), k_ep)
        mu_k = self.system.gradients(thetas, ep)
        lanes = on * (jnp.arange(k) == 0)  # only agent 0's report can carry the canary
        reports = jax.vmap(lambda c, key, m: self.swapped(c).release(self.setting, key, m))(
            lanes, jax.random.split(k_mech, k), mu_k)
        radii = (filter_radii(cfg, self.system.dim, batch, jnp.float32(cfg.max_episode_steps))
                 if cfg.robust == "fedpg-br" else ())
        return robust_mean(reports, cfg.robust, *radii, alpha=cfg.byzantine_alpha)[0]


def audit_fedpg(config: FedPGConfig, epsilons: Sequence[float], *, seed: int = 0,
                samples: int = 20_000, confidence: float = 0.95,
                progress: Callable[[int, int], None] | None = None) -> list[AuditResult]:
    """One end-to-end audit per ε (a pure mechanism's `epsilon_per_report`, one release's ε;
    or Gaussian's `epsilon`, the per-agent total over the run, for which σ is calibrated); with
    `config.robust` the attacker sees the robust rule's μ_t over K agents' reports."""
    check_audit_settings(samples, confidence)
    agents = []
    keys = jax.random.split(jax.random.key(seed), 2 * len(epsilons))
    field = "epsilon_per_report" if config.pure_mechanism else "epsilon"
    for i, e in enumerate(epsilons):  # every setting validated before any draw
        positive("epsilons", e)
        request = {"epsilon": None, "epsilon_per_report": None, field: float(e)}
        agents.append(CanaryFedPGAgent(replace(config, noise_multiplier=None, **request),
                                       keys[2 * i]))
    results = []
    for i, agent in enumerate(agents):
        results.append(audit_mechanism(agent, key=keys[2 * i + 1], samples=samples,
                                       confidence=confidence,
                                       pair=(jnp.zeros(1), jnp.ones(1)),
                                       statistic=agent.statistic, chunk=250))
        if progress is not None:
            progress(i + 1, len(agents))
    return results


@dataclass(frozen=True)
class FedPGAudit(SampledAudit):
    """`privrl audit fedpg`: `audit_fedpg` at each ε (one release's for laplace or a user's
    mechanism, each agent's total over the run for gaussian)."""

    algorithm: str = option("cen", choices=ALGORITHMS, help="cen: the agent sends its gradient "
                            "estimate to the server; dec: a node releases its update to its "
                            "peers.")
    mechanism: str = option(
        "laplace", choices=("laplace", "gaussian"), user_callable=True,
        help="laplace (audits --epsilon-per-report, one release's ε), gaussian (audits one "
        "release's (ε, δ) when σ is calibrated to each agent's total --epsilon over the run), "
        "or your own module:callable (audits --epsilon-per-report, as it declares).")
    epsilon: tuple[float, ...] | None = option(
        None, help="gaussian: each agent's total ε over the run, values to audit "
        "(comma-separated). Default 0.5,1,2,5,10.")
    epsilon_per_report: tuple[float, ...] | None = option(
        None, help="laplace: the ε of one release, values to audit (comma-separated). Default "
        "0.5,1,2,5,10.")
    clip: float = option(1.0, help="Clip C of the mechanism.")
    delta: float = option(1e-5, help="gaussian: δ of the audited (ε, δ).")
    budget: int = option(5000, flag="--episodes", help="Episodes each agent samples over the "
                                                       "run (FedPG-BR's: 5000).")
    robust: str = option(
        "none", choices=ROBUST, help="cen: the server's robust rule (fedpg-br, median, "
        "trimmed-mean); the attacker then sees its μ_t over all K agents' reports (the canary "
        "is one of them), to confirm the rule is post-processing. Default none: the attacker "
        "sees the one report.")

    @property
    def audited(self) -> str:
        """The field that gives the ε audited: gaussian's total, or one release's."""
        return "epsilon" if self.mechanism == "gaussian" else "epsilon_per_report"

    @property
    def epsilons(self) -> tuple[float, ...]:
        given = getattr(self, self.audited)
        return EPSILONS if given is None else given

    def validate(self) -> None:
        flag = {f.name: field_flag(f) for f in fields(self)}
        wrong = ({"epsilon", "epsilon_per_report"} - {self.audited}).pop()
        if getattr(self, wrong) is not None:
            fail(wrong, f"the {self.mechanism} audit takes {flag[self.audited]}")
        config = self.config()
        for e in self.epsilons:  # every setting validated (σ calibrated) before any draw
            positive(self.audited, e)
            try:
                replace(config, epsilon=e).resolved()
            except ConfigError as err:
                field = self.audited if err.field == "epsilon" else err.field
                raise ConfigError(field, err.message) from err
        super().validate()

    def config(self) -> FedPGConfig:
        """The audited agent's config (its ε replaced by each audited one)."""
        return FedPGConfig.from_preset("paper", algorithm=self.algorithm,
                                       mechanism=self.mechanism, epsilon=1.0, clip=self.clip,
                                       delta=self.delta, budget=self.budget, robust=self.robust)

    def run(self, progress: Progress = None) -> list[AuditResult]:
        return audit_fedpg(self.config(), self.epsilons, seed=self.seed, samples=self.samples,
                           confidence=self.confidence, progress=progress)
