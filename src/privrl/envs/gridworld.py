"""Paper 002's two-agent Grid-World (Zhuo et al., FedRL, section 5.1), in JAX.

Maps are N×N (N = 8, 16, 32): 1 = free, 0 = obstacle, the border always obstacle. Agents α and β
start at the two ends of one optimal (shortest) path and must meet (Manhattan distance <= 1).

Observations: α sees the `alpha_view`×`alpha_view` window of the map centred on itself, β the
`beta_view`×`beta_view` window centred on itself (3 and 5 as the paper's text; the authors' code
swapped them). Cells outside the map read as obstacles. Each observation is the stack of the last
`history` windows (oldest first; before the first step the older slots are zero, as the authors'
code). Neither window shows the other agent: only the map around oneself.

Actions: each agent moves N/S/W/E (0, 1, 2, 3); a joint action is 4·a_α + a_β (16 joint actions,
as the authors' code). A move into an obstacle leaves the agent where it was.

Reward r = r_l + r_g, after both agents moved simultaneously:
  * r_l = +50 when the agents meet (Manhattan distance <= 1 after the moves); otherwise the sum of
    the two agents' move rewards, −10 for a move that hit an obstacle and −1 for one that did not
    (so −2, −11 or −20 per step). This is how the authors' code combines two moves (it sums the
    two move rewards, then adds +50 on meeting); we let the meeting reward replace the move
    rewards so that a meeting is always worth exactly +50, as the paper's text says.
  * r_g = N / md(α, β) with md the Manhattan distance after the moves (the paper's c = N), using
    max(md, 1) so that a meeting on the same cell is finite.
An episode ends at a meeting (terminal) or after Tm = 38, 86, 178 steps for N = 8, 16, 32
(a time-limit cut, not terminal).

Maps come from the paper's data set (`load_maps`, read from a path the user gives) or from the
built-in generator (`generate_maps`: random obstacles, BFS shortest paths) so the package works
without the data.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.config import ConfigError, fail
from privrl.envs.gridspec import MAX_STEPS as MAX_STEPS
from privrl.envs.gridspec import SIZES as SIZES
from privrl.envs.gridspec import GridSpec

MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int32)  # N, S, W, E as (drow, dcol)
NUM_JOINT_ACTIONS = 16


def joint_action(a_alpha: Array | int, a_beta: Array | int) -> Array:
    return 4 * jnp.asarray(a_alpha) + jnp.asarray(a_beta)


class GridMaps(NamedTuple):
    """M maps with their start cells and one optimal path each (JAX arrays, vmappable)."""

    grid: Array  # (M, N, N) float32: 1 free, 0 obstacle
    start: Array  # (M, 2, 2) int32: [α (row, col), β (row, col)]
    path: Array  # (M, P, 2) int32: optimal path cells from α's start to β's, padded with β's
    path_len: Array  # (M,) int32: steps of the optimal path (cells − 1)

    @property
    def count(self) -> int:
        return int(self.grid.shape[0])

    def take(self, idx: np.ndarray | slice) -> GridMaps:
        """The maps `idx` selects, indexed on the host and put on the device (indexing JAX
        arrays, or `jnp.asarray` of a host array, compiles an eager program per operation and
        shape: about 40 at a run's split)."""
        return GridMaps(*(jax.device_put(np.asarray(x)[idx]) for x in self))


class GridState(NamedTuple):
    grid: Array  # (N, N)
    pos: Array  # (2, 2) int32: α, β
    t: Array  # int32 steps taken
    obs_alpha: Array  # (H, va, va)
    obs_beta: Array  # (H, vb, vb)


# --- maps: BFS, generator, loader ------------------------------------------------------------

def bfs_distances(grid: np.ndarray, start: tuple[int, int]) -> np.ndarray:
    """Shortest 4-connected path length from `start` to every free cell (−1: unreachable)."""
    n = grid.shape[0]
    dist = np.full(grid.shape, -1, np.int32)
    dist[start] = 0
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES:
            rr, cc = r + dr, c + dc
            if 0 <= rr < n and 0 <= cc < n and grid[rr, cc] and dist[rr, cc] < 0:
                dist[rr, cc] = dist[r, c] + 1
                queue.append((rr, cc))
    return dist


def bfs_path(grid: np.ndarray, a: tuple[int, int], b: tuple[int, int]) -> np.ndarray:
    """One shortest path from a to b (cells, a first), by walking down the BFS distance from b."""
    dist = bfs_distances(grid, b)
    if dist[a] < 0:
        raise ValueError(f"{b} is unreachable from {a}")
    cells = [a]
    r, c = a
    while (r, c) != tuple(b):
        for dr, dc in MOVES:
            rr, cc = r + dr, c + dc
            if 0 <= rr < grid.shape[0] and 0 <= cc < grid.shape[1] \
                    and dist[rr, cc] == dist[r, c] - 1:
                r, c = rr, cc
                break
        cells.append((r, c))
    return np.array(cells, np.int32)


def _pack(grids: np.ndarray, paths: list[np.ndarray], n: int) -> GridMaps:
    longest = max(len(p) for p in paths)
    padded = np.stack([np.concatenate([p, np.repeat(p[-1:], longest - len(p), 0)])
                       for p in paths])
    starts = np.stack([np.stack([p[0], p[-1]]) for p in paths]).astype(np.int32)
    # converted on the host and put (`GridMaps.take`)
    return GridMaps(*jax.device_put((np.asarray(grids, np.float32), starts,
                                     padded.astype(np.int32),
                                     np.array([len(p) - 1 for p in paths], np.int32))))


def generate_maps(count: int, size: int, seed: int = 0, obstacle_prob: float = 0.3,
                  min_steps: int = 2) -> GridMaps:
    """Random obstacle maps (border obstacle, each inner cell an obstacle with `obstacle_prob`),
    each with two free cells at least `min_steps` apart joined by a BFS shortest path."""
    if size < 4:
        fail("size", f"maps need size >= 4, got {size}")
    rng = np.random.default_rng(seed)
    grids, paths = [], []
    while len(grids) < count:
        g = np.zeros((size, size), np.uint8)
        g[1:-1, 1:-1] = rng.random((size - 2, size - 2)) >= obstacle_prob
        free = np.argwhere(g == 1)
        if len(free) < 2:
            continue
        a = tuple(free[rng.integers(len(free))])
        dist = bfs_distances(g, a)
        far = np.argwhere(dist >= min_steps)
        if len(far) == 0:
            continue
        b = tuple(far[rng.integers(len(far))])
        grids.append(g)
        paths.append(bfs_path(g, a, b))
    return _pack(np.stack(grids), paths, size)


DATA_KEYS = {"images": 3, "path_xy": 2, "path_offsets": 1}


def _maps_file(path: str | Path, size: int) -> Path:
    p = Path(path)
    return p / f"gridworld_{size}.npz" if p.is_dir() else p


def load_maps(path: str | Path, size: int, min_steps: int = 2) -> tuple[GridMaps, np.ndarray]:
    """The paper's maps of one size, from a directory holding gridworld_{size}.npz or that file.

    Each domain has 8 stored optimal paths; the agents start at the ends of the first one whose
    ends are at least `min_steps` apart (closer ends would start the agents already met). Returns
    the maps and their domain indices (domains without such a path are left out).
    Every problem raises ConfigError('maps', '<file>: <problem>').
    """
    f = _maps_file(path, size)

    def bad(msg: str) -> ConfigError:
        return ConfigError("maps", f"{f}: {msg}")

    if not f.is_file():
        raise bad("no such file" + (f" (expected gridworld_{size}.npz in the directory)"
                                    if Path(path).is_dir() else ""))
    try:
        data = np.load(f, allow_pickle=False)
        arrays = {k: data[k] for k in DATA_KEYS}
    except KeyError as e:
        raise bad(f"missing array {e}; expected keys {', '.join(DATA_KEYS)}") from None
    except (OSError, ValueError) as e:
        raise bad(f"not a readable .npz file ({e})") from None
    for k, nd in DATA_KEYS.items():
        if arrays[k].ndim != nd:
            raise bad(f"{k} must have {nd} dimensions, got shape {arrays[k].shape}")
        if not np.issubdtype(arrays[k].dtype, np.integer):
            raise bad(f"{k} must be an integer array, got dtype {arrays[k].dtype}")
    images, xy, offsets = arrays["images"], arrays["path_xy"], arrays["path_offsets"]
    m = images.shape[0]
    if images.shape[1:] != (size, size):
        raise bad(f"images must have shape (M, {size}, {size}) for size {size}, got "
                  f"{images.shape}")
    if not np.isin(images, (0, 1)).all():
        raise bad("images must hold only 0 (obstacle) and 1 (free)")
    if xy.shape[1:] != (2,):
        raise bad(f"path_xy must have shape (P, 2), got {xy.shape}")
    if offsets.shape != (8 * m + 1,) or offsets[0] != 0 or offsets[-1] != len(xy) \
            or np.any(np.diff(offsets) < 0):
        raise bad(f"path_offsets must be ({8 * m + 1},) non-decreasing from 0 to {len(xy)}")
    if len(xy) and (xy.min() < 0 or xy.max() >= size):
        raise bad(f"path_xy has cells outside the {size}×{size} map")
    keep, paths = [], []
    for i in range(m):
        for k in range(8):
            p = xy[offsets[8 * i + k]: offsets[8 * i + k + 1]].astype(np.int32)
            if len(p) == 0:
                continue
            if not images[i][tuple(p[0])] or not images[i][tuple(p[-1])]:
                raise bad(f"domain {i} path {k}: a start cell {tuple(p[0])} or "
                          f"{tuple(p[-1])} is an obstacle")
            if np.abs(p[0] - p[-1]).sum() >= min_steps:
                keep.append(i)
                paths.append(p)
                break
    if not keep:
        raise bad("no domain has a path whose ends are apart enough to start an episode")
    return _pack(images[keep], paths, size), np.asarray(keep)


# --- the JAX environment -----------------------------------------------------------------------

def window(grid: Array, pos: Array, view: int) -> Array:
    """The view×view cells centred on pos; cells outside the map read 0 (obstacle)."""
    h = view // 2
    padded = jnp.pad(grid, h)
    return jax.lax.dynamic_slice(padded, (pos[0], pos[1]), (view, view))


def _push(hist: Array, obs: Array) -> Array:
    return jnp.concatenate([hist[1:], obs[None]], 0)


def reset(spec: GridSpec, maps: GridMaps, idx: Array) -> GridState:
    """Start an episode on map `idx` (jit/vmap over idx)."""
    grid, pos = maps.grid[idx], maps.start[idx]
    h = spec.history
    oa = jnp.zeros((h, spec.alpha_view, spec.alpha_view)).at[-1].set(
        window(grid, pos[0], spec.alpha_view))
    ob = jnp.zeros((h, spec.beta_view, spec.beta_view)).at[-1].set(
        window(grid, pos[1], spec.beta_view))
    return GridState(grid, pos, jnp.int32(0), oa, ob)


def manhattan(pos: Array) -> Array:
    return jnp.sum(jnp.abs(pos[0] - pos[1]))


def step(spec: GridSpec, s: GridState, action: Array) -> tuple[GridState, Array, Array, Array]:
    """Both agents move; returns (state, reward, met (terminal), done (met or time limit))."""
    moves = jnp.asarray(MOVES)[jnp.stack([action // 4, action % 4])]  # (2, 2)
    target = s.pos + moves
    free = s.grid[target[:, 0], target[:, 1]] > 0  # the border is obstacle: never out of range
    pos = jnp.where(free[:, None], target, s.pos)
    md = manhattan(pos)
    met = md <= 1
    moves_r = jnp.sum(jnp.where(free, spec.step_reward, spec.hit_reward))
    r_local = jnp.where(met, spec.meet_reward, moves_r)
    reward = r_local + spec.size / jnp.maximum(md, 1).astype(jnp.float32)
    t = s.t + 1
    s = GridState(s.grid, pos, t,
                  _push(s.obs_alpha, window(s.grid, pos[0], spec.alpha_view)),
                  _push(s.obs_beta, window(s.grid, pos[1], spec.beta_view)))
    return s, reward, met, met | (t >= spec.horizon)


def expert_action(maps: GridMaps, idx: Array, t: Array) -> Array:
    """The optimal joint action at step t: α walks the optimal path forward, β walks it backward
    (they meet after ⌈(L − 1)/2⌉ steps). FCN's supervised labels."""
    path, n = maps.path[idx], maps.path_len[idx]

    def direction(a: Array, b: Array) -> Array:
        d = b - a
        return jnp.argmax(jnp.all(jnp.asarray(MOVES) == d, axis=-1))

    ia, ib = jnp.minimum(t, n), jnp.maximum(n - t, 0)
    a = direction(path[ia], path[jnp.minimum(ia + 1, n)])
    b = direction(path[ib], path[jnp.maximum(ib - 1, 0)])
    return joint_action(a, b)


class EvalResult(NamedTuple):
    success: Array  # (M,) bool: met within Tm steps
    total_reward: Array  # (M,) float32: the episode's cumulative reward
    length: Array  # (M,) int32


def evaluate(spec: GridSpec, maps: GridMaps, policy, key: Array) -> EvalResult:
    """One episode per map, all maps at once (vmap), `policy(key, obs_alpha, obs_beta) -> (M,)`
    joint actions; fixed-length scan over Tm steps with finished episodes frozen."""
    idx = jnp.arange(maps.count)
    s0 = jax.vmap(lambda i: reset(spec, maps, i))(idx)

    def body(carry: tuple, k: Array) -> tuple:
        s, done, ret, met_any, length = carry
        a = policy(k, s.obs_alpha, s.obs_beta)
        s2, r, met, d = jax.vmap(lambda st, ac: step(spec, st, ac))(s, a)
        live = ~done
        s = jax.tree_util.tree_map(
            lambda new, old: jnp.where(live.reshape((-1,) + (1,) * (new.ndim - 1)), new, old),
            s2, s)
        return (s, done | d, ret + jnp.where(live, r, 0.0), met_any | (live & met),
                length + live.astype(jnp.int32)), None

    m = maps.count
    init = (s0, jnp.zeros(m, bool), jnp.zeros(m), jnp.zeros(m, bool), jnp.zeros(m, jnp.int32))
    (_, _, ret, met, length), _ = jax.lax.scan(body, init, jax.random.split(key, spec.horizon))
    return EvalResult(met, ret, length)


def random_policy(key: Array, obs_alpha: Array, obs_beta: Array) -> Array:
    return jax.random.randint(key, obs_alpha.shape[:1], 0, NUM_JOINT_ACTIONS)
