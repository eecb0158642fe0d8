"""`privrl audit fedpg` audits the release a local run makes: the canary agent (a local run's
`settings_algorithm`, the setting as data) and `run_fedpg` reach the same family release
functions with the same parameters, in FedPG-Cen and FedPG-Dec. A tiny network, short
episodes."""

from __future__ import annotations

import pytest

from privrl.privacy import mechanisms
from privrl.systems.fedpg.algorithm import FedPGConfig
from privrl.systems.fedpg.audit import audit_fedpg
from privrl.systems.fedpg.local import run_fedpg

TINY = dict(agents=2, hidden=(4,), batch_min=2, batch_max=3, minibatch=1, inner_steps=1,
            max_episode_steps=20, budget=12, clip=1.0)
FAMILIES = ("identity_release", "laplace_release", "gaussian_release")  # FedPG's programs'


@pytest.mark.parametrize(("algorithm", "mechanism"), [("cen", "laplace"), ("dec", "gaussian")])
def test_the_audit_and_a_local_run_release_through_the_same_functions(algorithm, mechanism,
                                                                      spy_release):
    calls = spy_release(mechanisms, *FAMILIES)
    field = "epsilon" if mechanism == "gaussian" else "epsilon_per_report"  # what it audits
    cfg = FedPGConfig(algorithm=algorithm, mechanism=mechanism, **{field: 3.0}, **TINY)
    run_fedpg(cfg.resolved())
    run = set(calls)
    assert {c[0] for c in run} == set(FAMILIES)
    calls.clear()
    (result,) = audit_fedpg(cfg, [3.0], samples=40, confidence=0.95)
    assert set(calls) == run
    assert result.epsilon_claimed > 0
