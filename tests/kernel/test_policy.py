"""Saved policies (issue 39): policy.npz round-trips without running code, tampering is one
RunFileError naming the file, `act` is greedy without a key and sampled with one, and
`privrl evaluate` reports returns and writes them beside the run without overwriting."""

from __future__ import annotations

import json
import pickle

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import privrl
from privrl.config import ConfigError
from privrl.envs.task import make_task
from privrl.evaluation import evaluate_run
from privrl.main import main
from privrl.nets.flat import FlatModel, actor_critic, mlp
from privrl.output import RunRecord, save
from privrl.policy import FILE, load_policy, saved_policy
from privrl.runfile import RunFileError, dumps, read


def balancing_theta(model: FlatModel) -> np.ndarray:
    """An actor-critic θ (hidden 2, no biases) that pushes right iff angle + angular velocity
    > 0: a classic CartPole heuristic that balances far longer than a random policy (≈ 22)."""
    w = np.array([0.0, 0.0, 1.0, 1.0], np.float32)
    params = {"common": {"kernel": np.stack([w, -w], 1)},
              "policy": {"kernel": np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)},
              "value": {"kernel": np.zeros((2, 1), np.float32)}}
    flat = np.asarray(jax.flatten_util.ravel_pytree(params)[0])  # the module's key order
    assert flat.size == model.dim
    return flat


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A run directory with a 2-trial policy: trial 0 balances, trial 1 always pushes left."""
    path = tmp_path_factory.mktemp("run")
    task = make_task("gymnax:CartPole-v1")
    model = actor_critic(2, 2, 4)
    theta = np.stack([balancing_theta(model), np.zeros(model.dim, np.float32)])
    policy = saved_policy("pgc-a3c", model, task, "logits,value", theta, 200)
    save(RunRecord("pgc-a3c", {}, 0, {}, {"statement": "test"}, policy=policy), path)
    return path


def test_policy_file_is_a_run_file_with_the_models_description(cartpole_run):
    state = read(cartpole_run / FILE, "policy")
    d = state["description"]
    assert d["model"] == {"architecture": "actor-critic", "hidden": [2], "activation": "relu",
                          "use_bias": False, "obs_dim": 4, "num_actions": 2, "dim": 14}
    assert d["env"] == "gymnax:CartPole-v1" and d["action_space"] == {"kind": "discrete",
                                                                        "n": 2}
    assert state["theta"].shape == (2, 1, 14) and state["theta"].dtype == np.float32


def test_act_is_greedy_without_a_key_and_sampled_with_one(cartpole_run, tmp_path):
    p = privrl.load_policy(cartpole_run, trial=0)
    with pytest.raises(ConfigError, match="only a Text2Action run") as e:  # a corpus: refused
        privrl.load_policy(cartpole_run, data=tmp_path)
    assert e.value.field == "data"
    assert int(p.act([0, 0, 0.1, 0.0])) == 1 and int(p.act([0, 0, -0.1, 0.0])) == 0
    batch = np.array([[0, 0, 0.1, 0], [0, 0, -0.1, 0]], np.float32)
    assert p.act(batch).tolist() == [1, 0]
    # θ = 0: logits (0, 0), greedy is action 0, a sample is either with probability 1/2
    zero = load_policy(cartpole_run, trial=1)
    obs = np.zeros((2000, 4), np.float32)
    assert not zero.act(obs).any()
    share = zero.act(obs, key=jax.random.key(3)).mean()
    assert abs(share - 0.5) < 0.05  # 2000 Bernoulli(1/2): sd 0.011
    assert zero.act(obs, key=7).tolist() == zero.act(obs, key=jax.random.key(7)).tolist()
    with pytest.raises(ValueError, match="trial"):
        load_policy(cartpole_run, trial=2)
    with pytest.raises(ValueError, match=r"\(4,\)"):
        p.act(np.zeros(3))


def test_q_policy_samples_epsilon_greedy(tmp_path):
    task = make_task("gymnax:CartPole-v1")
    model = mlp((4,), 2, 4)
    theta = np.asarray(jax.jit(model.init)(jax.random.key(0)))[None]  # one program, not an op each
    saved_policy("dp-dqn", model, task, "q", theta, 500, epsilon=0.5).write(tmp_path / FILE)
    p = load_policy(tmp_path)
    obs = np.random.default_rng(0).normal(size=(4000, 4)).astype(np.float32)
    greedy = p.act(obs)
    differ = (p.act(obs, key=jax.random.key(1)) != greedy).mean()
    assert abs(differ - 0.25) < 0.03  # ε/2 of the actions are the other one; sd 0.007


def _tamper(run, tmp_path, state):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / FILE).write_bytes(dumps("policy", state))
    return bad


@pytest.mark.parametrize("change", [
    lambda d, t: (d["model"].update(hidden=[10**6]), t),  # a huge network
    lambda d, t: (d["model"].update(dim=17), t),  # sizes that do not add up
    lambda d, t: (d.update(trials=3), t),  # a shape the description does not have
    lambda d, t: (d["model"].update(architecture="pickle"), t),
    lambda d, t: (d.update(head="exec"), t),
    lambda d, t: (None, t.astype(np.float64)),
    lambda d, t: (d.update(epsilon=2.0), t),
])
def test_a_tampered_policy_is_one_run_file_error_naming_the_file(cartpole_run, tmp_path,
                                                                 change):
    state = read(cartpole_run / FILE, "policy")
    _, theta = change(state["description"], state["theta"])
    bad = _tamper(cartpole_run, tmp_path, {"description": state["description"],
                                           "theta": theta})
    with pytest.raises(RunFileError, match=r"policy\.npz"):
        load_policy(bad)


def test_a_truncated_pickled_or_linked_policy_is_refused(cartpole_run, tmp_path):
    raw = (cartpole_run / FILE).read_bytes()
    for name, data in (("cut", raw[: len(raw) // 2]), ("pkl", pickle.dumps({"x": 1}))):
        (tmp_path / name).mkdir()
        (tmp_path / name / FILE).write_bytes(data)
        with pytest.raises(RunFileError, match=rf"{name}/policy\.npz"):
            load_policy(tmp_path / name)
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / FILE).symlink_to(cartpole_run / FILE)
    with pytest.raises(RunFileError, match="symbolic link"):
        load_policy(tmp_path / "link")


def test_a_users_module_is_never_loaded_from_the_file(tmp_path):
    import flax.linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(x)

    task = make_task("gymnax:CartPole-v1")
    model = FlatModel(Net(), jnp.zeros((4,), jnp.float32))
    saved_policy("fedpg-cen", model, task, "logits", np.zeros((1, model.dim)), 500
                 ).write(tmp_path / FILE)
    with pytest.raises(ConfigError, match="pass it"):
        load_policy(tmp_path)
    assert load_policy(tmp_path, model=Net()).act(np.zeros(4)) in (0, 1)
    with pytest.raises(ConfigError, match="parameters"):
        load_policy(tmp_path, model=nn.Dense(3))


def test_evaluate_plays_the_policy_on_its_task(cartpole_run):
    ev = evaluate_run(cartpole_run, episodes=8, seed=1)
    means = ev.returns.mean(1)
    assert ev.max_steps == 200 and ev.rows == [(0, 0), (1, 0)]
    # the heuristic balances (random ≈ 22); always pushing left falls within ~10 steps
    assert means[0] > 100 and means[1] < 15
    again = evaluate_run(cartpole_run, episodes=8, seed=1, trial=0, env="gymnasium:CartPole-v1")
    assert again.returns.mean() > 100


def test_privrl_evaluate_writes_fresh_files_and_refuses_bad_input(cartpole_run, capsys):
    run = str(cartpole_run)
    assert main(["evaluate", run, "--episodes", "3", "--trial", "0"]) == 0
    assert main(["evaluate", run, "--episodes", "2"]) == 0
    first = json.loads((cartpole_run / "evaluate-1.json").read_text())
    second = json.loads((cartpole_run / "evaluate-2.json").read_text())
    assert [r["trial"] for r in first["per_trial"]] == [0]
    assert [r["trial"] for r in second["per_trial"]] == [0, 1]
    rows = (cartpole_run / "evaluate-2.csv").read_text().splitlines()
    assert rows[0] == "trial,learner,episode,return" and len(rows) == 1 + 2 * 2
    capsys.readouterr()
    for args, message in (
            ([str(cartpole_run / "nope")], "RUN_DIR"),
            ([run, "--env", "gymnax:Acrobot-v1"], "--env: gymnax:Acrobot-v1 has 6"),
            ([run, "--trial", "7"], "--trial"),
            ([run, "--episodes", "0"], "--episodes"),
            ([run, "--env", "gymnax:Pendulum-v1"], "--env")):
        assert main(["evaluate", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert sorted(p.name for p in cartpole_run.glob("evaluate-*")) == [
        "evaluate-1.csv", "evaluate-1.json", "evaluate-2.csv", "evaluate-2.json"]


def test_a_module_named_in_the_file_is_never_imported(cartpole_run, tmp_path, capsys):
    state = read(cartpole_run / FILE, "policy")
    for env in ("os:getcwd", "gymnasium:os:getcwd", "evil.py:make"):
        state["description"]["env"] = env
        bad = tmp_path / env.replace(":", "_")
        bad.mkdir()
        (bad / FILE).write_bytes(dumps("policy", state))
        assert main(["evaluate", str(bad)]) == 2
        assert "never imported" in capsys.readouterr().err


def test_a_sweep_setting_keeps_its_policy_too(cartpole_run, tmp_path):
    from privrl.output import save_setting

    state = read(cartpole_run / FILE, "policy")
    policy = load_policy(cartpole_run)
    record = RunRecord("pgc-a3c", {}, 0, {"n": 1}, {}, policy=saved_policy(
        "pgc-a3c", policy.model, make_task("gymnax:CartPole-v1"), "logits,value",
        state["theta"], 200))
    save_setting(record, tmp_path / "s")
    np.testing.assert_array_equal(load_policy(tmp_path / "s", trial=1).theta,
                                  state["theta"][1, 0])


NET_PY = '''
import flax.linen as nn


class Net(nn.Module):
    """One observation -> the logits of CartPole's two actions."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x)


def not_a_module():
    return 3
'''


def test_privrl_evaluate_takes_a_users_network_with_model(tmp_path, capsys):
    """A run trained with the user's own network is evaluated with `--model file.py:Net` (the
    option, never the file, allows the import); without it, or with something other than a
    flax module, one line naming --model and nothing written."""
    from privrl.plugins import load_module

    (tmp_path / "usernet.py").write_text(NET_PY)
    net = load_module(f"{tmp_path / 'usernet.py'}:Net", "model")
    model = FlatModel(net, jnp.zeros((4,), jnp.float32))
    w = np.array([0.0, 0.0, 1.0, 1.0], np.float32)  # push right iff angle + ang. velocity > 0
    theta = jax.flatten_util.ravel_pytree(
        {"params": {"Dense_0": {"bias": np.zeros(2, np.float32),
                                "kernel": np.stack([-w, w], 1)}}})[0]
    assert theta.size == model.dim
    run = tmp_path / "run"
    run.mkdir()
    saved_policy("fedpg-cen", model, make_task("gymnax:CartPole-v1"), "logits",
                 np.asarray(theta)[None], 200).write(run / FILE)
    capsys.readouterr()
    for args in ([], ["--model", f"{tmp_path / 'usernet.py'}:not_a_module"],
                 ["--model", f"{tmp_path / 'nope.py'}:Net"]):
        assert main(["evaluate", str(run), "--episodes", "2", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error: --model:" in err[0], err
    assert not list(run.glob("evaluate-*"))
    assert main(["evaluate", str(run), "--episodes", "4", "--model",
                 f"{tmp_path / 'usernet.py'}:Net"]) == 0
    summary = json.loads((run / "evaluate-1.json").read_text())
    assert summary["mean_return"] > 100  # the heuristic balances; random ≈ 22


def test_model_is_refused_for_privrls_own_network(cartpole_run, tmp_path, capsys):
    """--model on a run whose network privrl rebuilds itself is refused before any import."""
    marker = tmp_path / "imported"
    (tmp_path / "loud.py").write_text(f"open({str(marker)!r}, 'w').close()\nNet = 1\n")
    assert main(["evaluate", str(cartpole_run), "--model", f"{tmp_path / 'loud.py'}:Net"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--model" in err[0] and "privrl's own" in err[0], err
    assert not marker.exists()


def test_a_continuous_policy_plays_its_mean_action_or_samples_and_says_which(tmp_path, capsys):
    """Issue 53: a Gaussian policy's greedy play is labelled "mean action" (not argmax);
    --sample plays sampled actions (other returns: σ = 1 here), and the report says which
    was used and why the two can differ."""
    task = make_task("gymnax:Pendulum-v1")
    model = mlp((4,), 2, 3)
    theta = np.asarray(jax.jit(model.init)(jax.random.key(0)))[None]  # one program, not an op each
    save(RunRecord("dp-reinforce", {}, 0, {}, {"statement": "test"},
                   policy=saved_policy("dp-reinforce", model, task, "logits", theta, 20)),
         tmp_path)
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path), "--episodes", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "mean action policy on gymnax:Pendulum-v1" in out
    assert "Actions played: mean action; --sample" in out and "can differ" in out
    assert main(["evaluate", str(tmp_path), "--episodes", "2", "--sample"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Actions played: sampled (Gaussian)" in out
    mean, sampled = (json.loads((tmp_path / f"evaluate-{n}.json").read_text()) for n in (1, 2))
    assert mean["policy"] == "mean action" and "can differ" in mean["policy_note"]
    assert sampled["policy"] == "sampled (Gaussian)" and "can differ" in sampled["policy_note"]
    assert mean["mean_return"] != sampled["mean_return"]
