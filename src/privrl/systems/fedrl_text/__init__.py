"""FedRL on Text2Action (paper 002, Table 2) and its baselines; importing the package registers
the player of their saved networks (privrl.players.register_player,
privrl.systems.fedrl_text.played)."""

from typing import Any

from privrl.players import register_player


def _played() -> Any:
    from privrl.systems.fedrl_text import played

    return played


register_player("text2action:", _played)
