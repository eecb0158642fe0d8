"""Issue 43, item 6: inputs that gave a traceback, an OverflowError or a silent exit 0 now give
one line naming the option, exit 2, and write nothing; checked before any training."""

from __future__ import annotations

from pathlib import Path

import pytest

from privrl.main import main


@pytest.mark.parametrize(("args", "names"), [
    (["--env", "os:system"], "--env"),  # callable that fails when called
    (["--env", "json:loads"], "--env"),
    (["--env", ":make"], "--env"),  # no module
    (["--env", "..x:y"], "--env"),  # a relative module
    (["--env", "builtins:exit"], "--env"),  # tried to exit 0 silently
    (["--seed", str(2**70)], "--seed"),  # OverflowError
    (["--seed", "-1"], "--seed"),
])
def test_bad_run_inputs_give_one_line_and_exit_2(args: list[str], names: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    assert main(["run", "dp-reinforce", "--episodes", "1", *args, "--out", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("privrl: error:") and names in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_an_uncreatable_out_is_refused_before_any_work(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for out in (a_file / "sub", Path("/proc/privrl-x")):
        assert main(["run", "dp-reinforce", "--episodes", "1", "--out", str(out),
                     "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("privrl: error: --out:") and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no probe left behind


def test_a_bad_privrl_devices_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("PRIVRL_DEVICES", "abc")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert main(["run", "dp-reinforce", "--episodes", "1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "privrl: error: PRIVRL_DEVICES must be a whole number >= 1, got 'abc'")


@pytest.mark.parametrize(("system", "mechanism"), [
    (s, m) for s in ("pgc-a3c", "fedpg-cen") for m in ("privunit", "privunitg")]
    + [("pgc-a3c", "projunit"), ("pgc-a3c", "privunitg-seed")])
def test_an_epsilon_privunit_cannot_calibrate_is_one_line(
        system: str, mechanism: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """ε = 10⁶ overflowed PrivUnit's calibration (OverflowError, ZeroDivisionError)."""
    out = tmp_path / "out"
    assert main(["run", system, "--mechanism", mechanism, "--epsilon", "1e6",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("privrl: error: --epsilon:") and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("command", ["dp-reinforce", "dp-dqn", "ldp-reinforce", "ldp-dqn",
                                     "fedpg-cen", "fedpg-dec", "pgc-a3c"])
def test_env_code_is_not_imported_when_out_is_refused(command: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    """`--env file.py:make` runs that file's code: not before `--out` is known to be usable."""
    marker = tmp_path / "imported"
    (tmp_path / "user_env.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\n"
        "def make():\n    import gymnax\n    return gymnax.make('CartPole-v1')\n")
    (tmp_path / "a-file").write_text("")
    assert main(["run", command, "--env", f"{tmp_path / 'user_env.py'}:make",
                 "--out", str(tmp_path / "a-file" / "sub"), "--no-progress"]) == 2
    assert "--out" in capsys.readouterr().err
    assert not marker.exists()


def test_python_m_privrl_does_not_import_from_the_working_directory(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    marker = tmp_path / "imported"
    (tmp_path / "cwd_env.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\ndef make(): pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-m", "privrl", "run", "dp-reinforce", "--env",
                           "cwd_env:make", "--out", str(tmp_path / "out"), "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "cannot import cwd_env" in done.stderr, done.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "names"), [
    (["pgc-a3c", "--runtime", "flower", "--trials", "2"], "--trials"),
    (["pgc-a3c", "--runtime", "flower", "--shuffle"], "--shuffle"),
    (["pgc-a3c", "--runtime", "flower", "--supernodes", "0"], "--supernodes"),
    (["pgc-a3c", "--runtime", "flower", "--address", "auto"], "--address"),
    # FedPG-Dec's peers talk to each other; Flower carries only server <-> SuperNode messages.
    (["fedpg-dec", "--runtime", "flower"], "--runtime"),
    # FedPG-Cen on Flower: each agent's Report (a local mechanism) or the secure sum of
    # discrete noise shares, every agent each round; no trusted server's noise, no threshold
    # without a secure sum
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "central-gaussian", "--epsilon", "2"],
     "--mechanism"),
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "gaussian", "--epsilon", "2",
      "--threshold", "2"], "--threshold"),
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "gaussian", "--epsilon", "2",
      "--agents", "4", "--supernodes", "5"], "--supernodes"),
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "distributed-gaussian",
      "--epsilon", "2", "--supernodes", "2"], "--supernodes"),
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "distributed-gaussian",
      "--epsilon", "2", "--sampling-rate", "0.5"], "--sampling-rate"),
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "distributed-gaussian",
      "--epsilon", "2", "--agents", "4", "--supernodes", "5"], "--supernodes"),
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "distributed-gaussian",
      "--epsilon", "2", "--supernodes", "4", "--threshold", "2"], "--threshold"),
    (["fedpg-cen", "--runtime", "flower", "--mechanism", "distributed-gaussian",
      "--epsilon", "2", "--supernodes", "4", "--min-honest", "9"], "--min-honest"),
])
def test_the_flower_runtime_refuses_what_it_cannot_run(args: list[str], names: str,
                                                       tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """Refused in one line before any process starts."""
    out = tmp_path / "out"
    assert main(["run", *args, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("privrl: error:") and names in err and len(err.splitlines()) == 1, err
    assert not out.exists()
