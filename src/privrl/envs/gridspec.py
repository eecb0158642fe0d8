"""Paper 002's Grid-World options (`GridSpec`), apart from its JAX environment
(privrl.envs.gridworld) so that a config's validation reads them before JAX starts (issue 53)."""

from __future__ import annotations

from dataclasses import dataclass

from privrl.config import at_least, fail, integer, odd

SIZES = (8, 16, 32)
MAX_STEPS = {8: 38, 16: 86, 32: 178}  # Tm: twice the longest optimal path of the data set


@dataclass(frozen=True)
class GridSpec:
    """The environment's options (the defaults are the paper's text)."""

    size: int = 8
    alpha_view: int = 3
    beta_view: int = 5
    history: int = 2
    max_steps: int | None = None  # None: the paper's Tm for `size`
    hit_reward: float = -10.0
    step_reward: float = -1.0
    meet_reward: float = 50.0

    def validate(self) -> GridSpec:
        if self.size not in SIZES:
            fail("size", f"must be one of {', '.join(map(str, SIZES))}, got {self.size}")
        odd("alpha_view", self.alpha_view)
        odd("beta_view", self.beta_view)
        integer("history", self.history)
        if self.max_steps is not None:
            at_least("max_steps", self.max_steps, 1)
        return self

    @property
    def horizon(self) -> int:
        return self.max_steps if self.max_steps is not None else MAX_STEPS[self.size]
