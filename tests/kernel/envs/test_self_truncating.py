"""Issue 53, item 3: a Gymnasium environment without a registered spec that ends its own
episodes (terminated/truncated) runs: no step limit needed, the rollout's arrays grow to the
longest episode under the safety cap (`--max-steps`, default HOST_EPISODE_CAP)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.envs.rollout import GROW_FROM, rollout_host
from privrl.envs.task import HOST_EPISODE_CAP, make_task

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _back(key: jax.Array, obs: jax.Array) -> jax.Array:  # always steps back: never the goal
    return jnp.zeros(obs.shape[0], jnp.int32)


@pytest.mark.parametrize("length", [30, 100])
def test_the_arrays_grow_to_the_episode_the_env_ends(load_example, length: int) -> None:
    walk = load_example("byo_gymnasium").Walk
    envs = [walk(max_steps=length) for _ in range(2)]
    key = jax.random.key(3)
    grown = rollout_host(envs, _back, key, HOST_EPISODE_CAP, grow=True)
    size = GROW_FROM if length <= GROW_FROM else 2 * GROW_FROM
    assert grown.obs.shape[0] == size and grown.actions.shape[0] == size
    assert grown.length.tolist() == [length, length]
    fixed = rollout_host([walk(max_steps=length) for _ in range(2)], _back, key, 300)
    for a, b in zip(jax.tree_util.tree_leaves(grown), jax.tree_util.tree_leaves(fixed),
                    strict=True):  # the same episodes; only the padding differs
        a, b = np.asarray(a), np.asarray(b)
        if a.ndim and a.shape != b.shape:
            b = b[:size]
        np.testing.assert_array_equal(a, b)


def test_a_self_truncating_env_runs_from_the_command_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """It was refused: "states no step limit ... set the episode cap"."""
    import json

    from privrl.main import main

    out = tmp_path / "out"
    assert main(["run", "dp-reinforce", "--env", f"{EXAMPLES}/byo_gymnasium.py:Walk",
                 "--episodes", "2", "--batch-episodes", "2", "--out", str(out),
                 "--no-progress"]) == 0, capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["max_episode_steps"] == HOST_EPISODE_CAP


def test_a_gymnasium_task_without_a_limit_grows(load_example) -> None:
    load_example("byo_gymnasium")
    task = make_task("byo_gymnasium:Walk")
    assert task.episode_steps is None and task.grows
    assert not make_task("gymnasium:CartPole-v1").grows  # its spec's 500 steps: fixed arrays
