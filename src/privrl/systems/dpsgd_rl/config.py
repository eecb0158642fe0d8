"""Paper 003's configurations: `EpisodicConfig` (what REINFORCE and DQN share), their own
`ReinforceConfig` and `DQNConfig`, and `ObservationPrivacy` (LDP on observations), with their
presets and validation.

It imports no JAX, flax or dp-accounting (the accountant and the mechanisms are imported by the
methods that use them), so the command line refuses a bad value before JAX starts (issue 53).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from privrl.choices import ACCOUNTANTS, DEFAULT_ACCOUNTANT, LOG_STDS, NOISE_MODES
from privrl.config import (
    ACCOUNTANT_HELP,
    ENV_HELP,
    NOISE_HELP,
    PRIVATE_HELP,
    Config,
    check_uniform_start,
    fail,
    finite,
    in_range,
    integer,
    log_std_option,
    max_steps_help,
    non_negative,
    one_of,
    option,
    positive,
    uniform_start_option,
    within,
)
from privrl.privacy.box import check_box
from privrl.privacy.plan import PlanError, PrivacyRequest, plan_gaussian
from privrl.systems.dpsgd_rl.choices import DQN_OPTIMIZERS as OPTIMIZERS
from privrl.systems.dpsgd_rl.choices import OBS_MODES as MODES
from privrl.systems.dpsgd_rl.levers import LeverConfig

if TYPE_CHECKING:
    from privrl.privacy.accounting import Accountant, PrivacyEvent
    from privrl.privacy.mechanisms import Mechanism


# --- LDP on observations (privrl.systems.dpsgd_rl.ldp_obs) -------------------------------------

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
                check_box(self.box_low, self.box_high)  # no JAX: the mechanism checks it again
            except ValueError as e:
                fail("box_low", str(e))

    def mechanism(self) -> Mechanism | None:
        from privrl.privacy.mechanisms import BoxGaussianMechanism, UnboundedGaussianNoise

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
        from privrl.privacy.accounting import Accountant
        from privrl.privacy.mechanisms import BoxGaussianMechanism
        from privrl.privacy.noise import noise_fields
        from privrl.privacy.record import COMPOSED, Claim, Facts, Releases, privacy_record

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


# --- what both learners share (privrl.systems.dpsgd_rl.episodic) --------------------------------

@dataclass(frozen=True)
class EpisodicConfig(Config):
    """Options common to REINFORCE and DQN (each algorithm's config extends this)."""

    # Presets: "paper" is the dataclass defaults (the slides, read as docs/dpsgd-rl.md says).
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {"paper": {}}

    preset: str = option("paper", help="paper: the slides' settings (read as docs/dpsgd-rl.md "
                         "says); adaptive: the paper's learner with the levers that adapt it to "
                         "the task (adaptive clip, 8 episodes per update, step from noise, best "
                         "candidate on the public simulator); continuous: the paper's learner "
                         "started close to the uniform policy, for a Box task; "
                         "adaptive-continuous: both. Options given explicitly override it.")
    seeds: int = option(1, flag="--trials", help="Independent trials, run vectorized.")
    seed: int = option(0, help="Random seed (same seed, same results).")
    episodes: int = option(1000, help="Training episodes at most (stops when solved).")
    max_episode_steps: int | None = option(
        None, flag="--max-steps", help=max_steps_help("CartPole-v1's 500"))
    solve_threshold: float | None = option(
        None, flag="--target-return", help="Solved when the mean of --solve-window consecutive "
        "greedy evaluation returns reaches this (training stops there). Default: the task's "
        "(CartPole-v1's 475; a Gymnasium reward_threshold); a task without one is never "
        "solved and reports returns.")
    solve_window: int = option(25, help="Evaluation returns averaged by the solved rule.")
    stop_when_solved: bool = option(True, help="Stop training once solved.")
    gamma: float = option(0.99, help="Discount factor γ, in (0, 1].")
    learning_rate: float = option(0.01, help="The optimizer's step size.")
    # DP-SGD (central DP of the trained model; the learner holding the data is trusted)
    dp: bool = option(False, cli=False, help="DP-SGD on the learner's gradients.")
    noise_multiplier: float = option(
        0.0, help="Noise multiplier σ: N(0, σ²C²) on the sum of the clipped gradients of the "
        "protected units (episodes for REINFORCE, transitions for DQN). 0 clips without noise "
        "(no guarantee).")
    clip: float = option(1.0, help="C: the L2 bound of each protected unit's gradient.")
    delta: float = option(1e-5, help="δ of the stated (ε, δ), in (0, 1).")
    target_epsilon: float | None = option(
        None, flag="--epsilon", help="Each protected unit's total ε at --delta over the run "
        "(REINFORCE: one episode; DQN: one stored transition, every update that samples it); "
        "σ is calibrated to it (instead of --noise-multiplier).")
    max_epsilon: float | None = option(
        None, flag="--epsilon-budget", help="Stop training before an update would take a "
        "protected unit's ε above this cap.")
    accountant: str = option(DEFAULT_ACCOUNTANT, choices=ACCOUNTANTS, help=ACCOUNTANT_HELP)
    secure_noise: bool = option(
        False, help="Float-safe DP-SGD noise: an exact discrete Gaussian from the OS CSPRNG "
        "(docs/secure-noise.md); needs --accountant rdp (DQN: and --q 1, no subsampling).")
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)
    # LDP on observations
    obs: ObservationPrivacy = option(  # noqa: RUF009 (option returns a dataclasses.field)
        cli=False, default_factory=ObservationPrivacy,
        help="Local DP on the observations the learner sees.")
    env: str | None = option(None, help=ENV_HELP)
    private_params: tuple[str, ...] = option(
        (), flag="--private", help=PRIVATE_HELP + " Every training episode draws its own.")

    def validate(self) -> None:
        """The rules both algorithms share (each config's validate() adds its own)."""
        for name in ("seeds", "episodes", "solve_window"):
            integer(name, getattr(self, name))
        if self.max_episode_steps is not None:
            integer("max_episode_steps", self.max_episode_steps)
        if self.solve_threshold is not None:
            finite("solve_threshold", self.solve_threshold)
        non_negative("noise_multiplier", self.noise_multiplier)
        positive("clip", self.clip)
        in_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        for name in ("target_epsilon", "max_epsilon"):
            if getattr(self, name) is not None:
                positive(name, getattr(self, name))
        if self.target_epsilon is not None and not self.dp:
            fail("target_epsilon", "only DP-SGD runs calibrate σ")
        one_of("accountant", self.accountant, ACCOUNTANTS)
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, "noise mode")
        if self.obs.secure and self.accountant != "rdp":
            fail("accountant", "secure (discrete Gaussian) observation noise is composed with "
                               "the RDP accountant only (choose rdp): CKS20 bound its Rényi "
                               "divergences, not its privacy-loss distribution")
        if self.secure_noise:
            if not self.dp:
                fail("secure_noise", "float-safe noise is for DP-SGD runs (dp)")
            if self.accountant != "rdp":
                fail("accountant", "secure (discrete Gaussian) noise is composed with the RDP "
                                   "accountant only (choose rdp): CKS20 bound its Rényi "
                                   "divergences, not its privacy-loss distribution")
        in_range("gamma", self.gamma, 0, 1, low_open=True)
        positive("learning_rate", self.learning_rate)
        with within("obs"):
            self.obs.validate()

    @property
    def private(self) -> bool:
        """True when the DP-SGD run states an ε (a noise multiplier > 0)."""
        return self.dp and self.noise_multiplier > 0


def calibrated_sigma(cfg: EpisodicConfig, releases: int, sampling_rate: float | None = None
                     ) -> float:
    """DP-SGD's σ for `target_epsilon` (the protected unit's total at δ over the `releases` it
    takes part in, Poisson-sampled at `sampling_rate`), by the privacy plan
    (privrl.privacy.plan) and the config's accountant."""
    request = PrivacyRequest(cfg.target_epsilon, delta=cfg.delta, accountant=cfg.accountant)
    try:
        return plan_gaussian(request, releases, sampling_rate).noise_multiplier
    except PlanError as e:
        fail("target_epsilon" if e.field == "epsilon" else e.field, e.message)


# --- REINFORCE (privrl.systems.dpsgd_rl.reinforce) ---------------------------------------------

# "adaptive" (issue 51): the paper's learner with the private levers that adapt a DP-REINFORCE
# run to its task: the clip follows the median of the episodes' gradient norms (Andrew et al.
# 2021: the clip count's noise is part of the episode's one Gaussian release, its ε counted),
# 8 episodes per update (DP-SGD's unit stays one episode: more episodes per update is more
# signal per unit of noise), the step size from the noise level, and the best candidate on the
# task's public simulator kept every 10 updates, reverting and halving the step when the
# policy collapses. The returns are normalized within each episode (the paper's, kept).
# Measured in benchmarks/log/24-dprl.md.
# "continuous" (issue 51): the paper's learner on a Box task, started close to the uniformly
# random policy (`uniform_start`: its mean at the box's centre, its state-free σ the
# uniform's), with γ = 0.9 and Adam at 3e-3. On gymnax Pendulum-v1 the paper's Glorot start,
# squashed into the box, plays its greedy actions near a bound (below random), its 0.01 step
# throws the mean about, and at γ = 0.99 the episode-standardized returns carry almost no
# signal: non-private it fell from random, where these settings learn
# (benchmarks/log/28-floor.md). "adaptive-continuous": the adaptive levers on that learner.
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "adaptive": {"adaptive_clip": True, "batch_episodes": 8, "step_from_noise": True,
                 "public_eval_every": 10},
    "continuous": {"log_std": "parameter", "uniform_start": True, "gamma": 0.9,
                   "learning_rate": 0.003},
}
PRESETS["adaptive-continuous"] = {**PRESETS["adaptive"], **PRESETS["continuous"]}


@dataclass(frozen=True)
class ReinforceConfig(LeverConfig, EpisodicConfig):
    """Every hyperparameter of a REINFORCE run; the defaults are the paper preset."""

    presets = PRESETS

    hidden: int = option(128, help="Hidden units of the policy network.")
    dropout: float = option(0.5, help="Dropout rate of the hidden layer, in [0, 1).")
    batch_episodes: int = option(1, help="Episodes per update (the slides: one).")
    normalize_returns: bool = option(True, help="Standardize the returns within a batch.")
    learning_rate: float = option(0.01, help="Adam's step size.")
    log_std: str = log_std_option()
    uniform_start: bool = uniform_start_option()
    # The levers that adapt a private run to its task (issue 51; the "adaptive" preset turns
    # them on): LeverConfig's fields (privrl.systems.dpsgd_rl.levers), shared with DP-DQN.

    def validate(self) -> None:
        super().validate()
        in_range("dropout", self.dropout, 0, 1, high_open=True)
        integer("hidden", self.hidden)
        integer("batch_episodes", self.batch_episodes)
        one_of("log_std", self.log_std, LOG_STDS)
        check_uniform_start(self.uniform_start, self.log_std)
        self.check_levers()

    @property
    def lever_system(self) -> str:
        return "REINFORCE (dp-reinforce)"

    @property
    def expected_batch(self) -> float:
        return float(self.batch_episodes)

    def resolved(self) -> ReinforceConfig:
        """Validate; with a target ε, calibrate σ for one release per episode (adaptive
        clipping: the joint σ of the episode's gradient and clip count); fill the clip
        count's default noise."""
        self.validate()
        cfg = self
        if self.target_epsilon is not None:
            cfg = replace(cfg, noise_multiplier=calibrated_sigma(self, 1))
        cfg = cfg.with_count_stddev()
        return cfg

    # --- privacy -----------------------------------------------------------------------------
    def events(self) -> list[PrivacyEvent]:
        """One episode's releases (each once): the gradient sum's Gaussian; with adaptive
        clipping also the clip count's (sensitivity ½ of the centred bit b − ½, noise σ_b:
        multiplier 2σ_b). The accountant composes them: exactly a Gaussian of multiplier σ."""
        from privrl.privacy.accounting import PrivacyEvent

        events = [PrivacyEvent("gaussian", self.gradient_noise_multiplier)]
        if self.adaptive_clip:
            events.append(PrivacyEvent("gaussian", 2.0 * self.clip_count_stddev))
        return events

    def event(self) -> PrivacyEvent:
        from privrl.privacy.accounting import PrivacyEvent

        return PrivacyEvent("gaussian", self.noise_multiplier)

    def max_updates(self) -> int:
        """Updates allowed by max_epsilon: all of them, or none if one release exceeds it."""
        from privrl.privacy.accounting import Accountant

        if not self.private or self.max_epsilon is None:
            return self.episodes
        if self.adaptive_clip:
            acc = Accountant(self.accountant)
            for e in self.events():
                acc.compose(e, 1)
            return self.episodes if acc.epsilon(self.delta) <= self.max_epsilon else 0
        acc = Accountant(self.accountant)
        return acc.max_count(self.event(), self.delta, self.max_epsilon, 1) * self.episodes

    def accountant_for(self, updates: int) -> Accountant:
        """One episode's account after `updates` updates: one release (with adaptive clipping
        the gradient's and the clip count's), if any update happened."""
        from privrl.privacy.accounting import Accountant

        acc = Accountant(self.accountant)
        if self.private and updates > 0:
            for e in self.events() if self.adaptive_clip else [self.event()]:
                acc.compose(e, 1)
        return acc


# --- DQN (privrl.systems.dpsgd_rl.dqn) ---------------------------------------------------------

_DP_SGD: Mapping[str, Any] = {
    "optimizer": "sgd", "momentum": 0.9, "learning_rate": 0.003, "weight_decay": 0.0,
    "average_over_stored": True, "learning_starts": 1000, "batch_size": 512, "tau": 0.002}


# adaptive (ours, issue 51): dp-sgd with the levers of privrl.systems.dpsgd_rl.levers: the clip
# starts at --clip and follows the median of the sampled transitions' gradient norms (its
# count's noise split off the same σ and counted), and the best greedy policy on the task's
# public simulator kept every 10 training episodes, reverting (with the target network) and
# halving the step when it collapses. Not --step-from-noise: its 1/(dσ²) signal model cut the
# step 75× on corridor, where the adaptive clip had already shrunk the noise with the clip
# (benchmarks/log/26-dqn.md).
_ADAPTIVE: Mapping[str, Any] = {**_DP_SGD, "adaptive_clip": True, "public_eval_every": 10}


@dataclass(frozen=True)
class DQNConfig(LeverConfig, EpisodicConfig):
    """Every hyperparameter of a DQN run; the defaults are the paper preset."""

    preset: str = option(
        "paper", choices=("paper", "dp-sgd", "dp-solve", "adaptive"),
        help="paper: the slides' settings (AdamW). dp-sgd: ours, SGD with momentum, which "
        "learns under DP noise. dp-solve: ours, dp-sgd with a 16-16 network, double DQN and "
        "--pause-at 500, which solves CartPole at ε = 8 per transition (docs/dpsgd-rl.md). "
        "adaptive: ours, dp-sgd with the levers that adapt it to the task (adaptive clip, "
        "best candidate on the public simulator; issue 51). "
        "Options given explicitly override it.")
    hidden: tuple[int, ...] = option((128, 128), help="Hidden layer sizes of the Q-network.")
    learning_rate: float = option(1e-4, help="The optimizer's step size.")
    weight_decay: float = option(0.01, help="Decoupled weight decay (AdamW's default).")
    batch_size: int = option(128, help="Transitions per update (the expected batch under DP).")
    buffer_size: int = option(10_000, help="Replay buffer capacity.", unit="transitions")
    explore_start: float = option(
        0.9, help="ε-greedy: ε = end + (start − end)·exp(−steps / decay).")
    explore_end: float = option(0.05, help="See --explore-start.")
    explore_decay: float = option(1000.0, help="See --explore-start.", unit="steps")
    tau: float = option(0.005, help="Soft target-network update per step, in (0, 1].")
    grad_value_clip: float = option(100.0, help="Gradient value clip (non-private runs only).")
    sampling_probability: float | None = option(
        None, flag="--q", help="Poisson sampling probability per stored transition. Default: "
        "batch size / buffer size (paper 0.0128, dp-sgd 0.0512).")
    clip: float = option(10.0, help="C: L2 bound of each transition's gradient (ours: the "
                         "slides do not give it; C = 1 stalls DQN, see docs).")
    optimizer: str = option("adamw", choices=OPTIMIZERS,
                            help="adamw (AMSGrad, the slides' code) or sgd (heavy-ball momentum).")
    momentum: float = option(0.9, help="SGD momentum in [0, 1) (sgd only).")
    average_over_stored: bool = option(
        False, help="DP-SGD: divide the noisy sum by q × the stored transitions (the expected "
        "batch size now) instead of q × capacity, which shrinks the step while the buffer "
        "fills (post-processing: one transition is stored per step whatever the data).")
    learning_starts: int | None = option(
        None, help="The first update once this many transitions are stored. Default: the "
        "batch size.")
    double_dqn: bool = option(
        False, help="Double DQN targets: the next action chosen by the online network, valued "
        "by the target network.")
    lr_decay_updates: int | None = option(
        None, help="Decay the learning rate linearly over this many updates to lr × "
        "--lr-final-fraction, then hold it (post-processing). Default: constant.")
    lr_final_fraction: float = option(
        0.1, help="The decayed learning rate as a fraction of the first, in [0, 1].")
    pause_at: float | None = option(
        None, help="Make no updates during a training episode when the previous greedy "
        "evaluation returned at least this (post-processing: no privacy cost). Default: never.")

    # paper: the dataclass defaults. dp-sgd (ours, not the slides'): SGD + momentum instead of
    # AdamW, whose per-coordinate normalization turns DP noise into full-size steps on
    # coordinates with little gradient signal (docs/dpsgd-rl.md, benchmarks/log/04-*.md).
    # dp-solve (ours): dp-sgd with a 16-16 Q-network (386 parameters instead of 17,410, so the
    # same per-coordinate noise has ~7x less norm), double DQN and pause-at 500; it solves
    # CartPole at ε = 8 per transition (benchmarks/RESULTS.md, "A DP-DQN that solves").
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "paper": {},
        "dp-sgd": _DP_SGD,
        "dp-solve": {**_DP_SGD, "hidden": (16, 16), "double_dqn": True, "pause_at": 500.0},
        "adaptive": _ADAPTIVE,
    }

    @property
    def q(self) -> float:
        return (self.sampling_probability if self.sampling_probability is not None
                else self.batch_size / self.buffer_size)

    @property
    def max_batch(self) -> int:
        """Rows of the padded Poisson batch: the mean + 12 standard deviations + 16."""
        mean = self.q * self.buffer_size
        return min(self.buffer_size, math.ceil(mean + 12 * math.sqrt(mean) + 16))

    def validate(self) -> None:
        super().validate()
        if self.batch_size < 1 or self.buffer_size < self.batch_size:
            fail("batch_size", "need 1 <= batch size <= buffer size, got "
                               f"{self.batch_size} and {self.buffer_size}")
        if self.learning_starts is not None and not (
                self.batch_size <= self.learning_starts <= self.buffer_size):
            fail("learning_starts", "need batch size <= learning starts <= buffer size, got "
                                    f"{self.learning_starts}")
        q = self.sampling_probability
        if q is not None:
            in_range("sampling_probability", q, 0, 1, low_open=True)
            if not self.dp:
                fail("sampling_probability", "Poisson sampling is for DP-SGD runs (dp)")
        if self.secure_noise and self.dp and self.q < 1:
            fail("secure_noise", "float-safe noise needs sampling probability 1: no accountant "
                                 f"here covers the subsampled discrete Gaussian (q = {self.q:g})")
        in_range("tau", self.tau, 0, 1, low_open=True)
        one_of("optimizer", self.optimizer, OPTIMIZERS)
        in_range("momentum", self.momentum, 0, 1, high_open=True)
        non_negative("weight_decay", self.weight_decay)
        if self.lr_decay_updates is not None:
            integer("lr_decay_updates", self.lr_decay_updates)
        in_range("lr_final_fraction", self.lr_final_fraction, 0, 1)
        if self.pause_at is not None:
            positive("pause_at", self.pause_at)
        self.check_levers()

    @property
    def lever_system(self) -> str:
        return "DQN (dp-dqn)"

    @property
    def expected_batch(self) -> float:
        """The Poisson sample's mean size on a full buffer, q × capacity."""
        return self.q * self.buffer_size

    def clip_count_accounting(self) -> str:
        """How the accountant counts --adaptive-clip's count (privacy.json)."""
        return ("both releases of an update read the same Poisson sample: the vector (gradient "
                "sum / C_t, count × z_Δ/σ_b) has sensitivity z_Δ/z and noise multiplier z_Δ, so "
                "the update is ONE Poisson-subsampled Gaussian of multiplier z = "
                "(z_Δ⁻² + (2σ_b)⁻²)^(−1/2), the event below, composed over the releases a "
                "transition can take part in as without the lever")

    def resolved(self) -> DQNConfig:
        """Validate; with a target ε, calibrate σ for the releases one transition can see
        (adaptive clipping: the joint σ of the gradient and the clip count); fill the clip
        count's default noise."""
        self.validate()
        # σ is calibrated once the task's episode is known (episodic_task resolves again);
        # the clip count's noise σ_b only once σ is.
        if self.target_epsilon is None:
            return self.with_count_stddev()
        if self.max_episode_steps is None:
            return self
        return replace(self, noise_multiplier=calibrated_sigma(
            self, self.releases_per_unit(self.max_steps()), self.q)).with_count_stddev()

    # --- privacy -----------------------------------------------------------------------------
    def max_steps(self) -> int:
        return self.episodes * self.max_episode_steps

    def event(self) -> PrivacyEvent:
        from privrl.privacy.accounting import PrivacyEvent

        q = self.q
        return PrivacyEvent("gaussian", self.noise_multiplier, "poisson" if q < 1 else "none", q)

    def releases_per_unit(self, updates: int) -> int:
        """Updates one transition can take part in: it is evicted after `buffer_size` steps."""
        return min(updates, self.buffer_size)

    def truncation_delta(self, updates: int) -> float:
        """Chernoff bound on P(some batch of the run exceeded max_batch), added to δ."""
        n, q, k = self.buffer_size, self.q, self.max_batch
        if k >= n or q >= 1:
            return 0.0
        a = k / n
        kl = a * math.log(a / q) + (1 - a) * math.log((1 - a) / (1 - q))
        return min(1.0, self.releases_per_unit(updates) * math.exp(-n * kl))

    def max_updates(self) -> int:
        """Updates allowed by max_epsilon (all of them without one)."""
        from privrl.privacy.accounting import Accountant

        total = self.max_steps()
        if not self.private or self.max_epsilon is None:
            return total
        acc = Accountant(self.accountant)
        n = acc.max_count(self.event(), self.delta, self.max_epsilon,
                          self.releases_per_unit(total))
        return total if n >= self.releases_per_unit(total) else n

    def accountant_for(self, updates: int) -> Accountant:
        from privrl.privacy.accounting import Accountant

        acc = Accountant(self.accountant)
        if self.private:
            acc.compose(self.event(), self.releases_per_unit(updates))
        return acc
