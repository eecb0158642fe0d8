"""The attack that seeded noise allows, and that secret noise stops.

An aggregator holds config.json (the seed) and the report log. With seeded noise it recomputes
every agent's Laplace noise from the seed and subtracts it: the clipped gradients come out
exactly. With secret noise (each agent's root from os.urandom in its own process) the same
procedure recovers nothing: its estimate is no closer to the gradient than the report itself.
The agents here are the Ray runtime's agent actors, called in-process (no Ray needed).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest

from privrl.compute.sharding import setting_trial_keys
from privrl.federation import AggregatorService, AggregatorSpec
from privrl.federation.service import read_log
from privrl.privacy import PrivacyLedger
from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig
from privrl.systems.pgc_a3c.ray import AgentActor

SUBMISSIONS = 6  # agents 0..5, one submission each
pytestmark = pytest.mark.slow  # three agent programs to compile (about 3 s each)


def _config(noise: str, mechanism: str = "laplace") -> PGCA3CConfig:
    return PGCA3CConfig.from_preset(
        "paper", mechanism=mechanism, epsilon=2.0 if mechanism != "none" else None, clip=0.01,
        submissions=SUBMISSIONS, parallel_agents=1, max_episode_steps=20, seed=7,
        noise=noise).resolved()


def _run(cfg: PGCA3CConfig, directory: Path) -> np.ndarray:
    """Agents submit through the aggregator service (which logs every report); θ stays at
    θ₀, so every agent's input is known to the test. Returns the reports as logged."""
    algo = PGCA3C(cfg)
    theta0 = np.asarray(algo.init(jax.random.key(cfg.seed)).agg.theta)
    svc = AggregatorService(AggregatorSpec(algo.dim), theta0, SUBMISSIONS,
                            PrivacyLedger(cfg.epsilon), algo.mechanism.guarantee, directory)
    agent = AgentActor(cfg)
    for n in range(SUBMISSIONS):
        sub, _ = agent.run(theta0, n, 0)
        assert svc.submit(sub).accepted
    svc.close()
    (directory / "config.json").write_text(json.dumps(cfg.to_dict()))
    return read_log(directory, algo.dim)


def _attack(directory: Path) -> np.ndarray:
    """What the aggregator can do with config.json and the log alone: recompute each agent's
    noise key from the seed (the rule every seeded runner uses) and subtract the noise."""
    cfg = PGCA3CConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in
                          json.loads((directory / "config.json").read_text()).items()})
    algo = PGCA3C(replace(cfg, parallel_agents=1))
    root = algo.init(setting_trial_keys(cfg.seed, 1, 1, 1, 1)[0]).key  # the local trial's
    guesses = []
    for r in read_log(directory, algo.dim):
        # submission n = a·T + index is the local runner's round n (one agent per round)
        n = int(r["agent"]) * cfg.submissions_per_agent + int(r["index"])
        key = jax.random.fold_in(root, n)
        _, k_mech = jax.random.split(key)
        noise = jax.random.laplace(jax.random.split(k_mech, 1)[0], (algo.dim,)) \
            * algo.mechanism.scale
        guesses.append(r["value"] - np.asarray(noise))
    return np.stack(guesses)


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The clipped gradients themselves: the same agents without noise (clip only)."""
    return _run(_config("seeded", "none"), tmp_path_factory.mktemp("truth"))["value"]


def test_seeded_noise_lets_the_aggregator_recover_the_clipped_gradients(
        tmp_path: Path, truth: np.ndarray) -> None:
    reports = _run(_config("seeded"), tmp_path)["value"]
    guess = _attack(tmp_path)
    noise = np.abs(reports - truth).sum(axis=1)
    assert noise.min() > 50 * 0.005  # the reports are far from the inputs (L1 ≫ C/2) ...
    # ... yet the attack gets them back to float32 rounding of the noise (scale C/ε = 0.005).
    np.testing.assert_allclose(guess, truth, atol=1e-6)


def test_secret_noise_leaves_the_same_attack_with_nothing(tmp_path: Path,
                                                          truth: np.ndarray) -> None:
    reports = _run(_config("secret"), tmp_path)["value"]
    guess = _attack(tmp_path)
    baseline = np.abs(reports - truth).sum(axis=1)  # the report itself as the estimate
    attack = np.abs(guess - truth).sum(axis=1)
    # The attack subtracts an independent Laplace vector: the difference of two Laplace
    # variables has E|·| = 1.5 b against b for one, so its L1 error is about 1.5 times the
    # report's own; over d = 112 coordinates the ratio's spread is small and 0.9 leaves a
    # wide margin.
    assert np.all(attack > 0.9 * baseline), (attack, baseline)


def test_secret_noise_keeps_the_agents_data_from_being_resimulated(
        tmp_path: Path, truth: np.ndarray) -> None:
    """Issue 43, item 8: the same aggregator re-simulates every agent's clipped gradient from
    config.json (its private dynamics and episode keys from the seed: `truth`). Under secret
    noise the agents' dynamics and episodes come from their secret roots, so what they
    actually clipped (released here without noise, mechanism "none") is none of those."""
    actual = _run(_config("secret", "none"), tmp_path)["value"]
    distance = np.abs(actual - truth).sum(axis=1)
    # Each gradient is clipped to L1 C/2 = 0.005; re-simulated ones would be equal to float
    # rounding (1e-6). Two independent episodes' clipped gradients differ by far more.
    assert np.all(distance > 1e-4), distance
