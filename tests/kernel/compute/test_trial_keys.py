"""Trial keys (privrl.compute.sharding.setting_trial_keys): a seed passed as data draws the keys
the seed compiled in draws, and every seed shares one program."""

from __future__ import annotations

import logging

import jax
import numpy as np

from privrl.compute import sharding


def test_a_seed_as_data_draws_the_keys_of_the_seed_compiled_in(caplog) -> None:
    shapes = [(1, 1, 1), (3, 1, 4), (2, 3, 6), (2, 3, 8)]  # (trials, settings, padded)
    for seed in (0, 1, 12345, 2**31 - 2):
        for trials, settings, padded in shapes:
            own = sharding.own_padded(trials, 1)
            got = sharding.setting_trial_keys(seed, trials, settings, padded, 1)
            want = sharding._trial_keys_any_seed(seed, trials, settings, padded, own)
            assert np.array_equal(jax.random.key_data(got), jax.random.key_data(want))
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        for seed in range(5, 9):
            sharding.setting_trial_keys(seed, 2, 3, 8, 1)
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled, compiled  # no program of its own per seed
    # outside int32's data path (seed + 1 must fit): compiled in, as jax.random.key takes it
    wide = sharding.setting_trial_keys(2**40, 2, 3, 8, 1)
    assert wide.shape == (8,)
