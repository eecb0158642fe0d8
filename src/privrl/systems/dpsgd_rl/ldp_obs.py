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

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.privacy.mechanisms import (
    Mechanism,
    UnboundedGaussianNoise,
    UnboundedGaussianParams,
    unbounded_gaussian_release,
)
from privrl.privacy.noise import secret_fold


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
