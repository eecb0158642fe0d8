"""`privrl plan fedpg-cen` end to end at a tiny size: the fleet sweep checks the
recommendation as one compiled program per K (every ε of a K together: the sampled secure
sum's σ as each trial's data) plus one for the non-private line, writes plan.json and the
frontier, says plainly that it used only the simulator, prints the recommended `privrl run`
as its last line, and no dp-accounting warning reaches stderr (q = 0.5 at K = 100, where
its RDP series used to warn hundreds of times a plan)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from privrl.main import main
from privrl.planner import api, pilot
from privrl.planner import systems as sy
from privrl.planner.api import SIMULATOR_ONLY


# A plan end to end: ≈ 27 CPU-s alone (pytest included), a quarter of it calibrating the q = 0.5
# settings' σ, most of the rest compiling the sweep's three programs. The second K is
# 50 (q = 1: unsampled, so each ε of the σ search is the analytic Gaussian's), not 200 (q = 0.25:
# two more searches over subsampled-Gaussian PLDs, 9 CPU-s more; benchmarks/log/34-suite.md);
# K = 100 keeps q = 0.5, where dp-accounting's RDP series used to warn. The task is CartPole with
# 50-step episodes (tests/planner/fleet_task.py) and a setting runs 1 report's rounds, not 2:
# running the three programs was ~9 of the test's ~30 CPU-s; they are compiled and run for real
# all the same, each K as one program, and every setting still plays 2 rounds or more
# (benchmarks/log/37-fedpg2.md).
@pytest.mark.slow
def test_the_fleet_plan_sweeps_each_k_as_one_program(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pilot is not what this test is about: a curve that climbs from random, and a
    # gradient sample of the proxy's shape; the sweep runs for real, a budget of 1 report's
    # rounds a setting (at least 2 rounds: a round's episodes vary)
    x = np.arange(1.0, 361.0)
    curve = sy.Curve(x, np.linspace(20.0, 200.0, x.size), 0.0)
    monkeypatch.setattr(api, "_nonprivate_pilot", lambda *a, **k: (curve, {}))
    monkeypatch.setattr(pilot, "gradient_sample", lambda task, hidden, n, seed: (
        np.random.default_rng(seed).normal(size=(n, 16)) * 0.1, 16))
    monkeypatch.setattr(sy, "FEDPG_FLEET_ROUNDS", (1,))
    out = tmp_path / "plan"
    assert main(["plan", "fedpg-cen", "--env", "planner.fleet_task:short_cartpole",
                 "--epsilon", "2", "--agents", "100", "--gradient-episodes", "8",
                 "--random-episodes", "20",
                 "--sweep-epsilons", "1,2", "--sweep-agents", "50,100", "--trials", "1",
                 "--no-progress", "--out", str(out)]) == 0
    std = capsys.readouterr()
    assert "failed to converge" not in std.err and "absl" not in std.err
    assert " ".join(SIMULATOR_ONLY.split()) in " ".join(std.err.split())
    assert "K = 50, 3 settings as 2 compiled programs" in std.err  # ε 1, 2; non-private
    assert "K = 100, 2 settings as 1 compiled program" in std.err
    assert "The sweep " in std.out and "at ε = 2, K = 100" in " ".join(std.out.split())  # where
    last = std.out.strip().splitlines()[-1]
    assert shlex.split(last)[:3] == ["privrl", "run", "fedpg-cen"], last
    plan = json.loads((out / "plan.json").read_text())
    assert plan["simulator_only"] == SIMULATOR_ONLY
    fr = plan["frontier"]
    assert fr["programs"] == 3 and fr["agents"] == [50, 100] and fr["epsilons"] == [1.0, 2.0]
    assert all(v is not None for row in fr["final_return"] for v in row)
    assert (out / "plan.png").stat().st_size > 0
    assert plan["fields"]["preset"] == "fleet" and plan["fields"]["agents"] == 100
