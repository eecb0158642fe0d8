"""PGC-A3C's adaptive levers (issue 51): the adaptive clip's release is the release at the
adaptive clip, its ε is the plan's and the ledger's, and the run keeps the best candidate of
the public simulator, never one below the start."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.federation.adapt import PUBLIC_EVAL_SALT
from privrl.privacy import LaplaceMechanism
from privrl.systems.pgc_a3c.algorithm import JITTED_EPISODES, PGCA3C, PGCA3CConfig
from privrl.systems.pgc_a3c.local import privacy_record, run_pgc_a3c, summarize
from privrl.systems.pgc_a3c.runtimes import check_runtime


def test_scaled_release_is_the_release_at_the_adaptive_clip():
    # The agent releases ∇/s through Laplace at C_0 and the aggregator multiplies by s: the
    # same distribution (here the same floats, one key) as Laplace at C_t = s·C_0 on ∇.
    grad = jax.random.normal(jax.random.key(0), (40,)) * 0.3
    key = jax.random.key(1)
    for s in (0.1, 1.0, 7.5):
        ours = LaplaceMechanism(4.5, 0.01).privatize(key, grad / s).value * s
        direct = LaplaceMechanism(4.5, 0.01 * s).privatize(key, grad).value
        np.testing.assert_allclose(ours, direct, rtol=2e-5, atol=1e-9)


@pytest.fixture(scope="module")
def adaptive_run():
    """The adaptive preset on CartPole, 1 trial, 180 submissions, a candidate every 2 rounds
    on 4 public episodes (tiny: it checks the bookkeeping, not learning)."""
    cfg = PGCA3CConfig.from_preset("adaptive", trials=1, submissions=180,
                                   public_eval_every=2, public_eval_episodes=4)
    return run_pgc_a3c(cfg)


def test_adaptive_clips_epsilon_is_in_the_ledger_and_privacy_json(adaptive_run):
    out = adaptive_run
    ledger = out.ledger.summary()
    # One agent, one report: the gradient at 4.5 and its clip bit at 0.5 compose to ε = 5.
    assert [e["epsilon"] for e in ledger["events"]] == [5.0]
    assert "adaptive-clip bit" in ledger["events"][0]["unit"]
    assert ledger["per_agent_epsilon"]["max"] == pytest.approx(5.0)
    record = privacy_record(out)
    assert record["mechanism"]["epsilon"] == pytest.approx(4.5)
    clip = record["adaptive_levers"]["adaptive_clip"]
    assert clip["epsilon_update_per_report"] == pytest.approx(4.5)
    assert clip["epsilon_clip_bit_per_report"] == pytest.approx(0.5)
    assert record["epsilon_per_report"] == pytest.approx(5.0)
    # The clip moved (CartPole's gradients are far above 0.01: it grows).
    assert clip["final_clip"][0] > 0.01
    assert "public" in record["adaptive_levers"]["note"]
    # The report is the policy's gradient alone (critic none: no value head), and says so
    assert "policy gradient" in record["statement"]
    assert record["mechanism"]["upload_bytes_per_report"] == 4 * PGCA3C(out.config).dim == 4 * 58


def test_final_policy_is_the_best_public_candidate_never_below_the_start(adaptive_run):
    out = adaptive_run
    cand = summarize(out)["levers"]["public_candidates"]
    assert cand["best_return"][0] >= cand["start_return"][0]
    assert cand["best_return"][0] >= cand["last_return"][0]
    # Re-evaluated on the same public episodes, the saved policy's return is the best one.
    algo = PGCA3C(out.config)
    key = jax.random.fold_in(jax.random.key(out.config.seed), PUBLIC_EVAL_SALT)
    again = np.asarray(algo.public_returns(jnp.asarray(out.theta), key)).mean(axis=1)
    assert again[0] == pytest.approx(cand["best_return"][0], rel=1e-6)


def test_levers_are_refused_where_they_do_not_apply():
    base = PGCA3CConfig.from_preset("adaptive")
    with pytest.raises(ConfigError, match="adaptive_clip"):
        replace(base, mechanism="prs").resolved()
    with pytest.raises(ConfigError, match="clip_epsilon_share"):
        replace(base, clip_epsilon_share=1.0).resolved()
    with pytest.raises(ConfigError, match="public_eval_episodes"):
        replace(base, public_eval_episodes=1).resolved()
    with pytest.raises(ConfigError, match="adaptive_clip"):
        check_runtime(base.resolved(), "ray")
    # The paper preset has none of them on.
    paper = PGCA3CConfig()
    assert not paper.adaptive_clip and not paper.step_from_noise
    assert paper.public_eval_every is None


def test_a_report_is_the_mean_gradient_of_its_agents_episodes():
    # E = 3: agent i plays episodes 3i .. 3i + 2 on its own dynamics; its report's gradient
    # is their mean, its score their mean return.
    cfg = PGCA3CConfig(mechanism="none", parallel_agents=2, episodes_per_report=3,
                       action_selection="sample")
    algo = PGCA3C(cfg)

    def round_of_reports() -> tuple:  # one program, not the round's ops one at a time
        theta = algo.model.init(jax.random.key(0))
        plan = algo.agents_plan(jnp.int32(0), jax.random.key(1), jax.random.key(2),
                                jnp.arange(2), jnp.ones(2, bool))
        traj = algo._one_trial(JITTED_EPISODES, theta, plan)
        return (plan.params.gravity, algo.episode_grads(theta, traj),
                algo.report_grads(theta, traj), algo.report_scores(traj), algo.score(traj))

    gravity, each, reports, report_scores, scores = map(np.asarray, jax.jit(round_of_reports)())
    # every agent's three episodes share its private gravity
    assert gravity.shape == (6,) and np.all(gravity.reshape(2, 3) == gravity[::3, None])
    np.testing.assert_allclose(reports, each.reshape(2, 3, -1).mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(report_scores, scores.reshape(2, 3).mean(axis=1))
    assert len(set(scores.tolist())) > 1  # different episodes
    with pytest.raises(ConfigError, match="episodes_per_report"):
        check_runtime(replace(cfg, episodes_per_report=2), "ray")
