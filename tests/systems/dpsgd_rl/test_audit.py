"""`privrl audit dp-reinforce`: canaries in a real DP-REINFORCE run keep the claim when the
mechanism is right and refute it when the noise is too small (short 20-step episodes keep it
fast; the training step is the run's own).

The audits run at 95 % confidence: a correct run exceeds its claim with probability ≤ 5 %
(SNJ23's bound is valid whatever the scores), and the seed is fixed, so the outcome is
reproducible. Much higher confidence is out of reach here: the bound's δ term, 2·m·δ·α, alone
is ~1e-4 with m = 400 canaries at δ = 1e-5, so no claim could be refuted at 1 − 1e-6.
"""

from __future__ import annotations

import json
from dataclasses import replace

import jax
import numpy as np
import pytest

from privrl.audit.one_run import one_run_audit
from privrl.systems.dpsgd_rl.audit import audit_config, audit_dp_reinforce, canary_run
from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

CFG = ReinforceConfig.from_preset("paper", dp=True, episodes=10, max_episode_steps=20,
                                  target_epsilon=1.0)


def test_correct_run_keeps_the_claim_and_a_quiet_one_is_refuted():
    (ok,) = audit_dp_reinforce(CFG, [1.0], canaries=400, guesses=50, confidence=0.95)
    assert ok.epsilon_claimed == pytest.approx(1.0, abs=1e-3)  # σ calibrated to ε = 1
    assert ok.epsilon_lower <= ok.epsilon_claimed
    # The same run with a hundredth of the noise its guarantee claims.
    quiet = Reinforce(audit_config(CFG))
    sigma = quiet.config.noise_multiplier
    quiet.mechanism = replace(quiet.mechanism, noise_multiplier=sigma / 100)
    run = canary_run(quiet, 400, jax.random.key(0))
    assert run.scores.shape == run.included.shape == (400,)
    # An included canary adds C·u (C = 1) to its update's released sum; what else lands on u
    # (the episode's clipped gradient, the other canaries, noise σC/100 ≈ 0.04) is ~0.15 sd.
    assert abs(run.scores[run.included].mean() - 1.0) < 0.05
    assert abs(run.scores[~run.included].mean()) < 0.05
    res = one_run_audit(run.scores, run.included, guesses_in=50, guesses_out=50,
                        epsilon_claimed=run.epsilon_claimed, delta=CFG.delta,
                        confidence=0.95)
    assert res.correct == 100 and res.violated, res


def test_audit_refuses_what_it_cannot_audit():
    from privrl.config import ConfigError

    with pytest.raises(ConfigError, match="noise_multiplier"):
        audit_config(replace(CFG, target_epsilon=None, noise_multiplier=0.0))
    with pytest.raises(ConfigError, match="guesses"):
        audit_dp_reinforce(CFG, [1.0], canaries=10, guesses=6)
    with pytest.raises(ConfigError, match="epsilons"):
        audit_dp_reinforce(CFG, [1.0, np.inf], canaries=10)


def test_audit_command_writes_a_run_directory_and_refuses_bad_options(tmp_path, capsys):
    from privrl.main import main

    for args, flag in [(["--epsilon", "0"], "--epsilon"), (["--guesses", "30"], "--guesses"),
                       (["--canaries", "1"], "--canaries"), (["--confidence", "1"],
                                                             "--confidence")]:
        assert main(["audit", "dp-reinforce", "--canaries", "50", *args, "--out",
                     str(tmp_path / "r"), "--no-progress"]) == 2
        assert f"error: {flag}:" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    assert main(["audit", "dp-reinforce", "--epsilon", "2", "--episodes", "4", "--canaries",
                 "20", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    record = json.loads((tmp_path / "r" / "audit.json").read_text())
    (res,) = record["results"]
    assert res["samples"] == 20 and res["guesses"] == 4 and res["epsilon_claimed"] > 1.99
    assert (tmp_path / "r" / "plots" / "audit.png").is_file()
