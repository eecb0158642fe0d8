"""Directed communication graphs and their push-sum mixing weights (peer side, no env code).

A topology is a schedule of K×K mixing matrices P(t), column-stochastic: column k holds the
shares p_{ik} of node k's mass that it sends to node i (p_{kk} is what it keeps), so every
column sums to 1 and push-sum conserves Σx and Σw (Kempe et al. 2003; Assran et al. 2019).
Round t uses `mixing[t % period]`. Rows need not sum to 1: on a directed graph they do not,
and that is exactly why plain averaging is biased and push-sum's weights w are needed.

Graphs are built and validated on the host with numpy, before anything runs:
every matrix is finite, non-negative and column-stochastic with p_{kk} > 0, and the union of
the graphs over every window of `window` consecutive rounds is strongly connected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privrl.choices import TOPOLOGIES

__all__ = [
    "TOPOLOGIES",
    "Topology",
    "TopologyError",
    "custom",
    "exponential",
    "is_strongly_connected",
    "make_topology",
    "mixing_from_adjacency",
    "random_directed",
    "ring",
]

_TOL = 1e-6


class TopologyError(ValueError):
    """An invalid graph or mixing matrix (named in the message)."""


@dataclass(frozen=True)
class Topology:
    """A validated schedule of column-stochastic mixing matrices, shape (period, K, K)."""

    name: str
    mixing: np.ndarray
    window: int  # the union over any `window` consecutive rounds is strongly connected
    cyclic: bool = True  # the schedule repeats (ring, exponential); random: one long schedule

    def __post_init__(self) -> None:
        mixing = np.asarray(self.mixing, dtype=np.float64)
        if mixing.ndim == 2:
            mixing = mixing[None]
        object.__setattr__(self, "mixing", mixing)
        validate_schedule(mixing, self.window, self.cyclic)

    @property
    def num_nodes(self) -> int:
        return int(self.mixing.shape[1])

    @property
    def period(self) -> int:
        return int(self.mixing.shape[0])

    def matrix(self, t: int) -> np.ndarray:
        return self.mixing[t % self.period]

    def describe(self) -> dict:
        return {"topology": self.name, "nodes": self.num_nodes, "period": self.period,
                "strongly_connected_window": self.window,
                "column_stochastic": True,
                "doubly_stochastic": bool(np.allclose(self.mixing.sum(axis=2), 1.0))}


# --- validation ------------------------------------------------------------------------------
def validate_mixing(p: np.ndarray, where: str = "mixing matrix") -> None:
    """Raise TopologyError unless p is a K×K column-stochastic matrix with p_kk > 0."""
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] < 1:
        raise TopologyError(f"{where}: must be a square K×K matrix with K >= 1, "
                            f"got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise TopologyError(f"{where}: weights must be finite and >= 0")
    sums = p.sum(axis=0)
    bad = np.flatnonzero(np.abs(sums - 1.0) > _TOL)
    if bad.size:
        k = int(bad[0])
        raise TopologyError(f"{where}: the weights sender {k} sends (column {k}) sum to "
                            f"{sums[k]:.6g}, not 1 (push-sum needs column-stochastic mixing)")
    if np.any(np.diag(p) <= 0):
        k = int(np.flatnonzero(np.diag(p) <= 0)[0])
        raise TopologyError(f"{where}: node {k} keeps none of its own mass (p_kk = 0); "
                            "push-sum needs p_kk > 0")


def is_strongly_connected(adjacency: np.ndarray) -> bool:
    """Every node reaches every other along directed edges (adjacency[i, k]: edge k → i)."""
    a = np.asarray(adjacency, bool)
    k = a.shape[0]
    reach = a | np.eye(k, dtype=bool)
    for _ in range(max(1, math.ceil(math.log2(max(k, 2))))):  # repeated squaring
        reach = reach | ((reach.astype(np.int64) @ reach.astype(np.int64)) > 0)
    return bool(reach.all())


def validate_schedule(mixing: np.ndarray, window: int, cyclic: bool) -> None:
    """Every matrix valid, and every window of `window` consecutive rounds strongly connected."""
    if mixing.ndim != 3:
        raise TopologyError(f"mixing schedule must have shape (period, K, K), got {mixing.shape}")
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise TopologyError(f"window must be an integer >= 1, got {window!r}")
    for t, p in enumerate(mixing):
        validate_mixing(p, f"mixing matrix of round {t}")
    period = mixing.shape[0]
    edges = mixing > 0
    starts = range(period) if cyclic else range(max(1, period - window + 1))
    for s in starts:
        idx = [(s + j) % period for j in range(window)] if cyclic else \
            list(range(s, min(s + window, period)))
        if not is_strongly_connected(edges[idx].any(axis=0)):
            raise TopologyError(f"the graph is not strongly connected over rounds {s}.."
                                f"{s + window - 1} (window {window}); push-sum would not reach "
                                "consensus")


# --- constructions ---------------------------------------------------------------------------
def mixing_from_adjacency(adjacency: np.ndarray) -> np.ndarray:
    """Column-stochastic weights: each sender splits its mass equally among itself and its
    out-neighbours (adjacency[i, k] True: an edge k → i)."""
    a = np.asarray(adjacency, bool) | np.eye(len(adjacency), dtype=bool)
    return a / a.sum(axis=0, keepdims=True)


def _check_nodes(num_nodes: int) -> int:
    if isinstance(num_nodes, bool) or int(num_nodes) != num_nodes or num_nodes < 1:
        raise TopologyError(f"the number of nodes K must be an integer >= 1, got {num_nodes!r}")
    return int(num_nodes)


def ring(num_nodes: int) -> Topology:
    """Static directed ring k → k+1: keep half, send half (doubly stochastic by symmetry)."""
    k = _check_nodes(num_nodes)
    adj = np.zeros((k, k), bool)
    adj[(np.arange(k) + 1) % k, np.arange(k)] = True
    return Topology("ring", mixing_from_adjacency(adj), window=1)


def exponential(num_nodes: int) -> Topology:
    """Time-varying one-peer directed exponential graph of Stochastic Gradient Push (Assran et
    al. 2019): in round t node k sends half its mass to k + 2^(t mod L), L = ⌈log2 K⌉; the
    union over any L consecutive rounds is strongly connected."""
    k = _check_nodes(num_nodes)
    hops = [2**i for i in range(max(1, math.ceil(math.log2(k))))] if k > 1 else [0]
    mats = []
    for h in hops:
        adj = np.zeros((k, k), bool)
        adj[(np.arange(k) + h) % k, np.arange(k)] = True
        mats.append(mixing_from_adjacency(adj))
    return Topology("exponential", np.stack(mats), window=len(hops))


def default_random_window(num_nodes: int) -> int:
    """Rounds over which a random one-out-neighbour graph is (made) strongly connected."""
    return max(3, math.ceil(2 * math.log2(max(num_nodes, 2))))


def random_directed(
    num_nodes: int, rounds: int, seed: int, window: int | None = None, max_tries: int = 10_000
) -> Topology:
    """A random time-varying directed graph: in every round each node sends half its mass to
    one uniformly drawn other node (so columns sum to 1, rows do not). A round whose window
    (with the `window - 1` rounds before it) is not strongly connected is redrawn, so every
    window of `window` consecutive rounds of the returned schedule is strongly connected."""
    k = _check_nodes(num_nodes)
    if isinstance(rounds, bool) or int(rounds) != rounds or rounds < 1:
        raise TopologyError(f"rounds must be an integer >= 1, got {rounds!r}")
    window = default_random_window(k) if window is None else window
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise TopologyError(f"window must be an integer >= 1, got {window!r}")
    rng = np.random.default_rng(seed)
    if k == 1:
        return Topology("random", np.ones((rounds, 1, 1)), window=1, cyclic=False)
    edges = np.zeros((rounds, k, k), bool)
    for t in range(rounds):
        for _ in range(max_tries):
            target = (np.arange(k) + rng.integers(1, k, size=k)) % k  # never itself
            edges[t] = False
            edges[t, target, np.arange(k)] = True
            lo = max(0, t - window + 1)
            if t < window - 1 or is_strongly_connected(edges[lo : t + 1].any(axis=0)):
                break
        else:
            raise TopologyError(f"could not draw a random graph on {k} nodes that is strongly "
                                f"connected over every {window} rounds; use a larger window")
    mixing = np.stack([mixing_from_adjacency(e) for e in edges])
    return Topology("random", mixing, window=window, cyclic=False)


def custom(mixing: np.ndarray, window: int | None = None) -> Topology:
    """A user-given schedule (period, K, K) or one matrix (K, K), repeated cyclically."""
    m = np.asarray(mixing, dtype=np.float64)
    if m.ndim == 2:
        m = m[None]
    return Topology("custom", m, window=m.shape[0] if window is None else window)


def make_topology(name: str, num_nodes: int, rounds: int = 1, seed: int = 0,
                  window: int | None = None) -> Topology:
    if name == "ring":
        return ring(num_nodes)
    if name == "exponential":
        return exponential(num_nodes)
    if name == "random":
        return random_directed(num_nodes, rounds, seed, window)
    raise TopologyError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
