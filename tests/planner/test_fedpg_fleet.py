"""`privrl plan fedpg-cen` recommends FedPG's `fleet` presets (issue 51, session 11): Poisson
sampling of agents over the secure sum's Gaussian (its σ from the accountant, amplified by
sampling), the clip at the agents' median norm, a small network on a continuous task, and the
preset's own Adam step rather than one shrunk for the noise (which froze `reach` at its start:
benchmarks/log/26-fedrows.md). Config-level only: nothing is trained here."""

from __future__ import annotations

import math

import pytest

from privrl.planner import model
from privrl.planner import systems as sy
from privrl.planner.api import _recommend
from privrl.systems.fedpg.config import FedPGConfig

ENV = "gymnax:Pendulum-v1"


@pytest.fixture(scope="module")
def discrete_facts() -> sy.SystemFacts:
    """FedPG-Cen's planning facts on a Discrete task. Module-scoped, so this file runs whole on
    one xdist worker (tests/conftest.py): the σ search at ε = 2, K = 1,000 and `fleet`'s rounds,
    which the recommended command's config and the ε = 2 command's resolve alike, then runs
    once (calibrate_noise_multiplier's cache), not once on each worker (1.8 CPU-s;
    benchmarks/log/37-fedpg2.md)."""
    return sy.facts("fedpg-cen", False)


@pytest.mark.parametrize(("continuous", "preset", "learner"),
                         [(False, "fleet", "paper"), (True, "fleet-continuous", "continuous")])
def test_the_plan_recommends_the_fleet_preset_with_its_own_step(
        continuous: bool, preset: str, learner: str) -> None:
    f = sy.facts("fedpg-cen", continuous)
    assert (f.preset, f.mechanism) == (preset, "distributed-gaussian-continuous")
    # on a Box task the cost sets the rounds: the most of the choices (log 30-fedcen)
    assert f.reports_choices == ((max(sy.FEDPG_FLEET_ROUNDS),) if continuous
                                 else sy.FEDPG_FLEET_ROUNDS)
    own = FedPGConfig.from_preset(preset)
    # a noise far beyond the pilot's signal: the old rule shrank the step by (ρ0/ρ)²
    stats = model.PilotStats(dim=3000, norm_quantiles=(0.5, 1.0, 2.0), clip=1.0,
                             clipped_signal=0.1, clipped_variance=1.0, random_return=0.0,
                             nonprivate_return=1.0, episodes_to_learn=1000.0,
                             episodes_per_report=f.episodes_per_report)
    noise = sy.noise_fn("fedpg-cen", f, stats)
    rec = _recommend("fedpg-cen", f, stats, noise, 2.0, 1000, f.reports_choices[-1])
    assert rec.learning_rate == own.learning_rate == f.command_learning_rate
    assert model.step_size(f.learning_rate, stats, noise(2.0, rec.reports_per_agent, 1000),
                           1000, model.noise_to_signal(stats, 0.0, 1)) < own.learning_rate / 10
    assert rec.preset == preset and rec.mechanism == "distributed-gaussian-continuous"
    # the recommended command's config: 50 sampled agents a round of K = 1,000, adaptive clip,
    # σ from the accountant for the rounds the budget takes
    cfg = sy.build_config("fedpg-cen", sy.config_fields("fedpg-cen", rec, ENV, (), 2, 0,
                                                        levers=True)).resolved()
    assert cfg.sampling_rate == pytest.approx(0.05) and cfg.adaptive_clip
    assert cfg.dp_rounds == sy.fedpg_dp_rounds(rec.reports_per_agent, preset)
    assert cfg.noise_multiplier is not None and cfg.noise_multiplier > 0
    # its non-private twin: no mechanism, no clip bits
    np_rec = sy.Recommendation(**{**rec.__dict__, "mechanism": "none", "epsilon": math.inf})
    np_cfg = sy.build_config("fedpg-cen", sy.config_fields("fedpg-cen", np_rec, ENV, (), 2,
                                                           0)).resolved()
    assert (np_cfg.mechanism, np_cfg.adaptive_clip, np_cfg.sampling_rate) == ("none", False,
                                                                            None)
    # the learner: paper's, or continuous's with a small network, Adam 1e-3 and reports of
    # paper's B_t ~ U{12..20} episodes, the server's mean inner steps (B̄ + b)/b kept near
    # continuous's 2.5 (session 12: more inner steps reuse each round's noise)
    base = FedPGConfig.from_preset(learner)
    assert own.gamma == base.gamma and own.log_std == base.log_std
    assert own.hidden == (16, 16) and own.learning_rate == 1e-3
    paper = FedPGConfig.from_preset("paper")
    assert (own.batch_min, own.batch_max) == (paper.batch_min, paper.batch_max)

    def inner(c: FedPGConfig) -> float:
        return ((c.batch_min + c.batch_max) / 2 + c.minibatch) / c.minibatch

    assert inner(own) == pytest.approx(inner(base), abs=0.1)


def test_paper_presets_stay_exact() -> None:
    paper, cont = FedPGConfig.from_preset("paper"), FedPGConfig.from_preset("continuous")
    assert (paper.mechanism, paper.adaptive_clip, paper.hidden) == ("none", False, (16, 16))
    assert (cont.hidden, cont.learning_rate, cont.mechanism) == ((64, 64), 3e-4, "none")


def test_fleet_needs_an_epsilon() -> None:
    from privrl.config import ConfigError

    with pytest.raises(ConfigError) as got:
        FedPGConfig.from_preset("fleet", agents=1000).resolved()
    assert got.value.field == "epsilon"


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_the_fleet_command_is_one_privrl_run_accepts_at_a_small_epsilon(
        epsilon: float, discrete_facts: sy.SystemFacts) -> None:
    """At ε = 0.5 (K = 1,000) σ ≈ 6 exceeds twice the clip bits' default noise (q·K/20 = 2.5),
    which `privrl run` refuses (adaptive clipping needs σ_b > σ/2): the plan's command must
    carry a σ_b that fits. At ε = 2 the default fits and is kept."""
    f = discrete_facts
    rec = sy.Recommendation(preset=f.preset, mechanism=f.mechanism, epsilon=epsilon,
                            agents=1000, reports_per_agent=f.reports_choices[-1], batch=1,
                            learning_rate=f.command_learning_rate or 1e-3, clip=1.0)
    fields = sy.config_fields("fedpg-cen", rec, "gymnax:CartPole-v1", (), 2, 0, levers=True)
    cfg = sy.build_config("fedpg-cen", fields).resolved()  # refused before the fix at ε = 0.5
    assert cfg.adaptive_clip and 2 * cfg.clip_count_stddev > cfg.noise_multiplier
    assert ("clip_count_stddev" in fields) == (epsilon == 0.5)
