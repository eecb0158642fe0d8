"""DP-SGD RL's option value sets, each written once: the configs validate against them and the
command line derives its choices from them (this module imports nothing: the CLI reads it
before JAX starts)."""

from __future__ import annotations

DQN_OPTIMIZERS = ("adamw", "sgd")  # DQNConfig.optimizer
OBS_MODES = ("none", "sigma", "box")  # ObservationPrivacy.mode: no noise, the slides', a box
