"""privacy.json is written by one record path for every FedPG runtime: the Flower runtime's
statement of the Reports its server accepted, and of its secure sums, is the local runner's
record (privrl.systems.fedpg.local.privacy_record) of what its agents released."""

import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from privrl.privacy.discrete_sum import DiscreteGaussianSum
from privrl.systems.fedpg.config import FedPGConfig
from privrl.systems.fedpg.flower import FlowerCenRun
from privrl.systems.fedpg.local import Released, privacy_record, run_fedpg, summarize
from privrl.systems.fedpg.reproduce import short_privacy

TINY = dict(agents=2, hidden=(4,), batch_min=2, batch_max=3, minibatch=1, inner_steps=1,
            max_episode_steps=20, budget=12, clip=1.0, noise="seeded")


def _flower(cfg: FedPGConfig, rounds: list[dict], mechanism=None) -> FlowerCenRun:
    """A run on 2 SuperNodes; under the secure sum, SecAgg+ reveals only with both (a
    threshold is a strict majority)."""
    return FlowerCenRun(cfg, mechanism, rounds, np.zeros(3, np.float32), 2,
                        None if mechanism is None else 2, 0.0)


@pytest.mark.parametrize("request_", [{"mechanism": "laplace", "epsilon": 2.0},
                                      {"mechanism": "none"}])
def test_local_and_flower_state_the_same_record_for_the_same_request(request_):
    """A local FedPG-Cen run and a Flower run whose server accepted every agent's Report in as
    many rounds: the same privacy.json, statement and headline included (ε the agents' total,
    split by the plan and enforced by the same ledger)."""
    cfg = FedPGConfig(**TINY, **request_).resolved()
    local = run_fedpg(cfg)
    rounds = int(local.releases.max())
    assert rounds >= 2
    flower = _flower(cfg, [{"accepted_agents": [0, 1]}] * rounds).privacy()
    stated = privacy_record(local)
    assert flower == stated
    if cfg.mechanism == "laplace":
        assert stated["ledger"]["budget_per_agent"]["epsilon"] == 2.0  # the total, enforced
        assert stated["epsilon_per_release"] == pytest.approx(2.0 / cfg.max_rounds())
        total, each = rounds * 2.0 / cfg.max_rounds(), 2.0 / cfg.max_rounds()
        assert stated["headline"].startswith(f"{total:.4g}-LDP")
        # a sweep's table cell is cut from the same headline
        assert short_privacy(summarize(local)) == f"{total:.4g}-LDP, per release {each:.4g}-LDP"
    else:
        assert stated["headline"].startswith("NO PRIVACY GUARANTEE")
        assert short_privacy(summarize(local)) == "none"


def test_the_secure_sum_record_is_the_local_runners_of_its_releases():
    """A Flower secure-sum run's privacy.json is the local runner's record of K agents each in
    every one of its rounds through the deployment's mechanism, plus the SecAgg+ threshold."""
    cfg = FedPGConfig(algorithm="cen", mechanism="distributed-gaussian", epsilon=3.0,
                      **TINY).resolved()
    m = DiscreteGaussianSum(clip=1.0, dim=6, agents=2, min_honest=2, noise_multiplier=2.0,
                            bits=24)
    run = _flower(cfg, [{"agents_in_sum": 2}] * 3, m)
    stated = run.privacy()
    assert {k: v for k, v in stated.items()
            if k not in ("secure_sum", "fewest_agents_in_a_revealed_sum")} == \
        privacy_record(Released.summed(cfg, m, 3))
    assert stated["guarantee"]["epsilon"] == m.epsilon(3) and math.isfinite(m.epsilon(3))
    assert stated["headline"].startswith(f"(ε = {m.epsilon(3):.4g}, δ = 1e-05)-DP")
    assert stated["ledger"]["reports"] == 2 * 3  # each agent charged once a round
    assert stated["trust_model"]["by_dropouts"][0]["epsilon"] == m.epsilon(3)
    assert stated["secure_sum"]["min_honest_surviving_agents"] == 2
    assert stated["fewest_agents_in_a_revealed_sum"] == 2
