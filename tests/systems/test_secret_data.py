"""Secret means the whole agent (issue 43, item 8): under secret noise an agent's private
dynamics and the randomness of its episodes come from its secret root too, not from the seed
in config.json; seeded runs (no root) keep the seeded keys exactly.

Each system's plan is computed with no root, with a root, and with another root: the agents'
private parameters and episode keys must change with the root. (PGC-A3C's end to end version,
an aggregator re-simulating the clipped gradients: tests/systems/pgc_a3c/test_noise_attack.py.)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest

from privrl.privacy.noise import secret_keys
from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig
from privrl.systems.fedpg.algorithm import FedPG
from privrl.systems.fedpg.config import FedPGConfig

# Heterogeneous agents, each one's gravity drawn uniformly from a range: two roots then give
# the same environments with probability 0 (drawn from 5 values, 3 agents matched under two
# independent secret roots 1 time in 125, and the test failed by chance).
FEDPG = dict(agents=3, hidden=(4,), batch_min=2, batch_max=4, minibatch=2,
             max_episode_steps=40, budget=60, seed=7, private_params=("gravity=8:12",))


def _equal(a: Any, b: Any) -> bool:
    def bits(x: Any) -> Any:  # keys compared by their bits
        x = jnp.asarray(x) if not hasattr(x, "dtype") else x
        return jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    data = lambda t: jax.tree_util.tree_map(bits, t)  # noqa: E731
    return bool(jax.tree_util.tree_all(jax.tree_util.tree_map(jnp.array_equal, data(a),
                                                              data(b))))


def _three(plan: Any, state: Any) -> tuple[Any, Any, Any]:
    """`plan` of `state` seeded, under one secret root and under another."""
    return (plan(state), plan(state._replace(noise=secret_keys())),
            plan(state._replace(noise=secret_keys())))


def test_fedpg_cen_agents_environments_and_episodes_come_from_the_root() -> None:
    algo = FedPG(FedPGConfig(**FEDPG, algorithm="cen").resolved())
    state = algo.init(jax.random.key(0))
    key = jax.random.key(1)
    seeded, one, two = _three(lambda s: algo.variant.plan(s, key, jnp.bool_(True)), state)
    for a, b in ((seeded, one), (one, two)):
        assert not _equal(a.env_params, b.env_params)
        assert not _equal(a.k_ep, b.k_ep)
        # B_t, N_t and the server's own environment are the server's: public, seeded.
        assert _equal(a.batch, b.batch) and _equal(a.server_env, b.server_env)


def test_fedpg_dec_nodes_environments_and_rounds_come_from_the_root() -> None:
    algo = FedPG(FedPGConfig(**FEDPG, algorithm="dec").resolved())
    state = algo.init(jax.random.key(0))
    key = jax.random.key(1)
    seeded, one, two = _three(lambda s: algo.variant.inputs(s, key), state)
    for a, b in ((seeded, one), (one, two)):
        assert not _equal(a[1], b[1])  # each node's private environment
        assert not _equal(a[2], b[2])  # each node's round key (episodes, B_t, N_t, SCSG)
    assert seeded[3] is None and not _equal(one[3], two[3])  # the mechanism's keys


@pytest.mark.parametrize("learner, config, data_keys", [
    (Reinforce, ReinforceConfig, (1,)),  # the rollout's key
    (DQN, DQNConfig, (1, 2)),  # the reset's and the episode loop's (actions, steps, minibatches)
])
def test_dpsgd_training_episodes_come_from_the_root(learner: Any, config: Any,
                                                    data_keys: tuple[int, ...]) -> None:
    algo = learner(config(dp=True, noise_multiplier=1.0, episodes=2,
                          private_params=("gravity=8:12",)).resolved())
    seeded, one, two = _three(algo.plan, algo.init(jax.random.key(0)))
    for a, b in ((seeded, one), (one, two)):
        assert all(not _equal(a[0][i], b[0][i]) for i in data_keys)
        assert not _equal(a[1], b[1])  # the episodes' private dynamics
        assert _equal(a[0][3], b[0][3])  # evaluation, of the released policy: seeded
