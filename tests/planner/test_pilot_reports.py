"""PGC-A3C's plan measures its own reports: the pilot's gradient sample is PGC-A3C's
per-report gradient (`report_grads` of the recommended `adaptive` command: the policy's
gradient alone since session 10, its loss summed over the episode's steps) at that command's
start, not the REINFORCE proxy, whose norms are not a report's
(benchmarks/log/24-untuned.md, "At the plan's K", cause 2)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.planner import api, pilot
from privrl.planner import systems as sy

ENV = "gymnax:CartPole-v1"


def own_reports(episodes: int, seed: int) -> tuple[np.ndarray, int]:
    """PGC-A3C's reports as the recommended `adaptive` command would release them, built here
    from the preset (not through the planner), on other keys than the plan's."""
    from privrl.systems.pgc_a3c.algorithm import JITTED_EPISODES, PGCA3C, PGCA3CConfig

    cfg = PGCA3CConfig.from_preset("adaptive", env=ENV, mechanism="laplace", epsilon=5.0,
                                   submissions=episodes, parallel_agents=episodes)
    algo = PGCA3C(cfg)

    def reports() -> jax.Array:  # one program, not the reports' ops one at a time
        theta = algo.init(jax.random.key(seed)).agg.theta
        plan = algo.agents_plan(jnp.zeros((), jnp.int32), jax.random.key(seed + 7),
                                jax.random.key(seed + 9), jnp.arange(episodes),
                                jnp.ones(episodes, bool))
        return algo.report_grads(theta, algo._one_trial(JITTED_EPISODES, theta, plan))

    return np.asarray(jax.jit(reports)(), np.float64), algo.dim


def test_pgc_a3c_plan_clips_its_own_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    # the non-private pilot run replaced by a curve that climbs from random (no training here)
    x = np.arange(1.0, 2001.0)
    curve = sy.Curve(x, np.linspace(20.0, 200.0, x.size), 0.0)
    monkeypatch.setattr(api, "_nonprivate_pilot", lambda *a, **k: (curve, {}))
    result = api.plan("pgc-a3c", api.PlanConfig(env=ENV, epsilon=5.0, sweep=False,
                                                gradient_episodes=8), log=lambda s: None)
    grads, dim = own_reports(32, seed=3)
    assert result.pilot["dim"] == dim  # the command's own network
    f = sy.facts("pgc-a3c", False)
    q10, _, q90 = np.quantile(pilot.norms(grads, f.norm), [0.1, 0.5, 0.9])
    # the clip ball's radius is the median report norm: within the reports' own 10-90 % range
    # (the proxy's norms are ~50x smaller on CartPole: its clip falls far below q10)
    assert q10 <= result.pilot["clip"] * f.radius <= q90
    assert math.isfinite(result.pilot["clipped_variance"])
    assert result.pilot["gradient_proxy"].startswith("none")
    proxy, proxy_dim = pilot.gradient_sample(api.task_of(api.PlanConfig(env=ENV, epsilon=5.0)),
                                             f.hidden, 8, 0)
    # (the `adaptive` report is the policy's gradient alone since session 10, so the proxy's
    # actor has its d; its loss is a mean over steps, the report's a sum: norms still differ)
    assert proxy_dim == dim and np.median(pilot.norms(proxy, f.norm)) < q10
    # The recommended command keeps `adaptive`'s own update rule (its |B| of 9 and its step
    # from the noise, benchmarks/log/26-plan3.md), and K is the model's law for that rule,
    # named in plan.json (the pilot's `fleet_model` and a note).
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

    own = PGCA3CConfig.from_preset("adaptive", mechanism="laplace", epsilon=5.0).resolved()
    command = sy.build_config("pgc-a3c", result.fields)
    assert (command.buffer_size, command.step_from_noise) == (own.buffer_size, True) == (9, True)
    assert command.learning_rate == own.learning_rate == result.recommendation["learning_rate"]
    assert result.recommendation["batch"] == 9 and result.pilot["fleet_model"].startswith("adam")
    assert any(n.startswith(f"K = {result.recommendation['agents']:,}: the model's Adam law")
               for n in result.notes)
    # K is sized for the aim, 0.8 of the way from the mark (0.5) to the pilot's final return,
    # not for the mark itself (which a run at that K lands on about half the time: Gymnasium
    # CartPole 0.4997, benchmarks/log/28-disc.md); the sweep's verdict still reads the mark.
    p = result.pilot
    rand = p["random_return"]
    assert (p["aim"], p["mark"]) == (pytest.approx(0.9), 0.5)
    assert p["episodes_to_mark"] == sy.episodes_to_learn(curve, rand, 0.5)
    assert p["episodes_to_learn"] == sy.episodes_to_learn(curve, rand, p["aim"])
    assert p["episodes_to_learn"] > 1.5 * p["episodes_to_mark"]  # a straight climb: ~1.8x
    from dataclasses import fields, replace

    from privrl.planner import model

    stats = model.PilotStats(**{k.name: (tuple(p[k.name]) if isinstance(p[k.name], list) else
                                         p[k.name]) for k in fields(model.PilotStats)})
    at_mark = replace(stats, episodes_to_learn=p["episodes_to_mark"])
    k_mark = model.smallest_fleet(at_mark, sy.noise_fn("pgc-a3c", f, at_mark), 5.0,
                                  f.reports_choices, sy.needed_fn("pgc-a3c", f, at_mark))
    assert k_mark is not None and result.recommendation["agents"] > 1.5 * k_mark[0]


def test_other_systems_keep_the_proxy() -> None:
    for system in ("fedpg-cen", "dp-reinforce"):
        f = sy.facts(system, False)
        assert sy.report_sample(system, f, ENV, (), 5.0, 8, 0) is None


def test_the_fleet_is_sized_for_an_aim_above_the_mark() -> None:
    # The Adam law puts the private run at the pilot's level of E0 after K agents: K sized for
    # the mark itself lands on it about half the time (Gymnasium CartPole 0.4997 at the plan's
    # K, benchmarks/log/28-disc.md), so PGC-A3C's `adaptive` plan aims 0.8 of the way past it.
    adam = sy.facts("pgc-a3c", False)
    assert sy.adam_law("pgc-a3c", adam)
    assert sy.sizing_aim("pgc-a3c", adam, 0.5, None) == pytest.approx(0.9)
    assert sy.sizing_aim("pgc-a3c", adam, 0.8, None) == pytest.approx(0.96)
    assert sy.sizing_aim("pgc-a3c", adam, 0.5, 0.6) == 0.6  # the user's aim
    for system in ("fedpg-cen", "dp-reinforce"):  # the trace law keeps the mark by default
        trace = sy.facts(system, False)
        assert not sy.adam_law(system, trace)
        assert sy.sizing_aim(system, trace, 0.5, None) == 0.5
        assert sy.sizing_aim(system, trace, 0.5, 0.7) == 0.7
