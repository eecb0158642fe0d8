"""`privrl plan`: bad input refused in one line, the recommended command is one `privrl run`
parses and builds into the recommended config, plan.json's schema (no training here)."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from privrl.main import main
from privrl.output import OutputDirError
from privrl.planner import systems as sy
from privrl.planner.api import PLAN_SCHEMA, SIMULATOR_ONLY, Frontier, PlanResult, write
from privrl.planner.command import run_command

BASE = ["plan", "pgc-a3c", "--env", "gymnax:CartPole-v1", "--epsilon", "5", "--no-progress"]


@pytest.mark.parametrize(("args", "names"), [
    (["plan", "pgc-a3c", "--epsilon", "5"], "--env"),  # no simulator
    (["plan", "pgc-a3c", "--env", "gymnax:CartPole-v1"], "--epsilon"),
    ([*BASE[:-2], "-1", "--no-progress"], "--epsilon"),
    ([*BASE, "--agents", "0"], "--agents"),
    ([*BASE, "--fraction", "1.5"], "--fraction"),
    ([*BASE, "--aim", "0.3"], "--aim"),  # K sized for less than the mark
    ([*BASE, "--aim", "1.5"], "--aim"),
    ([*BASE, "--private", "gravity"], "--private"),  # not field=low:high
    ([*BASE, "--private", "no_such_field=1:2"], "--private"),
    ([*BASE, "--sweep-epsilons", "1,x"], "--sweep-epsilons"),
    (["plan", "dqn", "--env", "gymnax:CartPole-v1", "--epsilon", "5"], "SYSTEM"),
])
def test_bad_plan_input_is_one_line_exit_2_nothing_written(
        args: list[str], names: str, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default output (runs/) would be made here
    out = tmp_path / "out"
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("privrl: error:") and names in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ε = 1, not 2.5: FedPG-Cen's fleet σ (q = 50/300) is larger, its PLD search cheaper (3.8 ->
# 2.4 CPU-s); no case's check depends on the value.
REC = sy.Recommendation(mechanism="", epsilon=1.0, agents=300, clip=0.0123, reports_per_agent=2,
                        batch=7, learning_rate=0.003, preset="")
MECH = {"pgc-a3c": ("laplace", "tuned"),
        "fedpg-cen": ("distributed-gaussian-continuous", "fleet"),
        "dp-reinforce": ("gaussian", "paper")}
EXECUTORS = {"pgc-a3c": ("privrl.systems.pgc_a3c.cli", "_execute_pgc", 0),
             "fedpg-cen": ("privrl.systems.fedpg.cli", "_execute_fedpg", 0),
             "dp-reinforce": ("privrl.systems.dpsgd_rl.cli", "_execute", 1)}


@pytest.mark.parametrize(("system", "levers"), [*((s, False) for s in sy.SYSTEMS),
                                                 ("pgc-a3c", True), ("dp-reinforce", True)])
def test_the_recommended_command_builds_the_recommended_config(
        system: str, levers: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last line `privrl plan` prints (`levers`; without: the settings the sweep runs)
    runs through the real `privrl run` parser and config builder (the training itself is
    replaced) and gives the fields the plan recommends; PGC-A3C's command runs the adaptive
    preset with the levers on, its own update rule (|B| the plan's rec.batch, the step from the
    noise from rec's η) and its 2 reports per agent as one report of 2 episodes."""
    import importlib

    mechanism, preset = MECH[system]
    rec = sy.Recommendation(**{**REC.__dict__, "mechanism": mechanism, "preset": preset})
    fields = sy.config_fields(system, rec, "gymnax:Acrobot-v1", ("link_mass_1=0.8:1.2",),
                              trials=3, seed=7, levers=levers)
    words = shlex.split(run_command(system, fields))
    assert words[:3] == ["privrl", "run", system]
    module, name, at = EXECUTORS[system]
    got: list[Any] = []
    monkeypatch.setattr(importlib.import_module(module), name,
                        lambda *a, **k: got.append(a[at]))
    assert main([*words[1:], "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    (config,) = got
    for key, value in fields.items():
        if key in ("preset", "dp"):
            continue
        want = tuple(value) if isinstance(value, list) else value
        assert getattr(config, key) == want, key
    assert config.preset == fields.get("preset", config.preset)
    if system == "pgc-a3c":
        adaptive = (config.preset, config.adaptive_clip, config.public_eval_every)
        assert adaptive == (("adaptive", True, 20) if levers else ("tuned", False, None))
        assert config.episodes_per_report == (2 if levers else 1)
        assert config.submissions == REC.agents * (1 if levers else 2)  # the same episodes
        assert config.buffer_size == REC.batch  # reports (of 2 episodes under the levers)
        assert config.step_from_noise == levers  # the preset's own step rule, from rec's η
        assert config.learning_rate == REC.learning_rate
    if system == "dp-reinforce":  # the adaptive preset's clip and candidates on the plan's
        adaptive = (config.preset, config.adaptive_clip, config.public_eval_every)
        assert adaptive == (("adaptive", True, 10) if levers else ("paper", False, None))
        assert (config.batch_episodes, config.episodes) == (REC.batch, 43)  # ⌈300/7⌉ updates
        assert not config.step_from_noise and config.clip == REC.clip


def test_plan_json_schema_and_never_overwriting(tmp_path: Path) -> None:
    fr = Frontier((1.0, 5.0), (100, 200), ((30.0, None), (150.0, 190.0)), (200.0, 210.0),
                  20.0, 12.5, (400,))
    result = PlanResult("dp-reinforce", "gymnax:CartPole-v1", ("gravity=9:10",), 5.0, None,
                        {"dim": 10, "clip": 0.3}, {"agents": 200, "epsilon": 5.0}, 2.0,
                        {"episodes": 200, "clip": 0.3}, fr, {"agents": 200}, True, ("a note",))
    written = write(result, tmp_path / "plan")
    d = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert d["schema"] == PLAN_SCHEMA and d["simulator_only"] == SIMULATOR_ONLY
    assert set(d) >= {"system", "env", "private_params", "epsilon", "pilot", "recommendation",
                      "smallest_epsilon", "fields", "frontier", "check", "learns", "notes"}
    assert d["frontier"]["final_return"] == [[30.0, None], [150.0, 190.0]]
    assert d["frontier"]["left_out"] == [400] and d["learns"] is True
    assert (tmp_path / "plan" / "plan.png").stat().st_size > 0
    assert written.path == tmp_path / "plan"
    # a sweep that left out every K (over its episode cap) writes plan.json and no figure
    nothing = replace(result, frontier=Frontier((5.0,), (), ((),), (), 20.0, 0.0, (100,)))
    write(nothing, tmp_path / "none")
    assert json.loads((tmp_path / "none" / "plan.json").read_text())["frontier"]["agents"] == []
    assert not (tmp_path / "none" / "plan.png").exists()
    with pytest.raises(OutputDirError):  # an existing non-empty output is never overwritten
        write(result, tmp_path / "plan")


def test_fraction_of_the_nonprivate_improvement() -> None:
    from privrl.planner.api import fraction_of

    assert fraction_of(110.0, 20.0, 200.0) == pytest.approx(0.5)
    assert fraction_of(10.0, 20.0, 200.0) < 0  # below random
    assert fraction_of(110.0, 20.0, 15.0) is None  # non-private not above random
    assert fraction_of(None, 20.0, 200.0) is None
    assert not math.isnan(fraction_of(20.0, 20.0, 200.0))  # type: ignore[arg-type]


def test_settings_for_a_capped_fleet_are_rederived() -> None:
    """A benchmark that caps K gets the plan's batch for the K it runs, not the planned K's."""
    from privrl.planner.api import recommend_at

    pilot = {"dim": 200, "norm_quantiles": [1.0, 2.0, 3.0], "clip": 4.0,
             "clipped_signal": 0.05, "clipped_variance": 1.0, "random_return": -500.0,
             "nonprivate_return": -100.0, "episodes_to_learn": 2000.0,
             "episodes_per_report": 1, "norm": "l1"}
    def at(system: str, k: int) -> Any:
        return recommend_at(PlanResult(system, "gymnax:CartPole-v1", (), 5.0, None, pilot,
                                       {"reports_per_agent": 1, "agents": 100_000}, None, {},
                                       None, None, None, ()), k)

    big, small = at("dp-reinforce", 100_000), at("dp-reinforce", 2_000)
    assert (big.agents, small.agents) == (100_000, 2_000)
    # at least the updates the pilot took to learn (E0 = 2,000 episodes of one: 2,000)
    assert small.batch == 1 and big.batch == 100_000 // 2_000
    # PGC-A3C's command keeps `adaptive`'s own |B| and step rule at any K (26-plan3)
    big, small = at("pgc-a3c", 100_000), at("pgc-a3c", 2_000)
    assert (big.batch, big.learning_rate) == (small.batch, small.learning_rate) == (9, 0.01)
    assert small.clip == big.clip == 4.0 and small.mechanism == "laplace"
