"""The pilot measures learning, not its start: E0 from a curve that starts past the mark is
refused, and PGC-A3C's pilot starts where the recommended `adaptive` command starts (the
uniform policy). Synthetic curves and configs only: no JAX run."""

from __future__ import annotations

import math

import numpy as np

from privrl.planner import model
from privrl.planner import systems as sy


def curve(returns: np.ndarray) -> sy.Curve:
    return sy.Curve(np.arange(1, returns.size + 1, dtype=np.float64), returns, 0.0)


def test_a_curve_that_starts_past_the_mark_gives_no_e0() -> None:
    # random −500, the start already at −300 and flat to −200: the mark (−350) is reached in
    # the first window; that is the start, not learning
    start = curve(np.concatenate([np.full(1000, -300.0), np.full(1000, -200.0)]))
    assert sy.starts_past_mark(start, -500.0, 0.5)
    assert sy.episodes_to_learn(start, -500.0, 0.5) is None


def test_a_curve_that_climbs_from_random_gives_its_e0() -> None:
    # from random −500 linearly to −200 over 2,000 episodes: the moving average (window 100)
    # first reaches the mark −350 near the middle
    y = np.linspace(-500.0, -200.0, 2000)
    climb = curve(y)
    assert not sy.starts_past_mark(climb, -500.0, 0.5)
    e0 = sy.episodes_to_learn(climb, -500.0, 0.5)
    assert e0 is not None and 1000 < e0 < 1300


def pilot_fields(system: str, continuous: bool, env: str = "gymnax:Acrobot-v1") -> dict:
    f = sy.facts(system, continuous)
    rec = sy.Recommendation("none", math.inf, 2000, 1.0, 1, f.batch, f.learning_rate,
                            f.preset)
    return sy.config_fields(system, rec, env, (), 1, 0)


def test_pgc_a3c_pilot_starts_uniform_like_the_adaptive_command() -> None:
    f = sy.facts("pgc-a3c", False)
    assert sy.LEVERS_PRESET[("pgc-a3c", f.preset)] == "adaptive"
    cfg = sy.build_config("pgc-a3c", pilot_fields("pgc-a3c", False))
    cfg.validate()
    assert cfg.uniform_start is True
    # ... and learns as the command learns: from the policy's gradient alone (its E0)
    assert cfg.critic == "none"
    # a continuous task's pilot too (its Gaussian head's log-std state-free, as the command's)
    box = sy.build_config("pgc-a3c", pilot_fields("pgc-a3c", True, PENDULUM))
    assert (box.uniform_start, box.critic, box.log_std) == (True, "none", "parameter")


PENDULUM = "gymnax:Pendulum-v1"


def test_pgc_a3c_plans_a_continuous_task_with_the_policy_only_report_and_the_adam_law() -> None:
    # A continuous task's plan recommends `adaptive` too (its report the policy's gradient
    # alone, a state-free log-std, the uniform start, the adaptive clip, |B| 9, Adam, the step
    # from the noise) and sizes K with the Adam law of that rule, as on a discrete task. On
    # main it modelled `continuous` (the critic in its 771-parameter report on Pendulum) with
    # the trace law and no levers (benchmarks/log/28-cont.md).
    f = sy.facts("pgc-a3c", True)
    assert sy.LEVERS_PRESET[("pgc-a3c", f.preset)] == "adaptive"
    assert f.command_batch == 9 and f.clip_bit_share > 0
    rec = sy.Recommendation("laplace", 5.0, 10_000, 1.0, 1, f.command_batch,
                            f.command_learning_rate, f.preset)
    assert sy.levers_apply("pgc-a3c", rec)
    cfg = sy.build_config("pgc-a3c", sy.config_fields("pgc-a3c", rec, PENDULUM, ("m=0.8:1.2",),
                                                      1, 0, levers=True))
    cfg.validate()
    assert cfg.preset == "adaptive" and cfg.critic == "none" and cfg.log_std == "parameter"
    assert cfg.uniform_start and cfg.adaptive_clip and cfg.step_from_noise
    assert (cfg.buffer_size, cfg.server_optimizer) == (9, "adam")
    # the Adam law: K grows with the noise-to-signal ratio ρ, not with ρ² as the trace law's
    stats = model.PilotStats(42, (50.0, 100.0, 200.0), 200.0, 10.0, 400.0, -1250.0, -600.0,
                             1000.0)
    needed = sy.needed_fn("pgc-a3c", f, stats)
    assert needed is not None
    noise = sy.noise_fn("pgc-a3c", f, stats)
    assert needed(5.0, noise(5.0, 1, 1)) < model.episodes_needed(stats, noise(5.0, 1, 1))


def test_dp_reinforce_and_fedpg_pilots_need_no_start_change() -> None:
    # DP-REINFORCE's adaptive preset keeps the paper's network and start; FedPG-Cen's command
    # runs the pilot's own preset
    assert sy.start_fields("dp-reinforce", "paper") == {}
    assert ("fedpg-cen", sy.facts("fedpg-cen", False).preset) not in sy.LEVERS_PRESET


def test_dp_reinforce_plans_its_continuous_preset_on_a_box_task() -> None:
    """A Box task's pilot, run and `adaptive` command start close to the uniform policy (the
    paper's Glorot start played below random on Pendulum, benchmarks/log/28-floor.md); a
    discrete task keeps the paper's learner."""
    assert sy.facts("dp-reinforce", False).preset == "paper"
    f = sy.facts("dp-reinforce", True)
    assert f.preset == "continuous" and f.learning_rate == 0.003
    cfg = sy.build_config("dp-reinforce", pilot_fields("dp-reinforce", True))
    assert (cfg.preset, cfg.uniform_start, cfg.log_std, cfg.gamma) == (
        "continuous", True, "parameter", 0.9)
    rec = sy.Recommendation("gaussian", 5.0, 2000, 1.0, 1, 50, 0.003, f.preset)
    command = sy.build_config("dp-reinforce", sy.config_fields(
        "dp-reinforce", rec, "gymnax:Pendulum-v1", (), 1, 0, levers=True))
    assert command.preset == "adaptive-continuous" and command.uniform_start
    assert command.adaptive_clip and command.public_eval_every == 10
    assert not command.step_from_noise and command.batch_episodes == 50  # the plan's


def test_a_dp_reinforce_run_makes_at_least_the_pilots_updates() -> None:
    """Adam's step does not grow with the batch: a run of K episodes makes at least the
    updates the non-private pilot took to learn (E0 over its batch), not 10 large ones."""
    stats = sy.PilotStats(200, (1.0, 2.0, 3.0), 1.0, 0.05, 1.0, -500.0, -100.0, 300.0)
    assert sy.reinforce_updates(stats, 1) == 300
    assert sy.reinforce_updates(stats, 4) == 75
    assert sy.reinforce_batch(stats, 1e4, 30_000) == 100  # 30,000 / 300 updates
    assert sy.reinforce_batch(stats, 1e4, 200) == 1
    unlearned = sy.PilotStats(200, (1.0, 2.0, 3.0), 1.0, 0.05, 1.0, -500.0, -600.0, None)
    assert sy.reinforce_updates(unlearned, 1) == sy.MIN_UPDATES
    assert sy.reinforce_batch(unlearned, 1e4, 30_000) == 256  # MAX_REINFORCE_BATCH
