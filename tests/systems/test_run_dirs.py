"""The Python API writes the run directory the CLI writes (issue 39), through one writer, and
every system's run directory holds its trained policy (policy.npz) that `load_policy` uses."""

from __future__ import annotations

import json

import numpy as np
import pytest

import privrl
from privrl.main import main
from privrl.output import OutputDirError

FEDPG = dict(agents=2, budget=40, batch_min=2, batch_max=3, mechanism="laplace",
             epsilon_per_report=0.5, clip=1.0)
FEDPG_FLAGS = ["--agents", "2", "--episodes", "40", "--batch-min", "2", "--batch-max", "3",
               "--mechanism", "laplace", "--epsilon-per-report", "0.5", "--clip", "1",
               "--no-progress"]


def _files(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_the_api_writes_the_clis_run_directory(tmp_path):
    assert main(["run", "fedpg-cen", *FEDPG_FLAGS, "--out", str(tmp_path / "cli")]) == 0
    run = privrl.run_fedpg(privrl.FedPGConfig(**FEDPG), out=tmp_path / "api")
    cli, api = tmp_path / "cli", tmp_path / "api"
    assert _files(api) == _files(cli) == [
        "config.json", "metrics.csv", "plots/returns.png", "policy.npz", "privacy.json",
        "summary.json"]
    assert (api / "metrics.csv").read_bytes() == (cli / "metrics.csv").read_bytes()
    for name in ("privacy.json",):
        assert json.loads((api / name).read_text()) == json.loads((cli / name).read_text())
    assert json.loads((api / "config.json").read_text())["config"] == json.loads(
        (cli / "config.json").read_text())["config"]
    # the statement is the result's too, and save(dir) writes the same again, never over
    assert run.privacy_record["statement"] == json.loads(
        (cli / "privacy.json").read_text())["statement"]
    assert "LDP" in run.privacy_record["statement"]
    again = run.save(tmp_path / "again")
    assert (again / "metrics.csv").read_bytes() == (cli / "metrics.csv").read_bytes()
    with pytest.raises(OutputDirError):
        run.save(tmp_path / "again")
    np.testing.assert_array_equal(privrl.load_policy(api).theta, run.z[0, 0])


def test_an_api_run_refuses_a_taken_directory_before_it_computes(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    with pytest.raises(OutputDirError):
        privrl.run_pgc_a3c(privrl.PGCA3CConfig(trials=1, submissions=10**9),
                           out=tmp_path / "taken")
    assert _files(tmp_path / "taken") == ["x"]


def test_pgc_a3c_saves_each_trials_policy(tmp_path):
    out = privrl.run_pgc_a3c(privrl.PGCA3CConfig(trials=2, submissions=20), out=tmp_path / "r")
    assert "policy.npz" in _files(tmp_path / "r")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    for k in range(2):
        p = privrl.load_policy(tmp_path / "r", trial=k)
        np.testing.assert_array_equal(p.theta, out.theta[k])
        logits = np.stack([np.asarray(p.model.apply(out.theta[k], o)[0]) for o in obs])
        np.testing.assert_array_equal(p.act(obs), logits.argmax(1))


def test_dp_reinforce_and_dp_qlearning_save_their_policies(tmp_path):
    from privrl.systems.dpsgd_rl.reinforce import Reinforce

    cfg = privrl.ReinforceConfig.from_preset("paper", seeds=2, episodes=3)
    out = privrl.run_episodic(Reinforce.settings_algorithm([cfg]), "dp-reinforce",
                              out=tmp_path / "rf")
    p = privrl.load_policy(tmp_path / "rf", trial=1)
    assert p.description["system"] == "dp-reinforce" and p.description["head"] == "logits"
    np.testing.assert_array_equal(p.theta, out.policy.theta[1, 0])
    assert main(["evaluate", str(tmp_path / "rf"), "--episodes", "2"]) == 0

    q = privrl.run_dp_qlearning(privrl.DPQLearningConfig(sigma=0.5, seeds=1, episodes=4),
                                out=tmp_path / "dpq")
    p = privrl.load_policy(tmp_path / "dpq")
    assert p.description["head"] == "q" and p.obs_dim == 1
    np.testing.assert_array_equal(p.theta, q.policy.theta[0, 0])
    assert main(["evaluate", str(tmp_path / "dpq"), "--episodes", "2"]) == 0
