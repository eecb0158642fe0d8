"""`privrl audit pgc-a3c` audits the release a local run makes: the canary agent (`lone_agent`)
and `run_pgc_a3c` reach the same family release function with the same parameters, and a
broken family patched into that function is refuted by the end-to-end audit (short 20-step
episodes and a small network keep the tests fast; the code path is the run's).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.privacy import mechanisms
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
from privrl.systems.pgc_a3c.audit import CanaryAgent, audit_pgc_a3c
from privrl.systems.pgc_a3c.local import run_pgc_a3c

SMALL = {"max_episode_steps": 20, "hidden": 4, "parallel_agents": 3, "submissions": 6}


FAMILIES = ("identity_release", "laplace_release", "prs_release")


@pytest.mark.parametrize("mechanism", ["laplace", "prs", "none"])
def test_the_audit_and_a_local_run_release_through_the_same_functions(mechanism, spy_release):
    """The same family functions (a run's program computes none, laplace and PRS and selects
    the setting's), called with the same numbers."""
    cfg = PGCA3CConfig.from_preset("tuned", mechanism=mechanism, epsilon=4.0, **SMALL)
    calls = spy_release(mechanisms, *FAMILIES)
    run_pgc_a3c(cfg)
    run = set(calls)
    assert {c[0] for c in run} == set(FAMILIES)
    calls.clear()
    agent = CanaryAgent(cfg.resolved(), jax.random.key(0))
    draw = jax.jit(jax.vmap(agent.privatize, (0, None)))
    jax.block_until_ready(draw(jax.random.split(jax.random.key(1), 4), jnp.ones(1)))
    assert calls and set(calls) == run
    assert agent.guarantee.epsilon == (4.0 if mechanism != "none" else np.inf)


@pytest.mark.slow  # ~20 s: the agent's episode and gradient compiled twice
def test_a_broken_laplace_release_is_refuted_end_to_end(spy_release):
    """Laplace noise 10× too small in the family function: the run uses it, and the canary
    audit (through the run's path) refutes the claim; the honest one is kept on the same
    draws."""
    cfg = PGCA3CConfig.from_preset("paper", mechanism="laplace", epsilon=1.0,
                                   max_episode_steps=20)
    (honest,) = audit_pgc_a3c(cfg, [1.0], samples=4000, confidence=1 - 1e-6)
    assert not honest.violated, honest
    calls = spy_release(mechanisms, "laplace_release",
                        change=lambda p: p._replace(scale=p.scale * 0.1))
    (broken,) = audit_pgc_a3c(cfg, [1.0], samples=4000, confidence=1 - 1e-6)
    assert calls and broken.epsilon_claimed == 1.0
    assert broken.violated, broken
