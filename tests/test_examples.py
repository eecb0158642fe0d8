"""The examples a user copies (issue 39) run, at a tiny budget, and stay short."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NEW = ("saved_policy", "pgc_a3c_privunit", "fedpg_user_dp", "continuous_pendulum")


@pytest.mark.parametrize("name", NEW)
def test_an_example_is_under_80_lines(name):
    assert len((EXAMPLES / f"{name}.py").read_text().splitlines()) < 80


def test_saved_policy_example_loads_acts_and_evaluates(load_example, tmp_path):
    out = load_example("saved_policy").main(str(tmp_path / "run"), budget=20, episodes=2)
    assert out["own_loop"] >= 1 and len(out["summary"]["per_trial"]) == 1
    assert sorted(p.name for p in (tmp_path / "run").glob("evaluate-*")) == [
        "evaluate-1.csv", "evaluate-1.json"]


def test_pgc_a3c_privunit_example_on_a_users_task_and_model(load_example, tmp_path):
    load_example("byo_env")  # what the example imports
    out = load_example("pgc_a3c_privunit").main(str(tmp_path / "run"), submissions=30)
    assert out["privacy"]["statement"].startswith("5-LDP for all of one agent's reports")
    assert out["evaluation"]["env"] == "byo_env:Walk"
    assert (tmp_path / "run" / "policy.npz").is_file()


def test_fedpg_user_dp_example_states_user_level_dp(load_example, tmp_path):
    load_example("byo_env")
    out = load_example("fedpg_user_dp").main(str(tmp_path / "run"), agents=4, episodes=20)
    statement = out["privacy"]["statement"]
    assert "DP for one agent's whole data" in statement and "user level" in statement
    assert (tmp_path / "run" / "policy.npz").is_file()


def test_continuous_pendulum_example_trains_saves_and_acts_in_the_box(load_example, tmp_path):
    out = load_example("continuous_pendulum").main(str(tmp_path / "run"), submissions=18,
                                                   max_episode_steps=20)
    assert out["own_loop"] is not None and -16.3 * 200 <= out["own_loop"] <= 0.0
    assert (tmp_path / "run" / "policy.npz").is_file()
