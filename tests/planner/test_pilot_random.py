"""The plan's random baseline is a measured floor: enough episodes of the one random-policy
function every run's verdict uses (`privrl.evaluation.random_returns`) to know its mean to a
tenth of one episode's spread, with its 95% interval in plan.json. Session 9's pilot played
max(32, gradient_episodes) = 64 episodes: on Pendulum (an episode's return spreads by about
290) that mean is ±71 at 95%, and corridor's was 0.15 off (benchmarks/log/26-fedrows.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.evaluation import random_returns
from privrl.main import main
from privrl.planner import api, pilot
from privrl.planner import systems as sy

ENV = "gymnax:Pendulum-v1"


def test_the_plans_random_floor_is_known_to_a_tenth_of_an_episodes_spread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # no training here: the non-private pilot is a curve that climbs from random, and the
    # gradient sample is noise of the proxy's shape (neither is what this test is about)
    x = np.arange(1.0, 1001.0)
    curve = sy.Curve(x, np.linspace(-1250.0, -200.0, x.size), 0.0)
    monkeypatch.setattr(api, "_nonprivate_pilot", lambda *a, **k: (curve, {}))
    monkeypatch.setattr(pilot, "gradient_sample", lambda task, hidden, n, seed: (
        np.random.default_rng(seed).normal(size=(n, 16)), 16))
    cfg = api.PlanConfig(env=ENV, epsilon=5.0, sweep=False, gradient_episodes=8)
    p = api.plan("dp-reinforce", cfg, log=lambda s: None).pilot
    lo, hi = p["random_return_ci"]
    assert p["random_episodes"] == cfg.random_episodes
    assert p["random_return"] == pytest.approx(
        float(random_returns(api.task_of(cfg), cfg.random_episodes, cfg.seed).mean()))
    reference = random_returns(api.task_of(cfg), 4000, seed=1)  # other keys, 4x the episodes
    assert (hi - lo) / 2 <= 0.1 * reference.std(ddof=1)
    assert lo <= reference.mean() <= hi


def test_too_few_random_episodes_is_refused_by_name(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    args = ["plan", "dp-reinforce", "--env", ENV, "--epsilon", "5", "--no-progress",
            "--out", str(tmp_path / "out")]
    assert main([*args, "--random-episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--random-episodes" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
