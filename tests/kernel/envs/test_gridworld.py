"""Paper 002's Grid-World: walls, meetings, rewards, windows, BFS, the map loader's errors."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.envs import gridworld as gw

DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "frl-gridworld"  # ../shared
N, S, W, E = range(4)
# reset and step jitted (the spec static): one program each per spec, where an eager call
# compiled one per op
_reset = jax.jit(gw.reset, static_argnums=0)
_step = jax.jit(gw.step, static_argnums=0)
_window = jax.jit(gw.window, static_argnums=2)


def _maps(grid: np.ndarray, a: tuple, b: tuple) -> gw.GridMaps:
    path = gw.bfs_path(grid, a, b)
    return gw._pack(grid[None], [path], grid.shape[0])


def _open8() -> np.ndarray:
    g = np.zeros((8, 8), np.uint8)
    g[1:-1, 1:-1] = 1
    return g


def test_walls_block_and_cost_ten():
    g = _open8()
    g[2, 3] = 0  # an obstacle north of α
    spec = gw.GridSpec(8)
    s = _reset(spec, _maps(g, (3, 3), (3, 6)), 0)
    s2, r, met, done = _step(spec, s, gw.joint_action(N, S))  # α hits; β moves to (4, 6)
    np.testing.assert_array_equal(s2.pos, [[3, 3], [4, 6]])
    md = 1 + 3
    assert float(r) == pytest.approx(-10 - 1 + 8 / md)
    assert not bool(met) and not bool(done)
    # the border is an obstacle too
    s = _reset(spec, _maps(g, (1, 1), (6, 6)), 0)
    s2, r, _, _ = _step(spec, s, gw.joint_action(N, E))
    np.testing.assert_array_equal(s2.pos, [[1, 1], [6, 6]])
    assert float(r) == pytest.approx(-20 + 8 / 10)


def test_meeting_ends_the_episode_with_fifty():
    spec = gw.GridSpec(8)
    s = _reset(spec, _maps(_open8(), (3, 2), (3, 5)), 0)
    _, r, met, done = _step(spec, s, gw.joint_action(E, W))  # md 3 -> 1
    assert bool(met) and bool(done)
    assert float(r) == pytest.approx(50 + 8 / 1)
    # the same cell (md 0) is a meeting with finite r_g = N / max(md, 1)
    s = _reset(spec, _maps(_open8(), (3, 2), (3, 4)), 0)
    _, r, met, _ = _step(spec, s, gw.joint_action(E, W))
    assert bool(met) and float(r) == pytest.approx(58)


def test_time_limit_is_done_but_not_met():
    spec = gw.GridSpec(8, max_steps=3)
    s = _reset(spec, _maps(_open8(), (1, 1), (6, 6)), 0)
    for t in range(3):
        s, _, met, done = _step(spec, s, gw.joint_action(N, S))  # both stay against walls
        assert not bool(met) and bool(done) == (t == 2)
    assert gw.GridSpec(8).horizon == 38 and gw.GridSpec(16).horizon == 86 \
        and gw.GridSpec(32).horizon == 178


def test_windows_are_cut_at_borders_and_history_stacks():
    g = _open8()
    g[1, 2] = 0
    spec = gw.GridSpec(8, alpha_view=3, beta_view=5, history=3)
    s = _reset(spec, _maps(g, (1, 1), (6, 6)), 0)
    np.testing.assert_array_equal(s.obs_alpha[-1], [[0, 0, 0], [0, 1, 0], [0, 1, 1]])
    assert np.all(np.asarray(s.obs_alpha[:-1]) == 0)  # older history slots start empty
    beta = np.zeros((5, 5))
    beta[:3, :3] = g[4:7, 4:7]  # rows/cols 8 and 9 lie outside the map: obstacle
    np.testing.assert_array_equal(s.obs_beta[-1], beta)
    first = np.asarray(s.obs_alpha[-1])
    s, *_ = _step(spec, s, gw.joint_action(S, N))  # α to (2, 1)
    np.testing.assert_array_equal(s.obs_alpha[-2], first)
    np.testing.assert_array_equal(s.obs_alpha[-1], np.pad(g, 1)[2:5, 1:4])


def test_windows_match_numpy_slices_everywhere():
    rng = np.random.default_rng(0)
    g = (rng.random((8, 8)) > 0.3).astype(np.float32)
    for view in (3, 5, 7):
        h = view // 2
        padded = np.pad(g, h)
        for r in range(8):
            for c in range(8):
                w = _window(g, np.array([r, c]), view)
                np.testing.assert_array_equal(w, padded[r:r + view, c:c + view])


def test_expert_meets_within_half_the_optimal_path():
    maps = gw.generate_maps(40, 8, seed=3)
    spec = gw.GridSpec(8)

    def run(i):
        s = gw.reset(spec, maps, i)

        def body(carry, t):
            s, met_at = carry
            s, _, met, _ = gw.step(spec, s, gw.expert_action(maps, i, t))
            return (s, jnp.where((met_at < 0) & met, t + 1, met_at)), None

        (_, met_at), _ = jax.lax.scan(body, (s, jnp.int32(-1)), jnp.arange(spec.horizon))
        return met_at

    met_at = np.asarray(jax.jit(jax.vmap(run))(jnp.arange(maps.count)))  # one program
    bound = np.ceil((np.asarray(maps.path_len) - 1) / 2)
    assert np.all(met_at >= 1) and np.all(met_at <= bound)


def test_generated_paths_are_shortest_and_free():
    maps = gw.generate_maps(30, 16, seed=1)
    maps = jax.tree_util.tree_map(np.asarray, maps)  # read on the host (not an op per read)
    for i in range(maps.count):
        g = maps.grid[i]
        assert np.all(g[0] == 0) and np.all(g[-1] == 0) and np.all(g[:, 0] == 0)
        a, b = (tuple(map(int, p)) for p in maps.start[i])
        n = int(maps.path_len[i])
        assert gw.bfs_distances(g, a)[b] == n >= 2
        cells = np.asarray(maps.path[i][: n + 1])
        assert np.all(g[cells[:, 0], cells[:, 1]] == 1)
        assert np.all(np.abs(np.diff(cells, axis=0)).sum(1) == 1)


@pytest.mark.skipif(not (DATA / "gridworld_8.npz").exists(), reason="reference data absent")
@pytest.mark.parametrize("size", [8, 16])
def test_bfs_equals_the_data_sets_optimal_paths(size):
    d = np.load(DATA / f"gridworld_{size}.npz")
    images, xy, off = d["images"], d["path_xy"], d["path_offsets"]
    checked = 0
    for i in np.random.default_rng(0).choice(len(images), 100, replace=False):
        for k in range(8):
            p = xy[off[8 * i + k]: off[8 * i + k + 1]]
            if len(p) < 2:
                continue
            dist = gw.bfs_distances(images[i], tuple(p[0]))
            assert dist[tuple(p[-1])] == len(p) - 1
            checked += 1
    assert checked > 400


def _write(path, images, paths):
    xy = np.concatenate([np.asarray(p, np.int16).reshape(-1, 2) for p in paths])
    off = np.concatenate([[0], np.cumsum([len(p) for p in paths])]).astype(np.int64)
    np.savez(path, images=images, path_xy=xy, path_offsets=off,
             paths_per_domain=np.full(len(images), 8, np.int16))


def _fixture(tmp_path, size=8, m=3):
    g = _open8()
    images = np.stack([g] * m)
    paths = [[(1, 1), (1, 2), (1, 3)]] + [[]] * 7
    _write(tmp_path / f"gridworld_{size}.npz", images, paths * m)
    return tmp_path


def test_loader_reads_a_fixture(tmp_path):
    maps, keep = gw.load_maps(_fixture(tmp_path), 8)
    assert maps.count == 3 and list(keep) == [0, 1, 2]
    np.testing.assert_array_equal(maps.start[0], [[1, 1], [1, 3]])
    assert int(maps.path_len[0]) == 2


def test_loader_errors_name_the_file_and_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"^maps: .*gridworld_8.npz: no such file"):
        gw.load_maps(tmp_path, 8)
    _fixture(tmp_path)
    with pytest.raises(ConfigError, match=r"gridworld_8.npz: images must have shape \(M, 16, 16"):
        gw.load_maps(tmp_path / "gridworld_8.npz", 16)
    bad = tmp_path / "float.npz"
    np.savez(bad, images=np.ones((1, 8, 8), np.float32), path_xy=np.zeros((0, 2), np.int16),
             path_offsets=np.zeros(9, np.int64))
    with pytest.raises(ConfigError, match=r"float.npz: images must be an integer array"):
        gw.load_maps(bad, 8)
    g = _open8()
    g[1, 1] = 0
    wall = tmp_path / "wall.npz"
    _write(wall, g[None], [[(1, 1), (1, 2), (1, 3)]] + [[]] * 7)
    with pytest.raises(ConfigError, match=r"wall.npz: domain 0 path 0: a start cell .* obstacle"):
        gw.load_maps(wall, 8)
    junk = tmp_path / "junk.npz"
    junk.write_text("not numpy")
    with pytest.raises(ConfigError, match=r"junk.npz: not a readable"):
        gw.load_maps(junk, 8)


def test_unknown_size_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^size: "):
        gw.GridSpec(12).validate()
    with pytest.raises(ConfigError, match=r"^beta_view: "):
        gw.GridSpec(8, beta_view=4).validate()
