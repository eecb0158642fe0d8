"""`privrl audit pgc-a3c`: the end-to-end canary audit keeps the claim and sees the canary
(short 20-step episodes keep the tests fast; the agent-side code path is the same).

At confidence 1 − 1e-6 a correct pipeline exceeds its claim with probability ≤ 1e-6 (the
held-out bound is valid whatever threshold was chosen); the seed is fixed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
from privrl.systems.pgc_a3c.audit import CanaryAgent, audit_pgc_a3c


@pytest.mark.slow  # ~15 s on the shared 2-core CPU: compiling the agent's episode and gradient
def test_canary_report_carries_the_clipped_canary():
    cfg = PGCA3CConfig.from_preset("paper", mechanism="laplace", epsilon=5.0,
                                 max_episode_steps=20).resolved()
    agent = CanaryAgent(cfg, jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 2000)
    draw = jax.jit(jax.vmap(agent.privatize, (0, None)))
    y0, y1 = np.asarray(draw(keys, jnp.zeros(1))), np.asarray(draw(keys, jnp.ones(1)))
    # The canary is clipped to L1 norm clip/2 = 0.005 on coordinate 0; Laplace noise of scale
    # clip/ε = 0.002 has sd 0.0028, so the mean over 2000 draws is within 6e-5·6 of 0.005.
    assert abs(y1[:, 0].mean() - cfg.clip / 2) < 4e-4
    assert abs(y0[:, 0].mean()) < 2e-3  # an ordinary agent's gradient, clipped, plus noise
    assert agent.guarantee.epsilon == 5.0


@pytest.mark.slow
def test_end_to_end_audit_keeps_the_claim():
    cfg = PGCA3CConfig.from_preset("paper", mechanism="laplace", epsilon=1.0, max_episode_steps=20)
    (r,) = audit_pgc_a3c(cfg, [5.0], samples=4000, confidence=1 - 1e-6)
    assert r.epsilon_claimed == 5.0
    assert 0.0 < r.epsilon_lower <= r.epsilon_claimed, r


def test_audit_command_refuses_bad_options(tmp_path, capsys):
    from privrl.main import main

    for args, flag in [(["--mechanism", "none"], "--mechanism"), (["--epsilon", "0"],
                       "--epsilon"), (["--samples", "3"], "--samples")]:
        assert main(["audit", "pgc-a3c", *args, "--out", str(tmp_path / "r"),
                     "--no-progress"]) == 2
        assert f"error: {flag}:" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_adaptive_clip_bit_is_named_beside_the_audited_claim(tmp_path):
    """The canary tests a report's gradient release; with adaptive_clip the report also
    carries the clip bit's ε, which the audit's record and table must state (issue 51: any ε
    a lever spends appears in the audit)."""
    from privrl.audit.mechanism import AuditResult
    from privrl.audit.sweep import write_sweep
    from privrl.systems.pgc_a3c.audit import PGCA3CAudit

    audit = PGCA3CAudit(preset="adaptive", epsilons=(5.0,))
    eps_update, eps_bit = audit.config(5.0).resolved().release_epsilons()
    assert eps_bit is not None and eps_update + eps_bit == pytest.approx(5.0)
    (note,) = audit.claim_notes()
    assert f"gradient's {eps_update:.4g}" in note and f"clip bit, {eps_bit:.4g}" in note
    assert PGCA3CAudit(preset="tuned", epsilons=(5.0,)).claim_notes() == []
    result = AuditResult("pgc-a3c laplace canary agent", 1.0, eps_update, 0.0, 0.95, 100,
                         "test", 0.0, "above", 0, 1, 2)
    write_sweep(tmp_path, [result], {"claim_notes": [note]})
    assert note in (tmp_path / "audit.md").read_text()
