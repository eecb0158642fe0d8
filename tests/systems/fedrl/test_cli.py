"""`privrl run fedrl|fedrl-baseline`, `privrl reproduce fedrl`: one-line errors before any
computation, and a tiny run that writes its results directory."""

import json
import re

import numpy as np
import pytest

import privrl
from privrl import main as cli
from privrl.policy import read_saved
from privrl.systems.fedrl import local as grid
from privrl.systems.fedrl.algorithm import FedRLConfig


@pytest.fixture
def no_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("computation started despite invalid options")

    monkeypatch.setattr(grid, "run_grid", forbidden)


@pytest.mark.parametrize("args, message", [
    (["run", "fedrl", "--size", "12"], "--size: must be one of 8, 16, 32"),
    (["run", "fedrl", "--bounded", "0"], "--bounded"),
    (["run", "fedrl", "--noise-std", "-1"], "--noise-std"),
    (["run", "fedrl", "--history", "0"], "--history"),
    (["run", "fedrl", "--beta-view", "4"], "--beta-view"),
    (["run", "fedrl", "--epochs", "0"], "--epochs"),
    (["run", "fedrl-baseline", "--model", "cnn-alpha"], "--model: unknown model"),
    (["reproduce", "fedrl", "--maps", "MISSING", "--sizes", "8"], "no such file"),
    (["reproduce", "fedrl", "--maps", "MISSING", "--sizes", "7"], "--sizes"),
    (["reproduce", "fedrl", "--maps", "MISSING", "--models", "dqn-beta"], "--models"),
])
def test_bad_options_exit_2_with_one_line(args, message, capsys, no_compute, tmp_path):
    args = [str(tmp_path / "nothing") if a == "MISSING" else a for a in args]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_bad_maps_file_names_the_file(tmp_path, capsys, no_compute):
    bad = tmp_path / "gridworld_8.npz"
    np.savez(bad, images=np.ones((3, 16, 16), np.uint8), path_xy=np.zeros((0, 2), np.int16),
             path_offsets=np.zeros(25, np.int64))
    assert cli.main(["run", "fedrl", "--maps", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "images must have shape (M, 8, 8)" in err


def test_tiny_run_writes_results(tmp_path, capsys, monkeypatch):
    """A tiny FedRL run writes its directory (policy.npz: the parties' networks), and
    privacy.json composes exactly the releases it made."""
    import jax

    from privrl.federation.vertical import Channel

    # Count the Q vectors each party actually sends the other (rows of C_beta / C_alpha
    # messages, counted when they run: once per vmapped seed and scanned step).
    sent = {"alpha": 0, "beta": 0}
    send = Channel.send

    def counted(self, sender, receiver, kind, payload):
        if kind in ("C_alpha", "C_beta"):
            def add(v, who=sender):
                sent[who] += v.shape[0]
            jax.debug.callback(add, payload)
        return send(self, sender, receiver, kind, payload)

    monkeypatch.setattr(Channel, "send", counted)
    out = tmp_path / "run"
    code = cli.main(["run", "fedrl", "--bounded", "2", "--epochs", "1",
                     "--updates-per-epoch", "20", "--generated-maps", "40", "--buffer-size",
                     "500", "--noise", "secret", "--out", str(out)])
    assert code == 0
    shown = capsys.readouterr()
    for f in ("config.json", "metrics.csv", "privacy.json", "summary.json", "policy.npz",
              "plots/valid_success.png"):
        assert (out / f).exists(), f
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["formal_guarantee"] is True
    assert privacy["parties"]["beta"]["events"][0]["count"] == privacy["releases"]["beta"]
    assert privacy["parties"]["alpha"]["events"][0]["count"] == privacy["releases"]["alpha"]
    # The releases the run made are the ones privacy.json composes, party by party: β's
    # exactly, once test-clean's un-noised C_beta (no guarantee claimed) are set apart; α's
    # 20 steps × batch rows of C_alpha, its evaluation outputs (which stay with α) being
    # counted as releases too, conservatively.
    jax.effects_barrier()
    cfg = FedRLConfig(generated_maps=40)
    clean = grid.load_splits(cfg).test.count * cfg.spec().horizon
    assert sent["beta"] - clean == privacy["releases"]["beta"]
    assert sent["alpha"] == 20 * cfg.batch_size <= privacy["releases"]["alpha"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["test"]) == {"test-noise", "test-clean"}
    printed = shown.out
    assert "LDP" in printed and "noise: secret" in printed
    # progress without a terminal (issue 53): its last line has the ε of the epoch's releases,
    # within the run's (which also counts the test maps' releases)
    line = [x for x in shown.err.splitlines() if x.startswith("training: 1/1 epochs")][-1]
    spent = float(re.search(r"ε spent ([0-9.e+-]+)", line).group(1))
    assert 0 < spent <= privacy["guarantee"]["epsilon"] * (1 + 1e-3), line
    assert privacy["noise_keys"]["mode"] == "secret"  # (the counts above hold for any keys)
    # policy.npz: the kept networks (α's, β's, the shared head), each named with the party
    # holding it; load_policy plays them together (test-clean: no noise) as the run's own test
    # evaluation did, and privrl evaluate reproduces what it reported, map by map
    description, theta, _ = read_saved(out)
    assert description["kind"] == "networks" and theta.shape[:2] == (1, 1)
    assert [(n["name"], n["held_by"]) for n in description["networks"]] == [
        ("q_alpha", ["alpha"]), ("q_beta", ["beta"]), ("federated_head", ["alpha", "beta"])]
    _plays_the_runs_test_evaluation(out, summary["test"]["test-clean"], capsys)


def _plays_the_runs_test_evaluation(out, reported, capsys):
    """The run's policy (load_policy) acts as its greedy noise-free play; privrl evaluate
    plays each test map once and reports the run's test-clean success rate and mean return;
    a subset of the maps (--episodes, --seed) scores a subset of those episodes; options
    that have no meaning for a Grid-World run are one-line errors."""
    import jax
    import jax.numpy as jnp

    from privrl.envs import gridworld as gw

    cfg = FedRLConfig(generated_maps=40, bounded=2.0)
    test = grid.load_splits(cfg).test
    policy = privrl.load_policy(out)
    # one program, its observations on the host (eagerly: some 30 small programs)
    s0 = jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(
        lambda i: gw.reset(cfg.spec(), test, i)))(jnp.arange(test.count)))
    actions = policy.act((s0.obs_alpha, s0.obs_beta))
    assert actions.shape == (test.count,) and actions.dtype == np.int32
    assert set(actions.tolist()) <= set(range(gw.NUM_JOINT_ACTIONS))
    assert policy.act((s0.obs_alpha[1], s0.obs_beta[1])) == actions[1]
    with pytest.raises(ValueError, match="greedily"):
        policy.act((s0.obs_alpha, s0.obs_beta), key=0)
    with pytest.raises(ValueError, match="shapes"):
        policy.act((s0.obs_beta, s0.obs_alpha))

    assert cli.main(["evaluate", str(out)]) == 0
    capsys.readouterr()
    ev = json.loads((out / "evaluate-1.json").read_text())
    assert ev["episodes"] == test.count and ev["max_steps"] == cfg.spec().horizon
    assert [r["success_rate"] for r in ev["per_trial"]] == reported["per_seed"]["success"]
    assert ev["success_rate"] == pytest.approx(reported["success_rate"], abs=1e-12)
    assert ev["mean_return"] == pytest.approx(reported["avg_reward"], rel=1e-6)
    rows = (out / "evaluate-1.csv").read_text().splitlines()
    assert rows[0] == "trial,learner,episode,return,success" and len(rows) == 1 + test.count
    every = sorted(r.split(",", 3)[3] for r in rows[1:])
    assert cli.main(["evaluate", str(out), "--episodes", "2", "--seed", "3"]) == 0
    some = [r.split(",", 3)[3] for r in (out / "evaluate-2.csv").read_text().splitlines()[1:]]
    assert len(some) == 2 and all(r in every for r in some)
    for args, option in ((["--episodes", str(test.count + 1)], "--episodes"),
                         (["--sample"], "--sample"), (["--max-steps", "5"], "--max-steps"),
                         (["--env", "gymnax:CartPole-v1"], "--env"),
                         (["--data", str(out.parent)], "--data")):  # only Text2Action's takes it
        capsys.readouterr()
        assert cli.main(["evaluate", str(out), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"privrl: error: {option}:"), err
    assert not (out / "evaluate-3.json").exists()
    # the learner is rebuilt from config.json: one whose networks are not the file's, or
    # that is not a run's config, is one line naming the file, nothing written
    import shutil

    for change, named in (({"alpha_view": 5}, "policy.npz"), ({"unknown": 1}, "config.json")):
        bad = out.parent / f"bad-{named}"
        shutil.copytree(out, bad)
        doc = json.loads((bad / "config.json").read_text())
        doc["config"].update(change)
        (bad / "config.json").write_text(json.dumps(doc))
        capsys.readouterr()
        assert cli.main(["evaluate", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{bad}/{named}" in err[0], err
        assert not (bad / "evaluate-3.json").exists()

    # never overwrites
    assert cli.main(["run", "fedrl", "--epochs", "1", "--out", str(out)]) == 2


@pytest.mark.parametrize("choice", ["pld", "rdp"])
def test_accountant_flag_reaches_privacy_json(choice, monkeypatch):
    """--accountant sets the config field; each party's composed ε in privacy.json is then
    dp-accounting's own: the analytic Gaussian of the exactly composed releases (pld) or
    RdpAccountant over the same releases (rdp)."""
    import math

    import dp_accounting

    from privrl.systems.fedrl import cli as fedrl_cli
    from privrl.systems.fedrl.algorithm import FedRL

    seen = {}
    monkeypatch.setattr(fedrl_cli, "_execute", lambda algo, out, show, *_: seen.update(algo=algo))
    assert cli.main(["run", "fedrl", "--bounded", "2", "--noise-std", "3", "--delta", "1e-6",
                     "--accountant", choice]) == 0
    algo: FedRL = seen["algo"]
    assert algo.config.accountant == choice
    rec = algo.privacy_record(50, 2, 10, 10)
    z = 3.0 / (2 * 2.0)  # σ / (2B)
    for party, count in rec["releases"].items():
        account = rec["parties"][party]
        assert account["accountant_choice"] == choice
        assert account["events"] == [{**account["events"][0], "noise_multiplier": z,
                                      "count": count}]
        if choice == "pld":
            direct = dp_accounting.get_epsilon_gaussian(z / math.sqrt(count), 1e-6)
        else:
            acc = dp_accounting.rdp.RdpAccountant()
            acc.compose(dp_accounting.GaussianDpEvent(z), count)
            direct = acc.get_epsilon(1e-6)
        assert account["epsilon"] == pytest.approx(direct, rel=1e-9)
    assert f"accountant {choice}" in rec["statement"]


def test_accountant_without_bounded_is_refused(capsys, no_compute):
    assert cli.main(["run", "fedrl", "--accountant", "rdp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--accountant" in err and "bounded" in err, err

