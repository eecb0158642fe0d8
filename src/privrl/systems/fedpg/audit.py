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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import jax
import jax.numpy as jnp
from jax import Array

from privrl.audit.canary import CanaryAgentBase
from privrl.audit.mechanism import AuditResult, audit_mechanism, check_audit_settings
from privrl.config import ConfigError, positive
from privrl.privacy.mechanisms import PerTrialMechanism
from privrl.systems.fedpg.algorithm import FedPGConfig, settings_algorithm

__all__ = ["CanaryFedPGAgent", "audit_fedpg"]


class CanaryFedPGAgent(CanaryAgentBase):
    """`privatize(key, [c])`: one FedPG agent's first report; c = 1 makes it the canary."""

    def __init__(self, config: FedPGConfig, theta_key: Array) -> None:
        if config.mechanism == "none":
            raise ConfigError("mechanism", "the non-private run claims no ε; nothing to audit")
        system = settings_algorithm([replace(config, trials=1)])  # a local run's release path
        self.setting = (jax.tree_util.tree_map(lambda a: jnp.asarray(a[0]),
                                               system.setting_data([0]))
                        if isinstance(system.mechanism, PerTrialMechanism) else None)
        super().__init__(system, theta_key,
                         f"fedpg-{system.config.algorithm} {config.mechanism} canary agent")

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
        ep = system.sample(self.theta[None], env, live, k_ep)
        mu = system.gradients(self.theta[None], ep)[0]
        return system.release(self.setting, k_mech, mu).value


def audit_fedpg(config: FedPGConfig, epsilons: Sequence[float], *, seed: int = 0,
                samples: int = 20_000, confidence: float = 0.95,
                progress: Callable[[int, int], None] | None = None) -> list[AuditResult]:
    """One end-to-end audit per ε (`config.epsilon` set to each: Laplace's per-release ε, or
    Gaussian's per-agent budget over the run, for which σ is calibrated)."""
    check_audit_settings(samples, confidence)
    agents = []
    keys = jax.random.split(jax.random.key(seed), 2 * len(epsilons))
    for i, e in enumerate(epsilons):  # every setting validated before any draw
        positive("epsilons", e)
        agents.append(CanaryFedPGAgent(replace(config, epsilon=float(e),
                                               noise_multiplier=None), keys[2 * i]))
    results = []
    for i, agent in enumerate(agents):
        results.append(audit_mechanism(agent, key=keys[2 * i + 1], samples=samples,
                                       confidence=confidence,
                                       pair=(jnp.zeros(1), jnp.ones(1)),
                                       statistic=agent.statistic, chunk=250))
        if progress is not None:
            progress(i + 1, len(agents))
    return results
