"""privrl: privacy-preserving distributed and federated reinforcement learning.

The public Python API is the short list of names below, loaded on first use: importing
`privrl` (which every submodule does) stays free of JAX and of environment code, so that
aggregator-side code (`privrl.federation`) never pulls in agent-side code.

The privacy kernel
    Report, Guarantee          what leaves an agent, and what a mechanism promises about it
    Mechanism, LaplaceMechanism, ProjectedRandomSignMechanism, GaussianMechanism,
    PrivUnitMechanism, PrivUnitGMechanism
                               the only way to turn raw agent data into a Report
    DistributedGaussianMechanism, secure_aggregate
                               user-level DP with noise shared by the agents; only the
                               (simulated) secure sum reaches the server as a Report
    PrivacyLedger, BudgetExceededError
                               what each agent released, composed, refused past a budget
    Accountant                 (ε, δ) from Gaussian and subsampled events (dp-accounting)
    BufferedAggregator         the aggregator side: Reports in, parameters out
    audit_mechanism, AuditResult
                               an empirical lower bound on a mechanism's ε (docs/audit.md)
    ConfigError                an invalid configuration field (`.field` names it)

Your problem (docs/environments.md)
    Task, PrivateParam, make_task
                               an environment, its rewards and each agent's private dynamics

The systems (config dataclass, then the local runner that runs every trial of it)
    PGCA3CConfig, run_pgc_a3c              paper 000: locally private A3C
    DPQLearningConfig, run_dp_qlearning    paper 001: Q-learning with functional noise
    FedRLConfig, BaselineConfig, run_grid  paper 002: vertical FedRL on Grid-World
    TextConfig, run_cv                     paper 002: FedRL on Text2Action
    ReinforceConfig, DQNConfig, run_episodic
                                           paper 003: DP-SGD REINFORCE and DQN
    FedPGConfig, run_fedpg                 paper 004: FedPG-Cen and FedPG-Dec

A trained policy (docs/policies.md)
    load_policy, Policy        a run's saved policy (policy.npz): `act(obs, key=None)`
    evaluate_run               its returns on a task (what `privrl evaluate` reports)

Everything else is importable from its module (`privrl.systems.<name>.<module>`,
`privrl.privacy.<module>`, ...); docs/architecture.md maps them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_API = {
    "Report": "privrl.privacy.report",
    "Guarantee": "privrl.privacy.report",
    "Mechanism": "privrl.privacy.mechanisms",
    "LaplaceMechanism": "privrl.privacy.mechanisms",
    "ProjectedRandomSignMechanism": "privrl.privacy.mechanisms",
    "GaussianMechanism": "privrl.privacy.mechanisms",
    "PrivUnitMechanism": "privrl.privacy.ldp_vector",
    "PrivUnitGMechanism": "privrl.privacy.ldp_vector",
    "DistributedGaussianMechanism": "privrl.privacy.distributed",
    "secure_aggregate": "privrl.privacy.distributed",
    "Task": "privrl.envs.task",
    "PrivateParam": "privrl.envs.task",
    "make_task": "privrl.envs.task",
    "PrivacyLedger": "privrl.privacy.ledger",
    "BudgetExceededError": "privrl.privacy.ledger",
    "Accountant": "privrl.privacy.accounting",
    "BufferedAggregator": "privrl.federation.aggregator",
    "audit_mechanism": "privrl.audit.mechanism",
    "AuditResult": "privrl.audit.mechanism",
    "ConfigError": "privrl.config",
    "PGCA3CConfig": "privrl.systems.pgc_a3c.config",
    "run_pgc_a3c": "privrl.systems.pgc_a3c.local",
    "DPQLearningConfig": "privrl.systems.dp_qlearning.config",
    "run_dp_qlearning": "privrl.systems.dp_qlearning.local",
    "FedRLConfig": "privrl.systems.fedrl.config",
    "BaselineConfig": "privrl.systems.fedrl.config",
    "run_grid": "privrl.systems.fedrl.local",
    "TextConfig": "privrl.systems.fedrl_text.config",
    "run_cv": "privrl.systems.fedrl_text.local",
    "ReinforceConfig": "privrl.systems.dpsgd_rl.config",
    "DQNConfig": "privrl.systems.dpsgd_rl.config",
    "run_episodic": "privrl.systems.dpsgd_rl.local",
    "FedPGConfig": "privrl.systems.fedpg.config",
    "run_fedpg": "privrl.systems.fedpg.local",
    "load_policy": "privrl.policy",
    "Policy": "privrl.policy",
    "evaluate_run": "privrl.evaluation",
}
__all__ = sorted(_API)


# Systems that play their own saved networks (privrl.policy.register_player, on importing
# their package): imported before the API's policy functions are handed out.
_PLAYERS = ("privrl.systems.fedrl", "privrl.systems.fedrl_text")


def __getattr__(name: str) -> Any:
    if name in _API:
        if name in ("load_policy", "evaluate_run"):
            for package in _PLAYERS:
                import_module(package)
        value = getattr(import_module(_API[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'privrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
