"""PGC-A3C end to end: the guarantee a run reports, multi-submission composition, asynchrony."""

import math
from dataclasses import replace

import jax
import numpy as np
import pytest

from privrl.privacy import LaplaceMechanism, ProjectedRandomSignMechanism
from privrl.privacy.record import mechanism_record
from privrl.systems.pgc_a3c import algorithm as pgc_algorithm
from privrl.systems.pgc_a3c.algorithm import (
    PGCA3C,
    ConfigError,
    PGCA3CConfig,
    make_mechanism,
    server_optimizer,
    trial_group,
    trial_stages,
)
from privrl.systems.pgc_a3c.local import privacy_record, run_pgc_a3c, summarize


def test_laplace_eps10_run_completes_and_reports_eps10_per_agent():
    # 2 trials of 50 submissions: the shape of test_cli's runs (`_run`), whose chunk program
    # this run shares through the persistent compilation cache (ε and the seed are data)
    out = run_pgc_a3c(PGCA3CConfig(mechanism="laplace", epsilon=10.0, trials=2,
                                   submissions=50))
    assert out.scores.shape == (2, 50) and out.scores.min() >= 1
    ledger = out.ledger.summary()
    assert ledger["agents"] == 2 * 50 and ledger["reports"] == 2 * 50
    assert ledger["per_agent_epsilon"]["min"] == ledger["per_agent_epsilon"]["max"] == 10.0
    assert ledger["formal_guarantee"] is True
    record = privacy_record(out)
    assert record["epsilon_per_agent"] == 10.0 and "10-LDP" in record["statement"]
    # The headline (summary's privacy line) is the whole run's ε per agent, never a report's.
    assert record["guarantee"]["epsilon"] == pytest.approx(10.0)
    assert record["guarantee"]["unit"] == "all of one agent's reports"
    assert summarize(out)["privacy"] == record["headline"]
    assert record["headline"].startswith("10-LDP for all of one agent's reports, over the ")
    assert "; per release 10-LDP" in record["headline"]  # one report per agent here
    assert record["mechanism"]["mechanism"] == "laplace"
    assert summarize(out)["epsilon"] == 10.0


@pytest.fixture(scope="module")
def two_per_agent_run():
    """T = 2 reports per agent, each ε/2, 2 trials of 51 submissions: 5 rounds of P = 9 and a
    last round of six, the last agent's one report. Two tests inspect it (one program
    compiled, not two). Its program is test_cli's T = 2 run's (2 trials, chunks of 6 rounds;
    ε and the submissions cap are data), shared through the persistent compilation cache, and
    its random baseline's (10 episodes) is the one of the run above."""
    return run_pgc_a3c(PGCA3CConfig(mechanism="laplace", epsilon=4.0, trials=2,
                                    submissions=51, submissions_per_agent=2))


def test_multiple_submissions_compose_to_the_budget(two_per_agent_run):
    # T = 2 reports per agent, each ε/2: the ledger composes them back to ε per agent.
    out = two_per_agent_run
    ledger = out.ledger.summary()
    assert ledger["agents"] == 2 * math.ceil(51 / 2)
    assert ledger["reports_per_agent"] == {"min": 1, "max": 2}  # the last agent submits once
    assert ledger["per_agent_epsilon"]["max"] == pytest.approx(4.0)
    assert [e["epsilon"] for e in ledger["events"]] == [2.0]
    mech = make_mechanism(out.config, 112)
    assert isinstance(mech, LaplaceMechanism) and mech.epsilon == 2.0


def test_paper_defaults_per_mechanism():
    lap = PGCA3CConfig(mechanism="laplace").resolved()
    prs = PGCA3CConfig(mechanism="prs", epsilon=10.0).resolved()
    none = PGCA3CConfig(mechanism="none").resolved()
    assert (lap.clip, lap.buffer_size) == (0.01, 1)
    assert (prs.clip, prs.buffer_size) == (1.0, 100)
    assert math.isinf(none.epsilon) and none.buffer_size == 1
    algo = PGCA3C(prs)
    assert algo.dim == 112  # θ(c) 16×4 + θ(p) 2×16 + θ(v) 1×16, no biases
    assert isinstance(algo.mechanism, ProjectedRandomSignMechanism)
    assert algo.mechanism.resolved_d_hat(112) == 4  # ⌊10 / 2.5⌋


def test_privunit_mechanisms_are_selectable_and_split_the_budget_over_t():
    from privrl.privacy.ldp_vector import PrivUnitGMechanism, PrivUnitMechanism

    for name, cls in [("privunit", PrivUnitMechanism), ("privunitg", PrivUnitGMechanism)]:
        for preset, clip, buffer in [("paper", 0.005, 1), ("tuned", 0.005, 10),
                                     ("tuned-ldp", 0.05, 1)]:
            cfg = PGCA3CConfig.from_preset(preset, mechanism=name, epsilon=3.0,
                                           submissions_per_agent=3).resolved()
            assert (cfg.clip, cfg.buffer_size) == (clip, buffer)
            mech = make_mechanism(cfg, 112)
            assert isinstance(mech, cls) and mech.epsilon == 1.0 and mech.clip == clip
        with pytest.raises(ConfigError, match="secure_noise"):
            PGCA3CConfig(mechanism=name, secure_noise=True).resolved()
        with pytest.raises(ConfigError, match="d_hat"):
            PGCA3CConfig(mechanism=name, d_hat=2).resolved()


def test_tuned_ldp2_is_tuned_ldp_with_a_smaller_network():
    """tuned-ldp2 (issue 42) changes only the hidden units (d = 67, not 131): the same P,
    clip, |B| and ε for every mechanism; tuned-ldp itself is untouched."""
    for name in ("privunit", "privunitg", "projunit", "privunitg-seed", "laplace"):
        old = PGCA3CConfig.from_preset("tuned-ldp", mechanism=name, epsilon=1.0).resolved()
        new = PGCA3CConfig.from_preset("tuned-ldp2", mechanism=name, epsilon=1.0).resolved()
        assert (old.hidden, new.hidden) == (16, 8)
        assert new == replace(old, preset="tuned-ldp2", hidden=8)
    assert PGCA3C(PGCA3CConfig.from_preset("tuned-ldp2", mechanism="privunit")).dim == 67
    with pytest.raises(ConfigError, match="tuned-ldp2") as e:
        PGCA3CConfig(preset="tuned-ldp3").resolved()
    assert e.value.field == "preset"


def test_compact_mechanisms_run_and_every_run_records_its_upload_bytes():
    from privrl.privacy.ldp_compact import ProjUnitMechanism, SeedPrivUnitGMechanism

    lap = PGCA3CConfig(mechanism="laplace").resolved()
    assert mechanism_record(make_mechanism(lap, 112), 112)["upload_bytes_per_report"] == 4 * 112
    for name, cls, size in [("projunit", ProjUnitMechanism, 8 + 4 * 16),
                            ("privunitg-seed", SeedPrivUnitGMechanism, 8)]:
        cfg = PGCA3CConfig.from_preset("tuned-ldp", mechanism=name, epsilon=2.0, trials=1,
                                       submissions=12, submissions_per_agent=2).resolved()
        assert (cfg.clip, cfg.buffer_size) == (0.05, 1)  # PrivUnitG's
        mech = make_mechanism(cfg, 131)
        assert isinstance(mech, cls) and mech.epsilon == 1.0
        out = run_pgc_a3c(cfg)
        record, summary = privacy_record(out), summarize(out)
        assert record["mechanism"]["upload_bytes_per_report"] == size
        assert summary["upload_bytes_per_report"] == size
        # seed compression's ε rests on the generator, and the record says so
        assert ("ideal seed-to-Gaussian generator" in record["headline"]) == (
            name == "privunitg-seed")


def test_adam_momentum_is_adams_first_moment_decay():
    import jax.numpy as jnp

    g1, g2, lr = jnp.array([1.0, -2.0]), jnp.array([-3.0, 0.5]), 0.01
    for b1 in (0.9, 0.5):
        opt = server_optimizer(PGCA3CConfig(server_optimizer="adam", learning_rate=lr,
                                            adam_momentum=b1))
        state = opt.init(jnp.zeros(2))
        _, state = opt.update(g1, state)
        step, _ = opt.update(g2, state)
        m = (b1 * (1 - b1) * g1 + (1 - b1) * g2) / (1 - b1**2)
        v = (0.999 * 0.001 * g1**2 + 0.001 * g2**2) / (1 - 0.999**2)
        np.testing.assert_allclose(step, -lr * m / (jnp.sqrt(v) + 1e-8), rtol=1e-4)  # float32
    for bad in (1.0, -0.1):
        with pytest.raises(ConfigError) as e:
            PGCA3CConfig(adam_momentum=bad).resolved()
        assert e.value.field == "adam_momentum"


def test_lr_decay_updates_shrinks_the_step_as_one_over_root_of_updates():
    import jax.numpy as jnp

    g, lr, tau = jnp.array([1.0, -2.0]), 0.1, 4.0
    for name in ("sgd", "adam"):
        opt = server_optimizer(PGCA3CConfig(server_optimizer=name, learning_rate=lr,
                                            lr_decay_updates=tau))
        const = server_optimizer(PGCA3CConfig(server_optimizer=name, learning_rate=lr))
        state, fixed = opt.init(jnp.zeros(2)), const.init(jnp.zeros(2))
        for n in range(6):  # the n-th step (n updates before it) is η/√(1 + n/τ) of constant η's
            step, state = opt.update(g, state)
            ref, fixed = const.update(g, fixed)
            np.testing.assert_allclose(step, ref / math.sqrt(1 + n / tau), rtol=1e-6)
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ConfigError) as e:
            PGCA3CConfig(lr_decay_updates=bad).resolved()
        assert e.value.field == "lr_decay_updates"


def test_theta_ema_hands_out_the_moving_average_of_the_fast_weights():
    import jax.numpy as jnp
    import optax

    lr, beta = 0.1, 0.75
    opt = server_optimizer(PGCA3CConfig(server_optimizer="sgd", learning_rate=lr,
                                        theta_ema=beta))
    theta = jnp.array([1.0, -1.0])
    state = opt.init(theta)
    fast, avg = np.array([1.0, -1.0]), np.array([1.0, -1.0])
    for g in ([1.0, 2.0], [-3.0, 0.5], [0.5, 0.5]):  # SGD on φ, θ ← β·θ + (1 − β)·φ
        step, state = opt.update(jnp.array(g), state, theta)
        theta = optax.apply_updates(theta, step)
        fast = fast - lr * np.array(g)
        avg = beta * avg + (1 - beta) * fast
        np.testing.assert_allclose(theta, avg, rtol=1e-6)
        np.testing.assert_allclose(state.fast, fast, rtol=1e-6)
    for bad in (1.0, -0.1):
        with pytest.raises(ConfigError) as e:
            PGCA3CConfig(theta_ema=bad).resolved()
        assert e.value.field == "theta_ema"


def test_invalid_config_names_the_field():
    with pytest.raises(ConfigError, match=r"^epsilon: must be finite and > 0") as e:
        PGCA3CConfig(epsilon=float("nan")).resolved()
    assert e.value.field == "epsilon"
    with pytest.raises(ConfigError, match="reward"):
        PGCA3CConfig(reward="sparse").resolved()
    with pytest.raises(ConfigError) as e:
        PGCA3CConfig(buffer_size=0).resolved()
    assert e.value.field == "buffer_size"


def test_agents_of_a_round_share_one_snapshot_and_apply_in_turn():
    """With |B| = 1 the round applies P reports sequentially: θ moves P times per round; with
    |B| = 100 (PRS) the round's nine reports are buffered and θ stays. Both settings as one
    program (`for_settings`, a trial each, as a local run computes either: its setting as
    data), so one round program is compiled, not two; each trial keeps its own |B|."""
    lap = PGCA3CConfig(mechanism="laplace", epsilon=5.0, submissions=18).resolved()
    prs = PGCA3CConfig(mechanism="prs", epsilon=5.0, submissions=18).resolved()
    assert (lap.buffer_size, prs.buffer_size) == (1, 100)
    algo = PGCA3C.for_settings([lap, prs])
    state = jax.jit(jax.vmap(algo.init))(jax.random.split(jax.random.key(0), 2))
    state = state._replace(setting=algo.setting_data([0, 1]))  # trial 0 Laplace, 1 PRS
    after, scores = jax.jit(lambda s: algo.run_rounds(s, 1))(state)
    assert after.agg.updates.tolist() == [9, 0] and after.submitted.tolist() == [9, 9]
    assert scores.shape == (2, 9) and np.all(np.isfinite(scores))
    assert int(after.agg.count[1]) == 9  # PRS: nine reports buffered, θ unchanged
    np.testing.assert_array_equal(after.agg.theta[1], state.agg.theta[1])
    assert not np.array_equal(after.agg.theta[0], state.agg.theta[0])


def test_runs_of_any_budget_share_the_chunk_program():
    """The submissions cap is the trials' data, not a constant of the chunk's program: runs of
    different budgets (and chunks as long) lower to one program, so the persistent cache's
    entry for one (the Makefile's warm-up) serves the other (`make run`)."""
    from privrl.systems.pgc_a3c.local import ShardedTrials

    def chunk_program(submissions: int) -> str:
        cfg = PGCA3CConfig(mechanism="laplace", epsilon=5.0, submissions=submissions)
        runner = ShardedTrials(PGCA3C(cfg), 1, 2, devices=1)
        state = runner.init(jax.random.key(0))
        assert int(state.cap[0]) == submissions
        return runner._run.lower(state, np.zeros(1, bool)).as_text()

    assert chunk_program(18) == chunk_program(27_000)


def test_partial_last_round_submits_exactly_the_cap(two_per_agent_run):
    out = two_per_agent_run  # 51 = 5 × 9 + 6: the last round runs six agents of nine
    assert out.scores.shape == (2, 51) and out.ledger.summary()["reports"] == 2 * 51
    assert np.all(np.isfinite(out.scores)) and out.submitted.tolist() == [51, 51]


def test_releases_made_equal_the_ledger(count_releases):
    """Wrap the mechanism and count the Reports it minted: exactly the submissions the ledger
    composed (full rounds only, so that no padded agent slot mints a discarded report). A
    Laplace run releases through its setting as data, the programs' `privatize_setting`
    (`settings_algorithm`)."""
    counter = count_releases(pgc_algorithm, "privatize_setting")
    cfg = PGCA3CConfig(mechanism="laplace", epsilon=6.0, trials=1, submissions=27,
                       submissions_per_agent=3, hidden=4, max_episode_steps=10)
    out = run_pgc_a3c(cfg)
    ledger = out.ledger.summary()
    assert counter.calls == ledger["reports"] == 27
    assert ledger["reports_per_agent"] == {"min": 3, "max": 3} and ledger["agents"] == 9
    assert ledger["per_agent_epsilon"]["max"] == pytest.approx(6.0)
    # Beside the ledger's pure ε: the optimal (ε, δ) composition of the 3 reports of ε = 2.
    composed = privacy_record(out)["per_agent_composition"]
    assert composed["releases"] == 3 and composed["basic"]["epsilon"] == pytest.approx(6.0)
    assert composed["optimal"]["epsilon"] <= 6.0 and composed["enforced_by_ledger"] == "basic"


@pytest.mark.parametrize("mechanism", ["laplace", "prs"])
def test_optimal_budget_composition_buys_a_larger_epsilon_per_report(mechanism):
    """budget_composition "optimal": the budget (ε = 3, δ = 1e-5) over T = 30 reports buys
    each report the largest ε_0 the optimal composition admits (0.138, not ε/T = 0.1); the
    run's ledger admits the 30 reports (a basic ledger refuses them at the 22nd) and refuses a
    31st; privacy.json says the ledger enforces the optimal (ε, δ). No run is compiled: the
    runner charges the ledger `budget_ledger` builds, as below."""
    from privrl.privacy.accounting import calibrate_pure_epsilon
    from privrl.privacy.ledger import BudgetExceededError, PrivacyLedger
    from privrl.systems.pgc_a3c.algorithm import budget_ledger
    from privrl.systems.pgc_a3c.local import RunOutput

    cfg = PGCA3CConfig(mechanism=mechanism, epsilon=3.0, submissions_per_agent=30,
                       submissions=60, budget_composition="optimal").resolved()
    algo = PGCA3C(cfg)
    eps0 = algo.mechanism.guarantee.epsilon
    assert eps0 == calibrate_pure_epsilon(3.0, 30, 1e-5) == pytest.approx(0.138, abs=1e-3)
    ledger = budget_ledger(cfg)
    ledger.charge([0, 1], algo.mechanism.guarantee, count=30)
    with pytest.raises(BudgetExceededError):
        ledger.charge(0, algo.mechanism.guarantee)
    basic = PrivacyLedger(3.0)
    assert basic.can_charge(0, algo.mechanism.guarantee, 21)
    assert not basic.can_charge(0, algo.mechanism.guarantee, 22)
    out = RunOutput(cfg, np.zeros((1, 60), np.int32), np.array([60]), ledger,
                    mechanism_record(algo.mechanism, algo.dim), 0.0, 0.0, 1, 2)
    rec = privacy_record(out)
    composed = rec["per_agent_composition"]
    assert composed["enforced_by_ledger"] == "optimal" and rec["epsilon_per_report"] == eps0
    assert composed["optimal"]["epsilon"] == pytest.approx(3.0, rel=1e-6)
    assert composed["basic"]["epsilon"] == pytest.approx(30 * eps0)
    assert rec["ledger"]["budget_per_agent"] == {"epsilon": 3.0, "delta": 1e-5,
                                                 "composition": "optimal"}
    assert rec["statement"].startswith("(ε = 3, δ = 1e-05)-LDP for all of one agent's reports")
    assert "by the optimal composition theorem, as the ledger enforces" in rec["statement"]
    assert summarize(out)["privacy"].startswith("(ε = 3, δ = 1e-05)-LDP for all of one agent")
    assert rec["guarantee"]["epsilon"] == composed["optimal"]["epsilon"]
    assert f"; per release {eps0:.4g}-LDP" in rec["headline"]
    # the default keeps ε/T and the basic ledger
    plain = PGCA3C(PGCA3CConfig(mechanism=mechanism, epsilon=3.0, submissions_per_agent=30))
    assert plain.mechanism.guarantee.epsilon == 3.0 / 30
    with pytest.raises(ConfigError, match=r"^budget_composition"):
        PGCA3CConfig(mechanism="none", budget_composition="optimal").resolved()
    with pytest.raises(ConfigError, match=r"^budget_composition"):
        PGCA3CConfig(budget_composition="advanced").resolved()
    with pytest.raises(ConfigError, match=r"^delta"):
        PGCA3CConfig(delta=0.0).resolved()


def test_a_per_report_epsilon_overrides_the_split_within_the_total():
    """`epsilon` stays each agent's total (the ledger's cap); `epsilon_per_report` replaces the
    split ε/T, and the total must afford all T reports (an agent's reports are not cut)."""
    cfg = PGCA3CConfig(epsilon=5.0, epsilon_per_report=2.0, submissions_per_agent=2).resolved()
    assert PGCA3C(cfg).mechanism.guarantee.epsilon == 2.0
    assert cfg.privacy_plan().ledger().epsilon_budget == 5.0
    with pytest.raises(ConfigError, match=r"^epsilon: 5 cannot afford 2 releases"):
        PGCA3CConfig(epsilon=5.0, epsilon_per_report=3.0, submissions_per_agent=2).resolved()
    with pytest.raises(ConfigError, match=r"^epsilon_per_report"):
        PGCA3CConfig(mechanism="none", epsilon_per_report=1.0).resolved()


def test_shuffling_reorders_the_reports_and_states_the_central_epsilon():
    from privrl.privacy.shuffle import shuffle_epsilon

    base = dict(mechanism="laplace", epsilon=2.0, trials=1, submissions=36, parallel_agents=6,
                max_episode_steps=20, server_optimizer="adam")
    # Reports applied one by one with Adam (not linear in the reports, unlike SGD): the
    # shuffled order changes θ (and the shuffle is the only difference between the runs)
    turn = [run_pgc_a3c(PGCA3CConfig(**base, buffer_size=1, shuffle=s)) for s in (False, True)]
    assert turn[0].theta.shape == (1, PGCA3C(turn[0].config).dim)
    assert not np.allclose(turn[0].theta, turn[1].theta, rtol=1e-5, atol=1e-8)
    np.testing.assert_array_equal(turn[0].scores[:, :6], turn[1].scores[:, :6])  # round 1
    record = privacy_record(turn[1])
    assert record["shuffle"]["batch_size"] == 6
    assert record["shuffle"]["central_epsilon"] == shuffle_epsilon(2.0, 6, 1e-5) < 2.0
    assert "Shuffled" in record["statement"] and "shuffle" not in privacy_record(turn[0])
    with pytest.raises(ConfigError, match="shuffle"):
        PGCA3CConfig(mechanism="none", shuffle=True).resolved()
    with pytest.raises(ConfigError, match="shuffle_delta"):
        PGCA3CConfig(shuffle=True, shuffle_delta=0.0).resolved()
    # ids are index // T: with T > 1 an agent's reports can share a batch, which the bound
    # (one report per agent and batch) does not cover
    with pytest.raises(ConfigError, match=r"^shuffle: needs submissions_per_agent = 1"):
        PGCA3CConfig(mechanism="laplace", shuffle=True, submissions_per_agent=2).resolved()


def test_a_runs_trial_group_and_stages():
    # A run's group is its own trials per device, at most 10; settings run as one program
    # pass their own run's (local._run_trials), not the program's 90 per device.
    assert [trial_group(t, d) for t, d in ((1, 1), (3, 2), (20, 2), (180, 2))] == [1, 2, 10, 10]
    assert trial_stages(9, 10) == [50, 30, 20, 10] and trial_stages(1, 10) == []
    # An accelerator raises the block (the config's trial_block): all of a device's trials.
    assert trial_group(180, 2, PGCA3CConfig(trial_block=4096).resolved().trial_block) == 90
    with pytest.raises(ConfigError, match=r"^trial_block"):
        PGCA3CConfig(trial_block=0).resolved()
