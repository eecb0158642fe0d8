"""FedPG-Cen's adaptive levers (issue 51): the `adaptive` preset's step size from the noise
level and best candidate on the public simulator are post-processing (the same ε, ledger and
account as without them), and the kept policy is never below the start on that simulator."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.federation.adapt import MAX_BACKOFFS, PUBLIC_EVAL_SALT
from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig
from privrl.systems.fedpg.local import (
    Released,
    account,
    offer_candidates,
    privacy_record,
    public_candidates,
    run_fedpg,
    summarize,
)
from privrl.systems.fedpg.runtimes import check_runtime

TINY = dict(agents=2, hidden=(4,), batch_min=2, batch_max=3, minibatch=1, inner_steps=1,
            max_episode_steps=20, budget=24, mechanism="gaussian", epsilon=5.0,
            public_eval_every=2, public_eval_episodes=4, trials=2)


@pytest.fixture(scope="module")
def adaptive_run():
    """The adaptive preset, tiny (it checks the bookkeeping, not learning): 2 trials, a
    candidate every 2 rounds on 4 public episodes."""
    return run_fedpg(FedPGConfig.from_preset("adaptive", **TINY))


def test_adaptive_levers_leave_the_epsilon_ledger_and_account_unchanged(adaptive_run):
    run = adaptive_run
    assert run.config.step_from_noise and run.config.public_eval_every == 2
    # Without the levers: the same σ, and the same record of the same releases.
    plain = replace(run.config, step_from_noise=False, public_eval_every=None).resolved()
    assert plain.noise_multiplier == run.config.noise_multiplier
    most = int(run.releases.max())
    assert most >= 3
    stated = privacy_record(run)
    levers = stated.pop("adaptive_levers")
    assert privacy_record(Released(plain, run.mechanism, run.ledger, run.releases,
                                   account(FedPG(plain), most))) == stated
    assert stated["accounting"]["epsilon"] <= 5.0
    assert "post-processing" in levers["note"]
    step = levers["step_from_noise"]
    assert 0 < step["step_size"] < step["learning_rate"]  # the noise lowered it


def test_kept_policy_is_the_best_public_candidate_never_below_the_start(adaptive_run):
    run = adaptive_run
    cand = summarize(run)["levers"]["public_candidates"]
    assert "default parameters" in cand["simulator"]
    for k in range(2):
        assert cand["best_return"][k] >= cand["start_return"][k]
        assert cand["best_return"][k] >= cand["last_return"][k]
    # Re-evaluated on the same public episodes, the saved policy's return is the best one.
    algo = FedPG(run.config)
    key = jax.random.fold_in(jax.random.key(run.config.seed), PUBLIC_EVAL_SALT)
    again = np.asarray(algo.public_returns(jnp.asarray(run.z[:, 0]), key)).mean(axis=1)
    np.testing.assert_allclose(again, cand["best_return"], rtol=1e-6)


def test_a_collapse_reverts_to_the_best_and_lowers_the_step(monkeypatch):
    cfg = FedPGConfig.from_preset("adaptive", **TINY).resolved()
    algo = FedPG(cfg)
    state = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), 2))
    scripted = iter([[0.0, 0.0], [50.0, 50.0], [49.0, 1.0]])  # trial 1 collapses at the 3rd
    monkeypatch.setattr(algo, "public_returns", lambda thetas, key: jnp.asarray(
        next(scripted))[:, None] + jnp.arange(4.0)[None, :])
    candidates = public_candidates(algo)
    state = offer_candidates(candidates, state, None)
    moved = lambda s, by: s._replace(gossip=s.gossip._replace(x=s.gossip.x + by))  # noqa: E731
    state = offer_candidates(candidates, moved(state, 1.0), None)
    best = np.asarray(state.gossip.x)
    state = offer_candidates(candidates, moved(state, 5.0), None)
    theta, scale = np.asarray(state.gossip.x), np.asarray(state.opt_state.scale)
    np.testing.assert_array_equal(theta[1], best[1])  # reverted
    np.testing.assert_array_equal(theta[0], best[0] + 5.0)  # within its noise: kept going
    np.testing.assert_array_equal(scale[:, 0], [1.0, cfg.backoff])
    assert cfg.backoff ** MAX_BACKOFFS > 0


def test_step_from_noise_follows_the_noise_and_levers_are_refused_where_they_do_not_apply():
    base = FedPGConfig.from_preset("adaptive", **TINY)
    steps = [FedPG(replace(base, epsilon=e).resolved()).step_size for e in (1.0, 5.0)]
    assert steps[0] < steps[1] < base.learning_rate
    none = replace(base, mechanism="none", epsilon=None).resolved()
    assert FedPG(none).step_size == base.learning_rate  # no noise: the configured step
    with pytest.raises(ConfigError, match="step_from_noise"):
        replace(base, mechanism="privunit").resolved()
    with pytest.raises(ConfigError, match="step_from_noise"):
        replace(base, algorithm="dec").resolved()
    with pytest.raises(ConfigError, match="backoff"):
        replace(base, backoff=0.0).resolved()
    with pytest.raises(ConfigError, match="public_eval_every"):
        check_runtime(replace(base, trials=1).resolved(), "flower")
    # The paper preset has none of them on; adaptive-continuous is continuous's learner.
    paper = FedPGConfig()
    assert not paper.step_from_noise and paper.public_eval_every is None
    cont = FedPGConfig.from_preset("adaptive-continuous")
    assert cont.gamma == FedPGConfig.from_preset("continuous").gamma and cont.step_from_noise


def test_step_from_noise_knows_the_distributed_noise_summed_over_the_fleet():
    """distributed-gaussian (user-level, the issue's K = 1,000 rows) adds σC once to the sum of
    the K reports: the step reads the calibrated discrete mechanism's σ and stays near η with
    K = 1,000, and shrinks with 4 agents at the same ε (the adaptive preset refused it)."""
    from privrl.federation.adapt import noise_step

    base = FedPGConfig.from_preset("adaptive", **{**TINY, "mechanism": "distributed-gaussian",
                                                  "epsilon": 2.0, "trials": 1})
    small, big = (FedPG(replace(base, agents=k).resolved()) for k in (4, 1000))
    sigma = big.mechanism.noise_multiplier
    assert big.step_noise_multiplier() == sigma
    assert big.step_size == pytest.approx(noise_step(base.learning_rate,
                                                     1000 / (big.dim * sigma ** 2), 1000 * 10))
    assert small.step_size < 0.5 * base.learning_rate < 0.99 * base.learning_rate < big.step_size
