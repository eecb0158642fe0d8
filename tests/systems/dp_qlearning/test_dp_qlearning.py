"""DP Q-learning (paper 001): the 1-D task, configuration and privacy records, learning, CLI."""

import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl import main as cli
from privrl.config import ConfigError
from privrl.envs.line1d import Line1D, optimal_return
from privrl.systems.dp_qlearning import local as runner
from privrl.systems.dp_qlearning.algorithm import (
    DPQLearning,
    DPQLearningConfig,
    describe_privacy,
    privacy_record,
    run_keys,
)


# --- the environment -------------------------------------------------------------------------
def test_line1d_dynamics_reward_and_termination():
    env = Line1D()
    params = env.default_params
    obs, state = env.reset_env(jax.random.key(0), params)
    s = float(obs[0])
    assert 0 <= s <= 1
    for t in range(params.max_steps_in_episode):
        action = t % 3 == 0  # mostly action 0 (up), so the clip at 1 is reached
        obs, state, reward, done, _ = env.step_env(jax.random.key(t + 1), state,
                                                   jnp.int32(action), params)
        s2 = float(obs[0])
        move = s2 - s
        if action == 0:
            assert 0 <= move <= 0.25 + 1e-6 and s2 <= 1
        else:
            assert -0.25 - 1e-6 <= move <= 0 and s2 >= 0
        assert float(reward) == pytest.approx(0.5 - abs(s2 - 0.5))
        assert bool(done) == (t == params.max_steps_in_episode - 1)
        s = s2


def test_value_iteration_moves_towards_the_centre():
    """Value iteration's policy moves towards 0.5. The Monte Carlo check of its return and the
    random policy's (policy_return) is asserted by test_cli_reproduce_small, on the reference
    returns that `reproduce` computes anyway (20,000 episodes each instead of 4,000 here: the
    same check, two rollout programs fewer)."""
    v_opt, first = optimal_return()
    assert np.all(first[:400] == 0) and np.all(first[600:] == 1)  # move towards 0.5
    assert v_opt < 25


def assert_references_hold(refs: dict) -> None:
    """The optimal grid policy's Monte Carlo return matches value iteration; random is far
    below."""
    v_opt = refs["optimal_value_iteration"]
    # the stationary grid policy is optimal up to discretization (≈1e-5 here): within 5 s.e.
    assert abs(refs["optimal_policy_monte_carlo"] - v_opt) < 5 * refs["optimal_policy_mc_se"] + 0.01
    assert v_opt < 25 and refs["random_policy"] < v_opt - 8


# --- configuration and privacy records --------------------------------------------------------
T5 = dict(epsilon=0.5, delta=1e-5, sensitivity_constant=1e-4, k=5.0)


def test_epsilon_calibrates_sigma_and_records_the_claim():
    cfg = DPQLearningConfig(**T5).resolved()
    t_over_b = 100 * 50 - 128 + 1
    expected = math.sqrt(2 * t_over_b * math.log(math.e + 0.5 / 1e-5)) * 1e-4 / 0.5
    assert cfg.sigma == pytest.approx(expected)
    rec = privacy_record(cfg)
    assert rec["private"] and rec["epsilon"] == 0.5
    t5 = rec["theorem5"]
    assert (t5["T_over_B"], t5["B"], t5["J"], t5["C"]) == (t_over_b, 128, 100, 1e-4)
    assert rec["delta"] == pytest.approx(1e-5 + 100 * math.exp(-(10 - 8.68 * expected) ** 2 / 2))
    assert "ONLY AS VALID AS" in rec["statement"]
    # The heading (printed before and after the run) is the whole training's (ε, δ).
    assert rec["guarantee"]["epsilon"] == 0.5 and rec["guarantee"]["delta"] == rec["delta"]
    assert describe_privacy(cfg) == rec["headline"]
    assert rec["headline"].startswith(f"(ε = 0.5, δ = {rec['delta']:.3g})-DP")
    assert "ONLY AS VALID AS" in rec["headline"]


def test_sigma_alone_claims_no_epsilon():
    rec = privacy_record(DPQLearningConfig(sigma=0.4).resolved())
    assert not rec["private"] and rec["epsilon"] == "not claimed"
    assert "NO ε IS CLAIMED" in rec["statement"]
    assert rec["headline"].startswith("NO PRIVACY GUARANTEE") and rec["guarantee"] is None
    assert "NO PRIVACY" in privacy_record(DPQLearningConfig(sigma=0.0).resolved())["statement"]


def test_noise_keys_are_recorded():
    """Seeded: SIMULATION ONLY in the claim; secret: not. (Same seed, other returns under
    secret keys, and seeded metrics.csv byte-identical to before, were checked end to end.)"""
    seeded = privacy_record(DPQLearningConfig(**T5).resolved())
    assert seeded["noise_keys"]["mode"] == "seeded" and "SIMULATION ONLY" in seeded["statement"]
    secret = privacy_record(DPQLearningConfig(**T5, noise="secret").resolved())
    assert secret["noise_keys"]["mode"] == "secret" and "SIMULATION" not in secret["statement"]
    with pytest.raises(ConfigError) as e:
        DPQLearningConfig(**T5, noise="public").resolved()
    assert e.value.field == "noise"
    # σ = 0 adds no noise: no word of noise keys (issue 53 item 8)
    none = privacy_record(DPQLearningConfig(sigma=0.0).resolved())
    assert "noise_keys" not in none and "SIMULATION" not in none["statement"]
    for sigma, says in ((0.0, False), (0.4, True)):
        cfg = DPQLearningConfig(sigma=sigma, episodes=10).resolved()
        summary = runner.summarize(runner.DPQLOutput(cfg, np.zeros((1, 10)), 0.0))
        assert ("noise" in summary) is says, summary


@pytest.mark.parametrize("overrides, field", [
    ({"sigma": -0.1}, "sigma"),
    ({}, "sigma"),  # neither σ nor ε
    ({**T5, "delta": 0.0}, "delta"),
    ({**T5, "delta": 1.0}, "delta"),
    ({**T5, "epsilon": 0.0}, "epsilon"),
    ({**T5, "epsilon": -1.0}, "epsilon"),
    ({**T5, "sensitivity_constant": 0.0}, "sensitivity_constant"),
    ({**T5, "sensitivity_constant": None}, "sensitivity_constant"),  # no silent default
    ({**T5, "k": 0.2}, "k"),  # 2k = 0.4 < 8.68·σ_min ≈ 0.56
    ({**T5, "sigma": 0.001}, "sigma"),  # below the calibration
    ({"sigma": 0.3, "delta": 1e-5}, "delta"),  # δ without ε
    ({"sigma": 0.3, "beta": 2.0}, "beta"),  # β without ε
    ({"sigma": 0.3, "episodes": 0}, "episodes"),
    ({"sigma": 0.5, "episodes": 2}, "episodes"),  # 100 transitions < one batch of 128
])
def test_bad_configuration_names_the_field(overrides, field):
    with pytest.raises(ConfigError) as e:
        DPQLearningConfig(**overrides).resolved()
    assert e.value.field == field


# --- learning ---------------------------------------------------------------------------------
@pytest.mark.learning
def test_non_private_qlearning_learns_well_above_random():
    """σ = 0, 2 seeds × 30 episodes. A random policy returns 10.9 on average (per-episode sd
    ≈ 2.7, so a 10-episode mean is 10.9 ± 0.9); we require every seed's last 10 episodes to
    average ≥ 17, more than 6 s.d. above random (the optimum is 20.7).

    Only σ = 0 runs here: that noise changes training and that a run is reproducible bit for
    bit are checked on the short run of the noise-store test below (the same program there).
    """
    cfg = DPQLearningConfig(sigma=0.0, episodes=30, seeds=2).resolved()
    returns, _, overflow = DPQLearning(cfg).train_many(run_keys(0, 2), jnp.array([0.0]))
    final = np.asarray(returns)[0, :, -10:].mean(-1)
    assert not bool(np.asarray(overflow).any())
    assert np.all(final >= 17.0), final


@pytest.mark.product_compile  # the chunked run's floats against the one-program run's
def test_noise_store_capacity_bound_holds_with_a_wrapping_replay():
    """The stores are sized by 'every queried state was in the replay during the block'; a
    replay that wraps many times within a block (130 slots, 100-step blocks) must not overflow.

    Issue 53: a run goes a chunk of episodes per compiled call so that progress shows between
    calls; one episode per call gives the one-program run's floats bit for bit, and progress
    sees each chunk's episodes as they end.

    The one program also trains σ = 0 and σ = 0.5 again: noise changes training, and a run is
    reproducible bit for bit (the σ = 0.5 run twice in one call, and again chunked)."""
    cfg = DPQLearningConfig(sigma=0.5, episodes=4, noise_reset_episodes=2,
                            replay_capacity=130, seed=1, seeds=2).resolved()
    algo = DPQLearning(cfg)
    assert algo.noise_capacity == algo.target_noise_capacity == 130 + 100
    returns, theta, overflow = algo.train_many(run_keys(1, 2), jnp.array([0.5, 0.0, 0.5]))
    assert not bool(np.asarray(overflow).any())
    r = np.asarray(returns)
    np.testing.assert_array_equal(r[0], r[2])
    assert not np.array_equal(r[0], r[1])
    seen = []
    chunked, _, chunked_theta = runner.train_grid(
        cfg, [0.5], chunk_episodes=1, progress=lambda done, so_far: seen.append((done, so_far)))
    np.testing.assert_array_equal(chunked, r[:1])
    np.testing.assert_array_equal(chunked_theta, np.asarray(theta)[:1])
    assert [done for done, _ in seen] == [1, 2, 3, 4]
    for done, so_far in seen:
        np.testing.assert_array_equal(so_far, chunked[..., :done])


# --- command line -----------------------------------------------------------------------------
@pytest.fixture
def no_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("computation started despite invalid options")

    monkeypatch.setattr(runner, "run_dp_qlearning", forbidden)


@pytest.mark.parametrize("args, option", [
    (["--gp-scale", "-1"], "--gp-scale"),
    ([], "--gp-scale"),
    (["--epsilon", "0.5", "--delta", "1e-5", "--k", "5"], "--sensitivity-constant"),
    (["--epsilon", "0", "--delta", "1e-5", "--k", "5", "--sensitivity-constant", "1"],
     "--epsilon"),
    (["--epsilon", "0.5", "--delta", "2", "--k", "5", "--sensitivity-constant", "1"],
     "--delta"),
    (["--epsilon", "0.5", "--delta", "1e-5", "--k", "5", "--sensitivity-constant", "-1"],
     "--sensitivity-constant"),
    (["--epsilon", "0.5", "--delta", "1e-5", "--k", "0.1", "--sensitivity-constant", "1e-4"],
     "--k"),
    (["--gp-scale", "0.2", "--trials", "0"], "--trials"),
    (["--gp-scale", "0.2", "--secure-noise"], "--secure-noise: float-safe noise does not apply"),
])
def test_cli_bad_input_one_line_exit_2(args, option, capsys, tmp_path, no_compute):
    out = tmp_path / "run"
    rc = cli.main(["run", "dp-qlearning", *args, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and option in err, err
    assert not out.exists()


def test_cli_run_writes_results_with_the_theorem5_record(tmp_path, monkeypatch, capsys):
    """The run also counts what Theorem 5 composes, as the run makes it: T/B noisy gradient
    updates (environment steps after which θ moved; before the replay holds a batch the
    computed step is discarded) and J noise functions per network (episodes that begin with
    both noise stores empty: the initial ones and every reset that a later episode uses);
    privacy.json must state the same T/B and J."""
    counts = {"updates": 0, "functions": 0}

    def add(name):
        def bump(flag):
            counts[name] += int(flag)
        return bump

    env_step, episode = DPQLearning.env_step, DPQLearning.episode

    def counted_step(self, carry, key, sigma):
        new, reward = env_step(self, carry, key, sigma)
        jax.debug.callback(add("updates"), jnp.any(new[0].theta != carry[0].theta))
        return new, reward

    def counted_episode(self, ts, inp, sigma):
        jax.debug.callback(add("functions"), (ts.noise.count == 0)
                           & (ts.target_noise.count == 0))
        return episode(self, ts, inp, sigma)

    monkeypatch.setattr(DPQLearning, "env_step", counted_step)
    monkeypatch.setattr(DPQLearning, "episode", counted_episode)
    monkeypatch.setattr(runner, "CHUNK_EPISODES", 1)  # a compiled call per episode
    out = tmp_path / "run"
    rc = cli.main(["run", "dp-qlearning", "--epsilon", "0.5", "--delta", "1e-5",
                   "--sensitivity-constant", "1e-4", "--k", "5", "--episodes", "3",
                   "--progress-every", "0.001", "--out", str(out)])
    assert rc == 0
    # progress (issue 53): its compiling phase, a line after each chunk with the mean return
    # so far, and the ε (spent by the one release, the trained Q-function) at the end
    err = capsys.readouterr().err
    assert "training: compiling …" in err and "compiled (and ran the first chunk) in" in err
    for done in (1, 2):
        assert re.search(rf"training: {done}/3 episodes, mean return [0-9.e+-]+, [0-9]+ s",
                         err), err
    assert re.search(r"training: 3/3 episodes, mean return [0-9.e+-]+, ε spent 0\.5, ", err), err
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "metrics.csv", "privacy.json", "summary.json", "plots"} <= names
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["private"] and privacy["theorem5"]["C"] == 1e-4
    assert privacy["theorem5"]["T_over_B"] == 3 * 50 - 128 + 1
    jax.effects_barrier()
    assert counts == {"updates": privacy["theorem5"]["T_over_B"],
                      "functions": privacy["theorem5"]["J"]}
    assert privacy["T_over_B"] == privacy["theorem5"]["T_over_B"]
    assert privacy["J"] == privacy["theorem5"]["J"]
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0] == "seed,episode,return" and len(rows) == 1 + 3
    # issue 51: the random baseline on Line1D (rewards in [0, 0.5] for 50 steps) and verdict
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < summary["random_return"] < 25 and summary["random_episodes"] == 10
    assert summary["learned"] is (summary["learned_test"]["difference_lower"] > 0)
    # results are never overwritten
    assert cli.main(["run", "dp-qlearning", "--gp-scale", "0.1", "--out", str(out)]) == 2


def test_cli_reproduce_small(tmp_path, capsys):
    """Also the Monte Carlo check of value iteration's return and the random policy's, on the
    run's reference returns (`assert_references_hold`)."""
    out = tmp_path / "rep"
    rc = cli.main(["reproduce", "dp-qlearning", "--trials", "2", "--episodes", "3",
                   "--out", str(out)])
    assert rc == 0
    tables = json.loads((out / "tables.json").read_text())
    assert [r["sigma"] for r in tables["rows"]] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert tables["references"]["monte_carlo_episodes"] == 20_000
    assert_references_hold(tables["references"])
    assert (out / "plots" / "returns.png").stat().st_size > 0
    assert "optimal policy" in (out / "tables.md").read_text()
    privacy = json.loads((out / "privacy.json").read_text())
    assert all(not p["private"] for p in privacy.values())
