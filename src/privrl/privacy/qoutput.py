"""Mechanisms for released Q-network outputs (paper 002, FedRL eq. 1-2).

In FedRL each party sends the other its Q-network's outputs with Gaussian noise. Two ways:

* `UnboundedQNoise` (the paper): Q̂ = Q + N(0, σ²). Q outputs are unbounded, so no noise level
  bounds what one release reveals: NO formal ε exists, and the guarantee says ε = ∞.
* `BoundedQGaussian` (our bounded mode): clip the Q vector to L2 norm B, then add N(0, σ²) per
  coordinate. Any two clipped vectors differ by at most 2B, so one release is a Gaussian
  mechanism with noise multiplier σ / (2B); its (ε, δ) is exact, and many releases compose
  with privrl.privacy.accounting via `event`.

The unit protected is everything that determines one released vector: the releasing party's
observation and its local network parameters (local DP: any two inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from jax import Array

from privrl.privacy.accounting import Accountant
from privrl.privacy.mechanisms import (
    GaussianMechanism,
    Mechanism,
    UnboundedGaussianParams,
    _check_positive,
    _gaussian_ldp_guarantee,
    no_guarantee,
    noise_scales,
    unbounded_gaussian_release,
)
from privrl.privacy.noise import noise_fields, record_mode
from privrl.privacy.qnoise import QNoiseConfig as QNoiseConfig
from privrl.privacy.record import COMPOSED, Claim, Composition, Facts, Releases, privacy_record
from privrl.privacy.report import Guarantee

Q_UNIT = "one released Q-output vector (one party's Q-network output for one state)"
Q_NEIGHBOURS = ("any two Q-output vectors in the declared L2 ball (local DP): any change of the "
                "releasing party's observation or local Q-network parameters")


@dataclass(frozen=True)
class BoundedQGaussian(GaussianMechanism):
    """Clip the Q vector to L2 norm `clip` (= B), add N(0, σ²) per coordinate, σ = z·B.

    `secure=True`: GaussianMechanism's float-safe path (the discrete Gaussian on a grid, the
    vector clipped to B again in integers), whose ε is RDP's (compose it with the RDP
    accountant), not the analytic Gaussian's."""

    name = "bounded-q-gaussian"

    @classmethod
    def from_sigma(cls, sigma: float, bound: float, delta: float = 1e-5,
                   secure: bool = False) -> BoundedQGaussian:
        bound = _check_positive("bound", bound)
        return cls(_check_positive("sigma", sigma) / bound, bound, delta, secure)

    @property
    def guarantee(self) -> Guarantee:
        return _gaussian_ldp_guarantee(self.event.noise_multiplier, self.delta, 2.0 * self.clip,
                                       Q_UNIT, Q_NEIGHBOURS, secure=self.secure)


@dataclass(frozen=True)
class UnboundedQNoise(Mechanism):
    """Q̂ = Q + N(0, σ²): the paper's mechanism. Unbounded input: NO formal guarantee."""

    sigma: float
    name = "unbounded-q-noise"

    def __post_init__(self) -> None:
        (sigma,) = noise_scales("sigma", self.sigma)
        object.__setattr__(self, "sigma", sigma)

    @property
    def guarantee(self) -> Guarantee:
        return no_guarantee(Q_UNIT, "Q outputs are unbounded, so Gaussian noise of any σ gives "
                                    "no formal ε (no sensitivity bound)")

    def params(self) -> dict[str, Any]:
        return {"sigma": self.sigma}

    def release_params(self, dim: int) -> UnboundedGaussianParams:
        return UnboundedGaussianParams(np.float32(self.sigma))

    def release(self, params: UnboundedGaussianParams, key: Array, x: Array) -> Array:
        return unbounded_gaussian_release(params, key, x)


def q_mechanism(cfg: QNoiseConfig) -> Mechanism:
    """The mechanism `cfg` asks for on released Q outputs: the paper's unbounded noise, or with
    `bounded` a Gaussian mechanism on Q vectors clipped to L2 norm B."""
    if cfg.bounded is None:
        return UnboundedQNoise(cfg.noise_sigma)
    return BoundedQGaussian.from_sigma(cfg.noise_sigma, cfg.bounded, cfg.delta,
                                       cfg.secure_noise)


def q_release_privacy(cfg: QNoiseConfig, mech: Mechanism, counts: dict[str, int]
                      ) -> dict[str, Any]:
    """privacy.json of a FedRL run: the mechanism, each party's release count and, in bounded
    mode only, each party's composed (ε, δ); paper mode states that there is NO formal ε."""
    common = {
        "releases": counts,
        "exchanged_without_noise": ["theta_g (shared MLP parameters)", "Y (TD targets, "
                                    "from α's rewards)", "actions", "batch_ids"],
        "test_clean_variant": "test-clean sends Q outputs without noise: NO guarantee "
                              "for those releases",
    }
    mode = record_mode(cfg.noise, cfg.secure_noise)
    if cfg.bounded is None:
        rest: dict[str, Any] = {"epsilon": "none"}
        facts = Facts(None, f"the paper's Gaussian noise (σ = {cfg.noise_sigma:g}) is added to "
                      "unbounded Q outputs: no sensitivity bound exists, so NO formal ε (or δ) "
                      "can be stated", noise=mode)
    else:
        assert isinstance(mech, BoundedQGaussian)
        parties = {}
        for name, count in counts.items():
            acc = Accountant(cfg.accountant, neighbouring=mech.guarantee.neighbouring)
            acc.compose(mech.event, count)
            parties[name] = {
                "unit": f"all of party {name}'s observations and local Q-network parameters "
                        "over the run (every release composed)",
                "one_release_epsilon": mech.guarantee.epsilon,
                **acc.record(cfg.delta),
            }
        rest = {"bound_l2": cfg.bounded, "noise_sigma": cfg.noise_sigma, "parties": parties}
        noise = (f"float-safe discrete Gaussian noise of variance ≥ {cfg.noise_sigma:g}² (ε by "
                 "RDP)" if cfg.secure_noise else f"N(0, {cfg.noise_sigma:g}²) noise")
        facts = Facts(
            Claim(max(p["epsilon"] for p in parties.values()), cfg.delta, "LDP",
                  "local, the other party untrusted",
                  "all of one party's observations and local Q-network parameters (every "
                  "Q-output release of the run composed)",
                  f"accountant {cfg.accountant}, the larger of the two parties' ε"),
            releases=Releases("each party", f"Q-output vectors clipped to L2 norm "
                              f"{cfg.bounded:g}", noise, max(counts.values()),
                              mech.guarantee.epsilon, mech.guarantee.delta),
            also=[Composition(p["epsilon"], cfg.delta, f"accountant {cfg.accountant} for "
                              f"party {name}'s {counts[name]} releases alone")
                  for name, p in parties.items()],
            not_protected="θ_g, Y_j and actions travel without noise, as in the paper, so the "
                          "protocol as a whole has no end-to-end ε",
            noise=mode)
    rest.update(noise_fields(mode))
    return privacy_record(
        facts, mechanism=mech, formal_key="formal_guarantee", fields=common | rest,
        order=["mechanism", *common, "formal_guarantee", *rest, *COMPOSED])


def baseline_privacy(name: str, trained_on: str) -> dict[str, Any]:
    """privacy.json of a non-private baseline (Grid-World or Text2Action)."""
    return privacy_record(Facts(None, f"{name}: non-private baseline trained on "
                                      f"{trained_on}; no noise"),
                          formal_key="formal_guarantee", fields={"epsilon": "none"},
                          order=["formal_guarantee", "epsilon", *COMPOSED])
