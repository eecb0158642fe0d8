"""Did it learn? (issue 51): the random baseline every run is compared with
(`evaluation.random_returns`), the verdict's one-sided Welch t-test (`evaluation.verdict`),
the line a run ends with, and the plots' titles, axes, legends and random line (issue 53)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from privrl.envs.task import make_task
from privrl.evaluation import (
    RANDOM_EPISODES_HOST,
    random_baseline,
    random_returns,
    verdict,
    verdict_line,
    verdict_rows,
)


# --- the verdict's statistics ----------------------------------------------------------------
@pytest.fixture(scope="module")
def random_sample():
    """500 returns of a 'random policy': N(22, 10²), CartPole-like."""
    return np.random.default_rng(0).normal(22.0, 10.0, 500)


def test_a_run_well_above_random_learned(random_sample):
    final = np.random.default_rng(1).normal(60.0, 30.0, 100)
    v = verdict(final, random_sample)
    assert v.learned and not v.below
    # the bound is the Welch t bound: difference ≈ 38, standard error ≈ 3.1, t(0.95) ≈ 1.66
    se = np.sqrt(final.var(ddof=1) / 100 + random_sample.var(ddof=1) / 500)
    assert v.lower == pytest.approx(final.mean() - random_sample.mean() - 1.66 * se, abs=0.02 * se)
    s = v.fields()
    assert s["learned"] is True and s["random_return"] == pytest.approx(random_sample.mean())
    lo, hi = s["random_return_ci"]
    assert lo < s["random_return"] < hi and hi - lo == pytest.approx(
        2 * 1.965 * random_sample.std(ddof=1) / np.sqrt(500), rel=1e-3)
    assert "one-sided Welch t-test at 95%" in s["learned_test"]["test"]
    assert verdict_line(s).startswith("Learned: the final return ")
    assert dict(verdict_rows(s))["learned? (final − random > 0, one-sided 95%)"].startswith("yes")


def test_a_run_at_random_did_not_learn(random_sample):
    """The same distribution as random: no verdict of learning (at 95%, a false 'learned' has
    probability 5%; this seed's draw is checked to be an ordinary one, |t| < 1)."""
    final = np.random.default_rng(2).normal(22.0, 10.0, 100)
    v = verdict(final, random_sample)
    assert abs(final.mean() - random_sample.mean()) < 1.2  # |t| < 1 for this draw
    assert not v.learned and not v.below
    line = verdict_line(v.fields())
    assert line.startswith("Did not learn:") and "not above a random policy's" in line


def test_a_run_below_random_says_so(random_sample):
    final = np.random.default_rng(3).normal(9.0, 1.0, 50)  # a greedy policy that falls at once
    v = verdict(final, random_sample)
    assert not v.learned and v.below and v.upper < 0
    s = v.fields()
    assert s["learned"] is False and s["learned_test"]["below_random"] is True
    assert "is below a random policy's" in verdict_line(s)


def test_too_few_final_returns_are_not_counted_as_learned(random_sample):
    v = verdict([500.0, np.nan], random_sample)
    assert not v.learned and np.isnan(v.lower)
    assert verdict_line(v.fields()).startswith("Did it learn? Not shown")


# --- the random baseline -----------------------------------------------------------------------
def test_random_returns_on_cartpole_are_a_random_policys_and_seeded():
    """A uniform-random policy on CartPole-v1 lasts about 22 steps on average (the known
    figure; std ≈ 12, so 200 episodes' mean is within ±3 of it at > 3 sigma). Same seed,
    same returns; another seed, others."""
    task = make_task("gymnax:CartPole-v1")
    r = random_returns(task, 200, seed=7)
    assert r.shape == (200,) and r.mean() == pytest.approx(22.0, abs=3.0)
    np.testing.assert_array_equal(r, random_returns(task, 200, seed=7))
    assert not np.array_equal(r, random_returns(task, 200, seed=8))


def test_random_returns_on_a_box_task_and_a_runs_baseline_on_a_host_task():
    """Pendulum's random actions are uniform in [−2, 2]: every 20-step return is negative and
    far from the optimum's 0; a run's baseline on a Gymnasium task plays at most
    RANDOM_EPISODES_HOST episodes."""
    r = random_returns(make_task("gymnax:Pendulum-v1"), 16, seed=0, max_steps=20)
    assert r.shape == (16,) and np.all(r < -1.0)
    host = random_baseline(make_task("gymnasium:CartPole-v1"), 1000, seed=0)
    assert host.shape == (RANDOM_EPISODES_HOST,) and 12 < host.mean() < 40


def test_a_baseline_on_an_equal_task_built_afresh_compiles_nothing(compiles):
    """Every run builds its task afresh: the baseline's programs (its agents' draws, its
    rollout) are found again in JAX's cache for an equal task (same environment, private
    fields, episode cap), and give the same returns. Before, each call compiled both again."""
    from privrl.envs.task import PrivateParam

    def task():
        return make_task("gymnax:CartPole-v1", [PrivateParam("gravity", values=(9.7, 9.9))])

    first = random_returns(task(), 24, seed=5, max_steps=30)
    with compiles() as compiled:
        again = random_returns(task(), 24, seed=5, max_steps=30)
    assert compiled == []
    np.testing.assert_array_equal(again, first)


def test_a_head_without_a_key_is_never_a_cached_rollouts(monkeypatch, compiles):
    """A policy head the program key cannot see into gives the rollout no key at all (its
    program compiled for the call), never one shared by every such head."""
    import privrl.evaluation as ev

    task = make_task("gymnax:CartPole-v1")
    keyed, head = ev._program_key, type(task.head)
    monkeypatch.setattr(ev, "_program_key",
                        lambda v, depth=0: None if type(v) is head else keyed(v, depth))
    first = random_returns(task, 8, seed=3, max_steps=12)
    with compiles() as compiled:
        again = random_returns(task, 8, seed=3, max_steps=12)
    assert "jit(_rollout)" in compiled
    np.testing.assert_array_equal(again, first)


def test_the_baselines_programs_are_shared_only_by_equal_tasks():
    """The key a baseline's program is found under tells apart what traces differently:
    numbers by type and bits, private fields by their values, environments by type and
    attributes; a closure (whose captured values it cannot see) has no key: compiled afresh."""
    import gymnax

    from privrl.envs.task import PrivateParam
    from privrl.evaluation import _program_key

    keys = [_program_key(v) for v in (0.0, -0.0, 1, 1.0, True, np.float32(1), (1,), [1])]
    assert len(set(keys)) == len(keys)
    g = [PrivateParam("gravity", values=(9.8,)), PrivateParam("gravity", values=(9.7,)),
         PrivateParam("gravity", 9.0, 10.0), PrivateParam("length", values=(9.8,))]
    assert len({_program_key(p) for p in g}) == len(g)
    assert _program_key(PrivateParam("gravity", values=(9.8,))) == _program_key(g[0])
    assert _program_key(gymnax.make("CartPole-v1")[0]) == _program_key(
        gymnax.make("CartPole-v1")[0]) != _program_key(gymnax.make("Acrobot-v1")[0])
    lake = [gymnax.make("FrozenLake-misc")[0] for _ in range(2)]
    assert _program_key(lake[0]) == _program_key(lake[1])
    lake[1].is_slippery = not lake[1].is_slippery
    assert _program_key(lake[0]) != _program_key(lake[1])
    scale = 2.0
    assert _program_key(PrivateParam("gravity", fn=lambda k, i: scale * i)) is None
    assert _program_key(functools.partial(np.add, 1)) is None  # a C type: state not in __dict__
    assert _program_key(lake[0].step_env) is None


# --- plots: titles, axes in words, plurals, the random line --------------------------------------
def _drawn(monkeypatch, draw) -> dict:
    """The title, axis labels and legend texts of the figure `draw(path)` saves."""
    import matplotlib.figure

    seen = {}

    def savefig(fig, path, **kw):
        ax = fig.axes[0]
        seen.update(title=ax.get_title(), xlabel=ax.get_xlabel(), ylabel=ax.get_ylabel(),
                    legend=[t.get_text() for t in ax.get_legend().get_texts()],
                    lines=[line.get_ydata()[0] for line in ax.get_lines()])

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    draw()
    return seen


def test_plots_name_the_task_and_epsilon_say_their_axes_in_words_and_draw_random(
        monkeypatch, tmp_path):
    from privrl.output import plot_curves, plot_title
    from privrl.systems.fedpg.local import plot_returns
    from privrl.systems.pgc_a3c.metrics import plot_scores

    title = plot_title("PGC-A3C", "gymnax:Acrobot-v1", "laplace, ε = 5 per agent")
    scores = np.random.default_rng(0).normal(-400, 50, (1, 60)).astype(np.float32)
    pgc = _drawn(monkeypatch, lambda: plot_scores(tmp_path / "a.png", scores,
                                                  np.array([60]), 10, title, None, -497.0))
    assert "gymnax:Acrobot-v1" in pgc["title"] and "ε = 5" in pgc["title"]
    assert pgc["ylabel"] == "mean return over the last 10 episodes"
    assert "mean over 1 trial" in pgc["legend"] and "random policy: -497" in pgc["legend"]
    assert -497.0 in pgc["lines"]

    fed = _drawn(monkeypatch, lambda: plot_returns(
        tmp_path / "b.png", {"FedPG-Cen": (np.arange(5.0)[None], np.ones((1, 5)))}, 5, title,
        None, None, 22.5))
    assert "FedPG-Cen (mean of 1 seed)" in fed["legend"]
    assert "random policy: 22.5" in fed["legend"] and "seeds)" not in " ".join(fed["legend"])

    ep = _drawn(monkeypatch, lambda: plot_curves(
        tmp_path / "c.png", {"dp-reinforce": np.ones((3, 40))}, title, "training episode",
        "greedy evaluation return", random=20.0, window=25))
    assert ep["ylabel"] == "mean greedy evaluation return\nover the last 25 training episodes"
    assert "dp-reinforce, mean of 3 seeds" in ep["legend"]
    assert "random policy: 20" in ep["legend"]


def test_fedrl_plot_title_names_its_noise_and_epsilon():
    """Issue 53 item 7, FedRL's plot (it named the task and system only): the Q-output noise's
    σ, and the ε where the record states one; a baseline says it has none."""
    from types import SimpleNamespace

    from privrl.systems.fedrl.config import BaselineConfig, FedRLConfig
    from privrl.systems.fedrl.local import privacy_label

    def label(config, guarantee=None):
        return privacy_label(SimpleNamespace(config=config, privacy={"guarantee": guarantee}))

    assert label(FedRLConfig()) == "Gaussian Q-output noise σ = 1, unbounded outputs: no ε"
    assert label(FedRLConfig(bounded=2.0), {"epsilon": 3.21, "delta": 1e-5}) == (
        "Gaussian Q-output noise σ = 1, outputs clipped to 2: ε = 3.21 (δ = 1e-05)")
    assert label(FedRLConfig(noise_sigma=0.0)) == "no Q-output noise (σ = 0)"
    assert label(BaselineConfig()) == "non-private baseline (no noise)"
