"""The value sets of the kernel's options, each written once.

The library validates a config field against its set (`config.one_of`), and the command line
derives its choices from the same tuple (`privrl.cli.value_enum`). This module imports nothing,
so the command line can read it before JAX starts.
"""

from __future__ import annotations

NOISE_MODES = ("seeded", "secret")  # where mechanism noise keys come from (privacy.noise)
ACCOUNTANTS = ("pld", "rdp")  # how Gaussian releases compose (privacy.accounting)
DEFAULT_ACCOUNTANT = "pld"
COMPOSITIONS = ("basic", "optimal")  # how a ledger composes pure ε-LDP reports (privacy.ledger)
LOG_STDS = ("state", "parameter")  # what a privrl network's log-std depends on (nets.heads)
# Text2Action's corpora (paper 002): file stem -> the paper's name (envs.text2action).
TEXT2ACTION_CORPORA = {"win2k": "WHS", "cooking": "CT", "wikihow": "WHG"}
TEXT_HEAD_ACTIVATIONS = ("relu", "leaky_relu")  # the shared text MLP's (nets.text)
TOPOLOGIES = ("ring", "exponential", "random")  # directed gossip graphs (federation.topology)
# The mechanisms `privrl audit mechanism` builds (audit.sweep.build_mechanism).
AUDIT_MECHANISMS = ("laplace", "prs", "privunit", "privunitg", "projunit", "privunitg-seed",
                    "gaussian", "box-gaussian", "gaussian-sum", "functional", "broken-laplace")

# Which `privrl run` command takes which action space (every one of these takes --env: a gymnax
# or Gymnasium id, or your callable); the others (dp-qlearning, fedrl) take no --env. The --env
# help is generated from it, docs/environments.md and README.md state it, and
# tests/test_capabilities.py checks all of them against each other and against the learners.
ACTION_SPACES: dict[str, tuple[str, ...]] = {
    "pgc-a3c": ("discrete", "continuous"),
    "fedpg-cen": ("discrete", "continuous"),
    "fedpg-dec": ("discrete", "continuous"),
    "dp-reinforce": ("discrete", "continuous"),
    "ldp-reinforce": ("discrete", "continuous"),
    "dp-dqn": ("discrete",),
    "ldp-dqn": ("discrete",),
}
CONTINUOUS_COMMANDS = tuple(c for c, spaces in ACTION_SPACES.items() if "continuous" in spaces)
