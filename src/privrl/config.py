"""Errors shared by every algorithm's configuration."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid option; `option` names it (as on the command line)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


class RayNotInstalledError(RuntimeError):
    """Ray is an optional extra; the message says how to install it."""
