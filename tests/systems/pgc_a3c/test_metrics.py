"""Paper 000's metrics (eq. 25-27, Table 3) on hand-made score sequences."""

import math

import numpy as np
import pytest

from privrl.systems.pgc_a3c.metrics import (
    first_success_time,
    median_fst,
    moving_average,
    relative_auc,
    success_ratio_curve,
)


def test_moving_average_is_forward_window():
    scores = np.arange(1, 13, dtype=float)  # ζ_1..ζ_12 = 1..12
    mu = moving_average(scores, m=10)
    # μ_1 = mean(1..10) = 5.5, μ_2 = 6.5, μ_3 = 7.5; N - m + 1 = 3 values
    np.testing.assert_allclose(mu, [5.5, 6.5, 7.5])
    assert moving_average(scores[:5], m=10).shape == (0,)
    with pytest.raises(ValueError):
        moving_average(scores, m=0)


def test_fst_first_n_with_mean_at_threshold():
    scores = np.full(40, 100.0)
    scores[7:17] = 195.0  # ζ_8..ζ_17 all 195, so μ_8 = 195 exactly
    assert first_success_time(scores, 195.0, 10)[()] == 8.0
    scores[16] = 194.0  # now no window of 10 reaches 195
    assert math.isinf(first_success_time(scores, 195.0, 10)[()])


def test_fewer_scores_than_one_window_never_succeed():
    """A run shorter than the window (`--submissions 8`, m = 10) has no μ_n: FST ∞ per trial
    (it was an argmax over nothing, a traceback at the end of the run)."""
    np.testing.assert_array_equal(first_success_time(np.full((2, 8), 500.0)), [np.inf, np.inf])


def test_fst_per_trial_and_median_counts_failures_as_infinite():
    scores = np.full((5, 30), 10.0)
    scores[0, 0:10] = 200  # FST 1
    scores[1, 5:15] = 200  # FST 6
    scores[2, 20:30] = 200  # FST 21
    fst = first_success_time(scores)  # trials 3 and 4 never succeed
    np.testing.assert_array_equal(fst, [1, 6, 21, np.inf, np.inf])
    assert median_fst(fst) == 21.0  # median of 1, 6, 21, ∞, ∞
    assert median_fst(np.array([1.0, np.inf, np.inf])) is None


def test_success_ratio_curve_and_relative_auc():
    fst = np.array([2.0, 4.0, np.inf, 4.0])
    curve = success_ratio_curve(fst, 5)
    np.testing.assert_allclose(curve, [0, 0.25, 0.25, 0.75, 0.75])
    reference = success_ratio_curve(np.array([1.0, 1.0]), 5)  # all succeed at once
    assert relative_auc(curve, reference) == pytest.approx(2.0 / 5.0)
    assert relative_auc(reference, reference) == 1.0
    with pytest.raises(ValueError):
        relative_auc(curve, reference[:3])
