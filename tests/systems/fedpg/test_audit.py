"""`privrl audit fedpg`: the end-to-end canary audit of a FedPG-Cen agent keeps the claim and
sees the canary (20-step episodes keep it fast; the agent-side code is the run's own).

At confidence 1 − 1e-6 a correct pipeline exceeds its claim with probability ≤ 1e-6 (the
held-out bound is valid whatever threshold was chosen); the seed is fixed.
"""

from __future__ import annotations

import json

import pytest

from privrl.main import main


def test_audit_command_refuses_bad_options(tmp_path, capsys):
    for args, flag in [(["--epsilon-per-report", "0"], "--epsilon-per-report"),
                       (["--epsilon-per-report", "inf"], "--epsilon-per-report"),
                       (["--epsilon", "2"], "--epsilon"),  # laplace audits one release
                       (["--mechanism", "gaussian", "--epsilon", "1e-9"], "--epsilon"),
                       (["--mechanism", "gaussian", "--epsilon-per-report", "1"],
                        "--epsilon-per-report"),
                       (["--samples", "3"], "--samples"), (["--confidence", "1"],
                                                           "--confidence"),
                       (["--clip", "-1"], "--clip"), (["--mechanism", "none"], "--mechanism"),
                       (["--algorithm", "dec", "--robust", "median"], "--robust")]:
        assert main(["audit", "fedpg", *args, "--out", str(tmp_path / "r"),
                     "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "error" in err and flag in err, err
    assert not (tmp_path / "r").exists()


def test_the_canary_reaches_a_dec_nodes_report():
    """World 1's report is the canary's release, world 0's the agent's own, on the same key,
    for a Dec node too: its update runs through the round object, which once kept the original
    system, so Dec's audited report never held the canary (Cen's is checked end to end
    below)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from privrl.systems.fedpg.algorithm import FedPGConfig
    from privrl.systems.fedpg.audit import CanaryFedPGAgent

    cfg = FedPGConfig(algorithm="dec", mechanism="laplace", epsilon_per_report=1.0, clip=1.0,
                      agents=3, hidden=(4,), batch_min=2, batch_max=3, minibatch=2,
                      max_episode_steps=20).resolved()
    agent, key = CanaryFedPGAgent(cfg, jax.random.key(0)), jax.random.key(5)
    privatize = jax.jit(agent.privatize)  # one program (as the audit runs it), not op by op
    world = [np.asarray(privatize(key, jnp.array([c]))) for c in (0.0, 1.0)]
    assert not np.array_equal(*world)
    np.testing.assert_array_equal(world[0], privatize(key, jnp.array([0.0])))


@pytest.mark.slow  # compiles one agent's episodes and gradient (~10 s)
def test_end_to_end_audit_keeps_the_claim_and_sees_the_canary(tmp_path, monkeypatch):
    import privrl.systems.fedpg.audit as audit

    # 20-step episodes and B_t of 2 or 3 (not 12..20): the same code path, far less to run
    # (2,000 releases a world); the canary still moves the report by about half the
    # sensitivity, whatever the number of episodes behind the agent's own μ (ε lower ≈ 1.7)
    original = audit.CanaryFedPGAgent.__init__

    def short(self, config, key):
        from dataclasses import replace

        original(self, replace(config, max_episode_steps=20, batch_min=2, batch_max=3), key)

    monkeypatch.setattr(audit.CanaryFedPGAgent, "__init__", short)
    assert main(["audit", "fedpg", "--algorithm", "cen", "--mechanism", "laplace",
                 "--epsilon-per-report", "5", "--samples", "2000", "--confidence", "0.999999",
                 "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    (res,) = json.loads((tmp_path / "r" / "audit.json").read_text())["results"]
    assert res["epsilon_claimed"] == 5.0
    # the canary moves the report by about half the sensitivity: the bound sees it
    assert 0.5 < res["epsilon_lower"] <= res["epsilon_claimed"], res
    assert (tmp_path / "r" / "plots" / "audit.png").is_file()


@pytest.mark.parametrize("rule", ["fedpg-br", "median"])
def test_audit_under_a_robust_rule_keeps_the_claim_and_sees_the_canary(rule):
    """The attacker sees the server's μ_t under the rule, over K = 3 agents' reports (the
    canary one of them): the rule only post-processes reports, so one report's claim still
    holds, and the canary still moves μ_t (fedpg-br keeps every report here: its threshold is
    widened by Laplace's noise radius; the median of three moves with the canary's report)."""
    from privrl.systems.fedpg.algorithm import FedPGConfig
    from privrl.systems.fedpg.audit import audit_fedpg

    cfg = FedPGConfig(mechanism="laplace", epsilon_per_report=5.0, clip=1.0, agents=3, robust=rule,
                      hidden=(4,), batch_min=2, batch_max=3, max_episode_steps=20)
    (res,) = audit_fedpg(cfg, [5.0], samples=2000, confidence=0.999999)
    assert "robust " + rule in res.mechanism
    assert 0.2 < res.epsilon_lower <= res.epsilon_claimed, res
