"""The DQN settings of paper 002's learners (`ReplayOptions`), apart from their JAX replay
code (privrl.replay) so that a config's validation reads them before JAX starts (issue 53)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from privrl.config import Config, fail, in_range, integer, option, positive

if TYPE_CHECKING:
    from jax import Array


@dataclass(frozen=True)
class ReplayOptions(Config):
    """The DQN settings of paper 002's learners on every domain (Grid-World defaults)."""

    learning_rate: float = option(1e-3, help="Adam's step size.")
    gamma: float = option(0.9, help="Discount factor γ, in [0, 1).")
    batch_size: int = option(32, help="Transitions per update.")
    buffer_size: int = option(100_000, help="Replay memory capacity.", unit="transitions")
    num_envs: int = option(1, help="Episodes stepped together per update.")
    explore_start: float = option(1.0, help="ε-greedy: ε decays linearly from this to "
                                  "--explore-end over --explore-steps.")
    explore_end: float = option(0.1, help="See --explore-start.")
    explore_steps: int = option(1000, help="See --explore-start.", unit="vector steps")
    target_period: int = option(250, help="Updates between target-network copies.")
    epochs: int = option(200, help="Training epochs at most (early stop on validation).")
    patience: int = option(10, help="Stop after this many epochs without validation "
                           "improvement.")
    seed: int = option(0, help="Random seed (same seed, same results).")

    def validate_replay(self, *more: str) -> None:
        """The shared checks, plus the fields named in `more` that must be integers >= 1."""
        for name in ("batch_size", "buffer_size", "num_envs", "explore_steps", "target_period",
                     "epochs", "patience", *more):
            integer(name, getattr(self, name))
        if self.buffer_size < self.num_envs:
            fail("buffer_size", "must hold at least one vector step")
        positive("learning_rate", self.learning_rate)
        in_range("gamma", self.gamma, 0, 1, high_open=True)
        if not 0 <= self.explore_end <= self.explore_start <= 1:
            fail("explore_end", "need 0 <= end <= start <= 1")

    def epsilon(self, step: Array) -> Array:
        import jax.numpy as jnp

        frac = jnp.minimum(step / self.explore_steps, 1.0)
        return self.explore_start + frac * (self.explore_end - self.explore_start)
