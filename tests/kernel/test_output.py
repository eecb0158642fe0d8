"""Tests for the one run-directory writer: what it writes, that it never overwrites, and that
its JSON is strict (no NaN or Infinity tokens)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privrl.output import (
    OutputDirError,
    RunRecord,
    csv_writer,
    new_run_dir,
    save,
    save_setting,
    write_json,
)


def _strict(path: Path) -> Any:
    def refuse(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token} in {path}")

    return json.loads(path.read_text(), parse_constant=refuse)


def _record(**kw: Any) -> RunRecord:
    def plot(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"png")

    base: dict[str, Any] = dict(
        algorithm="toy", config={"lr": 0.1}, seed=3,
        summary={"best": math.inf, "loss": np.float32(np.nan), "n": np.int64(2)},
        privacy={"statement": "NO PRIVACY GUARANTEE", "epsilon": float("inf")},
        metrics=csv_writer("step,value", lambda: (f"{i},{i / 4:g}" for i in range(3))),
        plots={"curve.png": plot}, run_info={"devices": 2})
    return RunRecord(**{**base, **kw})


def test_save_writes_every_file_of_a_run(tmp_path: Path) -> None:
    summary = save(_record(files={"ray.json": {"cluster": "local"}}), tmp_path / "run",
                   command=["privrl", "run", "toy"])
    run = tmp_path / "run"
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()) == [
        "config.json", "metrics.csv", "plots/curve.png", "privacy.json", "ray.json",
        "summary.json"]
    assert (run / "metrics.csv").read_text() == "step,value\n0,0\n1,0.25\n2,0.5\n"
    config = _strict(run / "config.json")
    assert list(config)[:5] == ["algorithm", "config", "seed", "devices", "command"]
    assert config["config"] == {"lr": 0.1} and config["seed"] == 3
    assert config["command"] == ["privrl", "run", "toy"]
    assert "versions" in config and "created" in config
    assert _strict(run / "ray.json") == {"cluster": "local"}
    assert summary["n"] == 2


def test_json_is_strict_for_inf_and_nan(tmp_path: Path) -> None:
    save(_record(), tmp_path)
    assert _strict(tmp_path / "summary.json") == {"best": "inf", "loss": "nan", "n": 2}
    assert _strict(tmp_path / "privacy.json")["epsilon"] == "inf"
    write_json(tmp_path / "x.json", {"v": [np.array([np.inf, -np.inf]), (float("nan"),)]})
    assert _strict(tmp_path / "x.json") == {"v": [["inf", "-inf"], ["nan"]]}


def test_save_never_overwrites(tmp_path: Path) -> None:
    save(_record(), tmp_path)
    before = (tmp_path / "summary.json").read_text()
    with pytest.raises(OutputDirError, match="never"):
        save(_record(summary={"other": 1}), tmp_path)
    assert (tmp_path / "summary.json").read_text() == before
    # Other content (a Ray run's logs) may be there already; the run's files may not.
    other = tmp_path / "ray-run"
    (other / "aggregator").mkdir(parents=True)
    save(_record(), other)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "privacy.json").write_text("{}")
    with pytest.raises(OutputDirError, match=r"privacy\.json"):
        save(_record(), tmp_path / "half")
    assert not (tmp_path / "half" / "config.json").exists()  # refused before writing anything


def test_without_metrics_or_plots_only_the_json_files_are_written(tmp_path: Path) -> None:
    save(_record(metrics=None, plots={}), tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "config.json", "privacy.json", "summary.json"]


def test_save_setting_writes_the_bare_config(tmp_path: Path) -> None:
    assert save_setting(_record(), tmp_path / "s")["n"] == 2
    assert _strict(tmp_path / "s" / "config.json") == {"lr": 0.1}
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "config.json", "privacy.json", "summary.json"]
    with pytest.raises(OutputDirError):
        save_setting(_record(), tmp_path / "s")


def test_a_stem_with_a_module_path_names_one_directory(tmp_path):
    """A stem holding a user's `path/file.py:callable`: one directory under the root, its
    name without path separators or colons."""
    path = new_run_dir(None, "pgc-a3c-tuned-examples/own_mechanism.py:duchi-eps5",
                       root=str(tmp_path))
    assert path.parent == tmp_path and path.is_dir()
    assert path.name.startswith("pgc-a3c-tuned-examples_own_mechanism.py_duchi-eps5-")
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("runtime", ["local", "ray", "flower"])
def test_privacy_json_names_the_runtimes_trust_domain(tmp_path: Path, runtime: str) -> None:
    """privacy.json says where the run's parties lived: one process, one Ray cluster whose
    users can read any agent's memory, or one domain per agent (docs/threat-model.md)."""
    save(_record(runtime=runtime), tmp_path / "r")
    save_setting(_record(runtime=runtime), tmp_path / "s")
    for where in ("r", "s"):
        domain = _strict(tmp_path / where / "privacy.json")["trust_domain"]
        assert domain["runtime"] == runtime
        assert set(domain) == {"runtime", "domains", "what", "guarantee_against"}
    domain = _strict(tmp_path / "r" / "privacy.json")["trust_domain"]
    if runtime == "ray":  # anyone who can connect reads an agent's noise root: not protected
        assert "NOT the operator of the aggregator" in domain["guarantee_against"]
        assert "noise root" in domain["what"]
    if runtime == "local":
        assert domain["domains"] == "one process" and "simulation" in domain["what"]


def test_an_unknown_runtime_or_a_second_trust_domain_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown runtime 'cloud'"):
        _record(runtime="cloud")
    with pytest.raises(ValueError, match="trust domain"):
        _record(privacy={"statement": "x", "trust_domain": "anything"})
