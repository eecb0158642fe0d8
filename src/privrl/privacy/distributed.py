"""User-level central DP with distributed Gaussian noise and a simulated secure aggregation:
the `distributed-gaussian-continuous` mechanism, a simulation only. Its continuous shares over
a real-valued sum are no protocol's: a deployment sums integers modulo 2^b, and
`distributed-gaussian` (privrl.privacy.discrete_sum) is that mechanism, simulated exactly in a
local run. This one keeps what the discrete one lacks: Poisson sampling of agents (with its
amplification) and adaptive clipping.

DP-FedAvg (McMahan et al. 2018) adds Gaussian noise N(0, σ²C²I) to the SUM of the agents'
clipped updates. Here nobody holds that noise: every one of the K registered agents adds a
share N(0, σ²C²/m · I) to what it sends (Kairouz, Liu & Steinke 2021 do this with discrete
noise), and a secure-aggregation step reveals only the sum of the K messages. Any m of the
K shares already sum to the full N(0, σ²C²I); m = `min_honest` (default K).

One round (`DistributedGaussianMechanism`):
* each agent is sampled independently with probability q (Poisson sampling);
* a sampled agent sends clip_C(x) + its share, an unsampled one its share alone (a zeroed
  update), so that the noise in the sum does not depend on who was sampled;
* `secure_aggregate` returns the sum of all K messages as a `Report`: the only object that
  leaves this module. Individual messages are `Share`s, which aggregator code never sees.

Guarantee (user level, per round): unit = one agent's whole data (every update it could
send); neighbouring relation = zero-out: one agent's data is added or removed (its updates
are replaced by zero) while its noise share stays (Kairouz et al. 2021's "zero-out" notion
for DP-FTRL). Removing the agent moves the sum by its clipped update, L2 norm <= C, and the
sum's noise does not change, so one round is the Gaussian mechanism with noise multiplier
σ, Poisson-subsampled at rate q: dp_accounting's PoissonSampledDpEvent(q, GaussianDpEvent(σ))
(GaussianDpEvent(σ) at q = 1), composed over the rounds by privrl.privacy.accounting.

Trust model: agents follow the protocol, and the secure aggregation reveals the sum only
(simulated here: one function computes it; Bonawitz et al. 2017 is the protocol). The server
is honest-but-curious. If t agents drop out (their shares are missing) or collude with the
server (their shares are known to it), only K − t shares protect the others: the noise std
falls to σ·sqrt((K − t)/m). With t <= K − m the stated guarantee holds unchanged (the honest
shares alone have variance >= σ²C²); beyond it, the guarantee is the one of the smaller
multiplier (`effective_noise_multiplier`). Sampling must stay secret from the server for the
amplification by sampling to hold: unsampled agents send a message too.

Adaptive clipping (`AdaptiveClip`; Andrew, Thakkar, McMahan & Ramaswamy 2021, "Differentially
private learning with adaptive clipping", NeurIPS, Sec. 3 and Theorem 1). The clip C_t of
round t is traced state. Each sampled agent also reports the bit b = 1[‖x‖ <= C_t], as one
extra coordinate (b − ½)·κ_t of its message, κ_t = z_Δ·C_t/σ_b, and every coordinate of the
sum carries the same Gaussian noise of std z_Δ·C_t (shared out as above); unsampled agents
send 0 in both parts (their noise share still). Divided by κ_t, the extra coordinate of the
sum is Σ_sampled (b − ½) + N(0, σ_b²): the bit sum noised with std σ_b. The server sets
b̄_t = ½ + (that)/(q·K) (q·K: the public expected count, as for the update) and
C_{t+1} = C_t·exp(−η_C (b̄_t − γ)), post-processing of the released sums.

Why one round is still the Gaussian mechanism with multiplier z: the message of one agent
is v = [clip_{C_t}(x), (b − ½)κ_t], and zero-out moves the sum by v, of L2 norm at most
sqrt(C_t² + κ_t²/4) = C_t·sqrt(1 + z_Δ²/(4σ_b²)) (|b − ½| = ½ whatever b is). The noise is
isotropic with std z_Δ·C_t, so the noise std over the sensitivity is
    z = z_Δ / sqrt(1 + z_Δ²/(2σ_b)²) = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2),
the paper's Theorem 1, whatever C_t is (C_t is a function of earlier releases only, so the
rounds compose adaptively as before). Conversely, a target z and σ_b give
z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2), which needs 2σ_b > z. The accounting is unchanged:
PoissonSampledDpEvent(q, GaussianDpEvent(z)) per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from privrl.privacy.accounting import DEFAULT_ACCOUNTANT, Accountant, PrivacyEvent
from privrl.privacy.clipping import clip_l2, geometric_clip_update
from privrl.privacy.ledger import BudgetExceededError
from privrl.privacy.mechanisms import add_gaussian_noise
from privrl.privacy.report import _MINT, Guarantee, Report

__all__ = [
    "USER_NEIGHBOURS",
    "USER_NEIGHBOURS_ADAPTIVE",
    "USER_UNIT",
    "AdaptiveClip",
    "DistributedGaussianMechanism",
    "RoundBudget",
    "Share",
    "SumSettingParams",
    "joint_noise_multiplier",
    "secure_aggregate",
    "update_noise_multiplier",
]

USER_UNIT = "one agent's whole data (every update it sends over the run): user level"
USER_NEIGHBOURS = ("zero-out: add or remove one agent's data (its updates replaced by zero, "
                   "its noise share kept); the sum moves by at most the clip C in L2")
USER_NEIGHBOURS_ADAPTIVE = (
    "zero-out: add or remove one agent's data (its update and clip bit replaced by zero, its "
    "noise share kept); the sum of the messages [clip_C_t(update), (b − ½)·z_Δ·C_t/σ_b] moves "
    "by at most C_t·sqrt(1 + (z_Δ/2σ_b)²) = C_t·z_Δ/z in L2, C_t the round's (adaptive) clip")


def update_noise_multiplier(noise_multiplier: float, count_stddev: float) -> float:
    """z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2): the update's noise multiplier that, with the clip bits'
    sum noised with std σ_b, makes a round the Gaussian mechanism with multiplier z (see the
    module docstring). ValueError unless 2σ_b > z."""
    z, sb = float(noise_multiplier), float(count_stddev)
    if not 2 * sb > z:
        raise ValueError(f"the clip bits' noise std σ_b = {sb:g} must exceed z/2 = {z / 2:g} "
                         f"(z = {z:g}: the round's noise multiplier)")
    return (z ** -2 - (2 * sb) ** -2) ** -0.5


def joint_noise_multiplier(update_multiplier: float, count_stddev: float) -> float:
    """z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2): the inverse of `update_noise_multiplier`."""
    return (float(update_multiplier) ** -2 + (2 * float(count_stddev)) ** -2) ** -0.5


@dataclass(frozen=True)
class AdaptiveClip:
    """Adaptive clipping's parameters (Andrew et al. 2021): σ_b `count_stddev`, the std of the
    noise on the sum of the clip bits; γ `quantile`, the fraction of sampled agents whose
    update should lie within the clip; η_C `learning_rate` of the geometric update
    C_{t+1} = C_t·exp(−η_C (b̄_t − γ)). The paper's defaults: γ = 0.5, η_C = 0.2,
    σ_b = (expected agents per round)/20."""

    count_stddev: float
    quantile: float = 0.5
    learning_rate: float = 0.2

    def __post_init__(self) -> None:
        for name in ("count_stddev", "learning_rate"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")
        if not (isinstance(self.quantile, int | float) and 0 < self.quantile < 1):
            raise ValueError(f"quantile must be in (0, 1), got {self.quantile!r}")

    def next_clip(self, clip: Array, bit_fraction: Array) -> Array:
        """C_{t+1} = C_t·exp(−η_C (b̄_t − γ)): post-processing of the noised bit fraction."""
        return geometric_clip_update(clip, bit_fraction, self.quantile, self.learning_rate)


@jax.tree_util.register_pytree_node_class
class Share:
    """One agent's message to the secure aggregation: its (maybe zeroed) clipped update plus
    its noise share. Not a `Report`: no guarantee holds for one share alone (its noise is a
    1/m part of what the sum needs), so only `secure_aggregate` turns shares into a Report."""

    __slots__ = ("_value", "guarantee")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a Share is made by DistributedGaussianMechanism.share only")

    @classmethod
    def _make(cls, value: Array, guarantee: Guarantee) -> Share:
        share = object.__new__(cls)
        object.__setattr__(share, "_value", value)
        object.__setattr__(share, "guarantee", guarantee)
        return share

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Share is immutable")

    def __repr__(self) -> str:
        return f"Share(shape={getattr(self._value, 'shape', None)})"

    def tree_flatten(self) -> tuple[tuple[Array], Guarantee]:
        return (self._value,), self.guarantee

    @classmethod
    def tree_unflatten(cls, guarantee: Guarantee, children: tuple[Array]) -> Share:
        return cls._make(children[0], guarantee)


def secure_aggregate(shares: Share) -> Report:
    """Simulated secure aggregation: the sum over the leading axis of a batch of K shares, as
    the one `Report` the server receives. Nothing else about the shares is returned."""
    return Report._mint(_MINT, jnp.sum(shares._value, axis=0), shares.guarantee)


class ShareParams(NamedTuple):
    """`share_release`'s numbers."""

    clip: Any  # C (adaptive clipping: the round's C_t)
    std: Any  # each share's noise std σC/√m (adaptive: z_Δ·C_t/√m)
    bit_scale: Any  # adaptive clipping: κ = z_Δ·C_t/σ_b; None: no clip bit


class SumSettingParams(NamedTuple):
    """One setting of the sampled secure sum as a trial's data, for a program that runs
    several (FedPG's `for_settings`): the numbers its ε sets, as float32, each the float its
    own run compiles in. A batch of settings is these stacked along a trials axis."""

    share_std: Any  # σC/√m (without adaptive clipping)
    share_scale: Any  # adaptive clipping: z_Δ/√m, a share's noise std per unit of C_t
    bit_scale: Any  # adaptive clipping: z_Δ/σ_b, κ per unit of C_t


def share_release(p: ShareParams, key: Array, x: Array, sampled: Array) -> Array:
    """The distributed Gaussian family's release, one agent's message: clip_C(x) if sampled
    else 0 (adaptive: [clip_C(x), (b − ½)·κ], b = 1[‖x‖ <= C]), plus its noise share."""
    if p.bit_scale is None:
        message = clip_l2(x, p.clip)
    else:
        bit = (jnp.sqrt(jnp.sum(jnp.square(x))) <= p.clip).astype(x.dtype)
        message = jnp.concatenate([clip_l2(x, p.clip), ((bit - 0.5) * p.bit_scale)[None]])
    message = jnp.where(sampled, message, jnp.zeros_like(message))
    return add_gaussian_noise(message, p.std, key)


@dataclass(frozen=True)
class DistributedGaussianMechanism:
    """One round of user-level DP-FedAvg with distributed noise (see the module docstring).

    noise_multiplier σ: the sum's noise std / C; clip C: L2 clip of each update; agents K;
    min_honest m (<= K): shares are sized N(0, σ²C²/m) so that any m of them carry the full
    noise; sampling_rate q in (0, 1]; delta: δ of the per-round ε stated in `guarantee`.
    adaptive (optional): adaptive clipping; then `noise_multiplier` is the round's joint z,
    `clip` the initial C_0, and the messages carry the clip bit with the update noised with
    z_Δ = `update_multiplier` (module docstring).
    """

    noise_multiplier: float
    clip: float
    agents: int
    min_honest: int | None = None
    sampling_rate: float = 1.0
    delta: float = 1e-5
    accountant: str = DEFAULT_ACCOUNTANT
    adaptive: AdaptiveClip | None = None
    name = "distributed-gaussian-continuous"

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "clip"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")
        if isinstance(self.agents, bool) or int(self.agents) != self.agents or self.agents < 1:
            raise ValueError(f"agents must be an integer >= 1, got {self.agents!r}")
        m = self.agents if self.min_honest is None else self.min_honest
        if isinstance(m, bool) or int(m) != m or not 1 <= m <= self.agents:
            raise ValueError(f"min_honest must be an integer in [1, agents = {self.agents}], "
                             f"got {m!r}")
        object.__setattr__(self, "min_honest", int(m))
        q = self.sampling_rate
        if not (isinstance(q, int | float) and 0 < q <= 1):
            raise ValueError(f"sampling_rate must be in (0, 1], got {q!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        if self.adaptive is not None:
            update_noise_multiplier(self.noise_multiplier, self.adaptive.count_stddev)

    @property
    def update_multiplier(self) -> float:
        """The update's noise std / C: σ, or z_Δ under adaptive clipping."""
        if self.adaptive is None:
            return self.noise_multiplier
        return update_noise_multiplier(self.noise_multiplier, self.adaptive.count_stddev)

    @property
    def share_std(self) -> float:
        """Each agent's noise std per coordinate: σC/√m (adaptive: z_Δ·C_0/√m, at C_0)."""
        return self.update_multiplier * self.clip / math.sqrt(self.min_honest)

    @property
    def event(self) -> PrivacyEvent:
        """One round, for the accountant: Poisson(q)-sampled Gaussian with multiplier σ."""
        q = float(self.sampling_rate)
        return PrivacyEvent("gaussian", self.noise_multiplier, "poisson" if q < 1 else "none",
                            q)

    def effective_noise_multiplier(self, honest: int) -> float:
        """The sum's noise std / C that `honest` agents' shares alone guarantee (the others
        dropped out or collude with the server): σ·sqrt(min(honest, m)/m)."""
        if isinstance(honest, bool) or int(honest) != honest or not 1 <= honest <= self.agents:
            raise ValueError(f"honest must be an integer in [1, {self.agents}], got {honest!r}")
        return self.noise_multiplier * math.sqrt(min(honest, self.min_honest) / self.min_honest)

    @cached_property
    def guarantee(self) -> Guarantee:
        """(ε, δ)-DP of ONE round at `delta`; a run composes its rounds with the accountant.
        Adaptive clipping: the sensitivity is C_t·z_Δ/z, C_t traced (stated in words)."""
        eps = Accountant(self.accountant).epsilon_if(self.event, 1, self.delta)
        if self.adaptive is not None:
            return Guarantee(epsilon=eps, delta=self.delta,
                             notion="(ε, δ)-DP (central, user level, one round; distributed "
                                    "noise; adaptive clip)",
                             unit=USER_UNIT, neighbouring=USER_NEIGHBOURS_ADAPTIVE,
                             sensitivity=None, norm="L2")
        return Guarantee(epsilon=eps, delta=self.delta,
                         notion="(ε, δ)-DP (central, user level, one round; distributed noise)",
                         unit=USER_UNIT, neighbouring=USER_NEIGHBOURS, sensitivity=self.clip,
                         norm="L2")

    def params(self) -> dict[str, Any]:
        params = {"noise_multiplier": self.noise_multiplier, "clip": self.clip,
                  "agents": self.agents, "min_honest": self.min_honest,
                  "share_std": self.share_std,
                  "sum_noise_std": self.update_multiplier * self.clip,
                  "sampling_rate": self.sampling_rate, "delta": self.delta}
        if self.adaptive is not None:
            params["adaptive_clip"] = {
                "noise_multiplier_z": self.noise_multiplier,
                "update_noise_multiplier_z_delta": self.update_multiplier,
                "count_stddev_sigma_b": self.adaptive.count_stddev,
                "target_quantile_gamma": self.adaptive.quantile,
                "clip_learning_rate_eta": self.adaptive.learning_rate,
                "initial_clip": self.clip,
                "bit_scale": "κ_t = z_Δ·C_t/σ_b (the bit's coordinate is (b − ½)·κ_t)",
                "clip_and_noise": "share_std and sum_noise_std above are at the initial clip; "
                                  "round t's are z_Δ·C_t/√m and z_Δ·C_t"}
        return params

    def describe(self) -> dict[str, Any]:
        return {"mechanism": self.name, "params": self.params(), **self.guarantee.to_dict()}

    def upload_bytes(self, dim: int) -> int:
        """Bytes one agent's share uploads for an update of length `dim`: its d float32 (d + 1
        with adaptive clipping's bit), as simulated here; a real secure aggregation adds its
        own masking and key-exchange traffic, not counted."""
        return 4 * (dim + (self.adaptive is not None))

    def sample(self, keys: Array) -> Array:
        """Which agents take part in a round: each decides with its own key (K keys, the ones
        its share is drawn with, or secret ones), Bernoulli(q) independently; (K,) bool.
        The decision must stay secret from the server, so it never uses a server key."""
        if self.sampling_rate >= 1:
            return jnp.ones(keys.shape[:1], bool)
        return jax.vmap(lambda k: jax.random.bernoulli(jax.random.fold_in(k, 0x5A3),
                                                       self.sampling_rate))(keys)

    def setting_params(self) -> SumSettingParams:
        """This mechanism's ε-dependent numbers as one trial's data (`share`'s `setting`):
        float32, as its own run multiplies by them."""
        one = np.float32(1.0)
        z = np.float32(self.update_multiplier)
        # z·C/√m and z·C/σ_b as XLA compiled them until the numbers could be data: C times
        # the float32 z·(1/k), which the tests compare with a run from before
        share, bit = (one, one) if self.adaptive is None else (
            z * (one / np.float32(math.sqrt(self.min_honest))),
            z * (one / np.float32(self.adaptive.count_stddev)))
        return SumSettingParams(np.float32(self.share_std), share, bit)

    def share(self, key: Array, x: Array, sampled: Array, clip: Array | None = None,
              setting: SumSettingParams | None = None, guarantee: Guarantee | None = None
              ) -> Share:
        """One agent's message: clip_C(x) if sampled else 0, plus N(0, σ²C²/m · I).

        Adaptive clipping: C = `clip` (the round's C_t, traced; default C_0) and the message
        is [clip_C(x), (b − ½)·κ] if sampled else 0 (d + 1 coordinates), b = 1[‖x‖ <= C],
        κ = z_Δ·C/σ_b, plus N(0, z_Δ²C²/m · I).

        `setting` (traced; a program of settings, `setting_params`): the trial's own numbers
        in place of this mechanism's, the same float32 arithmetic; `guarantee`: the one the
        program's shares state (true of every setting's)."""
        x = jnp.asarray(x)
        if x.ndim != 1:
            raise ValueError(f"a share is made of a 1-D update, got shape {x.shape}")
        own = self.setting_params() if setting is None else setting
        if self.adaptive is None:
            if clip is not None:
                raise ValueError("a per-round clip is for adaptive clipping only")
            params = ShareParams(self.clip, own.share_std, None)
        else:
            c = jnp.asarray(self.clip if clip is None else clip, x.dtype)
            params = ShareParams(c, c * own.share_scale, self.bit_scale(c, own))
        return Share._make(share_release(params, key, x, sampled),
                           self.guarantee if guarantee is None else guarantee)

    def bit_scale(self, clip: Array, setting: SumSettingParams | None = None) -> Array:
        """κ = z_Δ·C/σ_b: the clip bit's coordinate is (b − ½)·κ, so that the sum's noise of
        std z_Δ·C on it is noise of std σ_b on the bit sum (`setting`: the trial's numbers)."""
        if self.adaptive is None:
            raise ValueError("the clip bit belongs to adaptive clipping")
        return clip * (self.setting_params() if setting is None else setting).bit_scale

    def unpack(self, report: Report, clip: Array, count: float,
               setting: SumSettingParams | None = None) -> tuple[Report, Array]:
        """Adaptive clipping, on the server: the secure sum (d + 1 coordinates) as the update
        sum (a Report of d coordinates, the same guarantee) and the noised fraction
        b̄ = ½ + (Σ_sampled (b − ½) + N(0, σ_b²))/count of sampled agents within `clip`, the
        C_t the round's shares were made with (count: the public expected number q·K).
        Post-processing of the one released sum."""
        if self.adaptive is None:
            raise ValueError("only adaptive clipping's sum carries the clip bits")
        value = report.value
        bits = value[-1] / self.bit_scale(clip, setting)
        return Report._mint(_MINT, value[:-1], report.guarantee), 0.5 + bits / count


class RoundBudget:
    """Each agent's (ε, δ) budget over the run, enforced before every round by the accountant
    that states the run's ε (the ledger's basic Σε would be far looser). Every agent is
    subject to every round (sampling is part of the mechanism), so one account serves all.

    The rounds that fit are found once (`Accountant.max_count`, exact: ε grows with the
    count), or given (`allowed`: a mechanism with its own accounting, calibrated for them,
    such as privrl.privacy.discrete_sum's; then `event` is None); `charge` refuses a round
    beyond them and records nothing in that case."""

    def __init__(self, event: PrivacyEvent | None, epsilon: float, delta: float, upper: int,
                 kind: str = DEFAULT_ACCOUNTANT, allowed: int | None = None) -> None:
        self.event, self.epsilon, self.delta = event, float(epsilon), float(delta)
        self.accountant = Accountant(kind)
        self.allowed = (self.accountant.max_count(event, self.delta, self.epsilon, int(upper))
                        if allowed is None else min(int(allowed), int(upper)))
        self.rounds = 0

    def can_charge(self) -> bool:
        return self.rounds < self.allowed

    def charge(self) -> None:
        """Record one more round, or raise BudgetExceededError (nothing recorded)."""
        if not self.can_charge():
            raise BudgetExceededError(
                f"round {self.rounds + 1} would exceed the budget ε = {self.epsilon:g} at "
                f"δ = {self.delta:g}: {self.allowed} round(s) fit")
        if self.event is not None:
            self.accountant.compose(self.event, 1)
        self.rounds += 1
