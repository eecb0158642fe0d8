"""Local DP on observations (paper 003, slides 25-28): the agent perturbs each observed state
before the learner sees it.

Two modes:

* "sigma" (the slides): Gaussian noise with per-dimension scale σ·IQR, IQR = the inter-quartile
  range of CartPole's state components [0.55, 0.39, 0.05, 0.32]. States are unbounded, so this
  gives NO formal guarantee, whatever σ is.
* "box" (ours, formal): clip each state into a declared box, then add Gaussian noise with std =
  noise_multiplier × the box's diagonal (the L2 sensitivity between any two states in the box).
  Each released state is (ε₀, δ₀)-LDP; an episode's states together are (ε, δ)-LDP by
  composing its releases with the accountant. An episode of T steps releases T + 1 states
  (s₀ at reset, then one per step), so a `max_steps` episode composes max_steps + 1 releases.

What is protected: the learner only ever sees the noisy states. What is NOT protected: the
rewards and episode ends (in CartPole an episode ends when the TRUE state leaves its bounds, so
its length reveals something about the true states), and anything the environment reveals by
other channels. The learner's actions are computed from noisy states: post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.config import Config, fail, in_range, non_negative, one_of, option, positive
from privrl.privacy.accounting import DEFAULT_ACCOUNTANT, Accountant
from privrl.privacy.mechanisms import (
    BoxGaussianMechanism,
    Mechanism,
    UnboundedGaussianNoise,
    UnboundedGaussianParams,
    unbounded_gaussian_release,
)
from privrl.privacy.noise import noise_fields, secret_fold
from privrl.privacy.record import COMPOSED, Claim, Facts, Releases, privacy_record
from privrl.systems.dpsgd_rl.choices import OBS_MODES as MODES

CARTPOLE_IQR: tuple[float, ...] = (0.55, 0.39, 0.05, 0.32)  # the slides' IQR of each component
# The default box: CartPole's termination bounds for x and θ (±2.4, ±0.2095 rad); for the
# velocities, bounds that the states of a 500-step CartPole-v1 episode rarely leave.
CARTPOLE_BOX: tuple[tuple[float, ...], tuple[float, ...]] = (
    (-2.4, -3.0, -0.2095, -3.5),
    (2.4, 3.0, 0.2095, 3.5),
)


@dataclass(frozen=True)
class ObservationPrivacy(Config):
    """How each observed state is perturbed before the learner sees it."""

    mode: str = option(
        "none", choices=MODES, help="none: the learner sees raw states. sigma: the slides' "
        "N(0, (σ·IQR)²) noise, σ = --iqr-scale (NO formal guarantee). box: clip to a box, "
        "Gaussian noise of std --noise-multiplier × its diagonal ((ε, δ)-LDP per state).")
    sigma: float = option(
        0.0, flag="--iqr-scale", help="sigma mode: the noise std σ in IQR units (>= 0; the "
        "slides' σ, no clip, so not a noise multiplier).")
    iqr: tuple[float, ...] = option(
        CARTPOLE_IQR, help="sigma mode: each observation component's IQR (the slides' "
        "CartPole values).")
    box_low: tuple[float, ...] = option(
        CARTPOLE_BOX[0], help="box mode: lower bounds, one per observation component "
        "(CartPole's by default).")
    box_high: tuple[float, ...] = option(
        CARTPOLE_BOX[1], help="box mode: upper bounds, one per observation component "
        "(CartPole's by default).")
    noise_multiplier: float = option(
        1.0, help="box mode: noise multiplier σ, the noise std / the box diagonal (the L2 "
        "bound of a clipped state; > 0).")
    delta: float = option(1e-5, help="box mode: δ₀ of one released state, in (0, 1).")
    secure: bool = option(
        False, flag="--secure-noise", help="box mode: float-safe discrete Gaussian observation "
        "noise from the OS CSPRNG (docs/secure-noise.md); its ε is RDP's (the RDP accountant "
        "composes each episode's states). Slow: one host call per observation.")

    def validate(self) -> None:
        one_of("mode", self.mode, MODES)
        non_negative("sigma", self.sigma)
        if self.secure and self.mode != "box":
            fail("secure", "float-safe observation noise is for box mode (the mode with a "
                           f"guarantee to protect), got mode {self.mode}")
        if self.mode == "box":
            positive("noise_multiplier", self.noise_multiplier)
            in_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
            try:
                self.mechanism()
            except ValueError as e:
                fail("box_low", str(e))

    def mechanism(self) -> Mechanism | None:
        """The observation mechanism, or None when the learner sees raw states."""
        if self.mode == "box":
            return BoxGaussianMechanism(self.box_low, self.box_high, self.noise_multiplier,
                                        self.delta, secure=self.secure)
        if self.mode == "sigma" and self.sigma > 0:
            return UnboundedGaussianNoise(tuple(self.sigma * q for q in self.iqr))
        return None

    @staticmethod
    def releases_per_episode(max_steps: int) -> int:
        """States one episode hands the learner at most: s₀ at reset and one per step."""
        return max_steps + 1

    def record(self, max_steps: int, accountant: str = DEFAULT_ACCOUNTANT,
               noise: str = "seeded") -> dict[str, Any]:
        """privacy.json's part for observations: per-state and per-episode guarantees, the
        statement composed from them (privrl.privacy.record); `noise`: the key mode."""
        mech = self.mechanism()
        if mech is None:
            return privacy_record(
                Facts(None, "the learner sees the raw states", asked=self.mode != "none"),
                fields={"mode": self.mode}, order=["mode", *COMPOSED])
        if self.mode == "sigma":
            return privacy_record(
                Facts(None, "Gaussian noise σ·IQR on unbounded states (the slides' method); no "
                      "ε can be stated for it", noise=noise), formal_key="formal_guarantee",
                fields={"mode": "sigma", "params": mech.params(), **noise_fields(noise)},
                order=["mode", "params", "formal_guarantee", *COMPOSED, "noise_keys"])
        assert isinstance(mech, BoxGaussianMechanism)
        if self.secure and accountant != "rdp":
            raise ValueError("secure (discrete Gaussian) observation noise is composed with the "
                             "RDP accountant only")
        releases = self.releases_per_episode(max_steps)
        acc = Accountant(accountant, neighbouring=mech.guarantee.neighbouring)
        acc.compose(mech.event, releases)
        episode = acc.record(self.delta)
        unit = f"the states of one episode (up to {releases}: s₀ and one per step of at most " \
               f"{max_steps})"
        facts = Facts(
            Claim(episode["epsilon"], self.delta, "LDP",
                  "local: the learner sees only noised states", unit,
                  f"the {accountant} accountant over {releases} states", episode["accountant"]),
            releases=Releases("each episode", "its states clipped to the box", (
                "float-safe discrete " if self.secure else "") + f"Gaussian noise of std "
                f"{mech.std:.4g}", releases, mech.guarantee.epsilon, self.delta),
            not_protected="rewards and episode ends", noise=noise)
        return privacy_record(facts, formal_key="formal_guarantee", fields={
            "mode": "box",
            "params": mech.params(),
            "per_step": {"epsilon": mech.guarantee.epsilon, "delta": self.delta,
                         "how": ("discrete Gaussian on a grid, float-safe: RDP's ε (its zCDP "
                                 "bound, CKS20), not the analytic Gaussian's" if self.secure else
                                 "analytic Gaussian mechanism (dp_accounting.get_epsilon_gaussian)"
                                 )},
            "per_episode": {**episode, "unit": unit},
            **noise_fields(noise)},
            order=["mode", "params", "formal_guarantee", "per_step", "per_episode",
                   *COMPOSED, "noise_keys"])


def private_observation(mechanism: Mechanism, noise_root: Array | None, key: Array,
                        obs: Array) -> Array:
    """What the learner sees of one observation: `mechanism`'s release of it, keyed by the
    release's seeded `key` (with a secret `noise_root`: `secret_fold(noise_root, key)`)."""
    return mechanism.privatize(secret_fold(noise_root, key), obs).value


def private_observations(mechanism: Mechanism, noise_root: Array | None, key: Array,
                         obs: Array) -> Array:
    """`private_observation` of each row of `obs` (n, obs_dim), row i keyed by
    `split(key, n)[i]`: a host rollout's batch of observations after one step (jit it)."""
    keys = jax.random.split(key, obs.shape[0])
    return jax.vmap(lambda k, o: private_observation(mechanism, noise_root, k, o))(keys, obs)


class ObservationSetting(NamedTuple):
    """One trial's σ·IQR observation noise as data, when settings run as one program: whether
    it is on, and its `UnboundedGaussianNoise` parameters (a scale of 0 when off)."""

    on: Any  # bool: the trial's observations pass through the noise (False: seen raw)
    noise: UnboundedGaussianParams


def observation_setting(mechanism: UnboundedGaussianNoise | None, dim: int
                        ) -> ObservationSetting:
    """`mechanism` (None: no noise) as one trial's data, for observations of length `dim`."""
    if mechanism is None:
        return ObservationSetting(np.bool_(False),
                                  UnboundedGaussianParams(np.zeros(dim, np.float32)))
    return ObservationSetting(np.bool_(True), mechanism.release_params(dim))


class PrivateObservations:
    """A gymnax-style environment whose observations pass through an LDP mechanism first.

    The raw state stays inside the environment state (termination is decided on it); the
    learner sees only `mechanism.privatize(key, obs).value`. With a trial's `setting` (settings
    run as one program) the release is σ·IQR noise with the setting's parameters, and the
    setting decides whether the wrapper is on: an off trial steps the environment with the
    keys the unwrapped environment gets and sees its raw observations (plus 0 × noise), so
    every trial gets its own run's floats.
    """

    def __init__(self, env: Any, mechanism: Mechanism | None, noise_root: Array | None = None,
                 setting: ObservationSetting | None = None) -> None:
        if (mechanism is None) == (setting is None):
            raise ValueError("PrivateObservations takes a mechanism or a trial's setting")
        self.env = env
        self.mechanism = mechanism
        self.noise_root = noise_root
        self.setting = setting

    def keyed(self, noise_root: Array | None) -> PrivateObservations:
        """This wrapper with secret observation-noise keys: each release's key is
        `secret_fold(noise_root, seeded key)`. Call it inside the jitted program with the root
        taken from the learner's state, so the root is an argument, never a constant."""
        return PrivateObservations(self.env, self.mechanism, noise_root, self.setting)

    def _keys(self, key: Array) -> tuple[Array, Array]:
        k_env, k_noise = jax.random.split(key)
        if self.setting is None:
            return k_env, k_noise
        return jax.random.wrap_key_data(jnp.where(
            self.setting.on, jax.random.key_data(k_env), jax.random.key_data(key))), k_noise

    def _release(self, key: Array, obs: Array) -> Array:
        if self.setting is None:
            assert self.mechanism is not None
            return private_observation(self.mechanism, self.noise_root, key, obs)
        return unbounded_gaussian_release(self.setting.noise, secret_fold(self.noise_root, key),
                                          obs)

    def reset_env(self, key: Array, params: Any) -> tuple[Array, Any]:
        k_env, k_noise = self._keys(key)
        obs, state = self.env.reset_env(k_env, params)
        return self._release(k_noise, obs), state

    def step_env(self, key: Array, state: Any, action: Array, params: Any) -> tuple:
        k_env, k_noise = self._keys(key)
        obs, state, reward, done, info = self.env.step_env(k_env, state, action, params)
        return self._release(k_noise, obs), state, reward, done, info

    def is_terminated(self, state: Any, params: Any) -> Array:
        return self.env.is_terminated(state, params)
