"""The buffered aggregator: bad reports are rejected with state untouched; flush at |B|."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privrl.federation import BufferedAggregator, InvalidReportError
from privrl.privacy import IdentityMechanism, LaplaceMechanism

D = 6


def _bytes(state):
    return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(state)]


def _report(x):
    return IdentityMechanism().privatize(jax.random.key(0), x)


@pytest.fixture
def agg_and_state():
    agg = BufferedAggregator(D, buffer_size=3, learning_rate=0.5)
    state = agg.init(jnp.arange(D, dtype=jnp.float32))
    state = agg.submit(state, _report(jnp.ones(D, jnp.float32)))  # a non-empty buffer
    return agg, state


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda: _report(jnp.array([1.0, jnp.nan, 0, 0, 0, 0], jnp.float32)), "NaN or inf"),
        (lambda: _report(jnp.array([1.0, jnp.inf, 0, 0, 0, 0], jnp.float32)), "NaN or inf"),
        (lambda: _report(jnp.array([1.0, -jnp.inf, 0, 0, 0, 0], jnp.float32)), "NaN or inf"),
        (lambda: _report(jnp.ones(D + 1, jnp.float32)), "shape"),
        (lambda: _report(jnp.ones(D - 1, jnp.float32)), "shape"),
        (lambda: _report(jnp.ones(D, jnp.float16)), "dtype"),
        (lambda: jnp.ones(D, jnp.float32), "Report"),  # a raw array is not a Report
        (lambda: np.ones(D, np.float32), "Report"),
    ],
)
def test_bad_report_rejected_state_bit_identical(agg_and_state, bad, message):
    agg, state = agg_and_state
    before = _bytes(state)
    with pytest.raises(InvalidReportError, match=message):
        agg.submit(state, bad())
    assert _bytes(state) == before
    # The aggregator keeps working after a rejection.
    state2 = agg.submit(state, _report(jnp.ones(D, jnp.float32)))
    assert int(state2.count) == 2


def test_receive_in_jit_drops_nonfinite_and_counts_it(agg_and_state):
    agg, state = agg_and_state
    new = jax.jit(agg.receive)(state, _report(jnp.full(D, jnp.nan, jnp.float32)))
    assert int(new.rejected) == int(state.rejected) + 1
    assert _bytes(new._replace(rejected=state.rejected)) == _bytes(state)


def test_buffer_flushes_at_size_with_mean_update():
    agg = BufferedAggregator(D, buffer_size=3, learning_rate=0.5)
    theta0 = jnp.arange(D, dtype=jnp.float32)
    state = agg.init(theta0)
    vals = [jnp.full(D, v, jnp.float32) for v in (1.0, 2.0, 6.0)]
    for i, v in enumerate(vals[:2]):
        state = agg.submit(state, _report(v))
        assert int(state.count) == i + 1
        np.testing.assert_array_equal(state.theta, theta0)  # nothing applied yet
    state = agg.submit(state, _report(vals[2]))
    assert int(state.count) == 0 and int(state.updates) == 1 and int(state.accepted) == 3
    # mean of 1, 2, 6 is 3; float32 mean may round in the last bit
    np.testing.assert_allclose(state.theta, theta0 - 0.5 * 3.0, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(state.buffer_sum, 0.0)  # flushed


def test_buffer_of_one_applies_every_report():
    agg = BufferedAggregator(D, buffer_size=1, learning_rate=0.5)
    state = agg.init(jnp.zeros(D, jnp.float32))
    rep = LaplaceMechanism(1.0, 0.01).privatize(jax.random.key(1), jnp.ones(D))
    state = agg.submit(state, rep)
    np.testing.assert_allclose(state.theta, -0.5 * rep.value, rtol=1e-6)


def test_invalid_construction():
    with pytest.raises(ValueError, match="buffer_size"):
        BufferedAggregator(D, buffer_size=0)
    with pytest.raises(ValueError, match="learning_rate"):
        BufferedAggregator(D, learning_rate=float("nan"))
    agg = BufferedAggregator(D)
    with pytest.raises(ValueError, match="theta"):
        agg.init(jnp.zeros(D + 1))


def test_aggregators_built_alike_are_equal_and_share_their_program():
    """optax makes new functions per call: the default optimizer is made once per learning
    rate, so two aggregators of one configuration are equal (`submit` compiles once for both)."""
    from privrl.federation.aggregator import named_optimizer

    assert BufferedAggregator(D, 2, 0.5) == BufferedAggregator(D, 2, 0.5)
    assert BufferedAggregator(D, 2, 0.5) != BufferedAggregator(D, 2, 0.25)
    assert named_optimizer("adam", 0.1) is named_optimizer("adam", 0.1)
    with pytest.raises(ValueError, match="optimizer"):
        named_optimizer("lion", 0.1)
