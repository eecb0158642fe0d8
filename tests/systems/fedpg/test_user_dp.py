"""FedPG-Cen with user-level DP: distributed Gaussian noise, secure sum, Poisson sampling."""

import json
import math

import dp_accounting
import pytest
from dp_accounting.rdp import RdpAccountant

from privrl import main as cli
from privrl.config import ConfigError
from privrl.systems.fedpg.algorithm import FedPGConfig, participant_slots

DG = dict(mechanism="distributed-gaussian", clip=1.0, epsilon=2.0)
TINY = dict(hidden=(4,), batch_min=2, batch_max=3, minibatch=1, inner_steps=1,
            max_episode_steps=20, budget=12)


@pytest.mark.parametrize("overrides, field", [
    ({**DG, "sampling_rate": 0.0}, "sampling_rate"),
    ({**DG, "sampling_rate": 1.5}, "sampling_rate"),
    ({**DG, "sampling_rate": 0.05, "agents": 10}, "sampling_rate"),  # q·K < 1
    ({**DG, "min_honest": 11, "agents": 10}, "min_honest"),  # K too small for the shares
    ({**DG, "min_honest": 0}, "min_honest"),
    ({**DG, "agents": 1}, "agents"),
    ({**DG, "algorithm": "dec"}, "mechanism"),
    ({**DG, "secure_noise": True}, "secure_noise"),
    ({**DG, "epsilon_budget": 3.0}, "epsilon_budget"),
    ({"mechanism": "distributed-gaussian", "clip": 1.0}, "epsilon"),
    ({"mechanism": "gaussian", "epsilon": 1.0, "clip": 1.0, "sampling_rate": 0.5},
     "sampling_rate"),
    ({"min_honest": 5}, "min_honest"),
    ({**DG, "dp_rounds": 0}, "dp_rounds"),
    ({"mechanism": "gaussian", "epsilon": 1.0, "clip": 1.0, "dp_rounds": 5}, "dp_rounds"),
])
def test_bad_config_is_refused(overrides, field):
    with pytest.raises(ConfigError) as e:
        FedPGConfig(**overrides).validate()
    assert e.value.field == field


def test_unreachable_epsilon_is_refused_before_running():
    with pytest.raises(ConfigError) as e:
        FedPGConfig(**{**DG, "epsilon": 1e-9, "sampling_rate": 1.0}).resolved()
    assert e.value.field == "epsilon"


def test_default_sampling_and_calibration():
    """q defaults to 50/K; σ is calibrated for the most rounds (sensitivity C, not 2C): the
    run's worst case composes to the target, checked against dp_accounting directly."""
    cfg = FedPGConfig(**DG, agents=1000, budget=100, accountant="rdp").resolved()
    assert cfg.sampling_rate == 0.05
    rdp = RdpAccountant()
    rdp.compose(dp_accounting.PoissonSampledDpEvent(
        0.05, dp_accounting.GaussianDpEvent(cfg.noise_multiplier)), cfg.max_rounds())
    assert 2.0 * 0.999 < rdp.get_epsilon(1e-5) <= 2.0  # reached, and not over-noised
    assert FedPGConfig(**DG, agents=20).resolved().sampling_rate == 1.0
    assert participant_slots(1000, 0.05) == math.ceil(50 + 6 * math.sqrt(47.5)) + 1
    assert participant_slots(1000, 1.0) == 1000



def test_cli_run_writes_the_events_to_privacy_json(tmp_path, capsys):
    """A tiny end-to-end run: privacy.json lists the events (q, σ, count) and its ε
    recomputes from them with dp_accounting directly; every agent is charged every round.
    σ is calibrated for 2 rounds (--dp-rounds) while the episodes allow more: the
    accountant's budget ends the run after 2 rounds, not the episode budget."""
    out = tmp_path / "dg"
    args = ["run", "fedpg-cen", "--agents", "4", "--budget", "60", "--batch-min", "2",
            "--batch-max", "3", "--minibatch", "1", "--mechanism", "distributed-gaussian",
            "--epsilon", "3", "--sampling-rate", "0.5", "--min-honest", "3", "--seed", "1",
            "--accountant", "rdp", "--dp-rounds", "2",
            "--out", str(out), "--no-progress"]
    assert cli.main(args) == 0
    rec = json.loads((out / "privacy.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    (event,) = rec["accounting"]["events"]
    assert event["sampling"] == "poisson" and event["sampling_probability"] == 0.5
    rounds = summary["rounds"]
    assert event["count"] == rounds == 2
    assert summary["trials_ended_by_privacy_budget"] == 1
    rdp = RdpAccountant()  # (the PLD account is tested in tests/kernel/privacy)
    rdp.compose(dp_accounting.PoissonSampledDpEvent(
        0.5, dp_accounting.GaussianDpEvent(event["noise_multiplier"])), event["count"])
    assert rec["accounting"]["epsilon"] == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-12)
    assert rec["accounting"]["epsilon"] <= 3.0
    assert rec["ledger"]["reports"] == 4 * rounds
    assert rec["mechanism"]["params"]["min_honest"] == 3
    assert "zero-out" in rec["mechanism"]["neighbouring"]
    assert rec["trust_model"]["by_dropouts"][0]["epsilon"] == rec["accounting"]["epsilon"]
    assert "User-level central DP" in rec["statement"]
