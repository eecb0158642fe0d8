"""DP-REINFORCE's and DP-DQN's adaptive levers (issue 51): the adaptive clip's count is released
with the gradients and its ε is counted (the accountant composes both; the statement says so),
the `adaptive` presets run, and the kept policy is never below the start on the public
simulator."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.federation.adapt import PUBLIC_EVAL_SALT, PublicCandidates
from privrl.privacy.accounting import Accountant, PrivacyEvent
from privrl.systems.dpsgd_rl.config import ObservationPrivacy
from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
from privrl.systems.dpsgd_rl.local import (
    offer_candidates,
    run_episodic,
    summarize,
)
from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

TINY = dict(dp=True, target_epsilon=5.0, episodes=4, seeds=2, hidden=8, batch_episodes=4,
            max_episode_steps=20, public_eval_every=2, public_eval_episodes=4)


@pytest.fixture(scope="module")
def adaptive_run():
    """The adaptive preset, tiny (it checks the bookkeeping, not learning): 2 trials of 4
    updates of 4 episodes, a candidate every 2 updates on 4 public episodes."""
    cfg = ReinforceConfig.from_preset("adaptive", **TINY)
    return run_episodic(Reinforce.settings_algorithm([cfg]), "dp-reinforce")


def test_the_clip_counts_epsilon_is_in_the_ledger_and_the_statement(adaptive_run):
    cfg = adaptive_run.config
    assert cfg.adaptive_clip and cfg.step_from_noise and cfg.public_eval_every == 2
    dp = adaptive_run.privacy["dpsgd"]
    z, z_delta, sb = (cfg.noise_multiplier, cfg.gradient_noise_multiplier,
                      cfg.clip_count_stddev)
    assert z_delta > z  # the gradient gives up part of the noise's ε to the count
    assert sorted(e["noise_multiplier"] for e in dp["events"]) == sorted([z_delta, 2 * sb])
    # The stated ε is the target's, counting both; without the count it would be less.
    assert dp["epsilon"] == pytest.approx(5.0, abs=1e-3)
    alone = Accountant(cfg.accountant)
    alone.compose(PrivacyEvent("gaussian", z_delta), 1)
    assert alone.epsilon(cfg.delta) < dp["epsilon"] - 0.2
    assert dp["adaptive_clip"]["count_stddev_sigma_b"] == sb
    assert "noised counts of the units within it" in dp["statement"]
    assert "post-processing" in adaptive_run.privacy["levers"]["note"]


def test_the_preset_runs_and_keeps_a_policy_never_below_its_start(adaptive_run):
    s = summarize(adaptive_run)
    levers = s["levers"]
    assert levers["adaptive_clip"]["final_clip"] != [1.0, 1.0]  # the clip moved
    step = levers["step_from_noise"]
    assert 0 < step["step_size"] < step["learning_rate"]  # the noise lowered it
    cand = levers["public_candidates"]
    assert "default parameters" in cand["simulator"]
    for k in range(2):
        assert cand["best_return"][k] >= cand["start_return"][k]
        assert cand["best_return"][k] >= cand["last_return"][k]
    # The saved policy is the best candidate: re-evaluated on the same public episodes.
    algo = Reinforce(adaptive_run.config)
    key = jax.random.fold_in(jax.random.key(adaptive_run.config.seed), PUBLIC_EVAL_SALT)
    thetas = jnp.asarray(adaptive_run.policy.theta).reshape(2, -1)  # policy.npz: (trials, 1, d)
    again = algo.public_returns(thetas, key).mean(axis=1)
    np.testing.assert_allclose(again, cand["best_return"], rtol=1e-6)
    # The verdict reads the kept policy's fresh public returns, not the training curve.
    assert adaptive_run.final_returns.shape == (2, 25)
    assert s["final_policy_return"] == pytest.approx(adaptive_run.final_returns.mean())


@pytest.mark.parametrize("learner", ["dp-reinforce", "dp-dqn"])
def test_a_collapse_reverts_to_the_best_and_lowers_the_step(monkeypatch, learner):
    """DP-DQN's target network reverts with θ (its own best, not the collapsed one)."""
    dqn = learner == "dp-dqn"
    cls, config, tiny = (DQN, DQNConfig, DQN_TINY) if dqn else (Reinforce, ReinforceConfig, TINY)
    cfg = config.from_preset("adaptive", **tiny).resolved()
    algo = cls(cfg)
    state = jax.jit(jax.vmap(algo.init))(  # one program, not one per op
        jax.random.split(jax.random.key(0), 2))
    scripted = iter([[0.0, 0.0], [50.0, 50.0], [49.0, 1.0]])  # trial 1 collapses at the 3rd
    monkeypatch.setattr(algo, "public_returns", lambda thetas, key: np.asarray(
        next(scripted))[:, None] + np.arange(4.0)[None, :])
    candidates = PublicCandidates(algo.public_returns, cfg.seed, cfg.backoff)

    def moved(state, by):  # θ moved by `by`, a DQN's target by 2·by
        state = state._replace(theta=state.theta + by)
        return state._replace(target=state.target + 2 * by) if dqn else state

    state = offer_candidates(candidates, state, None)
    state = offer_candidates(candidates, moved(state, 1.0), None)
    best = np.asarray(state.theta)
    best_target = np.asarray(state.target) if dqn else None
    state = offer_candidates(candidates, moved(state, 5.0), None)
    theta, scale = np.asarray(state.theta), np.asarray(state.opt_state.scale)
    np.testing.assert_array_equal(theta[1], best[1])  # reverted
    np.testing.assert_array_equal(theta[0], best[0] + 5.0)  # within its noise: kept going
    np.testing.assert_array_equal(scale, [1.0, cfg.backoff])
    if dqn:
        np.testing.assert_array_equal(np.asarray(state.target)[1], best_target[1])
        np.testing.assert_array_equal(np.asarray(state.target)[0], best_target[0] + 10.0)


def test_levers_are_refused_where_they_do_not_apply():
    base = ReinforceConfig.from_preset("adaptive", **TINY)
    with pytest.raises(ConfigError, match="adaptive_clip"):
        replace(base, target_epsilon=None, noise_multiplier=0.0).resolved()
    with pytest.raises(ConfigError, match="clip_count_stddev"):
        replace(base, clip_count_stddev=0.1).resolved()  # must exceed σ/2
    with pytest.raises(ConfigError, match="backoff"):
        replace(base, backoff=0.0).resolved()
    with pytest.raises(ConfigError, match="clip_count_stddev"):
        replace(base, adaptive_clip=False, clip_count_stddev=1.0).resolved()
    paper = ReinforceConfig()
    assert not (paper.adaptive_clip or paper.step_from_noise or paper.public_eval_every)
    # A lever keeps the run out of a program of settings (its levers are not data there).
    assert Reinforce.one_program_field([base.resolved()]) == "adaptive_clip"


# --- DP-DQN's `adaptive` preset: the same levers (privrl.systems.dpsgd_rl.levers) -------------

# ε = 1 (σ ≈ 5.5): the PLD σ search at q = 0.16 costs 0.8 CPU-s, 3.4 at ε = 5 (σ ≈ 1.6)
DQN_TINY = dict(dp=True, target_epsilon=1.0, episodes=4, seeds=2, hidden=(8,), buffer_size=200,
                batch_size=32, learning_starts=32, max_episode_steps=20, public_eval_every=2,
                public_eval_episodes=4, step_from_noise=True)  # the preset's third lever is off


@pytest.fixture(scope="module")
def dqn_adaptive_run():
    """DP-DQN's adaptive preset, tiny (bookkeeping, not learning): 2 trials of 4 episodes of
    at most 20 steps, a 200-transition buffer, a candidate every 2 episodes on 4 public
    episodes."""
    cfg = DQNConfig.from_preset("adaptive", **DQN_TINY)
    return run_episodic(DQN.settings_algorithm([cfg]), "dp-dqn")


def test_dqn_adaptive_preset_is_dp_sgd_with_the_levers():
    adaptive, dp_sgd = DQNConfig.from_preset("adaptive"), DQNConfig.from_preset("dp-sgd")
    assert adaptive.adaptive_clip and adaptive.public_eval_every == 10
    assert not adaptive.step_from_noise  # measured to hurt DP-DQN (benchmarks/log/26-dqn.md)
    assert replace(adaptive, adaptive_clip=False, public_eval_every=None,
                   preset="dp-sgd") == dp_sgd
    for other in (DQNConfig(), dp_sgd, DQNConfig.from_preset("dp-solve")):
        assert not other.levers_on  # paper, dp-sgd and dp-solve stay as they were


def test_dqn_clip_count_is_in_the_transitions_account(dqn_adaptive_run):
    cfg = dqn_adaptive_run.config
    dp = dqn_adaptive_run.privacy["dpsgd"]
    # σ is calibrated as without the lever (same target ε, same releases); the gradient gets
    # the larger z_Δ, the count the rest: one Poisson-sampled Gaussian of multiplier σ.
    plain = replace(DQNConfig.from_preset("dp-sgd", **{**DQN_TINY, "public_eval_every": None}),
                    max_episode_steps=20).resolved()
    assert cfg.noise_multiplier == pytest.approx(plain.noise_multiplier)
    z, z_delta, sb = cfg.noise_multiplier, cfg.gradient_noise_multiplier, cfg.clip_count_stddev
    assert z_delta > z and (z_delta ** -2 + (2 * sb) ** -2) ** -0.5 == pytest.approx(z)
    [event] = dp["events"]
    assert event["noise_multiplier"] == pytest.approx(z) and event["sampling"] == "poisson"
    # The gradient alone, at its own multiplier over the same releases, would state less ε:
    # the count's share is counted.
    alone = Accountant(cfg.accountant)
    alone.compose(PrivacyEvent("gaussian", z_delta, "poisson", cfg.q), event["count"])
    assert alone.epsilon(cfg.delta) < dp["epsilon"] - 0.05
    assert dp["adaptive_clip"]["count_stddev_sigma_b"] == sb
    assert "same Poisson sample" in dp["adaptive_clip"]["how_counted"]
    assert "noised counts of the units within it" in dp["statement"]


def test_dqn_lever_record_and_kept_policy(dqn_adaptive_run):
    s = summarize(dqn_adaptive_run)
    levers = dqn_adaptive_run.privacy["levers"]
    assert levers["adaptive_clip"] == s["levers"]["adaptive_clip"]
    assert levers["adaptive_clip"]["final_clip"] != [10.0, 10.0]  # the clip moved
    assert "post-processing" in levers["note"]
    step = levers["step_from_noise"]
    assert 0 < step["step_size"] < step["learning_rate"]
    cand = levers["public_candidates"]
    assert "default parameters" in cand["simulator"]
    for k in range(2):
        assert cand["best_return"][k] >= max(cand["start_return"][k], cand["last_return"][k])
    assert dqn_adaptive_run.final_returns.shape == (2, 25)


def test_dqn_levers_are_refused_where_they_do_not_apply():
    base = DQNConfig.from_preset("adaptive", **DQN_TINY)
    with pytest.raises(ConfigError, match=r"obs\.mode"):  # LDP observations
        replace(base, dp=False, target_epsilon=None, adaptive_clip=False,
                obs=ObservationPrivacy(mode="box")).resolved()
    with pytest.raises(ConfigError, match="adaptive_clip"):  # nothing noised to count with
        replace(base, target_epsilon=None, noise_multiplier=0.0).resolved()
    with pytest.raises(ConfigError, match="adaptive_clip"):  # no float-safe form
        replace(base, target_epsilon=None, noise_multiplier=1.0, sampling_probability=1.0,
                accountant="rdp", secure_noise=True).resolved()
    with pytest.raises(ConfigError, match="clip_count_stddev"):  # must exceed σ/2
        replace(base, clip_count_stddev=0.1).resolved()
    assert DQN.one_program_field([base.resolved()]) == "adaptive_clip"
