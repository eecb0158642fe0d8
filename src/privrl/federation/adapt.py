"""Aggregator-side levers that adapt a private run to its task, all post-processing of released
reports (issue 51): the step size set from the mechanism's known noise level, a step scale the
aggregator can lower, and the best candidate policy kept by its return on the task's PUBLIC
simulator (the environment's default parameters: no agent's data enters the choice).

Why these are post-processing: the reports' noise scale and clip are public parameters of the
mechanism; the candidates are θs the aggregator computed from released reports; the public
simulator's episodes are played with keys of the aggregator's own, on parameters no agent
holds. Whatever is chosen from them is a function of released data and public randomness, so
the agents' guarantee is unchanged (the system's privacy.json says what the simulator used).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

__all__ = [
    "LEVERS_NOTE",
    "MAX_BACKOFFS",
    "PUBLIC_EVAL_SALT",
    "BestCandidates",
    "PublicCandidates",
    "ScaledState",
    "lowered_scale",
    "noise_step",
    "public_candidates_record",
    "scaled",
]

# The step scale never falls below backoff**MAX_BACKOFFS: a run whose evaluations are noisy
# must not freeze.
MAX_BACKOFFS = 3

# What privacy.json says of the post-processing levers, for every system that has them.
LEVERS_NOTE = ("step_from_noise and public_candidates are post-processing: the step size from "
               "the mechanism's public noise scale, the candidates chosen on the public "
               "simulator named here, which holds no agent's data")


def noise_step(learning_rate: float, snr: float, reports_per_step: float) -> float:
    """The aggregator's step size from the measured noise level: η·s/(1 + s), s the
    signal-to-noise ratio of what one step follows (one report's `snr` times the reports it
    averages, `reports_per_step`). A noiseless mechanism (snr = ∞) keeps η; a step over noise
    that drowns the signal (s → 0) shrinks in proportion to s."""
    if not learning_rate > 0 or not reports_per_step > 0 or not snr >= 0:
        raise ValueError(f"need η > 0, reports > 0 and snr >= 0, got {learning_rate}, "
                         f"{reports_per_step}, {snr}")
    if math.isinf(snr):
        return float(learning_rate)
    s = snr * reports_per_step
    return float(learning_rate * s / (1.0 + s))


class ScaledState(NamedTuple):
    inner: Any  # the wrapped optimizer's state
    scale: Array  # the step's multiplier (1 until the aggregator backs off)


def scaled(inner: optax.GradientTransformation) -> optax.GradientTransformation:
    """`inner` with its update multiplied by a scale kept in the state (`ScaledState.scale`,
    starting at 1), which the aggregator lowers when it backs off (`BestCandidates`)."""

    def init(params: Array) -> ScaledState:
        return ScaledState(inner.init(params), jnp.ones((), jnp.float32))

    def update(grads: Array, state: ScaledState, params: Array | None = None
               ) -> tuple[Array, ScaledState]:
        step, new_inner = inner.update(grads, state.inner, params)
        return state.scale * step, ScaledState(new_inner, state.scale)

    return optax.GradientTransformation(init, update)


class BestCandidates:
    """Each trial's best candidate so far by its public-simulator return, and the back-off.

    `offer(returns, candidates, stderr)` takes every trial's current candidate (θ and whatever
    the caller must restore with it, e.g. the optimizer's state: row k is trial k's), its mean
    return on the public simulator and that mean's standard error. What it uses: those means
    and standard errors only (public-simulator scores of θs computed from released reports).

    - **The answer:** a candidate better than the trial's best becomes the best. The first
      candidate (the start) is always offered first, so `best` never returns a candidate
      whose public return is below the start's.
    - **The iterate:** a trial reverts to its best (and lowers its step by `backoff`; `offer`
      returns the mask) only on a collapse: it had *gained* (its best above its start by more
      than `sigmas` standard errors of the two evaluations: a gain the evaluation's own noise
      would not explain), and the candidate lost more than `collapse` of that gain and more
      than `sigmas` standard errors of its and the best's evaluations. Before such a gain
      nothing is reverted: a learner may pass through policies worse than its start (early
      noisy steps, a DQN's early updates), and reverting each to a start that happens to be
      the best froze it there (54 and 58 reverts on CartPole, benchmarks/log/26-dqn.md); the
      best stays the answer meanwhile."""

    def __init__(self, backoff: float = 0.5, collapse: float = 0.5, sigmas: float = 2.0):
        if not 0 < backoff <= 1:
            raise ValueError(f"backoff must be in (0, 1], got {backoff!r}")
        if not 0 <= collapse <= 1:
            raise ValueError(f"collapse must be in [0, 1], got {collapse!r}")
        if not sigmas >= 0:
            raise ValueError(f"sigmas must be >= 0, got {sigmas!r}")
        self.backoff, self.collapse, self.sigmas = backoff, collapse, float(sigmas)
        self.best_stderr: np.ndarray | None = None
        self.start: np.ndarray | None = None
        self.start_stderr: np.ndarray | None = None
        self.best_return: np.ndarray | None = None
        self.best: Any = None  # (trials, ...) host arrays: the best candidates' θ and extras
        self.history: list[np.ndarray] = []  # every offer's returns, (trials,) each
        self.backoffs: np.ndarray | None = None  # per trial: how often it reverted

    def offer(self, returns: np.ndarray, candidates: Any, stderr: np.ndarray | None = None
              ) -> np.ndarray:
        """Record this round of candidates (a pytree of (trials, ...) arrays) with their public
        returns (trials,) and those means' standard errors (default 0); returns the bool mask
        of trials that collapsed (to revert)."""
        returns = np.asarray(returns, np.float64)
        stderr = np.zeros_like(returns) if stderr is None else np.asarray(stderr, np.float64)
        host = jax.tree_util.tree_map(np.asarray, candidates)
        self.history.append(returns)
        if self.best_return is None:
            self.start, self.start_stderr = returns.copy(), stderr.copy()
            self.best_return = returns.copy()
            self.best_stderr = stderr.copy()
            self.best = jax.tree_util.tree_map(np.copy, host)
            self.backoffs = np.zeros(returns.shape, np.int64)
            return np.zeros(returns.shape, bool)
        assert self.start is not None and self.backoffs is not None
        assert self.best_stderr is not None and self.start_stderr is not None
        better = returns > self.best_return
        gain = self.best_return - self.start
        gained = gain > self.sigmas * np.hypot(self.best_stderr, self.start_stderr)
        noise = self.sigmas * np.hypot(stderr, self.best_stderr)
        margin = np.maximum(self.collapse * gain, noise)
        collapsed = gained & ~better & (returns < self.best_return - margin)
        self.best_return = np.where(better, returns, self.best_return)
        self.best_stderr = np.where(better, stderr, self.best_stderr)
        self.best = jax.tree_util.tree_map(
            lambda new, old: np.where(better.reshape((-1,) + (1,) * (new.ndim - 1)), new, old),
            host, self.best)
        self.backoffs = self.backoffs + collapsed
        return collapsed

    def revert(self, current: Any, mask: np.ndarray) -> Any:
        """`current` (a pytree of (trials, ...) arrays) with the masked trials' rows replaced by
        their best candidates'."""
        return jax.tree_util.tree_map(
            lambda now, best: np.where(mask.reshape((-1,) + (1,) * (best.ndim - 1)), best,
                                       np.asarray(now)), current, self.best)


# The public simulator's episodes are played with the run's seed with this folded in: keys no
# agent's episode uses, the same for every candidate of a run.
PUBLIC_EVAL_SALT = 0x9B11C


class PublicCandidates:
    """`--public-eval-every`, one piece for every system that has it: each trial's θ played on
    the task's public simulator (`evaluate(thetas, key)` → (trials, episodes) returns: the
    environment's default parameters, keys from the run's seed and PUBLIC_EVAL_SALT, the same
    episodes for every candidate), the best kept (BestCandidates) and the back-off. The system
    puts the θ and optimizer state it gets back into its own state."""

    def __init__(self, evaluate: Callable[[Array, Array], Array], seed: int, backoff: float):
        self.evaluate = evaluate
        self.key = jax.random.fold_in(jax.random.key(seed), PUBLIC_EVAL_SALT)
        self.best = BestCandidates(backoff)

    def offer(self, theta: Any, opt_state: Any) -> tuple[np.ndarray, Any, np.ndarray] | None:
        """Offer every trial's θ (rows; restored with its optimizer state `opt_state`, whose
        `scale` is the ScaledState's): None when no trial collapsed, else the reverted θ, the
        reverted optimizer state with the collapsed trials' step scales lowered, and the mask
        of collapsed trials."""
        reverted = self.offer_with(theta, opt_state)
        return None if reverted is None else (reverted[0], reverted[1], reverted[3])

    def offer_with(self, theta: Any, opt_state: Any, extra: Any = None
                   ) -> tuple[np.ndarray, Any, Any, np.ndarray] | None:
        """`offer`, with `extra` (rows, e.g. a DQN's target network; None: nothing) restored
        with each trial's best: None when no trial collapsed, else (θ, optimizer state,
        extra, the collapsed mask)."""
        episodes = np.asarray(self.evaluate(jnp.asarray(theta), self.key), np.float64)
        stderr = episodes.std(axis=1, ddof=1) / np.sqrt(episodes.shape[1])
        collapsed = self.best.offer(episodes.mean(axis=1), (theta, opt_state, extra), stderr)
        if not collapsed.any():
            return None
        theta, opt, extra = self.best.revert((theta, opt_state, extra), collapsed)
        return (theta, opt._replace(scale=lowered_scale(opt.scale, collapsed, self.best.backoff)),
                extra, collapsed)


def public_candidates_record(best: BestCandidates, task: str, actions: str, episodes: int,
                             every: int, n: int) -> dict[str, Any]:
    """The run record's statement of the best-candidate lever (summary.json and privacy.json
    of every system that has it): the public simulator it used (`task` with its default
    parameters; `actions`: how the candidates choose theirs there), how often and on how many
    episodes, and what it found for the first `n` trials."""
    assert best.best_return is not None and best.start is not None
    assert best.backoffs is not None
    return {
        "simulator": f"{task} with its default parameters (no agent's private draw), "
                     f"{actions}",
        "episodes_per_evaluation": episodes,
        "every_rounds": every,
        "start_return": [float(x) for x in best.start[:n]],
        "best_return": [float(x) for x in best.best_return[:n]],
        "last_return": [float(x) for x in best.history[-1][:n]],
        "backoffs": [int(x) for x in best.backoffs[:n]],
        "final_policy": "each trial's best candidate (policy.npz holds it)"}


def lowered_scale(scale: Any, collapsed: np.ndarray, backoff: float) -> np.ndarray:
    """The step scales (`ScaledState.scale`, one per trial, leading axis) after a back-off:
    the collapsed trials' multiplied by `backoff`, none below backoff**MAX_BACKOFFS."""
    scale = np.asarray(scale)
    lowered = np.where(collapsed, backoff, 1.0).reshape((-1,) + (1,) * (scale.ndim - 1))
    return np.maximum(scale * lowered, backoff ** MAX_BACKOFFS).astype(np.float32)
