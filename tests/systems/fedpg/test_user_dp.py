"""FedPG-Cen with user-level DP: distributed Gaussian noise over a secure sum. The discrete
mechanism (distributed-gaussian, the deployment's, simulated exactly) and the continuous one
(distributed-gaussian-continuous: Poisson sampling, adaptive clipping)."""

import json
import math

import dp_accounting
import pytest
from dp_accounting.rdp import RdpAccountant

from privrl import main as cli
from privrl.config import ConfigError
from privrl.privacy.discrete_sum import DiscreteGaussianSum
from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig, participant_slots

DG = dict(mechanism="distributed-gaussian-continuous", clip=1.0, epsilon=2.0)
DD = dict(mechanism="distributed-gaussian", clip=1.0, epsilon=2.0)
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
    ({"mechanism": "distributed-gaussian-continuous", "clip": 1.0}, "epsilon"),
    # the discrete mechanism takes every agent in every round, and has no adaptive clip
    ({**DD, "sampling_rate": 0.5}, "sampling_rate"),
    ({**DD, "adaptive_clip": True}, "adaptive_clip"),
    ({**DD, "secure_noise": True}, "secure_noise"),
    ({**DD, "algorithm": "dec"}, "mechanism"),
    ({**DD, "min_honest": 11, "agents": 10}, "min_honest"),
    ({"mechanism": "gaussian", "epsilon": 1.0, "clip": 1.0, "sampling_rate": 0.5},
     "sampling_rate"),
    ({"min_honest": 5}, "min_honest"),
    ({**DG, "dp_rounds": 0}, "dp_rounds"),
    ({"mechanism": "gaussian", "epsilon": 1.0, "clip": 1.0, "dp_rounds": 5}, "dp_rounds"),
    # adaptive clipping: distributed-gaussian-continuous on fedpg-cen only, its own fields in range
    ({"mechanism": "gaussian", "epsilon": 1.0, "clip": 1.0, "adaptive_clip": True},
     "adaptive_clip"),
    ({**DG, "algorithm": "dec", "adaptive_clip": True}, "adaptive_clip"),
    ({**DG, "adaptive_clip": True, "clip_quantile": 0.0}, "clip_quantile"),
    ({**DG, "adaptive_clip": True, "clip_quantile": 1.0}, "clip_quantile"),
    ({**DG, "adaptive_clip": True, "clip_lr": 0.0}, "clip_lr"),
    ({**DG, "adaptive_clip": True, "clip_count_stddev": -1.0}, "clip_count_stddev"),
    ({**DG, "clip_quantile": 0.9}, "clip_quantile"),  # without adaptive_clip
    ({**DG, "clip_count_stddev": 3.0}, "clip_count_stddev"),
])
def test_bad_config_is_refused(overrides, field):
    with pytest.raises(ConfigError) as e:
        FedPGConfig(**overrides).validate()
    assert e.value.field == field


def test_adaptive_clip_needs_bit_noise_above_half_sigma():
    """σ = 5 given, σ_b = 2.5 = σ/2: z_Δ would be infinite, refused naming σ_b's field; the
    default σ_b is q·K/20 (here 50/20 = 2.5 again)."""
    base = dict(mechanism="distributed-gaussian-continuous", clip=1.0, noise_multiplier=5.0,
                adaptive_clip=True, agents=1000)
    for extra in ({"clip_count_stddev": 2.5}, {}):
        with pytest.raises(ConfigError) as e:
            FedPGConfig(**base, **extra).resolved()
        assert e.value.field == "clip_count_stddev"
    assert FedPGConfig(**{**base, "noise_multiplier": 4.9}).resolved().clip_count_stddev == 2.5


def test_unreachable_epsilon_is_refused_before_running():
    with pytest.raises(ConfigError) as e:
        FedPGConfig(**{**DG, "epsilon": 1e-9, "sampling_rate": 1.0}).resolved()
    assert e.value.field == "epsilon"
    # the discrete mechanism is calibrated with the update's length, by the algorithm
    with pytest.raises(ConfigError) as e:
        FedPG(FedPGConfig(**{**DD, "epsilon": 1e-9}, **TINY, agents=4))
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
    accountant's budget ends the run after 2 rounds, not the episode budget. q = 0.25, not
    0.5: RDP's fractional orders of the subsampled Gaussian cost less at the smaller q (the σ
    search 1.3 CPU-s, not 3.2; benchmarks/log/36-fedpg.md)."""
    out = tmp_path / "dg"
    args = ["run", "fedpg-cen", "--agents", "4", "--episodes", "60", "--batch-min", "2",
            "--batch-max", "3", "--minibatch", "1", "--mechanism",
            "distributed-gaussian-continuous", "--epsilon", "3", "--sampling-rate", "0.25",
            "--min-honest", "3", "--seed", "1",
            "--accountant", "rdp", "--dp-rounds", "2",
            "--out", str(out), "--no-progress"]
    assert cli.main(args) == 0
    rec = json.loads((out / "privacy.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    (event,) = rec["accounting"]["events"]
    assert event["sampling"] == "poisson" and event["sampling_probability"] == 0.25
    rounds = summary["rounds"]
    assert event["count"] == rounds == 2
    assert summary["trials_ended_by_privacy_budget"] == 1
    rdp = RdpAccountant()  # (the PLD account is tested in tests/kernel/privacy)
    rdp.compose(dp_accounting.PoissonSampledDpEvent(
        0.25, dp_accounting.GaussianDpEvent(event["noise_multiplier"])), event["count"])
    assert rec["accounting"]["epsilon"] == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-12)
    assert rec["accounting"]["epsilon"] <= 3.0
    assert rec["ledger"]["reports"] == 4 * rounds
    assert rec["mechanism"]["params"]["min_honest"] == 3
    # each agent's share: the 386-parameter update as float32
    assert rec["mechanism"]["upload_bytes_per_report"] == summary["upload_bytes_per_report"]
    assert summary["upload_bytes_per_report"] == 4 * 386
    assert "zero-out" in rec["mechanism"]["neighbouring"]
    assert rec["trust_model"]["by_dropouts"][0]["epsilon"] == rec["accounting"]["epsilon"]
    assert "over the whole run (central, user level" in rec["statement"]
    assert "adaptive_clip" not in rec and "adaptive" not in rec["statement"]
    # The heading states the whole run's ε (the accountant's), never one round's, beside the
    # unit "one agent's whole data"; privacy.json and the summary say the same line.
    assert rec["guarantee"]["epsilon"] == rec["accounting"]["epsilon"]
    assert rec["guarantee"]["unit"].startswith("one agent's whole data")
    assert summary["privacy"] == rec["headline"]
    assert rec["headline"].startswith(f"(ε = {rec['accounting']['epsilon']:.4g}, δ = 1e-05)-DP")
    one_round = f"{rec['epsilon_per_release']:.4g}"
    assert one_round not in rec["headline"].split("; per release")[0]
    printed = capsys.readouterr()
    assert one_round not in printed.err and "whole data" not in printed.err
    assert f"ε = {rec['accounting']['epsilon']:.4g}" in printed.out
    assert "final_clip" not in summary
    assert (out / "metrics.csv").read_text().splitlines()[0].endswith(",mean_return")


def test_adaptive_run_is_accounted_with_z_and_writes_its_clip(tmp_path):
    """A tiny adaptive run (σ = z = 3 given, so nothing is calibrated): the account is
    PoissonSampledDpEvent(q, GaussianDpEvent(z)) per round, recomputed with dp_accounting
    directly; z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2) from privacy.json's split; metrics.csv gains the
    clip, starting at C_0 = clip."""
    from dp_accounting.pld import PLDAccountant

    from privrl.privacy.accounting import PLD_DISCRETIZATION
    from privrl.privacy.distributed import joint_noise_multiplier
    from privrl.systems.fedpg import local as runner

    cfg = FedPGConfig(mechanism="distributed-gaussian-continuous", clip=1.0, noise_multiplier=3.0,
                      **TINY, agents=4, sampling_rate=0.5, adaptive_clip=True,
                      clip_count_stddev=2.0)
    run = runner.run_fedpg(cfg)
    rounds = run.rounds_run
    assert rounds >= 2 and run.clip.shape == (1, rounds)
    rec = runner.privacy_record(run)
    (event,) = rec["accounting"]["events"]
    z = 3.0
    assert event["noise_multiplier"] == z and event["count"] == rounds
    pld = PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    pld.compose(dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(z)),
                rounds)
    assert rec["accounting"]["epsilon"] == pytest.approx(pld.get_epsilon(1e-5), rel=1e-12)
    split = rec["adaptive_clip"]
    assert split["noise_multiplier_z"] == z and split["count_stddev_sigma_b"] == 2.0
    assert joint_noise_multiplier(split["update_noise_multiplier_z_delta"], 2.0) == \
        pytest.approx(z, rel=1e-12)
    assert (split["target_quantile_gamma"], split["clip_learning_rate_eta"]) == (0.5, 0.2)
    assert "post-processing" in split["post_processing"]
    assert "adaptive clipping" in rec["statement"]
    assert "Post-processing (no privacy cost): the server's optimizer steps and clip updates" \
        in rec["statement"]
    runner.write_metrics(tmp_path / "metrics.csv", run)
    rows = [r.split(",") for r in (tmp_path / "metrics.csv").read_text().splitlines()]
    assert rows[0][-1] == "clip" and float(rows[1][-1]) == 1.0
    # the second round used C_1 = C_0·exp(−0.2(b̄_0 − 0.5)), b̄_0 in a plausible range
    assert 1.0 * math.exp(-0.2 * 4) < float(rows[2][-1]) < 1.0 * math.exp(0.2 * 4)
    assert runner.summarize(run)["final_clip"] == [round(float(run.final_clip[0]), 4)]


def test_discrete_run_states_its_mechanisms_epsilon(tmp_path, capsys):
    """A tiny distributed-gaussian run (the deployment's discrete mechanism, simulated): every
    agent in every round, calibrated for 2 rounds (--dp-rounds), so its budget ends the run
    after 2; privacy.json's ε recomputes from its own numbers with the mechanism's zCDP
    bound, and the per-dropout rows count fewer honest shares."""
    out = tmp_path / "dd"
    args = ["run", "fedpg-cen", "--agents", "4", "--episodes", "60", "--batch-min", "2",
            "--batch-max", "3", "--minibatch", "1", "--mechanism", "distributed-gaussian",
            "--epsilon", "3", "--min-honest", "3", "--seed", "1", "--dp-rounds", "2",
            "--out", str(out), "--no-progress"]
    assert cli.main(args) == 0
    rec = json.loads((out / "privacy.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["trials_ended_by_privacy_budget"] == 1
    p = rec["mechanism"]["params"]
    assert (p["agents"], p["min_honest_surviving"], p["bits"]) == (4, 3, 29)  # 4·2^29 < 2^32
    mech = DiscreteGaussianSum(p["clip"], p["dim"], p["agents"], p["min_honest_surviving"],
                               p["noise_multiplier"], p["bits"], delta=p["delta"])
    assert rec["accounting"]["epsilon"] == mech.epsilon(2) <= 3.0
    assert rec["guarantee"]["epsilon"] == rec["accounting"]["epsilon"]
    assert rec["ledger"]["reports"] == 4 * 2
    rows = rec["trust_model"]["by_dropouts"]
    assert rows[0] == {"dropped_or_colluding": 0, "honest_shares": 3,
                       "epsilon": rec["accounting"]["epsilon"]}
    assert rows[-1]["epsilon"] > rows[0]["epsilon"]
    assert summary["upload_bytes_per_report"] == 4 * 386
    assert "distributed discrete Gaussian" in rec["statement"]
    assert f"ε = {rec['accounting']['epsilon']:.4g}" in capsys.readouterr().out
