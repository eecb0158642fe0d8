"""privrl.nets.flat.FlatModel: building a model compiles nothing (issue 54)."""

from __future__ import annotations

import jax
import numpy as np


def test_building_a_model_compiles_no_program(compiles) -> None:
    """A model's structure (its size d, how θ unravels) is traced, not computed: eager, the
    key, each leaf's reshape and the concatenation compiled a program each (9 per run, each
    read from no cache: below the persistent cache's threshold). θ still unravels to the
    module's own parameters."""
    from privrl.nets.flat import actor_critic, mlp

    with compiles() as compiled:
        model = actor_critic(7, 3, 5)  # sizes no other test builds: nothing cached in-process
        other = mlp((6,), 3, 5)
    assert compiled == []
    assert (model.dim, other.dim) == (5 * 7 + 7 * 3 + 7 * 1, 5 * 6 + 6 + 6 * 3 + 3)
    theta = np.arange(model.dim, dtype=np.float32)
    params = model.unravel(theta)
    assert {k: v["kernel"].shape for k, v in params.items()} == {
        "common": (5, 7), "policy": (7, 3), "value": (7, 1)}
    np.testing.assert_array_equal(jax.flatten_util.ravel_pytree(params)[0], theta)
