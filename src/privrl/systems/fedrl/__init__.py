"""FedRL (paper 002) and its baselines on Grid-World; importing the package registers the
player of their saved networks (privrl.players.register_player, privrl.systems.fedrl.played)."""

from typing import Any

from privrl.players import register_player


def _played() -> Any:
    from privrl.systems.fedrl import played

    return played


register_player("gridworld-", _played)
