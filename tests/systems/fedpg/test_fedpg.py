"""FedPG (paper 004): the policy-gradient pieces, SCSG, config validation, CLI, learning."""

import json
from dataclasses import replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from privrl import main as cli
from privrl.config import ConfigError
from privrl.losses import action_log_probs, importance_weights, pg_surrogate, whiten
from privrl.systems.fedpg import local as runner
from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig


@pytest.fixture(scope="module")
def cen() -> FedPG:
    return FedPG(FedPGConfig(algorithm="cen", agents=3, budget=100))


@pytest.fixture(scope="module")
def episodes(cen):
    """Two learners × 4 episodes played with two different policies."""
    key = jax.random.key(3)
    thetas = jnp.stack([cen.model.init(jax.random.key(1)), cen.model.init(jax.random.key(2))])
    live = jnp.ones((2, 4), bool).at[1, 3].set(False)
    ep = jax.jit(cen.sample)(thetas, cen.env_params_of(key, jnp.arange(2)), live, key)
    return thetas, ep


# --- losses ----------------------------------------------------------------------------------
def test_importance_weights_are_one_when_policies_agree():
    logp = jnp.log(jnp.array([0.3, 0.9, 0.5, 0.2]))
    mask = jnp.array([1.0, 1.0, 1.0, 0.0])
    for kind in ("step", "trajectory"):
        np.testing.assert_array_equal(importance_weights(logp, logp, mask, kind), mask)


def test_importance_weights_step_trajectory_and_clip():
    target = jnp.log(jnp.array([0.5, 0.8, 0.1]))
    behaviour = jnp.log(jnp.array([0.25, 0.4, 0.2]))
    mask = jnp.ones(3)
    np.testing.assert_allclose(importance_weights(target, behaviour, mask, "step"),
                               [2.0, 2.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(importance_weights(target, behaviour, mask, "trajectory"),
                               [2.0] * 3, rtol=1e-6)
    np.testing.assert_allclose(importance_weights(target, behaviour, mask, "step", clip=1.5),
                               [1.5, 1.5, 0.5], rtol=1e-6)
    with pytest.raises(ValueError, match="step"):
        importance_weights(target, behaviour, mask, "per-decision")


def test_whiten_standardizes_valid_steps_only():
    x = jnp.array([3.0, 1.0, 2.0, 99.0])
    mask = jnp.array([1.0, 1.0, 1.0, 0.0])
    w = np.asarray(whiten(x, mask))
    assert w[3] == 0.0
    np.testing.assert_allclose(w[:3].mean(), 0.0, atol=1e-6)
    np.testing.assert_allclose(w[:3].std(), 1.0, rtol=1e-5)


def test_pg_surrogate_gradient_is_the_score_function_sum():
    """∇ Σ_h log π(a_h|s_h) Â_h = Σ_h Â_h ∇ log π(a_h|s_h), checked step by step."""
    key = jax.random.key(0)
    w = jax.random.normal(key, (4, 2))
    obs = jax.random.normal(jax.random.key(1), (5, 4))
    actions = jnp.array([0, 1, 1, 0, 1])
    adv = jnp.array([1.0, -0.5, 2.0, 0.3, 7.0])
    mask = jnp.array([1.0, 1.0, 1.0, 1.0, 0.0])

    def logp(wt, o, a):
        return action_log_probs(o @ wt, a)

    g = jax.jit(jax.grad(lambda wt: pg_surrogate(logp(wt, obs, actions), adv, mask)))(w)
    step = jax.jit(jax.grad(logp))  # ∇_w log π(a_h|s_h), one program for every h
    per_step = [adv[h] * step(w, obs[h], actions[h]) for h in range(4)]
    np.testing.assert_allclose(g, sum(per_step), rtol=1e-5, atol=1e-6)


# --- SCSG ------------------------------------------------------------------------------------
def test_scsg_direction_is_mu_when_theta_n_is_theta_0(cen, episodes):
    """At n = 0 (θ_n = θ₀) ω = 1, the correction cancels and v = μ: a plain PG step."""
    thetas, ep = episodes
    adv = jax.jit(cen.advantages)(ep)
    mu = jax.random.normal(jax.random.key(9), (cen.dim,))
    direction = jax.jit(cen.scsg_direction)
    v = direction(thetas[0], thetas[0], mu, ep.obs[0], ep.actions[0], adv[0],
                           ep.mask[0], ep.live[0])
    np.testing.assert_allclose(v, mu, atol=1e-5)
    # ... and with θ_n ≠ θ₀ the correction is not zero.
    v2 = direction(thetas[0], thetas[1], mu, ep.obs[0], ep.actions[0], adv[0],
                            ep.mask[0], ep.live[0])
    assert np.abs(np.asarray(v2 - mu)).max() > 1e-3


def test_scsg_with_no_correction_steps_is_plain_policy_gradient(cen, episodes):
    """N_t = 1 (only the n = 0 step) is exactly one optimizer step on μ; N_t = 0 is none."""
    thetas, _ = episodes
    theta0 = thetas[:1]
    mu = jax.random.normal(jax.random.key(5), (1, cen.dim))
    opt = jax.vmap(cen.optimizer.init)(theta0)
    env = cen.env_params_of(jax.random.key(0), jnp.array([0]))
    scsg = jax.jit(partial(cen.scsg, cen.source))
    one, _ = scsg(theta0, mu, opt, jnp.array([1]), env, jax.random.key(4))
    updates, _ = optax.adam(1e-3).update(-mu[0], optax.adam(1e-3).init(theta0[0]), theta0[0])
    np.testing.assert_allclose(one[0], theta0[0] + updates, atol=1e-6)
    none, _ = scsg(theta0, mu, opt, jnp.array([0]), env, jax.random.key(4))
    np.testing.assert_array_equal(none, theta0)


def test_gradient_estimate_ignores_unplayed_episodes(cen, episodes):
    thetas, ep = episodes
    assert int(ep.length[1, 3]) == 0 and float(ep.mask[1, 3].sum()) == 0
    mu = jax.jit(cen.gradients)(thetas, ep)
    adv = jax.jit(cen.advantages)(ep)
    alone = jax.jit(cen.batch_gradient)(thetas[1], ep.obs[1, :3], ep.actions[1, :3],
                                        adv[1, :3], ep.mask[1, :3], ep.live[1, :3])
    np.testing.assert_allclose(mu[1], alone, rtol=1e-5, atol=1e-6)


# --- config and CLI --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"agents": 0}, "agents"),
        ({"batch_min": 0}, "batch_min"),
        ({"batch_max": 0}, "batch_max"),
        ({"minibatch": 0}, "minibatch"),
        ({"minibatch": -4}, "minibatch"),
        ({"budget": 0}, "budget"),
        ({"topology": "star"}, "topology"),
        ({"mechanism": "laplace"}, "epsilon"),
        ({"mechanism": "laplace", "epsilon": float("nan"), "clip": 1.0}, "epsilon"),
        ({"mechanism": "laplace", "epsilon": 1.0, "clip": 0.0}, "clip"),
        ({"epsilon": 1.0}, "epsilon"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"importance_clip": -1.0}, "importance_clip"),
        ({"mechanism": "gaussian", "clip": 1.0}, "epsilon"),
        ({"mechanism": "gaussian", "noise_multiplier": 0.0, "clip": 1.0}, "noise_multiplier"),
        ({"mechanism": "gaussian", "noise_multiplier": 1.0, "clip": 1.0, "delta": 1.0},
         "delta"),
        ({"mechanism": "laplace", "epsilon": 1.0, "clip": 1.0, "noise_multiplier": 1.0},
         "noise_multiplier"),
        ({"mechanism": "privunit"}, "epsilon"),
        ({"mechanism": "privunitg", "epsilon": 1.0, "clip": 0.0}, "clip"),
        ({"mechanism": "privunit", "epsilon": 1.0, "clip": 1.0, "secure_noise": True},
         "secure_noise"),
    ],
)
def test_bad_config_is_refused(overrides, field):
    with pytest.raises(ConfigError) as e:
        FedPGConfig(**overrides).validate()
    assert e.value.field == field


def test_gaussian_total_epsilon_is_calibrated_over_the_most_rounds():
    """σ calibrated for ε = 5 at δ = 1e-5 over the most rounds the budget allows: composing
    that many releases costs at most 5 (and not much less: the calibration is tight)."""
    from privrl.privacy.accounting import Accountant

    cfg = FedPGConfig(mechanism="gaussian", epsilon=5.0, clip=1.0, budget=300).resolved()
    mech = FedPG(cfg).mechanism
    acc = Accountant()  # the default: exact analytic Gaussian composition
    acc.compose(mech.event, cfg.max_rounds())
    assert 4.9999 < acc.epsilon(1e-5) <= 5.0
    rdp = Accountant("rdp")
    rdp.compose(mech.event, cfg.max_rounds())
    assert rdp.epsilon(1e-5) > 5.0  # RDP would state more for the same σ
    assert cfg.noise_multiplier == pytest.approx(2 * mech.event.noise_multiplier)


@pytest.fixture
def no_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("computation started despite invalid options")

    monkeypatch.setattr(runner, "run_fedpg", forbidden)


@pytest.mark.parametrize(
    "args, option",
    [
        (["fedpg-cen", "--agents", "0"], "--agents"),
        (["fedpg-cen", "--minibatch", "0"], "--minibatch"),
        (["fedpg-cen", "--batch-min", "-1"], "--batch-min"),
        (["fedpg-cen", "--mechanism", "laplace"], "--epsilon"),
        (["fedpg-cen", "--mechanism", "laplace", "--epsilon", "inf"], "--epsilon"),
        (["fedpg-cen", "--epsilon", "2"], "--epsilon"),
        (["fedpg-dec", "--topology", "star"], "--topology"),
        (["fedpg-dec", "--topology", "ring", "--window", "3"], "--window"),
        (["fedpg-dec", "--agents", "0"], "--agents"),
        (["fedpg-dec", "--gravities", "9.8,-1"], "--gravities"),
        (["fedpg-cen", "--gravities", "heavy"], "--gravities"),
        (["fedpg-cen", "--mechanism", "gaussian", "--epsilon", "1", "--noise-multiplier", "2"],
         "--noise-multiplier"),
        (["fedpg-cen", "--mechanism", "gaussian", "--epsilon", "1e-9"], "--epsilon"),
        (["fedpg-dec", "--secure-noise"], "--secure-noise"),
        (["fedpg-cen", "--mechanism", "gaussian", "--epsilon", "5", "--secure-noise"],
         "--accountant"),  # the discrete Gaussian is accounted by RDP only
        (["fedpg-cen", "--mechanism", "gaussian", "--epsilon", "5", "--epsilon-budget", "9"],
         "--epsilon-budget"),
        (["fedpg-cen", "--mechanism", "gaussian", "--epsilon", "5", "--budget-composition",
          "optimal"], "--budget-composition"),
        (["fedpg-cen", "--mechanism", "laplace", "--epsilon-per-report", "1",
          "--epsilon-budget", "0"],
         "--epsilon-budget"),
        # a budget below one release is refused by either composition
        (["fedpg-cen", "--mechanism", "laplace", "--epsilon-per-report", "1",
          "--epsilon-budget", "0.5"],
         "--epsilon-budget"),
        (["fedpg-cen", "--mechanism", "laplace", "--epsilon-per-report", "1",
          "--epsilon-budget", "0.5",
          "--budget-composition", "optimal"], "--epsilon-budget"),
        # (Ray enforces --epsilon-budget on its nodes now: tests/systems/fedpg/test_ray_budget.py)
        # user-level DP (distributed-gaussian(-continuous); tests/systems/fedpg/test_user_dp.py)
        (["fedpg-cen", "--mechanism", "distributed-gaussian", "--epsilon", "2",
          "--sampling-rate", "0.5"], "--sampling-rate"),
        (["fedpg-cen", "--mechanism", "distributed-gaussian-continuous", "--epsilon", "2",
          "--sampling-rate", "0"], "--sampling-rate"),
        (["fedpg-cen", "--mechanism", "distributed-gaussian", "--epsilon", "2",
          "--min-honest", "11"], "--min-honest"),
        (["fedpg-cen", "--mechanism", "distributed-gaussian", "--epsilon", "1e-9",
          "--sampling-rate", "1"], "--epsilon"),
        (["fedpg-dec", "--mechanism", "distributed-gaussian", "--epsilon", "2"], "--mechanism"),
        (["fedpg-cen", "--mechanism", "gaussian", "--epsilon", "2", "--sampling-rate", "0.5"],
         "--sampling-rate"),
        # adaptive clipping (distributed-gaussian-continuous, fedpg-cen only)
        (["fedpg-cen", "--adaptive-clip"], "--adaptive-clip"),
        (["fedpg-dec", "--adaptive-clip"], "--adaptive-clip"),
        (["fedpg-cen", "--mechanism", "distributed-gaussian-continuous",
          "--noise-multiplier", "1",
          "--adaptive-clip", "--clip-quantile", "1"], "--clip-quantile"),
        (["fedpg-cen", "--mechanism", "distributed-gaussian-continuous",
          "--noise-multiplier", "1",
          "--adaptive-clip", "--clip-lr", "0"], "--clip-lr"),
        (["fedpg-cen", "--mechanism", "distributed-gaussian-continuous",
          "--noise-multiplier", "5",
          "--adaptive-clip", "--clip-count-stddev", "2.5"], "--clip-count-stddev"),
        (["fedpg-cen", "--mechanism", "distributed-gaussian-continuous",
          "--noise-multiplier", "1",
          "--clip-quantile", "0.9"], "--clip-quantile"),  # without --adaptive-clip
    ],
)
def test_cli_bad_input_one_line_exit_2(args, option, capsys, tmp_path, no_compute):
    out = tmp_path / "run"
    rc = cli.main(["run", *args, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and option in err, err
    assert not out.exists()


def test_cli_runs_write_the_results_directory(tmp_path, capsys, count_releases):
    from privrl.systems.fedpg import algorithm
    # Cen without a mechanism: no guarantee, and privacy.json says so.
    out = tmp_path / "cen"
    assert cli.main(["run", "fedpg-cen", "--agents", "2", "--episodes", "40",
                     "--out", str(out), "--no-progress"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "metrics.csv", "privacy.json", "summary.json", "plots"} <= names
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["statement"].startswith("NO PRIVACY GUARANTEE")
    assert privacy["ledger"]["formal_guarantee"] is False and "noise_keys" not in privacy
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithm"] == "fedpg-cen" and "noise" not in summary
    assert "noise keys" not in capsys.readouterr().out  # no mechanism: no noise-key line
    # Dec with Laplace: the ledger composes one ε-LDP release per node per round. It releases
    # through its setting as data, as the programs it could join do.
    laplace = count_releases(algorithm, "privatize_setting")
    out = tmp_path / "dec"
    assert cli.main(["run", "fedpg-dec", "--topology", "random", "--agents", "2", "--episodes",
                     "40", "--mechanism", "laplace", "--epsilon-per-report", "0.5",
                     "--out", str(out), "--no-progress"]) == 0
    privacy = json.loads((out / "privacy.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithm"] == "fedpg-dec" and summary["rounds"] >= 1
    assert privacy["ledger"]["formal_guarantee"] is True
    assert privacy["ledger"]["per_agent_epsilon"]["max"] == pytest.approx(0.5 * summary["rounds"])
    assert privacy["ledger"]["agents"] == 2
    # The releases the run made (counted on the mechanism) are the ones the ledger composed.
    assert laplace.calls == privacy["ledger"]["reports"] == 2 * summary["rounds"]
    assert privacy["epsilon_per_release"] == 0.5
    # Each report uploads the 386-parameter update as float32 (privacy.json and the summary).
    assert privacy["mechanism"]["upload_bytes_per_report"] == 4 * 386
    assert summary["upload_bytes_per_report"] == 4 * 386
    composed = privacy["per_agent_composition"]
    assert composed["basic"]["epsilon"] == pytest.approx(0.5 * summary["rounds"])
    assert composed["optimal"]["epsilon"] <= composed["basic"]["epsilon"]
    # the (ε, δ) account is stated beside the claim only where it reads other than the pure ε
    assert composed["optimal"]["delta"] == 1e-5
    assert ("optimal composition" in privacy["statement"]) == (
        f"{composed['optimal']['epsilon']:.4g}" != f"{composed['basic']['epsilon']:.4g}")
    # The headline (summary's privacy line) states the whole run's ε per agent, the ledger's
    # basic composition, and labels the release's ε as per release.
    assert privacy["guarantee"]["epsilon"] == pytest.approx(0.5 * summary["rounds"])
    assert summary["privacy"] == privacy["headline"]
    assert privacy["headline"].startswith(f"{0.5 * summary['rounds']:.4g}-LDP")
    assert privacy["headline"].endswith("; per release 0.5-LDP [simulation: seeded noise]")
    # Never overwrites: the same --out again is refused.
    assert cli.main(["run", "fedpg-cen", "--out", str(out), "--no-progress"]) == 2


def test_privunit_reports_are_pure_ldp_releases_composed_by_the_ledger(count_releases):
    from privrl.privacy.ldp_vector import PrivUnitMechanism
    from privrl.systems.fedpg.local import privacy_record, run_fedpg

    counter = count_releases(PrivUnitMechanism)
    # TINY's network and rounds: the releases counted and composed are the test, not the run
    run = run_fedpg(FedPGConfig(mechanism="privunit", epsilon_per_report=0.5, clip=1.0,
                                **TINY).resolved())
    privacy = privacy_record(run)
    rounds = int(run.releases.max())
    assert counter.calls == privacy["ledger"]["reports"] == 2 * rounds
    assert privacy["epsilon_per_release"] == 0.5 and privacy["delta_per_release"] == 0.0
    assert privacy["ledger"]["per_agent_epsilon"]["max"] == pytest.approx(0.5 * rounds)
    assert privacy["per_agent_composition"]["basic"]["epsilon"] == pytest.approx(0.5 * rounds)
    assert "privunit mechanism" in privacy["statement"]


@pytest.mark.parametrize(
    "args, option",
    [
        (["--trials", "0"], "--trials"),
        (["--agents", "0"], "--agents"),
        (["--episodes", "0"], "--episodes"),
        (["--gaussian-epsilons", "1,x"], "--gaussian-epsilons"),
        (["--laplace-epsilons-per-report", "-1"], "--laplace-epsilons-per-report"),
    ],
)
def test_reproduce_bad_input_one_line_exit_2(args, option, capsys, tmp_path, monkeypatch):
    from privrl.systems.fedpg import reproduce as sweep

    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("ran despite errors"))
    out = tmp_path / "sweep"
    rc = cli.main(["reproduce", "fedpg", *args, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and option in err, err
    assert not out.exists()


# --- releases made vs releases accounted -----------------------------------------------------
TINY = dict(agents=2, hidden=(4,), batch_min=2, batch_max=3, minibatch=1, inner_steps=1,
            max_episode_steps=20, budget=12)


def test_gaussian_releases_made_equal_the_events_in_privacy_json(count_releases):
    """Wrap the mechanism, run, count the Reports it minted: privacy.json composes exactly
    that many releases per agent, its ε recomputes from its events, and epsilon_per_release is
    one release's ε (not the run's target ε, which it once was)."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    from privrl.systems.fedpg import algorithm

    # A Gaussian run releases through its setting as data, as the programs it could join do.
    counter = count_releases(algorithm, "privatize_setting")
    cfg = FedPGConfig(algorithm="cen", mechanism="gaussian", epsilon=10.0, clip=1.0,
                      **TINY).resolved()
    run = runner.run_fedpg(cfg)
    rec = runner.privacy_record(run)
    (event,) = rec["accounting"]["events"]
    assert counter.calls == cfg.agents * event["count"] == rec["ledger"]["reports"] > 0
    assert rec["releases_per_agent"] == {"min": event["count"], "max": event["count"]}
    direct = RdpAccountant()
    direct.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(event["noise_multiplier"]), event["count"]))
    exact = dp_accounting.get_epsilon_gaussian(
        event["noise_multiplier"] / event["count"] ** 0.5, 1e-5)
    assert rec["accounting"]["epsilon"] == pytest.approx(exact, rel=1e-9)
    assert rec["accounting"]["cross_check"]["epsilon"] == pytest.approx(
        direct.get_epsilon(1e-5), rel=1e-12)
    one = dp_accounting.get_epsilon_gaussian(cfg.noise_multiplier / 2, 1e-5)
    assert rec["epsilon_per_release"] == pytest.approx(one, rel=1e-9) and one < 10.0 / 2
    assert rec["delta_per_release"] == 1e-5



def test_privacy_budget_ends_the_run_by_the_optimal_composition(count_releases):
    """Laplace releases of ε = 0.3, each agent's budget (ε = 2, δ = 0.01) by the optimal
    composition: the ledger admits 9 rounds (the KOV δ(2) of 9 releases is <= 0.01, of 10 it
    is not; basic composition would stop at 6, as 6 × 0.3 <= 2 < 7 × 0.3), then ends the
    trial before the round it refuses; the episode budget (60) would allow ~15. The releases
    the run made (counted on the mechanism) are the ones privacy.json composes. (The run
    loop asks the ledger the same way under either composition; basic's refusals are tested
    in tests/kernel/privacy/test_ledger.py.)"""
    from privrl.privacy.accounting import optimal_composition_admits
    from privrl.systems.fedpg import algorithm

    assert optimal_composition_admits(0.3, 9, 2.0, 0.01)
    assert not optimal_composition_admits(0.3, 10, 2.0, 0.01)
    counter = count_releases(algorithm, "privatize_setting")
    cfg = FedPGConfig(algorithm="cen", mechanism="laplace", epsilon_per_report=0.3, clip=1.0,
                      epsilon_budget=2.0, budget_composition="optimal", delta=0.01,
                      **{**TINY, "budget": 60}).resolved()
    run = runner.run_fedpg(cfg)
    rec, summary = runner.privacy_record(run), runner.summarize(run)
    agents, guarantee = np.arange(cfg.agents), FedPG(cfg).mechanism.guarantee
    assert run.releases.tolist() == [9] and counter.calls == cfg.agents * 9
    assert summary["trials_ended_by_privacy_budget"] == 1
    assert run.used.mean() < 60  # the episode budget was not what ended it
    assert not run.ledger.can_charge(agents, guarantee)
    basic = runner.budget_ledger(replace(cfg, budget_composition="basic"))
    assert basic.can_charge(agents, guarantee, 6) and not basic.can_charge(agents, guarantee, 7)
    composed = rec["per_agent_composition"]
    assert composed["releases"] == 9 and composed["enforced_by_ledger"] == "optimal"
    assert composed["optimal"]["epsilon"] <= 2.0 < composed["basic"]["epsilon"] == \
        pytest.approx(2.7)
    assert rec["ledger"]["budget_per_agent"] == {"epsilon": 2.0, "delta": 0.01,
                                                 "composition": "optimal"}
    assert rec["ledger"]["per_agent_epsilon"]["max"] == pytest.approx(
        composed["optimal"]["epsilon"])
    assert "enforced before every release (optimal composition)" in rec["statement"]
    assert "optimal composition" in summary["privacy"]
    assert rec["guarantee"]["epsilon"] == composed["optimal"]["epsilon"]
    assert rec["guarantee"]["delta"] == composed["optimal"]["delta"]
