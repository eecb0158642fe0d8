"""`privrl reproduce ... --noise`: every sweep passes the key mode to each run that privatizes
(the runs' privacy records then state it), the baselines get none, and an old sweep directory
(its sweep.json written before the option existed) still resumes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from privrl.config import ConfigError
from privrl.main import main
from privrl.output import open_sweep


def test_every_sweep_hands_its_noise_mode_to_the_private_runs() -> None:
    from privrl.systems.dp_qlearning.reproduce import DPQLSweepConfig
    from privrl.systems.dpsgd_rl.reproduce import Setting as DpsgdSetting
    from privrl.systems.dpsgd_rl.reproduce import SweepConfig as DpsgdSweep
    from privrl.systems.fedpg.reproduce import FedPGSweep
    from privrl.systems.fedrl.reproduce import ReproConfig as GridRepro
    from privrl.systems.fedrl_text.reproduce import ReproConfig as TextRepro
    from privrl.systems.pgc_a3c.reproduce import Setting, SweepConfig

    pgc = SweepConfig(noise="secret")
    assert pgc.run_config(Setting("laplace", 1.0)).noise == "secret"
    assert pgc.run_config(Setting("prs", 2.0)).noise == "secret"
    assert pgc.run_config(Setting("none", math.inf)).noise is None
    assert SweepConfig().run_config(Setting("laplace", 1.0)).noise is None  # default: seeded
    assert DPQLSweepConfig(noise="secret").run_config(0.2).noise == "secret"
    dpsgd = DpsgdSweep(noise="secret")
    for kind in ("dp", "ldp"):
        assert dpsgd.make(DpsgdSetting("reinforce", kind, 0.1)).config.noise == "secret"
    fedpg = FedPGSweep(noise="secret").settings()
    assert {n for n, c in fedpg.items() if c.noise == "secret"} == {
        n for n, c in fedpg.items() if c.mechanism != "none"} != set()
    grid = GridRepro(maps="unused", noise="secret")
    assert grid.make("fedrl", 8).config.noise == "secret"
    text = TextRepro(data="unused", noise="secret")
    assert text.make("fedrl", "win2k").noise == "secret"
    assert text.make("dqn-alpha", "win2k").noise is None  # a baseline releases nothing
    for bad in (lambda: DpsgdSweep(noise="public").validate(),
                lambda: TextRepro(data="unused", noise="public").validate()):
        with pytest.raises(ConfigError, match=r"^noise: "):
            bad()


def test_reproduce_noise_flag_reaches_the_sweep(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """The flag on the command line is the sweep's field (checked without running a sweep)."""
    from privrl.systems.dp_qlearning import reproduce as dpql
    from privrl.systems.dpsgd_rl import reproduce as dpsgd

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def capture(name: str) -> Any:
        def run(cfg: Any, *a: Any, **k: Any) -> None:
            seen[name] = cfg.noise
            raise Stop
        return run

    monkeypatch.setattr(dpql, "run_sweep", capture("dp-qlearning"))
    monkeypatch.setattr(dpsgd, "run_sweep", capture("dpsgd-rl"))
    for cmd in ("dp-qlearning", "dpsgd-rl"):
        with pytest.raises(Stop):
            main(["reproduce", cmd, "--noise", "secret", "--out", str(tmp_path / cmd)])
    assert seen == {"dp-qlearning": "secret", "dpsgd-rl": "secret"}
    assert main(["reproduce", "dp-qlearning", "--noise", "public"]) == 2


def test_a_sweep_from_before_the_noise_option_still_resumes(tmp_path: Path) -> None:
    open_sweep(tmp_path, {"trials": 2})
    open_sweep(tmp_path, {"trials": 2, "noise": None})  # the new option at its default: same
    with pytest.raises(ConfigError, match=r"^resume: "):
        open_sweep(tmp_path, {"trials": 2, "noise": "secret"})
