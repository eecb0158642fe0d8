"""Noise keys: secret roots come from os.urandom (fresh every call, usable as JAX keys), and a
run's record says plainly which kind it used."""

from __future__ import annotations

import jax
import numpy as np

from privrl.privacy.noise import noise_fields, secret_keys, summary_note


def test_secret_keys_are_fresh_jax_keys() -> None:
    a, b = secret_keys(), secret_keys()
    assert jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
    assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(b))
    many = jax.random.key_data(secret_keys(4))
    assert many.shape == (4, 2) and len({tuple(r) for r in many.tolist()}) == 4
    # usable exactly like a seeded key
    assert jax.random.normal(jax.random.fold_in(a, 3), (2,)).shape == (2,)


def test_the_record_says_whether_noise_is_reproducible() -> None:
    seeded, secret = noise_fields("seeded")["noise_keys"], noise_fields("secret")["noise_keys"]
    assert seeded["reproducible_from_seed"] and not secret["reproducible_from_seed"]
    assert "simulation" in seeded["note"] and "os.urandom" in secret["note"]
    assert "not a deployment" in summary_note("seeded")
