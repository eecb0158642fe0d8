"""Which runtime runs what is decided by the library (`check_runtime` of each system): the
Python API's entry points and `privrl run` refuse the same runs with the same message (the
CLI naming the flag where the API names the field), before anything starts or is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from privrl.config import ConfigError
from privrl.main import main
from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig


def _fedpg_ray(cfg: FedPGConfig) -> Callable[[Path], Any]:
    def call(directory: Path) -> Any:
        from privrl.systems.fedpg.ray import run_fedpg_dec_ray

        return run_fedpg_dec_ray(cfg, directory)
    return call


def _fedpg_flower(cfg: FedPGConfig) -> Callable[[Path], Any]:
    def call(directory: Path) -> Any:
        pytest.importorskip("flwr")
        from privrl.systems.fedpg.flower import plan_run

        return plan_run(cfg, 3)
    return call


def _pgc_ray(cfg: PGCA3CConfig) -> Callable[[Path], Any]:
    def call(directory: Path) -> Any:
        from privrl.systems.pgc_a3c.ray import run_pgc_a3c_ray

        return run_pgc_a3c_ray(cfg, directory)
    return call


def _pgc_flower(cfg: PGCA3CConfig) -> Callable[[Path], Any]:
    def call(directory: Path) -> Any:
        pytest.importorskip("flwr")
        from privrl.systems.pgc_a3c.flower import run_pgc_a3c_flower

        return run_pgc_a3c_flower(cfg, directory, 2)
    return call


CASES = [  # (the API's call, the same run as a command, the option the CLI names)
    (_fedpg_ray(FedPGConfig(algorithm="dec", agents=2, trials=2)),
     ["fedpg-dec", "--runtime", "ray", "--agents", "2", "--trials", "2"], "--trials"),
    (_fedpg_ray(FedPGConfig(algorithm="cen", agents=2)),
     ["fedpg-cen", "--runtime", "ray", "--agents", "2"], "--runtime"),
    (_fedpg_flower(FedPGConfig(algorithm="dec", agents=3)),
     ["fedpg-dec", "--runtime", "flower", "--agents", "3"], "--runtime"),
    (_fedpg_flower(FedPGConfig(algorithm="cen", agents=3, robust="median")),
     ["fedpg-cen", "--runtime", "flower", "--agents", "3", "--robust", "median"], "--robust"),
    (_fedpg_flower(FedPGConfig(algorithm="cen", agents=3, roster=False)),
     ["fedpg-cen", "--runtime", "flower", "--agents", "3", "--no-roster"], "--roster"),
    (_pgc_ray(PGCA3CConfig.from_preset("paper-code")),
     ["pgc-a3c", "--preset", "paper-code", "--runtime", "ray"], "--server-optimizer"),
    (_pgc_flower(PGCA3CConfig(trials=2)),
     ["pgc-a3c", "--runtime", "flower", "--trials", "2"], "--trials"),
]


@pytest.mark.parametrize(("api", "argv", "named"), CASES,
                         ids=["dec-ray-trials", "cen-ray", "dec-flower", "cen-flower-robust",
                             "cen-flower-roster-off-without-secure-sum",
                              "pgc-ray-rmsprop", "pgc-flower-trials"])
def test_the_api_and_the_cli_refuse_the_same_run_in_the_same_words(
        api: Callable[[Path], Any], argv: list[str], named: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError) as e:
        api(tmp_path / "api")
    assert not (tmp_path / "api").exists()  # refused before anything was written
    capsys.readouterr()
    assert main(["run", *argv, "--out", str(tmp_path / "cli"), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == f"privrl: error: {named}: {e.value.message}"
    assert not (tmp_path / "cli").exists()
