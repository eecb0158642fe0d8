"""Where mechanism noise comes from: `seeded` keys (reproducible) or `secret` keys (deployable).

A mechanism's ε holds only if whoever sees a report cannot predict its noise. With `seeded`
keys (derived from the run's seed, which config.json records) anyone holding config.json and
the reports can recompute every noise vector and subtract it, so the stated ε is a
simulation's guarantee, not a deployment's. With `secret` keys each agent (node, party) draws
its noise root from the operating system's CSPRNG (`os.urandom`) inside its own process; it is
never written to a file, never returned to a driver or an aggregator, and never becomes a
constant of a compiled program (it is passed as an argument, so JAX's persistent compilation
cache never stores it).

A secret root is 64 bits (one Threefry-2x32 key) expanded by JAX's counter-based Threefry
generator, which is not a certified CSPRNG; the float-safe samplers (`secure=True`) draw their
randomness from the OS CSPRNG directly.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from privrl.choices import NOISE_MODES

__all__ = ["NOISE_MODES", "SEEDED_NOTE", "noise_fields", "noise_mode", "noise_summary",
           "record_mode", "secret_fold", "secret_keys", "summary_note"]

SEEDED_NOTE = ("noise keys are SEEDED: every noise vector is reproducible from the seed in "
               "config.json, so anyone holding config.json and the reports can subtract the "
               "noise; the stated guarantee is a simulation's, not a deployment's")
SECRET_NOTE = ("noise keys are SECRET: each agent's noise root comes from the OS CSPRNG "
               "(os.urandom) in the process that runs it; it is never written or sent, so "
               "the noise is not reproducible from the seed (the rest of the run still is)")


SECURE_NOTE = ("noise is SECURE: float-safe discrete noise drawn on the host from the OS "
               "CSPRNG (os.urandom) for every release; no key is involved, so the noise is "
               "neither reproducible from the seed nor stored anywhere")


def noise_mode(mechanism: str, noise: str | None, secure_noise: bool) -> str | None:
    """`record_mode` of a run whose mechanism is `mechanism`, or None where it adds no noise
    (`none`): then no noise-keys line is written, in privacy.json or the summary."""
    return None if mechanism == "none" else record_mode(noise, secure_noise)


def noise_summary(mode: str | None) -> dict[str, str]:
    """summary.json's "noise" line (nothing without noise)."""
    return {} if mode is None else {"noise": summary_note(mode)}


def record_mode(noise: str | None, secure_noise: bool, default: str = "seeded") -> str:
    """What privacy.json and the summary say about the noise: "secure" when the float-safe
    samplers draw it (keys are then unused), else the key mode (or the runtime's default)."""
    return "secure" if secure_noise else (noise or default)


def secret_keys(count: int | None = None) -> Any:
    """A fresh JAX key (or `count` keys) from os.urandom, 64 bits each; call it in the process
    that will use it, and pass it to jitted code as an argument, never as a constant."""
    import jax

    n = 1 if count is None else int(count)
    data = np.frombuffer(os.urandom(8 * n), np.uint32).reshape(n, 2)
    keys = jax.random.wrap_key_data(data, impl="threefry2x32")
    return keys[0] if count is None else keys


def secret_fold(root: Any, key: Any) -> Any:
    """The noise key of one release under a secret `root`: Threefry keyed by the root, applied
    to the 64 bits of the key the seeded run would have used for that release.

    Where the seeded key comes from deep inside code that has no release counter (an
    environment wrapper, a party's vmapped batch), this keeps the seeded run's key tree for
    uniqueness (two releases share a key only if their seeded keys coincide) while no key is
    predictable without the root. `root` is None: the seeded key itself."""
    if root is None:
        return key
    import jax

    bits = jax.random.key_data(key)
    return jax.random.fold_in(jax.random.fold_in(root, bits[..., 0]), bits[..., 1])


def noise_fields(mode: str | None) -> dict[str, Any]:
    """The privacy.json fields that say where the noise came from (nothing without noise)."""
    if mode is None:
        return {}
    note = {"seeded": SEEDED_NOTE, "secret": SECRET_NOTE, "secure": SECURE_NOTE}[mode]
    return {"noise_keys": {"mode": mode, "reproducible_from_seed": mode == "seeded",
                           "note": note}}


def summary_note(mode: str) -> str:
    """One line for the printed summary."""
    if mode == "secure":
        return "noise: secure (float-safe discrete noise from the OS CSPRNG, never written)"
    return ("noise: seeded (reproducible from the seed: a simulation's guarantee, not a "
            "deployment's)" if mode == "seeded"
            else "noise: secret (OS CSPRNG keys held by each agent, never written)")
