"""The noise on FedRL's released Q outputs (paper 002): `QNoiseConfig`, its options and
checks, apart from the mechanisms (privrl.privacy.qoutput, `q_mechanism`) so that a config's
validation reads it before JAX starts (issue 53)."""

from __future__ import annotations

from dataclasses import dataclass

from privrl.choices import ACCOUNTANTS, DEFAULT_ACCOUNTANT, NOISE_MODES
from privrl.config import (
    ACCOUNTANT_HELP,
    NOISE_HELP,
    Config,
    fail,
    in_range,
    non_negative,
    one_of,
    option,
    positive,
)


@dataclass(frozen=True)
class QNoiseConfig(Config):
    """The noise on released Q outputs, shared by FedRL on every domain."""

    noise_sigma: float = option(
        1.0, flag="--noise-std", help="Std σ of the Gaussian noise on released Q outputs "
        "(paper: 1; with --bounded the noise multiplier is σ/B).")
    bounded: float | None = option(
        None, help="B: clip each released Q vector to L2 norm B, making each release a "
        "Gaussian mechanism with an (ε, δ) (composed per party). Default: the paper's "
        "unbounded noise, which has NO formal ε.")
    delta: float = option(1e-5, help="δ of the stated (ε, δ) in bounded mode.")
    accountant: str = option(DEFAULT_ACCOUNTANT, choices=ACCOUNTANTS, help=ACCOUNTANT_HELP)
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)
    secure_noise: bool = option(
        False, help="With --bounded: float-safe discrete Gaussian Q-output noise from the OS "
        "CSPRNG (docs/secure-noise.md); ε by RDP (the RDP accountant composes each party's "
        "releases). Slow: one host call per released vector.")

    def validate_noise(self) -> None:
        non_negative("noise_sigma", self.noise_sigma)
        if self.bounded is not None:
            positive("bounded", self.bounded)
            if self.noise_sigma == 0:
                fail("noise_sigma", "bounded mode needs noise σ > 0")
        in_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        one_of("accountant", self.accountant, ACCOUNTANTS)
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, "noise mode")
        if self.secure_noise:  # first: the CLI picks rdp for secure noise, so name the cause
            if self.bounded is None:
                fail("secure_noise", "float-safe noise needs bounded mode (the paper's unbounded "
                                     "noise has no guarantee to protect): give bounded")
            if self.accountant != "rdp":
                fail("accountant", "secure (discrete Gaussian) noise is composed with the RDP "
                                   "accountant only (choose rdp)")
        if self.bounded is None and self.accountant != DEFAULT_ACCOUNTANT:
            fail("accountant", "only meaningful with bounded (B): the paper's unbounded noise "
                               "has no ε to account")
