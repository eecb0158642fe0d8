"""FedPG's option value sets, each written once: the config validates against them and the
command line derives its choices from them (this module imports nothing: the CLI reads it
before JAX starts)."""

from __future__ import annotations

ALGORITHMS = ("cen", "dec")
MECHANISMS = ("none", "laplace", "gaussian", "privunit", "privunitg", "distributed-gaussian",
              "distributed-gaussian-continuous", "central-gaussian")
# Byzantine agents' behaviours (privrl.systems.fedpg.byzantine) and the server's robust rules
# (privrl.federation.robust).
ATTACKS = ("random-noise", "random-action", "sign-flip", "zero-gradient", "adaptive", "fedscspg",
           "normalized")
ROBUST = ("none", "fedpg-br", "median", "trimmed-mean")
