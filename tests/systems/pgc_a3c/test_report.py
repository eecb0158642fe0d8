"""What a PGC-A3C report carries (issue 51; benchmarks/log/26-report.md). Under the paper's
actor-critic loss the clipped report of a task with long episodes and large returns is nearly
all critic (Acrobot: the value head and the shared layer held 99.3 % of its L1 mass), so its ε
bought almost no policy signal. The `adaptive` preset reports the policy's gradient alone
(`critic` "none": no value head, d smaller); the paper's network is unchanged."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.nets.flat import actor_critic, check_description, describe_model, model_from_description
from privrl.systems.pgc_a3c.algorithm import JITTED_EPISODES, PGCA3C, PGCA3CConfig

AGENTS = 16


def policy_share(cfg: PGCA3CConfig) -> tuple[float, int]:
    """(the share of the clipped reports' mean L1 mass in the policy layer's parameters, d) of
    `cfg`'s reports at its start: 16 agents, each clipped to the median L1 norm (the plan's
    clip radius C/2)."""
    algo = PGCA3C(cfg)

    def reports() -> jax.Array:  # one program, not the reports' ops one at a time
        theta = algo.init(jax.random.key(0)).agg.theta
        plan = algo.agents_plan(jnp.zeros((), jnp.int32), jax.random.key(1), jax.random.key(2),
                                jnp.arange(AGENTS), jnp.ones(AGENTS, bool))
        return algo.report_grads(theta, algo._one_trial(JITTED_EPISODES, theta, plan))

    grads = np.asarray(jax.jit(reports)())
    l1 = np.abs(grads).sum(axis=1)
    clipped = grads * np.minimum(1.0, np.median(l1) / np.maximum(l1, 1e-30))[:, None]
    mass = algo.model.unravel(jnp.asarray(np.abs(clipped).mean(axis=0)))
    total = sum(float(jnp.sum(v)) for v in jax.tree_util.tree_leaves(mass))
    inner = mass.get("inner", mass)  # a state-free log-std wraps the actor-critic
    return float(sum(float(jnp.sum(v)) for v in jax.tree_util.tree_leaves(inner["policy"]))
                 / total), algo.dim


def test_the_adaptive_report_carries_the_policys_gradient_only() -> None:
    # Acrobot, −1 a step, cut at 60 steps (cheap; the critic's error still dominates)
    cfg = PGCA3CConfig.from_preset("adaptive", env="gymnax:Acrobot-v1", max_episode_steps=60,
                                   parallel_agents=AGENTS, submissions=AGENTS)
    assert cfg.critic == "none"
    ours, d = policy_share(cfg)
    theirs, d_shared = policy_share(replace(cfg, critic="shared"))
    # at the uniform start the policy layer is zero, so the shared layer gets no gradient from
    # the policy's loss: all of the report is the policy layer's
    assert ours == pytest.approx(1.0)
    assert theirs < 0.2  # the actor-critic report: mostly value head and shared layer
    assert d_shared - d == cfg.hidden + 1  # the value head's kernel and bias are gone


def test_a_policy_only_network_is_the_actor_critic_without_its_value_head() -> None:
    shared, alone = actor_critic(8, 3, 6, True), actor_critic(8, 3, 6, True, value_head=False)
    assert shared.dim - alone.dim == 8 + 1
    key = jax.random.key(4)
    a, b = shared.unravel(shared.init(key)), alone.unravel(alone.init(key))
    assert set(a) - set(b) == {"value"}
    for name in ("common", "policy"):  # the same start for the layers both have
        for leaf in ("kernel", "bias"):
            np.testing.assert_array_equal(a[name][leaf], b[name][leaf])
    obs = jnp.ones((5, 6))
    logits, value = alone.apply(alone.init(key), obs)
    np.testing.assert_array_equal(logits, shared.apply(shared.init(key), obs)[0])
    assert value.shape == (5,) and not np.any(np.asarray(value))
    # a saved policy's description rebuilds the policy-only network (and a bad flag is refused)
    desc = check_description(describe_model(alone, 3))
    assert desc["value_head"] is False
    assert model_from_description(desc).dim == alone.dim
    assert "value_head" not in describe_model(shared, 3)
    with pytest.raises(ValueError, match="value_head"):
        check_description({**desc, "value_head": "no"})


def test_paper_and_tuned_presets_keep_the_critic() -> None:
    for preset in ("paper", "paper-code", "tuned", "tuned-ldp", "tuned-ldp2", "continuous"):
        assert PGCA3CConfig.from_preset(preset).critic == "shared"
    with pytest.raises(Exception, match="critic"):
        PGCA3CConfig.from_preset("adaptive", critic="value").resolved()
