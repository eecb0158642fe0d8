"""Ray is an optional extra: without it, every `--runtime ray` command says how to install it
and writes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from privrl.main import main


@pytest.mark.parametrize("command", ["pgc-a3c", "fedpg-dec"])
def test_missing_ray_says_how_to_install(command: str, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    rc = main(["run", command, "--runtime", "ray", "--out", str(tmp_path / "x"),
               "--no-progress"])
    assert rc == 2
    assert "pip install 'privrl[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
