"""Noise keys: secret roots come from os.urandom (fresh every call, usable as JAX keys), and a
run's record says plainly which kind it used."""

from __future__ import annotations

import jax
import numpy as np

from privrl.privacy.noise import noise_fields, secret_fold, secret_keys, summary_note


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


def test_secret_fold_keys_each_release_by_the_root_and_the_seeded_key() -> None:
    """No root: the seeded key itself (seeded runs unchanged). With a root: a function of the
    root and the seeded key only (the same release gets the same key), different for another
    root or another seeded key, and the same under vmap as one by one."""
    data = jax.random.key_data
    seeded = jax.random.split(jax.random.key(7), 64)
    assert np.array_equal(data(secret_fold(None, seeded[0])), data(seeded[0]))
    root, other = secret_keys(), secret_keys()
    folded = jax.vmap(lambda k: secret_fold(root, k))(seeded)
    assert np.array_equal(data(folded[5]), data(secret_fold(root, seeded[5])))
    assert len({tuple(r) for r in data(folded).tolist()}) == 64
    assert not np.array_equal(data(folded[0]), data(seeded[0]))
    assert not np.array_equal(data(folded[0]), data(secret_fold(other, seeded[0])))
