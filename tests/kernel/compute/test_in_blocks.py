"""`in_blocks`: a batched function computed a fixed number of rows at a time."""

import jax.numpy as jnp
import numpy as np

from privrl.compute.sharding import in_blocks


def test_rows_are_computed_a_block_at_a_time_and_padding_is_dropped():
    shapes = []

    def fn(x, y):
        shapes.append(x.shape)
        return x * 2.0 + y, x + jnp.sum(y)  # the second: rows see only their own block

    x, y = jnp.arange(7.0), jnp.ones(7)
    out, plus = in_blocks(fn, 3)(x, y)
    np.testing.assert_array_equal(out, np.arange(7.0) * 2 + 1)
    np.testing.assert_array_equal(plus, np.arange(7.0) + 3)
    assert shapes == [(3,)]  # padded to 9 rows, 3 at a time
    one, _ = in_blocks(fn, 7)(x, y)
    np.testing.assert_array_equal(one, out)
