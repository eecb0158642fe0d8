"""FedPG-Cen and FedPG-Dec: federated variance-reduced policy gradient (paper 004), read top to
bottom. FedPG-Cen is FedPG-BR (Fan et al., NeurIPS 2021) without its Byzantine filter; FedPG-Dec
is the same local update over a time-varying directed graph with (correct) push-sum.

FedPG-Cen, round t (Algorithm 1):
1. the server broadcasts θ₀ᵗ; each of K agents samples B_t ~ U{12..20} episodes with it and
   computes its policy-gradient estimate μ_tᵏ; what it sends passes through a mechanism
   (default: none, as in the paper) and becomes a `Report`;
2. the server averages the reports into μ_t, draws N_t ~ Geom(b/(B_t+b)) on {1, 2, ...}
   (mean (B_t+b)/b, as FedPG-BR's code) and takes N_t SCSG steps, sampling b episodes itself
   with θ_n (the server is also a learner, with its own environment, as in FedPG-BR):
       v_n = (1/b) Σ_j [g(τ_j|θ_n) − ω(τ_j|θ_n, θ₀) g(τ_j|θ₀)] + μ_t,   θ_{n+1} = θ_n ⊕ v_n
   where ⊕ is an optimizer step (FedPG-BR: Adam 1e-3) and ω is the importance weight.
FedPG-Dec, round t (Algorithm 2 with push-sum as in Kempe et al. / Assran et al.): every node k
runs the same SCSG round from its de-biased z_k with its own μ_tᵏ (nothing is sent for it),
releases its update Δ_k = θ_{N}ᵏ − z_k through the mechanism, steps x_k ← x_k + w_k Δ̃_k
(a step on z), and gossips (x_k, w_k) along the round's directed graph (privrl.federation).

g(τ|θ) = Σ_h ∇log π_θ(a_h|s_h) Â_h with Â the reward-to-go Σ_{j≥h} γ^{j−h} r_j whitened per
episode (FedPG-BR's code: its baseline), r_j the task's rewards (CartPole: +1 per step).
The task (privrl.envs.task) is FedPG-BR's CartPole-v1 by default, each agent with its own
gravity; any task brings its environment, rewards and per-agent private dynamics, and the
policy (default: FedPG-BR's MLP, or a user's flax module) is sized from its spaces.
Everything per round is one jitted function; Cen's K agents (and the episodes of each) are
vectorized, Dec's nodes computed one at a time (each its own SCSG loop), the inner loop is a
`lax.while_loop`, and the runner computes trials one at a time per host device
(privrl.systems.fedpg.local).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from jax import Array

from privrl.config import (
    Config,
    check_preset,
    fail,
    in_range,
    integer,
    one_of,
    other_field,
    positive,
)
from privrl.envs.cartpole import CartPoleSpec
from privrl.envs.rollout import Trajectory, rollout_episodes
from privrl.envs.task import Task, cartpole_task, check_module, resolve_task
from privrl.federation.pushsum import (
    PushSumState,
    push_sum_apply,
    push_sum_init,
    push_sum_mix,
    push_sum_z,
)
from privrl.federation.star import average_reports, mean_from_sum
from privrl.federation.topology import TOPOLOGIES, Topology, TopologyError, make_topology
from privrl.losses import (
    action_log_probs,
    discounted_returns,
    importance_weights,
    pg_surrogate,
    whiten,
)
from privrl.nets.flat import FlatModel, mlp
from privrl.privacy.accounting import (
    ACCOUNTANTS,
    DEFAULT_ACCOUNTANT,
    CalibrationError,
    calibrate_noise_multiplier,
    optimal_composition_admits,
)
from privrl.privacy.distributed import (
    AdaptiveClip,
    DistributedGaussianMechanism,
    secure_aggregate,
)
from privrl.privacy.ldp_vector import PrivUnitGMechanism, PrivUnitMechanism
from privrl.privacy.ledger import COMPOSITIONS
from privrl.privacy.mechanisms import (
    GaussianMechanism,
    IdentityMechanism,
    LaplaceMechanism,
    Mechanism,
    PerTrialMechanism,
)
from privrl.privacy.noise import NOISE_MODES
from privrl.privacy.report import Report
from privrl.runtime.programs import alone_or_program, settings_program
from privrl.systems.fedpg.choices import ALGORITHMS, MECHANISMS

# Noise calibrated by an accountant: the local Gaussian (LDP per agent) and the distributed
# Gaussian (user-level central DP on the securely aggregated sum, privrl.privacy.distributed).
ACCOUNTED_MECHANISMS = ("gaussian", "distributed-gaussian")
# Pure ε-LDP per release (ε per release, composed by the ledger), unlike the Gaussian.
PURE_MECHANISMS = ("laplace", "privunit", "privunitg")
# distributed-gaussian's default sampling: this many agents per round in expectation.
DEFAULT_PARTICIPANTS = 50
IMPORTANCE = ("step", "trajectory")
OPTIMIZERS = ("adam", "sgd")
# "paper": FedPG-BR's CartPole setting (the dataclass defaults). No tuned preset yet.
PRESETS: dict[str, dict[str, Any]] = {"paper": {}}


@dataclass(frozen=True)
class FedPGConfig(Config):
    """Every hyperparameter of a FedPG run; defaults: FedPG-BR's CartPole-v1 setting.

    `budget` is the number of episodes each agent samples (B_t plus, for Cen, the server's
    N_t·b, so that Cen, Dec and a single agent are compared at equal samples per learner).
    `inner_steps` None draws N_t ~ Geom(b/(B_t+b)) on {1, 2, ...}; an integer fixes it (SVRPG).
    Privacy (what each agent sends, once per round): laplace, privunit, privunitg: `epsilon`
    per release (pure ε-LDP), composed by the ledger; gaussian: L2 clip `clip` and
    `noise_multiplier` σ (noise std σ·clip), or instead `epsilon` = each agent's total budget
    at `delta` over the run, for which σ is calibrated over the most rounds the budget allows,
    by `accountant` (pld: the exact analytic Gaussian composition; rdp: RDP), the one that also
    states the run's ε. distributed-gaussian (Cen only): user-level central DP; every agent
    clips its μ_tᵏ to `clip` and adds a share of the noise, the server sees only the sum,
    which carries N(0, σ²C²I) (σ = `noise_multiplier`, or calibrated from `epsilon` at
    `delta` for the most rounds the budget allows); each agent takes part in a round with
    probability `sampling_rate` (Poisson); shares are sized so that any `min_honest` (default
    K) of them carry the full noise. See privrl.privacy.distributed.
    `adaptive_clip` (distributed-gaussian only): the clip follows the `clip_quantile` γ of
    the sampled agents' update norms (Andrew et al. 2021), starting from `clip`, with
    learning rate `clip_lr` η_C; the clip bits' sum is noised with std `clip_count_stddev`
    σ_b (None: q·K/20), and σ (the round's noise multiplier, calibrated as without it) is
    split into the update's z_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2) and the bits' σ_b.
    """

    algorithm: str = "cen"  # cen (star, Algorithm 1) | dec (push-sum, Algorithm 2)
    preset: str = "paper"
    topology: str = "ring"  # dec only: ring | exponential | random
    window: int | None = None  # random topology: strongly connected over every `window` rounds
    agents: int = 10  # K
    hidden: tuple[int, ...] = (16, 16)
    gamma: float = 0.999
    batch_min: int = 12  # B_t ~ U{batch_min, ..., batch_max}
    batch_max: int = 20
    minibatch: int = 4  # b
    inner_steps: int | None = None
    learning_rate: float = 1e-3
    optimizer: str = "adam"
    importance: str = "step"  # per-step ratio (FedPG-BR's code) | trajectory (paper's ω)
    importance_clip: float | None = None  # truncate ω at this value
    max_episode_steps: int = 500
    gravities: tuple[float, ...] = (9.8,)  # per-agent gravity drawn from these (heterogeneity)
    # The task (privrl.envs.task): None is FedPG-BR's CartPole-v1 with per-agent `gravities`;
    # "gymnax:<id>" or "<module>:<callable>" another environment, whose agents differ by the
    # `private_params` specs ("field=low:high" uniform or "field=v1,v2" one of; none: all alike).
    env: str | None = None
    private_params: tuple[str, ...] = ()
    budget: int = 5000  # episodes per agent
    trials: int = 1
    seed: int = 0
    mechanism: str = "none"
    epsilon: float | None = None
    clip: float | None = None
    noise_multiplier: float | None = None  # gaussian only
    delta: float = 1e-5  # gaussian; laplace: δ of the optimal composition (stated, or budget)
    accountant: str = DEFAULT_ACCOUNTANT  # gaussian only: pld (exact here) | rdp
    # laplace only: each agent's privacy budget over the run, enforced by the ledger before
    # every round (a trial whose agents cannot afford the next round ends); None: the episode
    # budget alone bounds the releases. `budget_composition`: "basic" (pure ε, Σ of the
    # releases' ε) or "optimal" (an (ε, delta) by the optimal composition theorem).
    epsilon_budget: float | None = None
    budget_composition: str = "basic"
    target_return: float = 475.0  # "solved" (CartPole-v1's); set your task's
    # Noise keys: "seeded" (from the seed: reproducible, a simulation's guarantee) or "secret"
    # (each agent's or node's from the OS CSPRNG, never written); None: the runtime's default
    # (local runner: seeded, Ray: secret). See privrl.privacy.noise.
    noise: str | None = None
    # Float-safe (discrete, CSPRNG) noise for laplace or gaussian. See privrl.privacy.secure.
    secure_noise: bool = False
    # distributed-gaussian only: Poisson sampling rate q of agents per round, and the number
    # m of agents whose noise shares alone must carry the sum's full noise (None: K).
    # None: min(1, 50/K), an expected 50 agents per round (a round then costs about as much
    # as 50 agents, whatever K; at ε = 2 the noise on the mean is within 15% of q = 1's).
    sampling_rate: float | None = None
    min_honest: int | None = None
    # distributed-gaussian with epsilon: σ is calibrated for this many rounds (None: the most
    # the episode budget allows, max_rounds()); a trial that wants more is ended by the budget.
    dp_rounds: int | None = None
    # Shuffle model (fedpg-cen with a pure ε-LDP mechanism: laplace, privunit, privunitg): each
    # round's K reports reach the server in a random order without identities; privacy.json
    # adds the central (ε, δ = shuffle_delta) per round after amplification by shuffling
    # (privrl.privacy.shuffle), composed over an agent's rounds. The local ε is unchanged.
    shuffle: bool = False
    shuffle_delta: float = 1e-5
    # distributed-gaussian only: adaptive clipping (Andrew et al. 2021). clip_quantile γ: the
    # target fraction of sampled agents whose update norm is within the clip; clip_lr η_C:
    # C_{t+1} = C_t·exp(−η_C (b̄_t − γ)); clip_count_stddev σ_b: std of the noise on the sum
    # of the clip bits (None: q·K/20, the paper's choice; it must exceed σ/2).
    adaptive_clip: bool = False
    clip_quantile: float = 0.5
    clip_lr: float = 0.2
    clip_count_stddev: float | None = None

    presets = PRESETS

    @property
    def learners(self) -> int:
        """Parallel SCSG loops: the server (Cen) or every node (Dec)."""
        return 1 if self.algorithm == "cen" else self.agents

    def max_rounds(self) -> int:
        """An upper bound on the rounds the budget allows (each costs >= B_min + b·N_min)."""
        n_min = 1 if self.inner_steps is None else self.inner_steps
        return math.ceil(self.budget / (self.batch_min + self.minibatch * n_min)) + 1

    def calibration_rounds(self) -> int:
        """The rounds an accounted mechanism's σ is calibrated for."""
        return self.max_rounds() if self.dp_rounds is None else self.dp_rounds

    def validate(self) -> None:
        one_of("algorithm", self.algorithm, ALGORITHMS)
        check_preset(self.preset, PRESETS)
        one_of("topology", self.topology, TOPOLOGIES)
        one_of("mechanism", self.mechanism, MECHANISMS)
        one_of("accountant", self.accountant, ACCOUNTANTS)
        one_of("importance", self.importance, IMPORTANCE)
        one_of("optimizer", self.optimizer, OPTIMIZERS)
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, "noise mode")
        if self.secure_noise and self.mechanism not in ("laplace", "gaussian"):
            fail("secure_noise", f"float-safe noise is for laplace or gaussian, got "
                                 f"mechanism={self.mechanism!r}")
        if self.secure_noise and self.mechanism == "gaussian" and self.accountant != "rdp":
            fail("accountant", "secure (discrete Gaussian) noise is composed with the RDP "
                               "accountant only (choose rdp): CKS20 bound its Rényi "
                               "divergences, not its privacy-loss distribution")
        integer("agents", self.agents)
        integer("batch_min", self.batch_min)
        integer("batch_max", self.batch_max)
        if self.batch_max < self.batch_min:
            fail("batch_max", f"must be >= batch_min = {self.batch_min}, got {self.batch_max}")
        integer("minibatch", self.minibatch)
        if self.inner_steps is not None:
            integer("inner_steps", self.inner_steps, 0)
        integer("budget", self.budget)
        integer("trials", self.trials)
        integer("seed", self.seed, 0)
        integer("max_episode_steps", self.max_episode_steps)
        if not self.hidden or any(isinstance(h, bool) or not isinstance(h, int) or h < 1
                                  for h in self.hidden):
            fail("hidden", f"must be positive layer widths, got {self.hidden!r}")
        positive("learning_rate", self.learning_rate)
        in_range("gamma", self.gamma, 0, 1, low_open=True)
        if self.importance_clip is not None:
            positive("importance_clip", self.importance_clip)
        if self.window is not None:
            if self.topology != "random" or self.algorithm != "dec":
                fail("window", "only the random topology of fedpg-dec takes it")
            integer("window", self.window)
        if self.mechanism == "none":
            if self.epsilon is not None:
                fail("epsilon", "no mechanism (mechanism='none') has no ε; "
                                "drop epsilon or choose a mechanism")
        elif self.mechanism in PURE_MECHANISMS:
            if self.epsilon is None:
                fail("epsilon", f"required with mechanism={self.mechanism!r} (ε per release, "
                                "> 0)")
            if self.noise_multiplier is not None:
                fail("noise_multiplier", "only the gaussian mechanism takes it")
            positive("epsilon", self.epsilon)
            positive("clip", self.clip)
        else:
            # σ given: it is used (ε, if also given, was the target it was calibrated for).
            if self.epsilon is None and self.noise_multiplier is None:
                fail("epsilon", f"the {self.mechanism} mechanism needs epsilon (total per "
                                "agent) or noise_multiplier")
            if self.epsilon is not None:
                positive("epsilon", self.epsilon)
            if self.noise_multiplier is not None:
                positive("noise_multiplier", self.noise_multiplier)
            positive("clip", self.clip)
            if not isinstance(self.delta, float):
                fail("delta", f"must be in (0, 1), got {self.delta!r}")
            in_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        if self.mechanism not in ACCOUNTED_MECHANISMS and self.noise_multiplier is not None:
            fail("noise_multiplier", "only the gaussian and distributed-gaussian mechanisms "
                                     "take it")
        self._validate_adaptive_clip()
        self._validate_distributed()
        one_of("budget_composition", self.budget_composition, COMPOSITIONS)
        if self.mechanism not in PURE_MECHANISMS:
            if self.epsilon_budget is not None:
                fail("epsilon_budget", "only the pure ε-LDP mechanisms (laplace, privunit, "
                                       "privunitg) take it (gaussian: epsilon is already each "
                                       "agent's total, composed by accountant)")
            if self.budget_composition != "basic":
                fail("budget_composition", "composes pure ε-LDP releases: laplace, privunit "
                                           "or privunitg only (gaussian releases compose by "
                                           "accountant)")
        if self.epsilon_budget is not None:
            positive("epsilon_budget", self.epsilon_budget)
        if self.mechanism in PURE_MECHANISMS and self.budget_composition == "optimal":
            in_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        if self.mechanism in PURE_MECHANISMS and self.epsilon_budget is not None and not (
                optimal_composition_admits(self.epsilon, 1, self.epsilon_budget, self.delta)
                if self.budget_composition == "optimal"
                else self.epsilon <= self.epsilon_budget):
            fail("epsilon_budget", f"{self.epsilon_budget:g} cannot afford one release of "
                                   f"ε = {self.epsilon:g}: nothing would be released")
        try:
            CartPoleSpec(self.max_episode_steps, tuple(self.gravities))
        except ValueError as e:
            fail("gravities", str(e))
        if (self.env is not None or self.private_params) and tuple(self.gravities) != (9.8,):
            fail("gravities", "sets the default CartPole task's per-agent gravity; on another "
                              "task or with private parameters make gravity one of them "
                              "(gravity=v1,v2)")
        self._validate_shuffle()

    def _validate_shuffle(self) -> None:
        if self.shuffle and self.algorithm != "cen":
            fail("shuffle", "fedpg-cen only: FedPG-Dec has no server whose view a shuffler "
                            "could hide identities from (each peer knows its in-neighbours)")
        if self.shuffle and self.mechanism not in PURE_MECHANISMS:
            fail("shuffle", f"needs a pure ε-LDP mechanism ({', '.join(PURE_MECHANISMS)}), got "
                            f"mechanism={self.mechanism!r}: "
                            + {"none": "no mechanism has no local ε to amplify",
                               "distributed-gaussian": "the server already sees only the sum",
                               }.get(self.mechanism, "the amplification bound here (FMT21) "
                                                     "is for pure ε₀-LDP reports"))
        in_range("shuffle_delta", self.shuffle_delta, 0, 1, low_open=True, high_open=True)

    def _validate_adaptive_clip(self) -> None:
        """adaptive_clip's own fields; it belongs to distributed-gaussian on fedpg-cen."""
        if not isinstance(self.adaptive_clip, bool):
            fail("adaptive_clip", f"must be true or false, got {self.adaptive_clip!r}")
        if not self.adaptive_clip:
            for name, default in (("clip_quantile", 0.5), ("clip_lr", 0.2),
                                  ("clip_count_stddev", None)):
                if getattr(self, name) != default:
                    fail(name, "only adaptive clipping takes it (it is off)")
            return
        if self.algorithm != "cen":
            fail("adaptive_clip", "adaptive clipping adapts the clip of the securely "
                                  "aggregated sum: fedpg-cen with distributed-gaussian only")
        if self.mechanism != "distributed-gaussian":
            fail("adaptive_clip", "adaptive clipping needs mechanism='distributed-gaussian' "
                                  f"(the clip bits travel in its secure sum), got "
                                  f"mechanism={self.mechanism!r}")
        in_range("clip_quantile", self.clip_quantile, 0, 1, low_open=True, high_open=True)
        positive("clip_lr", self.clip_lr)
        if self.clip_count_stddev is not None:
            positive("clip_count_stddev", self.clip_count_stddev)

    def _validate_distributed(self) -> None:
        """distributed-gaussian's own fields and the combinations that make no sense."""
        if self.dp_rounds is not None:
            if self.mechanism != "distributed-gaussian" or self.epsilon is None:
                fail("dp_rounds", "the rounds σ is calibrated for: distributed-gaussian with "
                                  "epsilon only")
            integer("dp_rounds", self.dp_rounds)
        if self.mechanism != "distributed-gaussian":
            if self.sampling_rate is not None:
                fail("sampling_rate", "agent sampling is part of the distributed-gaussian "
                                      f"mechanism only, not of mechanism={self.mechanism!r}")
            if self.min_honest is not None:
                fail("min_honest", "noise shares belong to the distributed-gaussian mechanism "
                                   f"only, not to mechanism={self.mechanism!r}")
            return
        if self.algorithm != "cen":
            fail("mechanism", "distributed-gaussian protects a sum that a server aggregates: "
                              "fedpg-cen only (fedpg-dec has no aggregate; use gaussian)")
        if self.agents < 2:
            fail("agents", "distributed-gaussian needs K >= 2 agents: a secure sum of one "
                           "agent's message is that message (use --mechanism gaussian)")
        if self.min_honest is not None:
            integer("min_honest", self.min_honest)
            if self.min_honest > self.agents:
                fail("min_honest", f"{self.min_honest} honest agents' noise shares were "
                                   f"asked for, but there are only K = {self.agents} agents")
        if self.sampling_rate is None:
            return
        in_range("sampling_rate", self.sampling_rate, 0, 1, low_open=True)
        if self.sampling_rate * self.agents < 1:
            fail("sampling_rate", f"q·K = {self.sampling_rate:g}·{self.agents} < 1: fewer "
                                  "than one agent would take part in a round on average")

    def resolved(self) -> FedPGConfig:
        """Validated, with the Gaussian noise multiplier calibrated if ε was given."""
        self.validate()
        if self.mechanism == "distributed-gaussian" and self.sampling_rate is None:
            return replace(self, sampling_rate=min(1.0, DEFAULT_PARTICIPANTS / self.agents)
                           ).resolved()
        if self.adaptive_clip and self.clip_count_stddev is None:
            return replace(self, clip_count_stddev=self.sampling_rate * self.agents / 20
                           ).resolved()
        if self.mechanism not in ACCOUNTED_MECHANISMS or self.noise_multiplier is not None:
            self._check_count_stddev()
            return self
        if self.mechanism == "distributed-gaussian":
            # The sum's sensitivity under zero-out is clip itself: σ is the accountant's z.
            try:
                z = calibrate_noise_multiplier(self.epsilon, self.delta, self.calibration_rounds(),
                                               self.sampling_rate, kind=self.accountant)
            except CalibrationError as e:
                fail("epsilon", str(e))
            return replace(self, noise_multiplier=z).resolved()
        try:
            # The accountant's multiplier is std / sensitivity; the L2 ball's sensitivity is
            # 2·clip, so the mechanism's σ (std / clip) is twice it.
            z = calibrate_noise_multiplier(self.epsilon, self.delta, self.max_rounds(),
                                           kind=self.accountant)
        except CalibrationError as e:
            fail("epsilon", str(e))
        return replace(self, noise_multiplier=2.0 * z)

    def _check_count_stddev(self) -> None:
        """Adaptive clipping splits σ into z_Δ and σ_b: possible only if 2σ_b > σ."""
        if not self.adaptive_clip:
            return
        sigma, sb = self.noise_multiplier, self.clip_count_stddev
        if not 2 * sb > sigma:
            fail("clip_count_stddev",
                 f"σ_b = {sb:g} (its default is q·K/20) is too small for the noise multiplier σ = "
                 f"{sigma:.4g}: adaptive clipping needs σ_b > σ/2 = {sigma / 2:.4g} "
                 "(raise it, or sample more agents)")


# Settings run as one program (`FedPG.for_settings`) may differ in these fields only: their
# mechanisms (none, laplace, gaussian) as per-trial data, Dec's graph as each trial's mixing
# matrix, and what the host decides (ledger budgets, accountant).
SETTING_FIELDS = ("mechanism", "epsilon", "clip", "noise_multiplier", "delta", "accountant",
                  "topology", "window", "epsilon_budget", "budget_composition")
ONE_PROGRAM_MECHANISMS = ("none", "laplace", "gaussian")
# The families every program of FedPG settings computes, and every run that could join one:
# the same compiled arithmetic in both (privrl.privacy.mechanisms.PerTrialMechanism).
PROGRAM_FAMILIES = ONE_PROGRAM_MECHANISMS


def one_program_field(configs: Sequence[FedPGConfig]) -> str | None:
    """The config field that keeps resolved `configs` from running as one program (None: they
    can): they must differ only in SETTING_FIELDS and use none, laplace or gaussian without
    float-safe noise."""
    for cfg in configs:
        if cfg.mechanism not in ONE_PROGRAM_MECHANISMS:
            return "mechanism"
        if cfg.secure_noise:
            return "secure_noise"
    return other_field(configs, SETTING_FIELDS)


def settings_algorithm(configs: Sequence[FedPGConfig], task: Task | None = None,
                       model: nn.Module | None = None) -> FedPG:
    """The algorithm that runs `configs` together: `FedPG.for_settings`, or for one setting
    that could not join a program, its own `FedPG`. A setting that could join one computes
    through the program's path even alone, so that it gets the same floats alone, in any
    program and on every runtime."""
    return alone_or_program(FedPG, configs, task, model, one_program_field)


def make_mechanism(cfg: FedPGConfig) -> Mechanism | DistributedGaussianMechanism:
    """The randomizer applied to what each agent sends (default: none, no guarantee)."""
    if cfg.mechanism == "distributed-gaussian":
        if cfg.noise_multiplier is None:
            raise ValueError("resolve the config first (FedPGConfig.resolved)")
        adaptive = (AdaptiveClip(cfg.clip_count_stddev, cfg.clip_quantile, cfg.clip_lr)
                    if cfg.adaptive_clip else None)
        return DistributedGaussianMechanism(cfg.noise_multiplier, cfg.clip, cfg.agents,
                                            cfg.min_honest, cfg.sampling_rate, cfg.delta,
                                            cfg.accountant, adaptive)
    if cfg.mechanism == "laplace":
        return LaplaceMechanism(cfg.epsilon, cfg.clip, secure=cfg.secure_noise)
    if cfg.mechanism == "privunit":
        return PrivUnitMechanism(cfg.epsilon, cfg.clip)
    if cfg.mechanism == "privunitg":
        return PrivUnitGMechanism(cfg.epsilon, cfg.clip)
    if cfg.mechanism == "gaussian":
        if cfg.noise_multiplier is None:
            raise ValueError("resolve the config first (FedPGConfig.resolved)")
        return GaussianMechanism(cfg.noise_multiplier, cfg.clip, cfg.delta,
                                 secure=cfg.secure_noise)
    return IdentityMechanism()


def build_topology(cfg: FedPGConfig) -> Topology:
    """Dec's communication graph, validated before anything runs."""
    try:
        return make_topology(cfg.topology, cfg.agents, cfg.max_rounds(), cfg.seed, cfg.window)
    except TopologyError as e:
        fail("topology", str(e))


class Episodes(NamedTuple):
    """M learners × n episodes each, learner-major and padded to T steps."""

    obs: Array  # (M, n, T, obs_dim)
    actions: Array  # (M, n, T)
    mask: Array  # (M, n, T)
    live: Array  # (M, n) the episode was sampled
    length: Array  # (M, n) its length (CartPole: its return)
    rewards: Array  # (M, n, T) the environment's reward per step (0 on padded steps)


class CenPlan(NamedTuple):
    """A FedPG-Cen round before any episode is played (`FedPG.cen_plan`)."""

    theta_0: Array  # (1, d) the server's θ₀ᵗ
    thetas: Array  # (P, d) θ₀ᵗ per agent lane (P = K, or the sampled lanes)
    env_params: Any  # each lane's private environment
    live: Array  # (P, batch_max) the episodes each lane plays (its first B_t)
    k_ep: Array
    batch: Array  # B_t
    mech_keys: Array  # (K,) each agent's mechanism key
    ids: Array  # (P,) the agent of each lane
    valid: Array | None  # (P,) distributed-gaussian: the lane holds a sampled agent
    steps: Array  # (1,) N_t (0 for a finished trial)
    server_env: Any
    k_inner: Array
    key: Array  # the round's key


class NodePlan(NamedTuple):
    """A FedPG-Dec node's draws for a round, before it plays any episode."""

    batch: Array  # B_t
    live: Array  # (batch_max,) the episodes it plays (its first B_t)
    k_ep: Array
    mech_key: Array  # its mechanism key (its own secret key under secret noise)
    steps: Array  # N_t (0 for a finished trial)
    k_inner: Array


class DecPlan(NamedTuple):
    """A FedPG-Dec round before any episode is played (`FedPG.dec_plan`): every node's z_k,
    private environment and draws (`NodePlan`, leading axis K)."""

    z: Array  # (K, d) θ_{t,0}ᵏ
    env_params: Any
    node: NodePlan


class FedPGState(NamedTuple):
    """One trial. Cen: x is θ (1, d) and w = 1; Dec: push-sum (x, w) per node."""

    gossip: PushSumState
    opt_state: Any  # per learner (leading axis M)
    key: Array
    used: Array  # (K,) episodes each agent has sampled
    rounds: Array
    # Secret noise root (privrl.privacy.noise.secret_keys), or None: noise keys derive from
    # `key` (seeded). An argument of the jitted program, never a constant of it.
    noise: Array | None = None
    clip: Array | None = None  # adaptive clipping: the clip C_t of the next round; else None
    # Run as a member of a program of settings (`FedPG.for_settings`): the trial's mechanism
    # as data (MechanismArgs); None: the config's mechanism, compiled in.
    setting: Any = None


class RoundInfo(NamedTuple):
    mean_return: Array  # mean return of this round's B_t-batches (at θ₀ᵗ, or each z_k)
    used_before: Array  # mean episodes per agent before this round
    batch: Array  # B_t (mean over nodes for Dec)
    inner_steps: Array  # N_t (mean over nodes for Dec)
    participants: Array  # agents that played B_t episodes (K; fewer under agent sampling)
    clip: Array | None = None  # adaptive clipping: the clip C_t this round's shares used


class NodeUpdate(NamedTuple):
    """What one FedPG-Dec node computes in a round; only `report` leaves the node."""

    report: Report  # Δ̃_k, the randomized update
    opt_state: Any
    batch: Array  # B_t
    steps: Array  # N_t
    mean_return: Array  # of its B_t episodes


class FedPG:
    """One resolved config: `init(key)`, `round(state, mixing, live)`."""

    def __init__(self, config: FedPGConfig, task: Task | None = None,
                 model: nn.Module | None = None) -> None:
        """`task` (default: the one `config.env`/`config.private_params` name, else FedPG-BR's
        CartPole with per-agent `gravities`) and `model` (a flax module mapping one observation
        to the logits of the task's actions; default: FedPG-BR's MLP, `hidden` units, sized
        from the task's spaces)."""
        cfg, self.task = resolve_task(config.resolved(), task, partial(
            cartpole_task, config.max_episode_steps, config.gravities))
        self.config = cfg
        self.env, self.env_params = self.task.env, self.task.params
        if model is None:  # FedPG-BR's policy, PyTorch's default initialization
            self.model: FlatModel = mlp(tuple(cfg.hidden), self.task.num_actions,
                                        self.task.obs_dim, "torch_default")
        else:
            self.model = FlatModel(check_module(model, self.task, "logits"),
                                   jnp.zeros((self.task.obs_dim,), jnp.float32))
        self.dim = self.model.dim
        self.mechanism = make_mechanism(cfg)
        self.optimizer = {"adam": optax.adam, "sgd": optax.sgd}[cfg.optimizer](cfg.learning_rate)
        self.topology = build_topology(cfg) if cfg.algorithm == "dec" else None
        self.slots = participant_slots(cfg.agents, cfg.sampling_rate)
        # The jitted pieces of a host-side (Gymnasium) round, compiled once per run.
        self._act, self._split = jax.jit(self.act), jax.jit(jax.random.split)
        self._cen_plan, self._cen_mu = jax.jit(self.cen_plan), jax.jit(self.cen_mu)
        self._cen_finish, self._keep = jax.jit(self.cen_finish), jax.jit(self.keep)
        self._scsg_step = jax.jit(self.scsg_step)
        self._split_each = jax.jit(jax.vmap(jax.random.split))
        self._dec_plan, self._gradients = jax.jit(self.dec_plan), jax.jit(self.gradients)
        self._dec_release, self._dec_finish = jax.jit(self.dec_release), jax.jit(self.dec_finish)
        self._dec_node_plan = jax.jit(self.dec_node_plan)
        self._dec_node_release = jax.jit(self.dec_node_release)
        # The settings this algorithm runs, each as its own FedPG (its config, mechanism and
        # graph): itself, or those of `for_settings`.
        self.settings: list[FedPG] = [self]

    @classmethod
    def for_settings(cls, configs: Sequence[FedPGConfig], task: Task | None = None,
                     model: nn.Module | None = None) -> FedPG:
        """One algorithm for several settings that differ only in SETTING_FIELDS (mechanism
        family and its parameters, Dec's graph): its mechanism is a `PerTrialMechanism`, every
        trial carries its setting's as data (`FedPGState.setting`, from `setting_data`) and
        the runner passes each trial its setting's mixing matrix, so one jitted round runs
        them all. ConfigError names the field that keeps them apart."""
        algo = settings_program(cls, configs, task, model, one_program_field,
                                f"{', '.join(SETTING_FIELDS)} (mechanisms "
                                f"{', '.join(ONE_PROGRAM_MECHANISMS)}, without float-safe "
                                "noise)")
        algo.mechanism = PerTrialMechanism(tuple(a.mechanism for a in algo.settings),
                                           algo.dim, PROGRAM_FAMILIES)
        return algo

    def setting_data(self, settings: Sequence[int]) -> Any:
        """Per-trial data: trial k runs setting settings[k] (an index into `self.settings`)."""
        assert isinstance(self.mechanism, PerTrialMechanism)
        return self.mechanism.stack(settings)

    # --- setup ---------------------------------------------------------------------------
    def init(self, key: Array) -> FedPGState:
        """All Dec nodes start from the same θ (FedPG-BR initializes one policy)."""
        cfg = self.config
        k_theta, k_run = jax.random.split(key)
        theta = jnp.tile(self.model.init(k_theta)[None], (cfg.learners, 1))
        opt_state = jax.vmap(self.optimizer.init)(theta)
        zero = jnp.zeros((), jnp.int32)
        clip = jnp.asarray(cfg.clip, jnp.float32) if cfg.adaptive_clip else None
        return FedPGState(push_sum_init(theta), opt_state, k_run,
                          jnp.zeros((cfg.agents,), jnp.int32), zero, clip=clip)

    def env_params_of(self, key: Array, ids: Array) -> Any:
        """Each participant's private environment (the task's private parameters, fixed per id;
        the server is id K). Default task: CartPole with each agent's gravity."""
        return self.task.agents_params(jax.random.fold_in(key, 0x5EED), ids)

    # --- agent side: episodes and gradient estimates -------------------------------------
    def sample(self, thetas: Array, env_params: Any, live: Array, key: Array) -> Episodes:
        """Each of M learners plays `live.shape[1]` episodes with its own θ (M, d); episodes
        with `live` False are not played (they cost nothing)."""
        m, n = live.shape
        rep = lambda a: jnp.repeat(a, n, axis=0)  # noqa: E731
        theta_env = rep(thetas)
        params = jax.tree_util.tree_map(rep, env_params)

        def policy(k: Array, obs: Array) -> Array:
            return self.act(theta_env, k, obs)

        traj: Trajectory = rollout_episodes(self.env, params, policy, key, m * n,
                                            self.config.max_episode_steps, live.reshape(-1))
        return _episodes(traj, live)

    def act(self, theta_env: Array, key: Array, obs: Array) -> Array:
        """One action per environment, each from its own θ (P, d): the policy's sample."""
        logits = jax.vmap(self.model.apply)(theta_env, obs)
        return jax.random.categorical(key, logits).astype(jnp.int32)

    def host_sample(self, thetas: Array, env_params: Any, live: Array, key: Array) -> Episodes:
        """`sample` on a Gymnasium task: the same episodes played on the host (each action by
        the jitted policy), in the same arrays, so that the same agent-side code uses them."""
        m, n = live.shape
        rep = lambda a: np.repeat(np.asarray(a), n, axis=0)  # noqa: E731
        theta_env = jnp.asarray(rep(thetas))
        params = jax.tree_util.tree_map(rep, env_params)
        traj = self.task.rollout(params, lambda k, obs: self._act(theta_env, k, obs), key,
                                 m * n, self.config.max_episode_steps,
                                 np.asarray(live).reshape(-1))
        return _episodes(jax.tree_util.tree_map(jnp.asarray, traj), jnp.asarray(live))

    def host_sample_nodes(self, thetas: Array, env_params: Any, live: Array, keys: Array
                          ) -> Episodes:
        """Each FedPG-Dec node's episodes on a Gymnasium task (the host twin of each node's own
        `sample` with its key keys[m], vmapped over the nodes): all nodes' episodes in one
        host rollout, one jitted policy call per step for all of them. The host's randomness
        (reset seeds, actions) is its own, not the jitted rollout's, so one key serves: the
        first node's, which its jitted `sample` alone would use."""
        return self.host_sample(thetas, env_params, live, keys[0])

    def advantages(self, ep: Episodes) -> Array:
        """Â: reward-to-go of the task's rewards (discount γ) whitened per episode; (M, n, T)."""
        t = ep.mask.shape[-1]
        rewards = self.task.rewards(ep.rewards, ep.mask).reshape(-1, t)
        flat = ep.mask.reshape(-1, t)
        rtg = lambda r, m: discounted_returns(r, m, jnp.zeros(()), self.config.gamma)  # noqa: E731
        adv = jax.vmap(lambda r, m: whiten(rtg(r, m), m))(rewards, flat)
        return adv.reshape(ep.mask.shape)

    def log_probs(self, theta: Array, obs: Array, actions: Array) -> Array:
        return action_log_probs(self.model.apply(theta, obs), actions)

    def batch_gradient(self, theta: Array, obs: Array, actions: Array, adv: Array, mask: Array,
                       live: Array, weights: Array | None = None) -> Array:
        """(1/n) Σ_j g(τ_j|θ) over one learner's n live episodes (with ω: Σ ω g)."""

        def objective(th: Array) -> Array:
            logp = self.log_probs(th, obs, actions)
            per_ep = jax.vmap(pg_surrogate)(logp, adv, mask, weights) if weights is not None \
                else jax.vmap(pg_surrogate)(logp, adv, mask)
            return jnp.sum(per_ep * live) / jnp.maximum(jnp.sum(live), 1.0)

        return jax.grad(objective)(theta)

    def gradients(self, thetas: Array, ep: Episodes) -> Array:
        """μ per learner (M, d): the GPOMDP-style estimate at its θ from its episodes."""
        adv = self.advantages(ep)
        return jax.vmap(self.batch_gradient)(thetas, ep.obs, ep.actions, adv, ep.mask, ep.live)

    def scsg_direction(self, theta_n: Array, theta_0: Array, mu: Array, obs: Array,
                       actions: Array, adv: Array, mask: Array, live: Array) -> Array:
        """v_n = (1/b) Σ_j [g(τ_j|θ_n) − ω_j g(τ_j|θ₀)] + μ for one learner's b episodes,
        sampled with θ_n. With θ_n = θ₀, ω = 1 and v_n = μ exactly."""
        cfg = self.config
        logp_0 = self.log_probs(theta_0, obs, actions)
        logp_n = self.log_probs(theta_n, obs, actions)
        omega = jax.vmap(importance_weights, (0, 0, 0, None, None))(
            logp_0, logp_n, mask, cfg.importance, cfg.importance_clip)
        g_n = self.batch_gradient(theta_n, obs, actions, adv, mask, live)
        g_0 = self.batch_gradient(theta_0, obs, actions, adv, mask, live, omega)
        return g_n - g_0 + mu

    def scsg(self, theta_0: Array, mu: Array, opt_state: Any, steps: Array, env_params: Any,
             key: Array) -> tuple[Array, Any]:
        """N SCSG steps for each of M learners in parallel (learner m stops after steps[m])."""
        cfg = self.config
        b = cfg.minibatch

        def cond(c: tuple) -> Array:
            return c[0] < jnp.max(steps)

        def body(c: tuple) -> tuple:
            n, theta, opt, k = c
            k, k_ep = jax.random.split(k)
            going = n < steps
            ep = self.sample(theta, env_params,
                             jnp.broadcast_to(going[:, None], (going.shape[0], b)), k_ep)
            theta, opt = self.scsg_step(theta, opt, theta_0, mu, going, ep)
            return (n + 1, theta, opt, k)

        _, theta, opt_state, _ = jax.lax.while_loop(
            cond, body, (jnp.zeros((), jnp.int32), theta_0, opt_state, key))
        return theta, opt_state

    def scsg_step(self, theta: Array, opt: Any, theta_0: Array, mu: Array, going: Array,
                  ep: Episodes) -> tuple[Array, Any]:
        """One SCSG step of the M learners from their b episodes `ep` (sampled with θ_n);
        learners not `going` keep their θ and optimizer state."""
        adv = self.advantages(ep)
        v = jax.vmap(self.scsg_direction)(theta, theta_0, mu, ep.obs, ep.actions, adv,
                                          ep.mask, ep.live)
        updates, new_opt = jax.vmap(self.optimizer.update)(-v, opt, theta)  # ascent on J
        new_theta = theta + updates
        sel = lambda a, o: jnp.where(going.reshape((-1,) + (1,) * (a.ndim - 1)), a, o)  # noqa: E731
        return sel(new_theta, theta), jax.tree_util.tree_map(sel, new_opt, opt)

    def host_scsg(self, theta_0: Array, mu: Array, opt_state: Any, steps: Array,
                  env_params: Any, key: Array, each: bool = False) -> tuple[Array, Any]:
        """`scsg` on a Gymnasium task: the same loop (keys, episodes, steps) run on the host,
        each step's b episodes played with the current θ_n by `host_sample`. `each`: `key`
        holds one key per learner (M,), split per learner as each FedPG-Dec node's own `scsg`
        splits its key, and all learners' episodes are played by `host_sample_nodes`."""
        b = self.config.minibatch
        steps = np.asarray(steps)
        theta, opt, k = theta_0, opt_state, key
        split = self._split_each if each else self._split
        sample = self.host_sample_nodes if each else self.host_sample
        for n in range(int(steps.max(initial=0))):
            k, k_ep = (lambda s: (s[:, 0], s[:, 1]) if each else s)(split(k))
            going = n < steps
            ep = sample(theta, env_params, np.broadcast_to(going[:, None], (going.shape[0], b)),
                        k_ep)
            theta, opt = self._scsg_step(theta, opt, theta_0, mu, jnp.asarray(going), ep)
        return theta, opt

    def draw_steps(self, key: Array, batch: Array) -> Array:
        """N_t ~ Geom(b/(B_t+b)) on {1, 2, ...} (FedPG-BR's code), or the fixed inner_steps."""
        cfg = self.config
        if cfg.inner_steps is not None:
            return jnp.full(batch.shape, cfg.inner_steps, jnp.int32)
        p = cfg.minibatch / (batch + cfg.minibatch)
        return jax.random.geometric(key, p, batch.shape).astype(jnp.int32)

    # --- one round -----------------------------------------------------------------------
    def round(self, state: FedPGState, mixing: Array, live: Array) -> tuple[FedPGState, RoundInfo]:
        """One round of the configured algorithm; a trial with `live` False does nothing."""
        round_key = jax.random.fold_in(state.key, state.rounds)
        step = self.cen_round if self.config.algorithm == "cen" else self.dec_round
        new, info = step(state, mixing, round_key, live)
        return self.keep(live, new, state), info

    @staticmethod
    def keep(live: Array, new: FedPGState, old: FedPGState) -> FedPGState:
        """`new` for a live trial, `old` (unchanged) for a finished one."""
        return jax.tree_util.tree_map(lambda a, o: jnp.where(live, a, o), new, old)

    def cen_round(self, state: FedPGState, mixing: Array, key: Array, live: Array
                  ) -> tuple[FedPGState, RoundInfo]:
        del mixing
        plan = self.cen_plan(state, key, live)
        ep = self.sample(plan.thetas, plan.env_params, plan.live, plan.k_ep)
        mu, new_clip = self.cen_mu(state, plan, ep)
        theta, opt_state = self.scsg(plan.theta_0, mu, state.opt_state, plan.steps,
                                     plan.server_env, plan.k_inner)
        return self.cen_finish(state, plan, ep, theta, opt_state, new_clip)

    def host_round(self, state: FedPGState, mixing: Array, live: Array
                   ) -> tuple[FedPGState, RoundInfo]:
        """`round` of one trial (no trials axis) on a Gymnasium task: the same round, its
        episodes played on the host and everything else jitted (`host_cen_round`,
        `host_dec_round`). A trial with `live` False does nothing (its episodes are not
        played, N_t = 0)."""
        step = self.host_cen_round if self.config.algorithm == "cen" else self.host_dec_round
        return step(state, mixing, live)

    def host_cen_round(self, state: FedPGState, mixing: Array, live: Array
                       ) -> tuple[FedPGState, RoundInfo]:
        """FedPG-Cen's `host_round`: the agents' B_t episodes, then the server's b per SCSG
        step, played on the host; plan, agents' μ_tᵏ → mechanism → Reports → average, SCSG
        steps and new state jitted."""
        del mixing
        round_key = jax.random.fold_in(state.key, state.rounds)
        plan = self._cen_plan(state, round_key, live)
        ep = self.host_sample(plan.thetas, plan.env_params, plan.live, plan.k_ep)
        mu, new_clip = self._cen_mu(state, plan, ep)
        theta, opt_state = self.host_scsg(plan.theta_0, mu, state.opt_state, plan.steps,
                                          plan.server_env, plan.k_inner)
        new, info = self._cen_finish(state, plan, ep, theta, opt_state, new_clip)
        return self._keep(live, new, state), info

    def cen_plan(self, state: FedPGState, key: Array, live: Array) -> CenPlan:
        """Who plays what in a FedPG-Cen round: B_t, the agents' lanes (all K, or under
        distributed-gaussian the Poisson-sampled ones), their environments and keys, N_t."""
        cfg = self.config
        k, b_max = cfg.agents, cfg.batch_max
        k_b, k_ep, k_mech, k_n, k_inner = jax.random.split(key, 5)
        batch = jax.random.randint(k_b, (), cfg.batch_min, cfg.batch_max + 1)
        theta_0 = state.gossip.x  # (1, d): the server's θ₀ᵗ
        mech_keys = (jax.random.split(k_mech, k) if state.noise is None else
                     jax.vmap(node_noise_key, (None, 0, None))(state.noise, jnp.arange(k),
                                                              state.rounds))
        agent_live = (jnp.arange(b_max)[None, :] < batch) & live
        if isinstance(self.mechanism, DistributedGaussianMechanism):
            # Only `self.slots` lanes are computed (the first sampled agents by id): see
            # `cen_mu`.
            sampled = self.mechanism.sample(mech_keys)  # each agent's own (secret) key
            (ids,) = jnp.nonzero(sampled, size=self.slots, fill_value=k)
            valid = ids < k
            ids = jnp.where(valid, ids, 0)
            agent_live = agent_live & valid[:, None]
        else:
            ids, valid = jnp.arange(k), None
            agent_live = jnp.broadcast_to(agent_live, (k, b_max))
        thetas = jnp.broadcast_to(theta_0, (ids.shape[0], self.dim))
        steps = self.draw_steps(k_n, batch[None]) * live
        return CenPlan(theta_0, thetas, self.env_params_of(state.key, ids), agent_live, k_ep,
                       batch, mech_keys, ids, valid, steps,
                       self.env_params_of(state.key, jnp.array([k])), k_inner, key)

    def cen_mu(self, state: FedPGState, plan: CenPlan, ep: Episodes
               ) -> tuple[Array, Array | None]:
        """The agents' μ_tᵏ from their episodes, through the mechanism, as the server's
        average μ_t (1, d); and the next clip (adaptive clipping; else `state.clip`).

        distributed-gaussian: the sampled agents in a lane have played B_t episodes; all K
        agents send a Share (unsampled: noise only); the server gets the secure sum and
        divides it by the public expected count q·K. Adaptive clipping: the shares also carry
        the clip bits at C_t = state.clip, and the server returns C_{t+1} from their noised
        fraction (else the clip returned is None). A sampled agent beyond the lanes
        (probability below 1e-8 per round by the 6-std margin) sends its noise share only:
        its exclusion is data-independent and can only lower its inclusion probability, so
        the guarantee holds as stated (it costs utility, not privacy)."""
        cfg = self.config
        k = cfg.agents
        mu_k = self.gradients(plan.thetas, ep)
        if not isinstance(self.mechanism, DistributedGaussianMechanism):
            reports = jax.vmap(self.release, (None, 0, 0))(state.setting, plan.mech_keys, mu_k)
            if cfg.shuffle:  # the shuffler (simulated, seeded): a random order, no identities
                order = jax.random.permutation(jax.random.fold_in(plan.key, 0x5F1E), k)
                reports = jax.tree_util.tree_map(lambda a: a[order], reports)
            # Server: average (then N_t SCSG steps on its own episodes).
            return average_reports(reports)[None], state.clip
        # Back to the K agents: a sampled agent in a lane holds its μ, every other one 0.
        ids, valid = plan.ids, plan.valid
        included = jnp.zeros((k,), bool).at[ids].max(valid)
        mu_k = jnp.zeros((k, self.dim), mu_k.dtype).at[ids].add(mu_k * valid[:, None])
        count = cfg.sampling_rate * k
        if self.mechanism.adaptive is None:
            shares = jax.vmap(self.mechanism.share)(plan.mech_keys, mu_k, included)
            return mean_from_sum(secure_aggregate(shares), count)[None], None
        shares = jax.vmap(self.mechanism.share, (0, 0, 0, None))(plan.mech_keys, mu_k,
                                                                  included, state.clip)
        update, bit_fraction = self.mechanism.unpack(secure_aggregate(shares), state.clip,
                                                     count)
        new_clip = self.mechanism.adaptive.next_clip(state.clip, bit_fraction)
        return mean_from_sum(update, count)[None], new_clip

    def cen_finish(self, state: FedPGState, plan: CenPlan, ep: Episodes, theta: Array,
                   opt_state: Any, new_clip: Array | None) -> tuple[FedPGState, RoundInfo]:
        """The round's new state and what it reports, from the server's new θ."""
        used = state.used + plan.batch + self.config.minibatch * plan.steps[0]
        info = RoundInfo(_mean_return(ep), jnp.mean(state.used), plan.batch.astype(jnp.float32),
                         plan.steps[0].astype(jnp.float32), jnp.sum(jnp.any(ep.live, axis=1)),
                         state.clip)
        new = FedPGState(PushSumState(theta, state.gossip.w), opt_state, state.key, used,
                         state.rounds + 1, state.noise, new_clip, state.setting)
        return new, info

    def dec_round(self, state: FedPGState, mixing: Array, key: Array, live: Array
                  ) -> tuple[FedPGState, RoundInfo]:
        """Every node's `dec_node_update`, one node at a time (`lax.map`), then the gossip.

        Why not vmapped over the nodes: each node's SCSG loop runs its own N_t steps, and
        vmapped the loop runs until the node with the largest N_t is done (about 3 × the mean
        N_t for K = 10), each step rolling out every node's episodes. On CPU one node at a time
        took half the time (K = 10) to a third (K = 50); on an accelerator, where a step costs
        about the same for 4 or 400 episodes, vmapping would likely pay (not measured here)."""
        z, env, keys, noise = self.dec_inputs(state, key)

        def node(a: tuple[Any, ...]) -> NodeUpdate:
            z_k, opt_k, env_k, key_k, noise_k = a
            return self.dec_node_update(z_k, opt_k, env_k, key_k, live, noise_k, state.setting)

        upd = jax.lax.map(node, (z, state.opt_state, env, keys, noise))
        return self.dec_finish(state, upd, mixing)

    def host_dec_round(self, state: FedPGState, mixing: Array, live: Array
                       ) -> tuple[FedPGState, RoundInfo]:
        """FedPG-Dec's `host_round`: every node's round as in `dec_node_update` (its draws,
        B_t episodes, μ_tᵏ, N_t SCSG steps, released update), the nodes side by side: their
        B_t episodes, then their b per SCSG step, played on the host together
        (`host_sample_nodes`), each node with its own keys; plan, μ_tᵏ, SCSG steps, mechanism
        → Reports and the push-sum step and mixing jitted."""
        round_key = jax.random.fold_in(state.key, state.rounds)
        plan = self._dec_plan(state, round_key, live)
        node = plan.node
        ep = self.host_sample_nodes(plan.z, plan.env_params, node.live, node.k_ep)
        mu = self._gradients(plan.z, ep)
        theta, opt_state = self.host_scsg(plan.z, mu, state.opt_state, node.steps,
                                          plan.env_params, node.k_inner, each=True)
        upd = self._dec_release(plan, ep, theta, opt_state)
        new, info = self._dec_finish(state, upd, mixing)
        return self._keep(live, new, state), info

    def dec_inputs(self, state: FedPGState, key: Array) -> tuple[Array, Any, Array,
                                                                  Array | None]:
        """Every node's z_k, private environment, round key and (secret noise) noise key."""
        nodes = jnp.arange(self.config.agents)
        z = push_sum_z(state.gossip)  # θ_{t,0}ᵏ
        env = self.env_params_of(state.key, nodes)
        keys = jax.vmap(jax.random.fold_in, (None, 0))(key, nodes)
        noise = (None if state.noise is None else
                 jax.vmap(node_noise_key, (None, 0, None))(state.noise, nodes, state.rounds))
        return z, env, keys, noise

    def dec_plan(self, state: FedPGState, key: Array, live: Array) -> DecPlan:
        """Every node's draws for the round (`dec_node_plan`), from the keys `dec_round`
        gives `dec_node_update`."""
        z, env, keys, noise = self.dec_inputs(state, key)
        if noise is None:
            node = jax.vmap(self.dec_node_plan, (0, None))(keys, live)
        else:
            node = jax.vmap(self.dec_node_plan, (0, None, 0))(keys, live, noise)
        return DecPlan(z, env, node)

    def dec_node_plan(self, key: Array, live: Array, noise_key: Array | None = None
                      ) -> NodePlan:
        """One node's draws from its round key: B_t, its episodes' keys, its mechanism key
        (`noise_key` under secret noise), N_t and its SCSG loop's key."""
        cfg = self.config
        k_b, k_ep, k_mech, k_n, k_inner = jax.random.split(key, 5)
        batch = jax.random.randint(k_b, (), cfg.batch_min, cfg.batch_max + 1)
        steps = self.draw_steps(k_n, batch[None]) * live
        return NodePlan(batch, (jnp.arange(cfg.batch_max) < batch) & live, k_ep,
                        k_mech if noise_key is None else noise_key, steps[0], k_inner)

    def dec_node_update(self, z: Array, opt_state: Any, env_params: Any, key: Array,
                        live: Array, noise_key: Array | None = None, setting: Any = None
                        ) -> NodeUpdate:
        """One node's part of a FedPG-Dec round, from its own z_k, optimizer state, private
        environment and key only: B_t episodes, its own μ_tᵏ (never sent), N_t SCSG steps,
        and its update Δ_k = θ_N − z_k released through the mechanism (with `noise_key`, the
        node's own secret key, else a key derived from `key`). The local runner computes it
        for each node in turn; the Ray runner calls it inside each node's actor. `setting`:
        the trial's mechanism as data (`FedPGState.setting`; `settings_algorithm`)."""
        plan = self.dec_node_plan(key, live, noise_key)
        one = lambda tree: jax.tree_util.tree_map(lambda a: a[None], tree)  # noqa: E731
        env = one(env_params)
        ep = self.sample(z[None], env, plan.live[None], plan.k_ep)
        mu = self.gradients(z[None], ep)
        theta, opt_state = self.scsg(z[None], mu, one(opt_state), plan.steps[None], env,
                                     plan.k_inner)
        return self.dec_node_release(z, plan, ep, theta[0],
                                     jax.tree_util.tree_map(lambda a: a[0], opt_state), setting)

    def host_dec_node_update(self, z: Array, opt_state: Any, env_params: Any, key: Array,
                             live: Array, noise_key: Array | None = None) -> NodeUpdate:
        """`dec_node_update` on a Gymnasium task, for one node (a Ray node's round): its
        plan, its B_t episodes and then its b per SCSG step played on the host in this process,
        μ_tᵏ, the SCSG steps and the release through the mechanism jitted. The pieces of
        `host_dec_round` for one node: its episodes are those `host_sample_nodes` plays from
        the node's own keys (as when it is the first node of a local round)."""
        plan = self._dec_node_plan(key, live, noise_key)
        one = lambda tree: jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], tree)  # noqa: E731
        env = one(env_params)
        ep = self.host_sample_nodes(z[None], env, plan.live[None], plan.k_ep[None])
        mu = self._gradients(z[None], ep)
        theta, opt_state = self.host_scsg(z[None], mu, one(opt_state), plan.steps[None], env,
                                          plan.k_inner[None], each=True)
        return self._dec_node_release(z, plan, ep, theta[0],
                                      jax.tree_util.tree_map(lambda a: a[0], opt_state))

    def dec_node_release(self, z: Array, plan: NodePlan, ep: Episodes, theta: Array,
                         opt_state: Any, setting: Any = None) -> NodeUpdate:
        """A node's update Δ_k = θ_N − z_k through the mechanism, and what it keeps."""
        return NodeUpdate(self.release(setting, plan.mech_key, theta - z), opt_state,
                          plan.batch, plan.steps, _mean_return(ep))

    def release(self, setting: Any, key: Array, x: Array) -> Report:
        """What an agent sends, through the mechanism: the config's, or in a program of
        settings the trial's member (`setting`, its MechanismArgs)."""
        if setting is None:
            return self.mechanism.privatize(key, x)
        return self.mechanism.privatize_with(setting, key, x)

    def dec_release(self, plan: DecPlan, ep: Episodes, theta: Array, opt_state: Any
                    ) -> NodeUpdate:
        """`dec_node_release` of every node (its episodes `ep`, its θ_N and optimizer state)."""
        return jax.vmap(self.dec_node_release)(plan.z, plan.node, ep, theta, opt_state)

    def dec_finish(self, state: FedPGState, upd: NodeUpdate, mixing: Array
                   ) -> tuple[FedPGState, RoundInfo]:
        """Every node steps x_k ← x_k + w_k Δ̃_k, the (x, w) gossip along the round's graph;
        the new state and what the round reports."""
        cfg = self.config
        gossip = push_sum_mix(push_sum_apply(state.gossip, upd.report), mixing)
        used = state.used + upd.batch + cfg.minibatch * upd.steps
        batch = upd.batch.astype(jnp.float32)
        info = RoundInfo(jnp.sum(upd.mean_return * batch) / jnp.sum(batch), jnp.mean(state.used),
                         jnp.mean(batch), jnp.mean(upd.steps.astype(jnp.float32)),
                         jnp.asarray(cfg.agents))
        return (FedPGState(gossip, upd.opt_state, state.key, used, state.rounds + 1,
                           state.noise, state.clip, state.setting), info)

    def consensus_params(self, state: FedPGState) -> Array:
        """The learned policy: θ (Cen) or the mean of the nodes' z (Dec), shape (d,)."""
        return jnp.mean(push_sum_z(state.gossip), axis=0)


def participant_slots(agents: int, q: float | None) -> int:
    """Lanes computed per round under Poisson sampling: the mean q·K plus 6 standard
    deviations (P(more sampled) < 1e-8), at most K."""
    if q is None or q >= 1:
        return agents
    return min(agents, math.ceil(q * agents + 6 * math.sqrt(q * (1 - q) * agents)) + 1)


def node_noise_key(root: Array, node: Array, round_: Array) -> Array:
    """A node's (or agent's) mechanism key for one round under secret noise."""
    return jax.random.fold_in(jax.random.fold_in(root, node), round_)


def _mean_return(ep: Episodes) -> Array:
    """The mean of the live episodes' returns: the sum of the environment's rewards (CartPole:
    the episode's length)."""
    live = ep.live.astype(jnp.float32)
    return jnp.sum(jnp.sum(ep.rewards, axis=-1) * live) / jnp.maximum(jnp.sum(live), 1.0)


def _episodes(traj: Trajectory, live: Array) -> Episodes:
    """A rollout of M·n episodes (time-major, learner-major order) as `Episodes` (M, n, ...)."""
    m, n = live.shape
    per = lambda a: jnp.swapaxes(a, 0, 1).reshape((m, n, *a.shape[:1], *a.shape[2:]))  # noqa: E731
    return Episodes(per(traj.obs), per(traj.actions), per(traj.mask), live,
                    traj.length.reshape(m, n), per(traj.rewards))
