"""The planner's value sets (imports nothing: the CLI reads them before JAX starts)."""

from __future__ import annotations

SYSTEMS = ("pgc-a3c", "dp-reinforce", "fedpg-cen")
