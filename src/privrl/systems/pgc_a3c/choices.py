"""PGC-A3C's option value sets, each written once: the config validates against them and the
command line derives its choices from them (this module imports nothing: the CLI reads it
before JAX starts)."""

from __future__ import annotations

MECHANISMS = ("laplace", "prs", "privunit", "privunitg", "projunit", "privunitg-seed", "none")
REWARDS = ("env", "step", "failure", "goal", "shaped")
