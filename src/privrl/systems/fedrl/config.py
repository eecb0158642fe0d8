"""FedRL's Grid-World configurations (paper 002): `GridConfig` (what FedRL and its baselines
share), `FedRLConfig` and `BaselineConfig`, with their presets and validation. It imports no
JAX (the grid's spec, the replay options and the Q-noise options are light), so the command
line refuses a bad value before JAX starts (issue 53).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from privrl.config import check_preset, fail, one_of, option
from privrl.envs.gridspec import GridSpec
from privrl.privacy.qnoise import QNoiseConfig
from privrl.replay_options import ReplayOptions

PAPER_HISTORY = {8: 2, 16: 4, 32: 8}  # the authors' code (autolen): H by map size
PRESETS: dict[str, dict[str, Any]] = {"paper": {}}


@dataclass(frozen=True)
class GridConfig(ReplayOptions):
    """Options shared by FedRL and its Grid-World baselines; defaults are the paper preset."""

    preset: str = option("paper", help="paper: the paper's and its authors' code's settings.")
    size: int = option(8, help="Grid-World size N: 8, 16 or 32.")
    maps: str | None = option(
        None, help="Directory holding gridworld_{N}.npz (the paper's maps) or the .npz file "
        "itself. Default: maps from the built-in generator.")
    generated_maps: int = option(
        8000, help="Without --maps: how many maps to generate (split 8:1:1).")
    history: int | None = option(
        None, help="H: observations stacked per input. Default: the authors' 2, 4, 8 for N = "
        "8, 16, 32.")
    alpha_view: int = option(3, help="α's window (odd; paper text: 3).")
    beta_view: int = option(5, help="β's window (odd; paper text: 5).")
    updates_per_epoch: int = option(
        2000, help="Environment steps (one update each) per epoch.")
    seeds: int = option(1, flag="--trials", help="Independent trials, vectorized.")

    presets = PRESETS

    @property
    def h(self) -> int:
        return self.history if self.history is not None else PAPER_HISTORY.get(self.size, 2)

    def spec(self) -> GridSpec:
        return GridSpec(self.size, self.alpha_view, self.beta_view, self.h)

    def validate(self) -> None:
        check_preset(self.preset, PRESETS)
        self.spec().validate()
        self.validate_replay("updates_per_epoch", "seeds", "generated_maps")
        if self.generated_maps < 10:
            fail("generated_maps", "need at least 10 maps to split 8:1:1")


@dataclass(frozen=True)
class FedRLConfig(GridConfig, QNoiseConfig):
    def validate(self) -> None:
        super().validate()
        self.validate_noise()


MODELS = ("dqn-alpha", "dqn-full", "fcn-alpha", "fcn-full")


@dataclass(frozen=True)
class BaselineConfig(GridConfig):
    model: str = option("dqn-alpha", choices=MODELS,
                        help="DQN or FCN on α's observation (-alpha) or on both (-full).")

    def validate(self) -> None:
        one_of("model", self.model, MODELS)
        super().validate()

    @property
    def full(self) -> bool:
        return self.model.endswith("-full")
