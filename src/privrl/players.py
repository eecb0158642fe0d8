"""The players of systems' own networks, by environment prefix (`register_player`, also
privrl.policy's): a registry that imports nothing, so that a system's package registers its
player on import without loading numpy (a bad flag's error imports every system's package)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PLAYERS: dict[str, Callable[[], Any]] = {}  # env prefix -> a system's player (register_player)


def register_player(env_prefix: str, played: Callable[[], Any]) -> None:
    """Let a system play its own networks (`networks_policy`) on environments named
    `env_prefix`...: `played()` returns its module, with `load(run_dir, description, θ, path,
    trial[, data])` (what load_policy returns) and `evaluate(run_dir, description, θ, path,
    trials, episodes, seed[, data])` (privrl.evaluation; `data` only for a module whose `DATA`
    says what that directory is: `data_argument`). The system registers it when its package is
    imported (privrl's API and CLI import it first): the kernel imports no system."""
    PLAYERS[env_prefix] = played
