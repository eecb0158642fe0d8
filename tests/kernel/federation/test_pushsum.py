"""Push-sum over directed graphs: conservation, consensus on the true average, validation."""

import jax.numpy as jnp
import numpy as np
import pytest

from privrl.federation import topology as topo
from privrl.federation.pushsum import push_sum_add, push_sum_init, push_sum_mix, push_sum_z
from privrl.federation.topology import TopologyError


def _lopsided() -> np.ndarray:
    """A static directed graph on 5 nodes (a cycle plus 0 → 2, 0 → 3): node 0 splits its mass
    four ways, the others two ways, so P is column- but not row-stochastic."""
    adj = np.zeros((5, 5), bool)
    adj[(np.arange(5) + 1) % 5, np.arange(5)] = True
    adj[[2, 3], 0] = True
    return topo.mixing_from_adjacency(adj)


def _theta0(k: int, d: int = 3) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(k, d)).astype(np.float32) * 5


def _schedules():
    return [
        topo.custom(_lopsided()),
        topo.ring(7),
        topo.exponential(10),
        topo.random_directed(10, rounds=60, seed=3),
    ]


@pytest.mark.parametrize("graph", _schedules(), ids=lambda g: g.name)
def test_sums_of_x_and_w_are_conserved_every_round(graph):
    k = graph.num_nodes
    theta = _theta0(k)
    state = push_sum_init(jnp.asarray(theta))
    total_x, total_w = theta.sum(0), float(k)
    for t in range(60):
        state = push_sum_mix(state, jnp.asarray(graph.matrix(t)))
        np.testing.assert_allclose(np.asarray(state.x).sum(0), total_x, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(float(np.asarray(state.w).sum()), total_w, rtol=1e-6)
        assert np.all(np.asarray(state.w) > 0)


def _run(graph, rounds: int, theta: np.ndarray) -> np.ndarray:
    state = push_sum_init(jnp.asarray(theta))
    for t in range(rounds):
        state = push_sum_mix(state, jnp.asarray(graph.matrix(t)))
    return np.asarray(push_sum_z(state))


def _naive(graph, rounds: int, theta: np.ndarray) -> np.ndarray:
    """What a node does without push-sum weights: average what it receives, weights renormalized
    to sum to 1 per receiver (row-stochastic)."""
    z = theta.astype(np.float64)
    for t in range(rounds):
        p = graph.matrix(t)
        z = (p / p.sum(axis=1, keepdims=True)) @ z
    return z


@pytest.mark.parametrize("graph", [topo.custom(_lopsided()),
                                   topo.random_directed(10, rounds=200, seed=1)],
                         ids=["lopsided", "random"])
def test_z_converges_to_the_average_where_naive_averaging_is_biased(graph):
    theta = _theta0(graph.num_nodes)
    assert not np.allclose(graph.mixing.sum(axis=2), 1.0)  # not doubly stochastic
    mean = theta.mean(0)
    z = _run(graph, 200, theta)
    np.testing.assert_allclose(z, np.broadcast_to(mean, z.shape), atol=1e-4)
    naive = _naive(graph, 200, theta)
    # The naive nodes agree with each other (consensus) ...
    assert np.abs(naive - naive[0]).max() < 1e-4
    # ... on a value far from the average (spread of θ0 is ~5 per coordinate).
    assert np.abs(naive[0] - mean).max() > 0.1, (naive[0], mean)


def test_a_step_on_z_is_a_scaled_step_on_x():
    graph = topo.custom(_lopsided())
    state = push_sum_mix(push_sum_init(jnp.asarray(_theta0(5))), jnp.asarray(graph.matrix(0)))
    delta = jnp.asarray(_theta0(5)[::-1].copy())
    after = push_sum_add(state, delta)
    np.testing.assert_allclose(push_sum_z(after), push_sum_z(state) + delta, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(after.w, state.w)


def test_random_graph_is_connected_over_every_window_but_not_every_round():
    g = topo.random_directed(10, rounds=100, seed=7, window=4)
    np.testing.assert_allclose(g.mixing.sum(axis=1), 1.0, atol=1e-12)  # columns
    for s in range(100 - 4 + 1):
        assert topo.is_strongly_connected((g.mixing[s : s + 4] > 0).any(axis=0))
    # Each round alone (one out-neighbour per node) is almost never strongly connected.
    single = [topo.is_strongly_connected(m > 0) for m in g.mixing]
    assert sum(single) < 50
    # Same seed, same graph.
    np.testing.assert_array_equal(g.mixing, topo.random_directed(10, 100, 7, 4).mixing)


def test_exponential_graph_needs_its_window():
    g = topo.exponential(10)
    assert g.period == 4 and g.window == 4
    assert not topo.is_strongly_connected(g.mixing[1] > 0)  # hop 2 alone: evens and odds
    with pytest.raises(TopologyError, match="not strongly connected"):
        topo.Topology("exp-too-short", g.mixing, window=1)


def test_not_strongly_connected_graph_is_refused():
    adj = np.zeros((4, 4), bool)
    adj[1, 0] = adj[0, 1] = adj[3, 2] = adj[2, 3] = True  # two separate pairs
    with pytest.raises(TopologyError, match="not strongly connected"):
        topo.custom(topo.mixing_from_adjacency(adj))
    one_way = np.zeros((3, 3), bool)
    one_way[1, 0] = one_way[2, 1] = True  # a path, no way back to 0
    with pytest.raises(TopologyError, match="not strongly connected"):
        topo.custom(topo.mixing_from_adjacency(one_way))


def test_weights_not_summing_to_one_per_sender_are_refused():
    p = _lopsided().copy()
    p[1, 0] += 0.1  # sender 0 now gives away 1.1
    with pytest.raises(TopologyError, match=r"sender 0 .* sum to 1.1"):
        topo.custom(p)
    row_stochastic = (_lopsided() / _lopsided().sum(axis=1, keepdims=True))
    with pytest.raises(TopologyError, match="column-stochastic"):
        topo.custom(row_stochastic)
    with pytest.raises(TopologyError, match=">= 0"):
        topo.custom(np.array([[1.5, 0.5], [-0.5, 0.5]]))
    with pytest.raises(TopologyError, match="p_kk"):
        topo.custom(np.array([[0.0, 0.5], [1.0, 0.5]]))


@pytest.mark.parametrize("k", [0, -1, 2.5])
def test_bad_node_counts_are_refused(k):
    for make in (topo.ring, topo.exponential):
        with pytest.raises(TopologyError, match="K must be an integer >= 1"):
            make(k)
    with pytest.raises(TopologyError, match="K must be an integer >= 1"):
        topo.random_directed(k, 10, 0)


def test_single_node_graphs_are_trivial():
    for g in (topo.ring(1), topo.exponential(1), topo.random_directed(1, 5, 0)):
        np.testing.assert_array_equal(g.mixing, 1.0)
