"""DP-REINFORCE's adaptive levers (issue 51): the adaptive clip's count is released with the
gradients and its ε is counted (the accountant composes both; the statement says so), the
`adaptive` preset runs, and the kept policy is never below the start on the public simulator."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.federation.adapt import PUBLIC_EVAL_SALT, PublicCandidates
from privrl.privacy.accounting import Accountant, PrivacyEvent
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


def test_a_collapse_reverts_to_the_best_and_lowers_the_step(monkeypatch):
    cfg = ReinforceConfig.from_preset("adaptive", **TINY).resolved()
    algo = Reinforce(cfg)
    state = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), 2))
    scripted = iter([[0.0, 0.0], [50.0, 50.0], [49.0, 1.0]])  # trial 1 collapses at the 3rd
    monkeypatch.setattr(algo, "public_returns", lambda thetas, key: np.asarray(
        next(scripted))[:, None] + np.arange(4.0)[None, :])
    candidates = PublicCandidates(algo.public_returns, cfg.seed, cfg.backoff)
    state = offer_candidates(candidates, state, None)
    state = offer_candidates(candidates, state._replace(theta=state.theta + 1.0), None)
    best = np.asarray(state.theta)
    state = offer_candidates(candidates, state._replace(theta=state.theta + 5.0), None)
    theta, scale = np.asarray(state.theta), np.asarray(state.opt_state.scale)
    np.testing.assert_array_equal(theta[1], best[1])  # reverted
    np.testing.assert_array_equal(theta[0], best[0] + 5.0)  # within its noise: kept going
    np.testing.assert_array_equal(scale, [1.0, cfg.backoff])


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
