"""FedPG-Cen's plan calibrates σ for the rounds its budget takes, not the most it could take:
the round's episode cost (mean, spread) and the rounds a budget takes, against a simulation
of the round's draws (B_t uniform, N_t geometric as `Learner.draw_steps`)."""

from __future__ import annotations

import numpy as np
import pytest

from privrl.planner import systems as sy
from privrl.systems.fedpg.config import FedPGConfig


def _round_costs(cfg: FedPGConfig, rng: np.random.Generator, shape: tuple[int, ...]
                 ) -> np.ndarray:
    b = rng.integers(cfg.batch_min, cfg.batch_max + 1, shape)
    n = rng.geometric(cfg.minibatch / (b + cfg.minibatch))  # on {1, 2, ...}
    return b + cfg.minibatch * n


@pytest.mark.parametrize("preset", ["paper", "continuous"])
def test_round_episodes_match_the_rounds_draws(preset: str) -> None:
    cfg = FedPGConfig.from_preset(preset)
    costs = _round_costs(cfg, np.random.default_rng(0), (200_000,))
    mean, sd = cfg.round_episodes()
    # standard errors: sd/√n ≈ 0.04 (mean) and about 0.1 on the sd (heavy geometric tail)
    assert mean == pytest.approx(costs.mean(), abs=0.2)
    assert sd == pytest.approx(costs.std(), rel=0.03)
    assert mean == {"paper": 36, "continuous": 16}[preset]


@pytest.mark.parametrize(("preset", "reports"), [("paper", 2), ("paper", 64),
                                                 ("continuous", 16)])
def test_dp_rounds_cover_the_rounds_a_budget_takes_and_fewer_than_the_bound(
        preset: str, reports: int) -> None:
    """A trial plays rounds until its agents' episodes reach the budget; dp_rounds must cover
    that count in almost every trial (else the trial is cut short), and be well below
    FedPGConfig's default (the most rounds the budget could take), which σ was calibrated for."""
    rec = sy.Recommendation("distributed-gaussian", 2.0, 1000, 0.2, reports, 1000, 1e-3, preset)
    fields = sy.config_fields("fedpg-cen", rec, "gymnax:CartPole-v1", (), 1, 0)
    cfg = sy.build_config("fedpg-cen", fields).resolved()
    costs = _round_costs(cfg, np.random.default_rng(1), (20_000, 4 * reports + 8))
    rounds = 1 + np.argmax(np.cumsum(costs, axis=1) >= cfg.budget, axis=1)
    assert cfg.dp_rounds == sy.fedpg_dp_rounds(reports, preset)
    assert np.mean(rounds > cfg.dp_rounds) < 0.01
    assert cfg.dp_rounds <= cfg.max_rounds()
    if reports >= 16:  # σ for 1.4-1.9x fewer rounds than the bound (1.2-1.4x smaller σ)
        assert cfg.dp_rounds < cfg.max_rounds() / 1.4
    nonprivate = sy.config_fields("fedpg-cen", rec.__class__(**{
        **rec.__dict__, "mechanism": "none", "epsilon": float("inf")}), "gymnax:CartPole-v1",
        (), 1, 0)
    assert "dp_rounds" not in nonprivate and nonprivate["budget"] == cfg.budget
