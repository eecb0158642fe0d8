"""What every system's runtime rules share: a runtime's name and the one-trial rule.

Each system decides which of its runs a runtime carries in one library function
(`privrl.systems.fedpg.runtimes.check_runtime`, `privrl.systems.pgc_a3c.runtimes.
check_runtime`); its API entry points and its CLI both call it, so that both refuse the same
runs in the same words (the CLI names the flag where the library names the field).
"""

from __future__ import annotations

from privrl.config import fail

__all__ = ["NAMES", "one_trial", "require_extra"]

NAMES = {"local": "local", "ray": "Ray", "flower": "Flower"}  # as a sentence names them


def require_extra(runtime: str) -> None:
    """The runtime's optional extra is installed (ray, flower), or one line says how to install
    it (RayNotInstalledError; a ConfigError on `runtime`)."""
    if runtime == "ray":
        from privrl.runtime.ray import require_ray

        require_ray()
    elif runtime == "flower":
        try:
            import flwr  # noqa: F401
        except ImportError:
            fail("runtime", "the Flower runtime needs the flower extra: pip install "
                            "'privrl[flower]'")


def one_trial(trials: int, runtime: str) -> None:
    """A distributed runtime runs one trial (one deployment): ConfigError on `trials`."""
    if runtime != "local" and trials != 1:
        fail("trials", f"the {NAMES[runtime]} runtime runs one trial, got {trials}")
