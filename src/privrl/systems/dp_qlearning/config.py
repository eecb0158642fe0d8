"""DP Q-learning's configuration (paper 001): `DPQLearningConfig`, its preset and its
validation, Theorem 5's included. It imports no JAX, so the command line refuses a bad value
before JAX starts (issue 53).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from privrl.choices import NOISE_MODES
from privrl.config import (
    NOISE_HELP,
    Config,
    check_preset,
    fail,
    in_range,
    integer,
    non_negative,
    one_of,
    option,
    positive,
    probability,
)
from privrl.privacy.theorem5 import Theorem5

# "paper": the authors' settings (the dataclass defaults: their dpql.py). No tuned preset yet.
PRESETS: dict[str, dict[str, Any]] = {"paper": {}}


@dataclass(frozen=True)
class DPQLearningConfig(Config):
    """Every hyperparameter of a run. Defaults follow the authors' code (paper 001).

    Privacy: `sigma` alone adds the noise but claims no ε. With `epsilon`, `delta`,
    `sensitivity_constant` (C(α, k, L, B), required: the poster does not define it) and `k`,
    Theorem 5 is applied: σ defaults to its calibration, and a given σ must satisfy it.
    """

    preset: str = option("paper", help="paper: the authors' code's settings.")
    sigma: float | None = option(
        None, flag="--gp-scale", help="Scale σ ≥ 0 of the Gaussian-process noise on Q (the "
        "privacy knob; not a noise multiplier: the process has no clip). Alone, no ε is "
        "claimed. With --epsilon: default Theorem 5's calibration; a given scale must satisfy "
        "it.")
    epsilon: float | None = option(
        None, help="The reward function's total ε over the run (the protected unit: the whole "
        "reward function, every update included), in (0, 1) where Theorem 5 holds (needs "
        "--delta, --sensitivity-constant, --k).")
    delta: float | None = option(None, help="Target δ in (0, 1) for Theorem 5.")
    sensitivity_constant: float | None = option(
        None, help="Theorem 5's C(α, k, L, B) > 0. Required with --epsilon, no default: the "
        "poster does not define it, and the guarantee is only as valid as the C you supply.")
    k: float | None = option(
        None, help="Theorem 5's k > 0 (the C you supply must be for this k); needs 2k > "
        "8.68·√β·σ.")
    beta: float = option(
        1.0, help="Theorem 5's β > 0 (our reading: the kernel's inverse length scale, 1 for "
        "exp(−|x−y|)).")
    seeds: int = option(1, flag="--trials", help="Independent trials, vmapped.")
    seed: int = option(0, help="Random seed (same seed, same results).")
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)
    secure_noise: bool = option(
        False, help="Not available here: the functional noise is a Gaussian process, which "
        "the float-safe samplers do not cover (refused; docs/secure-noise.md).")
    episodes: int = option(100, help="Episodes per run (authors: 100).")
    episode_steps: int = option(50, help="Steps per episode (authors: 50).")
    hidden: int = option(16, help="Hidden units of the Q-network.")
    batch_size: int = option(128, help="Transitions per update.")
    gamma: float = option(0.999, help="Discount factor γ.")
    replay_capacity: int = option(10_000, help="Replay memory capacity.", unit="transitions")
    learning_rate: float = option(0.01, help="RMSprop's step size (torch.optim.RMSprop's "
                                  "defaults: lr, alpha, eps).")
    rms_decay: float = option(0.99, help="RMSprop's decay α.")
    rms_eps: float = option(1e-8, help="RMSprop's eps.")
    grad_clamp: float = option(1.0, help="Each gradient entry is clamped to [−c, c].")
    eps_start: float = option(
        0.9, help="ε-greedy: eps_end + (eps_start − eps_end)·exp(−steps / eps_decay).")
    eps_end: float = option(0.05, help="See --eps-start.")
    eps_decay: float = option(200.0, help="See --eps-start.", unit="steps")
    target_update_episodes: int = option(
        10, help="θ⁻ ← θ after episodes 0, N, 2N, ...")
    noise_reset_episodes: int = option(
        1, help="Fresh noise functions every N episodes (authors: 1; J = episodes / N).")

    presets = PRESETS

    # --- derived quantities --------------------------------------------------------------
    @property
    def total_steps(self) -> int:
        return self.episodes * self.episode_steps

    @property
    def updates(self) -> int:
        """Gradient steps: one per environment step once the replay holds a batch."""
        return max(0, self.total_steps - self.batch_size + 1)

    @property
    def resets(self) -> int:
        """J: noise functions drawn per network (one per block of noise_reset_episodes)."""
        return math.ceil(self.episodes / self.noise_reset_episodes)

    @property
    def claims_epsilon(self) -> bool:
        return self.epsilon is not None

    def theorem5(self) -> Theorem5:
        return Theorem5(epsilon=self.epsilon, delta=self.delta,
                        sensitivity_constant=self.sensitivity_constant, k=self.k,
                        beta=self.beta, updates=self.updates, batch_size=self.batch_size,
                        resets=self.resets)

    def resolved(self) -> DPQLearningConfig:
        """Validate everything; with ε, fill σ from Theorem 5 (or check the given σ)."""
        self.validate()
        privacy = {"delta": self.delta, "sensitivity_constant": self.sensitivity_constant,
                   "k": self.k}
        if self.epsilon is None:
            for name, value in [*privacy.items(),
                                ("beta", None if self.beta == 1.0 else self.beta)]:
                if value is not None:
                    fail(name, "only meaningful with epsilon (Theorem 5)")
            if self.sigma is None:
                fail("sigma", "give sigma, or epsilon with delta, sensitivity_constant and k")
            non_negative("sigma", self.sigma)
            return self
        for name, value in privacy.items():
            if value is None:
                why = (" (no default: the poster does not define C(α, k, L, B); the guarantee "
                       "is only as valid as the C you supply)"
                       if name == "sensitivity_constant" else "")
                fail(name, f"required with epsilon{why}")
        if self.updates < 1:
            fail("episodes", "no gradient update would run (the replay never holds a batch), "
                             "so there is nothing to calibrate")
        t5 = self.theorem5()  # a Theorem5Error is a ConfigError naming the parameter
        sigma = t5.min_sigma if self.sigma is None else float(non_negative("sigma", self.sigma))
        t5.check(sigma)
        return replace(self, sigma=sigma)

    def validate(self) -> None:
        """The preset and the training settings (resolved() adds the privacy ones)."""
        check_preset(self.preset, PRESETS)
        integer("seeds", self.seeds)
        integer("seed", self.seed, 0)
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, "noise mode")
        if self.secure_noise:
            fail("secure_noise", "float-safe noise does not apply to dp-qlearning: its noise is "
                                 "a Gaussian process (correlated across the states queried), "
                                 "not the isotropic Gaussian that the discrete Gaussian "
                                 "sampler replaces (docs/secure-noise.md)")
        integer("episodes", self.episodes)
        integer("episode_steps", self.episode_steps)
        integer("hidden", self.hidden)
        integer("batch_size", self.batch_size)
        integer("replay_capacity", self.replay_capacity, self.batch_size)
        if self.total_steps < self.batch_size:  # no update would run (and no batch be drawn)
            fail("episodes", f"{self.episodes} episodes of {self.episode_steps} steps are "
                             f"{self.total_steps} transitions, fewer than one batch "
                             f"({self.batch_size}): the Q-network would never be updated")
        integer("target_update_episodes", self.target_update_episodes)
        integer("noise_reset_episodes", self.noise_reset_episodes)
        for name in ("learning_rate", "rms_eps", "grad_clamp", "eps_decay"):
            positive(name, getattr(self, name))
        in_range("gamma", self.gamma, 0, 1, low_open=True)
        in_range("rms_decay", self.rms_decay, 0, 1, high_open=True)
        probability("eps_start", self.eps_start)
        probability("eps_end", self.eps_end)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "updates_T_over_B": self.updates, "resets_J": self.resets}
