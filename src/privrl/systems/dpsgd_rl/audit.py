"""End-to-end one-run audit of DP-SGD REINFORCE (Steinke, Nasr & Jagielski 2023).

One real DP-REINFORCE training run carries m canary episodes. Canary i is a gradient canary
(the white-box setting of Nasr et al. 2021 and of SNJ23 §6): an episode whose per-episode
gradient is C·uᵢ, with uᵢ a public random unit direction, so it sits exactly at the clip. It is
included with probability 1/2, independently, in update t(i) = i mod U (U = the run's updates;
a left-out canary contributes a zero row, as an absent episode would). Every update's batch is
the agent's own `batch_episodes` episodes plus its canaries, released through the run's own
`GaussianSumMechanism`, so the canaries go through the same clip and noise as real episodes.

The attacker sees every released noisy gradient (the strongest observer DP-SGD's guarantee
covers; the trained θ is post-processing of these) and knows the directions; its score for
canary i is ⟨ĝ_{t(i)}, uᵢ⟩. It guesses "in" for the k₊ highest scores and "out" for the k₋
lowest, and `privrl.audit.one_run` turns the count of correct guesses into a lower bound on ε.
The claim audited is the run's stated per-episode ε: one Gaussian release with noise multiplier
σ (every episode enters one update), by the run's accountant at its δ.

The run does every update (`stop_when_solved` off, no ε cap): a canary whose update never
happens would be in no release at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.audit.config import AuditConfig, Progress
from privrl.audit.one_run import OneRunResult, one_run_audit
from privrl.choices import ACCOUNTANTS
from privrl.config import ACCOUNTANT_HELP, ConfigError, option, positive
from privrl.systems.dpsgd_rl.episodic import EpisodicSetting
from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

__all__ = ["CanaryRun", "audit_config", "audit_dp_reinforce", "canary_run", "check_audit"]


class CanaryRun(NamedTuple):
    """One audited run's canaries: their scores, which were in, and the claimed ε."""

    scores: np.ndarray
    included: np.ndarray
    epsilon_claimed: float


def audit_config(config: ReinforceConfig) -> ReinforceConfig:
    """The run the audit trains: the user's, one seed, every update made."""
    cfg = replace(config, seeds=1, stop_when_solved=False, max_epsilon=None).resolved()
    if not cfg.private:
        raise ConfigError("noise_multiplier", "the run states no ε (σ = 0 or not DP-SGD); "
                                              "nothing to audit")
    if cfg.adaptive_clip:
        raise ConfigError("adaptive_clip", "the audit's canaries sit at a fixed clip; audit "
                                           "the run without --adaptive-clip (its ε is the "
                                           "same Gaussian's, privacy.json shows the split)")
    if cfg.secure_noise:
        raise ConfigError("secure_noise", "the audit draws its canary run with seeded float "
                                          "noise; audit the secure sampler with "
                                          "`privrl audit mechanism` instead")
    return cfg


def canary_run(algo: Reinforce, canaries: int, key: Array) -> CanaryRun:
    """Train `algo` (a private DP-REINFORCE) once with `canaries` gradient canaries."""
    cfg = algo.config
    updates = cfg.episodes
    per_update = math.ceil(canaries / updates)
    k_dir, k_in, k_run = jax.random.split(key, 3)
    dim = algo.model.dim  # (not a θ drawn eagerly for its size: a program per op)
    directions = jax.random.normal(k_dir, (updates * per_update, dim), jnp.float32)
    directions = directions / jnp.linalg.norm(directions, axis=1, keepdims=True)
    real = jnp.arange(updates * per_update) < canaries  # padding slots hold no canary
    included = jax.random.bernoulli(k_in, 0.5, (updates * per_update,)) & real
    # slot j = u * per_update + c: canary j in update u (i mod U order, made contiguous)
    rows = (cfg.clip * directions * included[:, None]).reshape(updates, per_update, dim)
    dirs = directions.reshape(updates, per_update, dim)
    # The noise's std σ·C is data, the trial's setting, not a constant of the program: one
    # compiled program for every σ (the audit's ε values, the test's quiet run), which the
    # persistent cache finds. The clip flag stays a constant: traced, XLA fused the sum
    # otherwise and the scores changed in their last bits.
    sums = algo.mechanism.release_params(dim)

    @jax.jit
    def train(k: Array, rows: Array, dirs: Array, std: Array) -> Array:
        def body(s: Any, xs: tuple[Array, Array]) -> tuple[Any, Array]:
            r, d = xs
            s, _, grad = algo.step(s, r)
            return s, d @ grad  # this update's canaries' scores

        setting = EpisodicSetting(sums._replace(std=std), None)
        start = algo.init(k)._replace(setting=setting)
        _, scores = jax.lax.scan(body, start, (rows, dirs))
        return scores.reshape(-1)

    scores = np.asarray(train(k_run, rows, dirs, sums.std))
    keep = np.asarray(real)
    return CanaryRun(scores[keep], np.asarray(included)[keep],
                     cfg.accountant_for(1).epsilon(cfg.delta))


def check_audit(canaries: int, guesses: int | None, confidence: float) -> int:
    """Validate the audit's own settings; returns k (guesses per side)."""
    if canaries < 2:
        raise ConfigError("canaries", f"need at least 2 canaries, got {canaries}")
    k = max(1, canaries // 10) if guesses is None else guesses
    if not 0 < 2 * k <= canaries:
        raise ConfigError("guesses", f"need 0 < 2·guesses <= canaries = {canaries}, got {k}")
    if not 0 < confidence < 1:
        raise ConfigError("confidence", f"must be in (0, 1), got {confidence}")
    return k


def audit_dp_reinforce(config: ReinforceConfig, epsilons: Sequence[float], *, seed: int = 0,
                       canaries: int = 1000, guesses: int | None = None,
                       confidence: float = 0.95,
                       progress: Callable[[int, int], None] | None = None
                       ) -> list[OneRunResult]:
    """One canary run per target ε (σ calibrated to it); k₊ = k₋ = `guesses` (default m/10).
    Every setting is checked before the first run."""
    k = check_audit(canaries, guesses, confidence)
    configs = []
    for e in epsilons:
        positive("epsilons", e)
        configs.append(audit_config(replace(config, dp=True, target_epsilon=float(e))))
    keys = jax.random.split(jax.random.key(seed), len(configs))
    results = []
    for i, (cfg, key) in enumerate(zip(configs, keys, strict=True)):
        run = canary_run(Reinforce(cfg), canaries, key)
        results.append(one_run_audit(
            run.scores, run.included, guesses_in=k, guesses_out=k,
            epsilon_claimed=run.epsilon_claimed, delta=cfg.delta, confidence=confidence,
            name=f"dp-reinforce (σ = {cfg.noise_multiplier:.3g})",
            test=f"{canaries} gradient canaries at the clip over {cfg.episodes} updates; "
                 f"score ⟨released gradient, canary direction⟩; k+ = k- = {k}"))
        if progress is not None:
            progress(i + 1, len(configs))
    return results


@dataclass(frozen=True)
class DPReinforceAudit(AuditConfig):
    """`privrl audit dp-reinforce`: `audit_dp_reinforce` at each per-episode ε."""

    epsilons: tuple[float, ...] = option((1.0, 2.0, 5.0, 10.0), flag="--epsilon", help=(
        "Per-episode ε values to audit (comma-separated); σ is calibrated to each."))
    canaries: int = option(1000, help="Gradient canaries m, each in the run with probability "
                                      "1/2.")
    guesses: int | None = option(None, help="k: the attacker guesses 'in' for the k highest "
                                 "scores and 'out' for the k lowest. Default: canaries / 10.")
    episodes: int = option(100, help="Training episodes (= updates) of each audited run.")
    clip: float = option(1.0, help="C: L2 bound of each episode's gradient.")
    batch_episodes: int = option(1, help="Episodes per update.")
    delta: float = option(1e-5, help="δ of the stated (ε, δ), in (0, 1).")
    accountant: str = option("pld", choices=ACCOUNTANTS, help=ACCOUNTANT_HELP)

    def resolved(self) -> DPReinforceAudit:
        """Validated, with k (`guesses`) filled in; every run's config checked (σ
        calibrated) before any training."""
        k = check_audit(self.canaries, self.guesses, self.confidence)
        for e in self.epsilons:
            audit_config(replace(self.config(), target_epsilon=e))
        return replace(self, guesses=k)

    def config(self) -> ReinforceConfig:
        """The audited run's config (its target ε replaced by each audited one)."""
        return ReinforceConfig.from_preset(
            "paper", dp=True, clip=self.clip, delta=self.delta, accountant=self.accountant,
            batch_episodes=self.batch_episodes, episodes=self.episodes, seed=self.seed)

    def run(self, progress: Progress = None) -> list[OneRunResult]:
        return audit_dp_reinforce(self.config(), self.epsilons, seed=self.seed,
                                  canaries=self.canaries, guesses=self.guesses,
                                  confidence=self.confidence, progress=progress)
