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


class _FakeRay:
    """ray's start-up surface, recording what `start_ray` asked for."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail, self.kwargs = fail, None

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: object) -> None:
        self.kwargs = kwargs
        if self.fail is not None:
            raise self.fail

    def cluster_resources(self) -> dict:
        return {"CPU": 2.0}


def test_ray_address_from_the_environment_joins_that_cluster(monkeypatch) -> None:
    """RAY_ADDRESS without --address: join it (num_cpus is not for an existing cluster: it was
    a ValueError traceback after "cluster local"), and say where (issue 43, item 9)."""
    from privrl.runtime.ray import start_ray

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    fake = _FakeRay()
    started, cluster = start_ray(fake, None)
    assert started and cluster["address"] == "10.0.0.7:6379"
    assert fake.kwargs["address"] == "10.0.0.7:6379" and fake.kwargs["num_cpus"] is None
    assert "_system_config" not in fake.kwargs  # Ray's settings are not for a joined cluster
    monkeypatch.delenv("RAY_ADDRESS")
    start_ray(fake, None)
    assert fake.kwargs["address"] is None and fake.kwargs["num_cpus"] >= 1  # a local cluster
    # which prestarts no workers its actors cannot use (tests/systems/fedpg/test_ray.py)
    assert fake.kwargs["_system_config"] == {"prestart_worker_first_driver": False}


def test_a_cluster_that_cannot_be_joined_is_one_config_error(monkeypatch) -> None:
    from privrl.config import ConfigError
    from privrl.runtime.ray import start_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = _FakeRay(ConnectionError("Could not find any running Ray instance.\nmore"))
    with pytest.raises(ConfigError, match=r"^address: cannot join the Ray cluster at h:1: "
                                          r"ConnectionError: Could not find .*RAY_AUTH_MODE"):
        start_ray(fake, "h:1")


def test_a_run_directory_left_empty_by_a_failed_run_is_removed(tmp_path) -> None:
    from privrl.output import removed_if_left_empty

    for keep in (False, True):
        path = tmp_path / f"run-{keep}"
        (path / "nodes").mkdir(parents=True)
        with pytest.raises(RuntimeError), removed_if_left_empty(path):
            if keep:
                (path / "nodes" / "node0.npz").write_bytes(b"checkpoint")
            raise RuntimeError("the cluster went away")
        assert path.exists() is keep  # a checkpoint written is kept
