"""Text2Action's configuration (paper 002): `TextConfig`, its presets and validation. It imports
no JAX (the corpora's names and the Q-noise and replay options are light), so the command line
refuses a bad value before JAX starts (issue 53).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from privrl.choices import TEXT2ACTION_CORPORA, TEXT_HEAD_ACTIVATIONS
from privrl.config import check_preset, fail, in_range, one_of, option, positive
from privrl.privacy.qnoise import QNoiseConfig
from privrl.replay_options import ReplayOptions

if TYPE_CHECKING:
    from privrl.envs.text2action import RewardSpec


TARGETS = ("copy", "frozen")
MODES = ("fedrl", "dqn-alpha", "dqn-full", "fcn-alpha", "fcn-full")
# paper: the paper's and the authors' settings. cpu: what fits a 2-core CPU in minutes per fold
# (texts stepped 16 at a time with one update per vector step; fewer, shorter epochs).
# wide-head (an improvement, not the paper): the shared MLP gets 64 hidden units instead of 4;
# with the paper's copied targets the 4-unit head is the bottleneck that collapses FedRL.
_CPU = {"num_envs": 16, "epochs": 4, "steps_per_epoch": 250, "patience": 3,
        "buffer_size": 20_000, "target_period": 20, "explore_steps": 300}
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "cpu": _CPU,
    "wide-head": {"head_hidden": 64},
    "cpu-wide-head": {**_CPU, "head_hidden": 64},
}


@dataclass(frozen=True)
class TextConfig(QNoiseConfig, ReplayOptions):
    """Options of every Text2Action learner; defaults are the paper preset."""

    preset: str = option(
        "paper", choices=tuple(PRESETS), help="paper (the paper's and authors' settings), cpu "
        "(fewer, batched updates), wide-head / cpu-wide-head (improvement: a 64-unit shared "
        "MLP).")
    mode: str = option("fedrl", choices=MODES, help="FedRL or a baseline (DQN or FCN on α's "
                       "observation, -alpha, or on both, -full).")
    corpus: str = option("win2k", choices=tuple(TEXT2ACTION_CORPORA),
                         help="win2k (WHS), cooking (CT) or wikihow (WHG).")
    max_words: int = option(500, help="Texts are cut here (the authors' num_words); the "
                            "padding width.")
    word_dim: int = option(50, help="word2vec dimension (paper: m = 50).")
    pos_dim: int = option(50, help="Part-of-speech embedding dimension.")
    tag_dim: int = option(50, help="Tag embedding dimension.")
    filters: int = option(32, help="Convolution filters per width.")
    hidden: int = option(128, help="Hidden units of each party's network.")
    w2v_epochs: int = option(20, help="word2vec training epochs.")
    buffer_size: int = option(50_000, help="Replay memory capacity.", unit="transitions")
    target_period: int = option(5, help="Updates between target copies (the authors' "
                                "target_steps).")
    epochs: int = option(20, help="Training epochs at most (early stop on validation).")
    steps_per_epoch: int | None = option(
        None, help="Vector steps per epoch. Default: one pass over the training words.")
    patience: int = option(5, help="Epochs without validation F1 improvement before stopping "
                           "(the authors' stop_epoch_gap).")
    valid_fraction: float = option(
        0.1, help="Of each fold's training texts, held out for model selection.")
    reward_base: float = option(50.0, help="The reward's base (the authors').")
    action_rate: float = option(0.05, help="The share of words that are actions (the "
                                "authors').")
    terminal_bonus: float = option(2.0, help="The reward's end-of-text bonus (the authors').")
    reward_scale: float = option(
        1.0, help="Learners see reward / reward_scale (metrics: the raw reward).")
    targets: str = option(
        "copy", choices=TARGETS, help="Target networks: copy (every target period: the "
        "paper) or frozen (never updated: what the authors' code does for FedRL; a control "
        "for the DQN baselines).")
    head_hidden: int = option(4, help="The shared MLP's hidden units (paper: 4).")
    head_activation: str = option("relu", choices=TEXT_HEAD_ACTIVATIONS,
                                  help="The shared MLP's activation (paper: relu).")
    runs: int = option(1, flag="--trials", help="Trials per fold, vectorized (paper: 5 runs).")

    presets = PRESETS

    def validate(self) -> None:
        check_preset(self.preset, PRESETS)
        one_of("mode", self.mode, MODES)
        one_of("corpus", self.corpus, TEXT2ACTION_CORPORA)
        ints = ["max_words", "runs", "head_hidden", "w2v_epochs", "word_dim"]
        if self.steps_per_epoch is not None:
            ints.append("steps_per_epoch")
        self.validate_replay(*ints)
        if self.max_words < 5:
            fail("max_words", "the widest convolution needs 5 words")
        one_of("targets", self.targets, TARGETS, what="target rule")
        one_of("head_activation", self.head_activation, TEXT_HEAD_ACTIVATIONS, what="activation")
        positive("reward_scale", self.reward_scale)
        in_range("valid_fraction", self.valid_fraction, 0, 1, low_open=True, high_open=True)
        self.validate_noise()
        if self.noise == "secret" and self.mode != "fedrl":
            fail("noise", f"{self.mode} releases nothing through a mechanism: secret noise "
                          "keys are for mode fedrl")
        if self.secure_noise and self.mode != "fedrl":
            fail("secure_noise", f"{self.mode} releases nothing through a mechanism: "
                                 "float-safe noise is for mode fedrl")

    def reward_spec(self) -> RewardSpec:
        from privrl.envs.text2action import RewardSpec

        return RewardSpec(base=self.reward_base, action_rate=self.action_rate,
                              num_words=self.max_words, terminal_bonus=self.terminal_bonus)
