"""Model selection on validation, shared by paper 002's runners (Grid-World and Text2Action):
per run, the best validation score so far, its epoch and its parameters, with early stopping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _where_seed(mask: np.ndarray, new: Any, old: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda n, o: jnp.where(jnp.asarray(mask).reshape((-1,) + (1,) * (n.ndim - 1)), n, o),
        new, old)


class Selection:
    """Per run: the best validation score so far, its epoch and parameters; and the epoch
    timer (the first epoch's time includes compilation). Shared by both paper-002 runners."""

    def __init__(self, params: Any, runs: int, patience: int) -> None:
        self.best = params
        self.best_val = np.full(runs, -1.0)
        self.best_epoch = np.zeros(runs, int)
        self.patience = patience
        self.compile_seconds = 0.0
        self.times: list[float] = []

    def train(self, epoch: int, chunk: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        state = jax.block_until_ready(chunk(*args))
        dt = time.perf_counter() - t0
        if epoch == 1:
            self.compile_seconds = dt
        else:
            self.times.append(dt)
        return state

    def record(self, epoch: int, val: np.ndarray, params: Any) -> bool:
        """Keep the runs that improved; True once no run improved for `patience` epochs."""
        improved = val > self.best_val
        self.best = _where_seed(improved, params, self.best)
        self.best_val = np.where(improved, val, self.best_val)
        self.best_epoch = np.where(improved, epoch, self.best_epoch)
        return bool(np.all(epoch - self.best_epoch >= self.patience))
