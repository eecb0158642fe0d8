"""The `paper-code` preset: the paper preset read through the public TF1 A3C code (issue 23).

Its two departures from `paper` are checked by hand: TF1's RMSProp at the aggregator (squared
average starting at 1, eps inside the square root) and the rewards (fall, and the example's goal).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl import main as cli
from privrl.envs.rollout import Trajectory
from privrl.federation.aggregator import BufferedAggregator
from privrl.privacy import IdentityMechanism
from privrl.systems.pgc_a3c import cli as pgc_cli
from privrl.systems.pgc_a3c import reproduce as rep
from privrl.systems.pgc_a3c.algorithm import (
    PGCA3C,
    ConfigError,
    PGCA3CConfig,
    server_optimizer,
)

CHANGED = {"preset", "server_optimizer", "reward"}  # vs the paper preset; rmsprop_* unused there


def test_paper_code_preset_is_the_paper_preset_plus_rmsprop_and_fall_reward():
    for mech, (clip, buffer) in {"laplace": (0.01, 1), "prs": (1.0, 100),
                                 "none": (0.01, 1)}.items():
        code = PGCA3CConfig.from_preset("paper-code", mechanism=mech, epsilon=5.0).resolved()
        paper = PGCA3CConfig.from_preset("paper", mechanism=mech, epsilon=5.0).resolved()
        assert (code.clip, code.buffer_size) == (clip, buffer)
        # the task's shaped reward: on the paper's CartPole task, −1 on a fall
        assert (code.server_optimizer, code.reward) == ("rmsprop", "shaped")
        assert PGCA3C(code).config.reward == "failure"
        assert (code.learning_rate, code.rmsprop_decay, code.rmsprop_eps,
                code.rmsprop_initial_scale) == (0.5, 0.99, 1e-10, 1.0)
        a, b = code.to_dict(), paper.to_dict()
        assert {k for k in a if a[k] != b[k]} == CHANGED
    assert paper.server_optimizer == "sgd" and paper.reward == "env"  # paper untouched


def _tf1_rmsprop(theta, grads, lr, decay, eps, ms0, momentum=0.0):
    """TF1 RMSPropOptimizer in float64: ms starts at ms0 (TF1: ones), ms ← decay·ms +
    (1 − decay)·g², mom ← momentum·mom + lr·g/√(ms + eps), θ ← θ − mom."""
    theta, ms = np.asarray(theta, np.float64), np.full(len(theta), ms0, np.float64)
    mom = np.zeros_like(theta)
    for g in grads:
        g = np.asarray(g, np.float64)
        ms = decay * ms + (1 - decay) * g * g
        mom = momentum * mom + lr * g / np.sqrt(ms + eps)
        theta = theta - mom
    return theta


def test_rmsprop_aggregator_matches_two_tf1_steps_by_hand():
    cfg = PGCA3CConfig.from_preset("paper-code")
    theta0 = np.array([0.3, -1.0, 2.0], np.float32)
    grads = [np.array([0.5, -2.0, 0.0], np.float32), np.array([-0.25, 4.0, 1e-3], np.float32)]
    # Through the aggregator the run uses (|B| = 1: each report is one optimizer step).
    agg = BufferedAggregator(3, 1, cfg.learning_rate, server_optimizer(cfg))
    state = agg.init(theta0)
    mech = IdentityMechanism(100.0)  # L1 clip to 50: these reports pass unchanged
    for k, g in enumerate(grads):
        state = agg.submit(state, mech.privatize(jax.random.key(k), jnp.asarray(g)))
    want = _tf1_rmsprop(theta0, grads, 0.5, 0.99, 1e-10, 1.0)
    np.testing.assert_allclose(np.asarray(state.theta), want, rtol=1e-6, atol=1e-7)
    # Step 1 by hand: ms = 0.99 + 0.01·g², so θ − 0.5·g/√ms (≈ SGD at η = 0.5 for small g).
    first = theta0 - 0.5 * grads[0] / np.sqrt(0.99 + 0.01 * grads[0] ** 2 + 1e-10)
    assert first[0] == pytest.approx(0.3 - 0.25 / math.sqrt(0.9925), rel=1e-6)
    # The initial squared average matters: from 0 the first step is ≈ η·10·sign(g).
    cold = PGCA3CConfig.from_preset("paper-code", rmsprop_initial_scale=0.0)
    tx = server_optimizer(cold)
    step, _ = tx.update(jnp.asarray(grads[0]), tx.init(jnp.asarray(theta0)))
    np.testing.assert_allclose(np.asarray(step), [-5.0, 5.0, 0.0], rtol=1e-5)
    # TF1's momentum (off in the preset): two steps by hand again.
    heavy = server_optimizer(PGCA3CConfig.from_preset("paper-code", rmsprop_momentum=0.9))
    theta, opt = jnp.asarray(theta0), heavy.init(jnp.asarray(theta0))
    for g in grads:
        step, opt = heavy.update(jnp.asarray(g), opt, theta)
        theta = theta + step
    np.testing.assert_allclose(np.asarray(theta),
                               _tf1_rmsprop(theta0, grads, 0.5, 0.99, 1e-10, 1.0, 0.9),
                               rtol=1e-6, atol=1e-7)


def test_invalid_rmsprop_fields_name_the_field():
    for field, value in [("rmsprop_decay", 1.0), ("rmsprop_decay", -0.1),
                         ("rmsprop_eps", 0.0), ("rmsprop_initial_scale", -1.0),
                         ("rmsprop_momentum", 1.0)]:
        with pytest.raises(ConfigError) as e:
            PGCA3CConfig.from_preset("paper-code", **{field: value}).resolved()
        assert e.value.field == field


def _episodes(lengths: list[int], terminated: list[bool], steps: int = 200,
              reward_per_step: float = 1.0) -> Trajectory:
    """P episodes of the given lengths; the environment pays `reward_per_step` (CartPole: +1)."""
    t = np.arange(steps)[:, None]
    mask = (t < np.asarray(lengths)[None, :]).astype(np.float32)
    p = len(lengths)
    return Trajectory(obs=jnp.zeros((steps, p, 4)), actions=jnp.zeros((steps, p), jnp.int32),
                      mask=jnp.asarray(mask), final_obs=jnp.zeros((p, 4)),
                      terminated=jnp.asarray(terminated),
                      length=jnp.asarray(lengths, jnp.int32),
                      rewards=jnp.asarray(mask * reward_per_step))


@pytest.mark.parametrize("reward, ends", [
    ("failure", [-1.0, -1.0, 0.0]),  # −1 on every fall, 0 at the step cap
    ("goal", [-1.0, 1.0, 1.0]),  # −1 on a fall before 195, +1 once 195 steps were reached
])
def test_fall_and_goal_rewards_by_hand(reward, ends):
    algo = PGCA3C(PGCA3CConfig.from_preset("paper-code", reward=reward))
    lengths, terminated = [12, 196, 200], [True, True, False]  # early fall, late fall, cap
    traj = _episodes(lengths, terminated)
    for k, n in enumerate(lengths):
        one = traj._replace(mask=traj.mask[:, k], terminated=traj.terminated[k],
                            length=traj.length[k], rewards=traj.rewards[:, k])
        r = np.asarray(algo.rewards(one))
        want = np.zeros(200, np.float32)
        want[n - 1] = ends[k]
        np.testing.assert_array_equal(r, want)


def test_goal_reward_reads_the_return_against_the_target():
    """On a task paying -1 per step (Acrobot's), "goal" gives +1 to an episode whose return
    reached target_score (-100: ended within 100 steps), -1 to a later termination and 0 at
    the step cap, as on CartPole where the return is the length."""
    algo = PGCA3C(PGCA3CConfig.from_preset("paper-code", reward="goal", target_score=-100.0))
    lengths, terminated = [60, 100, 150, 200], [True, True, True, False]
    traj = _episodes(lengths, terminated, reward_per_step=-1.0)
    for k, (n, end) in enumerate(zip(lengths, [1.0, 1.0, -1.0, 0.0], strict=True)):
        one = traj._replace(mask=traj.mask[:, k], terminated=traj.terminated[k],
                            length=traj.length[k], rewards=traj.rewards[:, k])
        want = np.zeros(200, np.float32)
        want[n - 1] = end
        np.testing.assert_array_equal(np.asarray(algo.rewards(one)), want)


def test_cli_accepts_the_preset(tmp_path, capsys, monkeypatch):
    seen = []
    monkeypatch.setattr(pgc_cli, "_execute_pgc", lambda config, out, show, *_: seen.append(config))
    assert cli.main(["run", "pgc-a3c", "--preset", "paper-code", "--mechanism", "prs",
                     "--epsilon", "5", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    (config,) = seen
    assert (config.preset, config.server_optimizer, config.buffer_size) == (
        "paper-code", "rmsprop", 100)
    # The Ray aggregator cannot rebuild RMSProp: refused in one line, before anything runs
    # (naming the field the preset set, a flag of its own).
    assert cli.main(["run", "pgc-a3c", "--preset", "paper-code", "--runtime", "ray",
                     "--no-progress"]) == 2
    assert "--server-optimizer" in capsys.readouterr().err

    def fake_sweep(cfg, out, **kw):
        seen.append(cfg)
        (out / "tables.md").write_text("# tables\n")
        return {}

    monkeypatch.setattr(rep, "run_sweep", fake_sweep)
    sweep = tmp_path / "sweep"
    assert cli.main(["reproduce", "pgc-a3c", "--preset", "paper-code", "--trials", "2",
                     "--out", str(sweep), "--no-progress"]) == 0
    assert seen[-1].preset == "paper-code" and seen[-1].run_config(
        rep.Setting("laplace", 10.0)).server_optimizer == "rmsprop"


def test_mean_loss_reduction_divides_the_episode_loss_by_its_steps():
    traj = _episodes([12], [True], steps=20)
    one = traj._replace(obs=jax.random.normal(jax.random.key(0), (20, 4)),
                        actions=traj.actions[:, 0], mask=traj.mask[:, 0],
                        final_obs=traj.final_obs[0], terminated=traj.terminated[0],
                        length=traj.length[0])
    summed = PGCA3C(PGCA3CConfig.from_preset("paper-code"))
    mean = PGCA3C(PGCA3CConfig.from_preset("paper-code", loss_reduction="mean"))
    theta = summed.model.init(jax.random.key(1))
    total = float(jax.jit(summed.episode_loss)(theta, one))
    assert total != 0.0
    assert float(jax.jit(mean.episode_loss)(theta, one)) == pytest.approx(total / 12, rel=1e-6)
    with pytest.raises(ConfigError) as e:
        PGCA3CConfig(loss_reduction="max").resolved()
    assert e.value.field == "loss_reduction"


def test_ray_runner_refuses_rmsprop_before_starting_ray(tmp_path):
    from privrl.systems.pgc_a3c.ray import run_pgc_a3c_ray

    with pytest.raises(ConfigError) as e:
        run_pgc_a3c_ray(PGCA3CConfig.from_preset("paper-code"), tmp_path / "agg")
    assert e.value.field == "server_optimizer"
    assert not (tmp_path / "agg").exists()
