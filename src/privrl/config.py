"""Errors shared by every algorithm's configuration."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid option; `option` names it (as on the command line)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


class RayNotInstalledError(RuntimeError):
    """Ray is an optional extra; the message says how to install it."""


def config_from_preset(cls: type, presets: dict, preset: str, **overrides: object) -> object:
    """`cls(preset=preset, **presets[preset], **overrides)`, None overrides ignored; an unknown
    preset is a ConfigError naming --preset and the choices."""
    if preset not in presets:
        raise ConfigError("--preset", f"unknown preset {preset!r}; "
                                      f"choose one of {', '.join(presets)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return cls(preset=preset, **{**presets[preset], **given})
