"""The levers that adapt a DP-SGD learner of paper 003 (DP-REINFORCE, DP-DQN) to its task (issue
51), one piece for both: their config fields and checks, adaptive clipping's split of σ between
the gradient and the clip count (Andrew et al. 2021), the step size from the noise level, and
the clip's update from a released count.

What each lever costs:
- adaptive_clip: each update also releases the noised count of the units (dp-reinforce: the
  batch's episodes; dp-dqn: the Poisson-sampled transitions) whose gradient norm is within the
  clip C_t. Its noise is split off the same σ: the gradient's multiplier rises to
  z_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2) (privrl.privacy.distributed.update_noise_multiplier), so that
  gradient and count together are ONE Gaussian of multiplier σ: the unit's ε is the one the
  accountant states, the count included.
- step_from_noise and public_eval_every: post-processing of released gradients and of the
  public simulator (privrl.federation.adapt), no ε.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypeVar

from privrl.config import fail, in_range, integer, option, positive

# The levers' switches (a run with one on runs alone, not in a program of settings).
ADAPTIVE_LEVERS = ("adaptive_clip", "step_from_noise", "public_eval_every")

# Optimizer steps whose gradients a step follows: Adam's and heavy-ball momentum's window
# 1/(1 − β₁) at β₁ = 0.9, both learners' optimizers.
OPTIMIZER_WINDOW = 10.0

L = TypeVar("L", bound="LeverConfig")


@dataclass(frozen=True)
class LeverConfig:
    """The levers' fields, shared by ReinforceConfig and DQNConfig (mixed into each; off by
    default: their `paper` presets do not use them). A learner names its protected unit in
    `lever_unit` and its expected units per update in `expected_batch`."""

    adaptive_clip: bool = option(
        False, help="Adaptive clipping (Andrew et al. 2021). The clip starts at --clip and "
        "follows the --clip-quantile of the units' gradient norms (dp-reinforce: the batch's "
        "episodes; dp-dqn: the sampled transitions): each update also releases the count of "
        "units within the clip, noised with std --clip-count-stddev, and "
        "C_{t+1} = C_t·exp(−lr·(noised fraction − quantile)). Same ε: σ is split between the "
        "gradient and the count, both counted by the accountant.")
    clip_quantile: float = option(
        0.5, help="--adaptive-clip: target fraction γ of units whose gradient norm is within "
        "the clip, in (0, 1) (the paper's: the median).")
    clip_lr: float = option(
        0.2, help="--adaptive-clip: learning rate η_C > 0 of the geometric clip update (the "
        "paper's: 0.2).")
    clip_count_stddev: float | None = option(
        None, help="--adaptive-clip: std σ_b of the noise on the count of units within the "
        "clip; must exceed σ/2. Default max(B/20, σ) (B: the units an update expects, "
        "dp-reinforce --batch-episodes, dp-dqn q × the buffer's size; the paper's B/20, at "
        "least σ so the gradient's share of the noise stays within 1.16σ).")
    step_from_noise: bool = option(
        False, help="The optimizer's step size from DP-SGD's noise level: η·s/(1 + s), s the "
        "signal-to-noise ratio of the B clipped units an update sums over the optimizer's "
        "window of 10 steps (1/(dσ²) per unit, d parameters). Post-processing.")
    public_eval_every: int | None = option(
        None, help="Every this many training episodes (dp-reinforce: one update each) the "
        "learner plays its greedy policy on the task's PUBLIC simulator (default parameters, "
        "no agent's private draw), keeps the best so far as the final policy, and reverts to "
        "it (dp-dqn: with its target network), lowering its step by --backoff, when the policy "
        "collapses. Post-processing. Default: off.", unit="episodes")
    public_eval_episodes: int = option(
        16, help="--public-eval-every: episodes per evaluation on the public simulator.")
    backoff: float = option(
        0.5, help="--public-eval-every: the step's multiplier in (0, 1] after a collapse.")

    # --- what a learner says of itself ---------------------------------------------------------
    @property
    def lever_system(self) -> str:
        """The command the levers belong to (in refusals)."""
        raise NotImplementedError

    @property
    def expected_batch(self) -> float:
        """The units an update expects (public): the count's denominator and B above."""
        raise NotImplementedError

    def clip_count_accounting(self) -> str:
        """How the accountant counts --adaptive-clip's count (privacy.json): here two
        unsampled releases composed; a learner that samples says its own."""
        return ("the accountant composes both releases of the unit (its events below: "
                "multipliers z_Δ and 2σ_b, the count's sensitivity being ½); together exactly "
                "one Gaussian of multiplier z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2)")

    # --- checks and resolution -----------------------------------------------------------------
    def check_levers(self) -> None:
        """The levers' own fields, and refusals where they do not apply."""
        for name in ("adaptive_clip", "step_from_noise"):
            if not isinstance(getattr(self, name), bool):
                fail(name, f"must be true or false, got {getattr(self, name)!r}")
        cfg: Any = self
        if self.adaptive_clip:
            if not cfg.dp or (cfg.noise_multiplier <= 0 and cfg.target_epsilon is None):
                fail("adaptive_clip", "adaptive clipping releases a noised count: it needs "
                                      "DP-SGD with noise (--noise-multiplier > 0 or --epsilon)")
            if cfg.secure_noise:
                fail("adaptive_clip", "adaptive clipping is not implemented with float-safe "
                                      "noise (--secure-noise)")
            in_range("clip_quantile", self.clip_quantile, 0, 1, low_open=True, high_open=True)
            positive("clip_lr", self.clip_lr)
            if self.clip_count_stddev is not None:
                positive("clip_count_stddev", self.clip_count_stddev)
        elif self.clip_count_stddev is not None:
            fail("clip_count_stddev", "only adaptive clipping takes it (it is off)")
        if self.public_eval_every is not None:
            integer("public_eval_every", self.public_eval_every)
        integer("public_eval_episodes", self.public_eval_episodes, 2)
        in_range("backoff", self.backoff, 0, 1, low_open=True)
        if cfg.obs.mechanism() is not None and self.levers_on:
            fail("obs.mode", f"the adaptive levers are for DP-SGD {self.lever_system}, not "
                             "with LDP observations")

    @property
    def levers_on(self) -> bool:
        return any(getattr(self, name) not in (False, None) for name in ADAPTIVE_LEVERS)

    def with_count_stddev(self: L) -> L:
        """With adaptive clipping: the clip count's noise σ_b filled (default max(B/20, σ)) and
        checked against σ (σ_b > σ/2, so that the gradient keeps a finite share)."""
        if not self.adaptive_clip:
            return self
        from privrl.privacy.distributed import update_noise_multiplier
        sigma = float(self.noise_multiplier)
        sb = (self.clip_count_stddev if self.clip_count_stddev is not None
              else max(self.expected_batch / 20, sigma))
        try:
            update_noise_multiplier(sigma, sb)
        except ValueError as e:
            fail("clip_count_stddev", str(e))
        return replace(self, clip_count_stddev=float(sb))

    @property
    def gradient_noise_multiplier(self) -> float:
        """The noise multiplier on the units' clipped gradient sum: σ, or under adaptive
        clipping z_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2), so that the gradient and the clip count
        together cost what one Gaussian release of multiplier σ costs."""
        sigma = float(self.noise_multiplier)
        if not self.adaptive_clip:
            return sigma
        from privrl.privacy.distributed import update_noise_multiplier
        return update_noise_multiplier(sigma, self.clip_count_stddev)

    def lever_step_size(self, learning_rate: float, dim: int) -> float:
        """--step-from-noise: the step size from one unit's SNR 1/(dσ_g²) (its clipped
        gradient's squared norm over the noise's, σ_g the gradient's multiplier) over the B
        units an update sums and the optimizer's window; else `learning_rate`."""
        if not (self.step_from_noise and self.private):
            return learning_rate
        from privrl.federation.adapt import noise_step
        return noise_step(learning_rate, 1.0 / (dim * self.gradient_noise_multiplier ** 2),
                          self.expected_batch * OPTIMIZER_WINDOW)


def next_clip(clip: Any, noised_centred_count: Any, expected: Any, quantile: float,
              learning_rate: float) -> Any:
    """C_{t+1} from the released count Σ(b_i − ½) + N(0, σ_b²) of units within C_t: the fraction
    within, (count + ½·expected)/expected (unbiased for a public `expected` number of units:
    the batch, or a Poisson sample's mean), moved geometrically toward the quantile (Andrew et
    al. 2021). Post-processing of the released count."""
    from privrl.privacy.clipping import geometric_clip_update
    fraction = (noised_centred_count + 0.5 * expected) / expected
    return geometric_clip_update(clip, fraction, quantile, learning_rate)


def adaptive_clip_mechanisms(cfg: Any, unit: str) -> tuple[Any, Any]:
    """--adaptive-clip's two releases of one update: the units' gradients divided by the
    public C_t, summed at clip 1 with multiplier z_Δ (exact: clip_1(g/C)·C = clip_C(g)), and the
    centred clip bits' sum (b − ½, sensitivity ½) with noise σ_b; both Poisson-sampled at q
    when the learner samples (the same sample: together one sampled Gaussian of multiplier σ)."""
    from privrl.privacy.mechanisms import GaussianSumMechanism
    q = float(getattr(cfg, "q", 1.0)) if cfg.dp else 1.0
    return (GaussianSumMechanism(cfg.gradient_noise_multiplier, 1.0, q, cfg.delta, unit=unit),
            GaussianSumMechanism(2.0 * cfg.clip_count_stddev, 0.5, q, cfg.delta,
                                 unit=unit + ": its clip bit"))
