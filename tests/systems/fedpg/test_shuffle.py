"""FedPG-Cen's shuffle model (`--shuffle`): each round's K reports reach the server in a random
order (a permutation of the same reports), privacy.json states the per-report ε₀ and the central
(ε, δ) per round and over the rounds; refused with one line naming --shuffle where it does not
apply."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from privrl import main as cli
from privrl.privacy.shuffle import shuffle_epsilon
from privrl.systems.fedpg import cen
from privrl.systems.fedpg import local as runner
from privrl.systems.fedpg.algorithm import FedPGConfig


@pytest.fixture
def no_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("computation started despite invalid options")

    monkeypatch.setattr(runner, "run_fedpg", forbidden)


@pytest.mark.parametrize(("args", "option"), [
    (["fedpg-dec", "--mechanism", "laplace", "--epsilon", "1", "--shuffle"], "--shuffle"),
    (["fedpg-cen", "--shuffle"], "--shuffle"),  # --mechanism none: no local ε
    (["fedpg-cen", "--mechanism", "distributed-gaussian", "--epsilon", "2", "--shuffle"],
     "--shuffle"),
    (["fedpg-cen", "--mechanism", "gaussian", "--epsilon", "2", "--shuffle"], "--shuffle"),
    (["fedpg-cen", "--mechanism", "laplace", "--epsilon", "1", "--shuffle",
      "--shuffle-delta", "0"], "--shuffle-delta"),
])
def test_shuffle_is_refused_where_it_does_not_apply(args, option, capsys, tmp_path, no_compute):
    out = tmp_path / "run"
    assert cli.main(["run", *args, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option in err, err
    assert not out.exists()


def test_shuffled_rounds_permute_the_reports_and_state_the_central_epsilon(monkeypatch):
    """One run (K = 4): what the mechanism released and what the server averaged, recorded
    round by round, are the same reports, in another order."""
    from privrl.systems.fedpg import algorithm

    released: list[np.ndarray] = []
    received: list[np.ndarray] = []
    # A Laplace run releases through its setting as data, as the programs it could join do.
    privatize, average = algorithm.privatize_setting, cen.average_reports

    def recorded(into, value):
        jax.debug.callback(lambda v: into.append(np.asarray(v).reshape(-1, v.shape[-1])), value)

    def releasing(*args):
        report = privatize(*args)
        recorded(released, report.value)
        return report

    def receiving(reports):
        recorded(received, reports.value)
        return average(reports)

    monkeypatch.setattr(algorithm, "privatize_setting", releasing)
    monkeypatch.setattr(cen, "average_reports", receiving)
    cfg = FedPGConfig(mechanism="laplace", epsilon=1.0, clip=1.0, agents=4, budget=12,
                      batch_min=2, batch_max=3, minibatch=2, inner_steps=1,
                      max_episode_steps=30, shuffle=True).resolved()  # small: ~3 rounds
    run = runner.run_fedpg(cfg)
    rounds = int(run.releases.max())
    sent, got = np.concatenate(released), np.concatenate(received)
    assert sent.shape == got.shape == (4 * rounds, run.z.shape[-1])
    orders = []
    for t in range(rounds):
        batch, server = sent[4 * t: 4 * t + 4], got[4 * t: 4 * t + 4]
        orders.append([int(np.flatnonzero((batch == row).all(axis=1))[0]) for row in server])
        assert sorted(orders[-1]) == [0, 1, 2, 3]  # every report once
    assert any(o != [0, 1, 2, 3] for o in orders), orders  # reordered (seeded: deterministic)

    record = runner.privacy_record(run)
    shuffled, per_round = record["shuffle"], shuffle_epsilon(1.0, 4, 1e-5)
    assert shuffled["local_epsilon_per_report"] == 1.0 and shuffled["batch_size"] == 4
    assert shuffled["central_epsilon_per_batch"] == per_round < 1.0
    assert shuffled["batches_per_user"] == rounds
    assert shuffled["central_epsilon"] == pytest.approx(rounds * per_round)
    assert shuffled["central_delta"] == pytest.approx(rounds * 1e-5)
    assert "Shuffled" in record["statement"] and "basic composition" in record["statement"]
    monkeypatch.undo()
    unshuffled = runner.privacy_record(replace_run(run, cfg))
    assert "shuffle" not in unshuffled and "Shuffled" not in unshuffled["statement"]


def replace_run(run, cfg):
    from dataclasses import replace

    return replace(run, config=replace(cfg, shuffle=False))
