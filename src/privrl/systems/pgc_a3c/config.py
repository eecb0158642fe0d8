"""PGC-A3C's configuration: `PGCA3CConfig` (every hyperparameter of a run, paper 000's
section 4 by default), its presets and per-mechanism defaults, and its validation.

It imports no JAX, flax or gymnax (privrl.privacy.plan and the CartPole spec are light), so
the command line refuses a bad value before JAX starts (issue 53); privrl.systems.pgc_a3c.algorithm
runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from privrl.choices import COMPOSITIONS, LOG_STDS, NOISE_MODES
from privrl.config import (
    ENV_HELP,
    NOISE_HELP,
    PRIVATE_HELP,
    Config,
    check_preset,
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
    probability,
    uniform_start_option,
)
from privrl.envs.cartpole import CartPoleSpec
from privrl.plugins import is_user_mechanism
from privrl.privacy.plan import (
    PlanError,
    PrivacyPlan,
    PrivacyRequest,
    plan_pure,
    split_clip_bit,
)
from privrl.systems.pgc_a3c.choices import MECHANISMS, REWARDS

LOSS_REDUCTIONS = ("sum", "mean")
ACTIONS = ("argmax", "sample")
SERVER_OPTIMIZERS = ("sgd", "adam", "rmsprop")
# What each report's gradient is of: "shared" the paper's actor-critic network and loss (policy,
# value head and the layer they share); "none" the policy alone (no value head, no critic).
CRITICS = ("shared", "none")
# The mechanisms whose clip --adaptive-clip moves: the agent scales its gradient by the public
# C_0/C_t before the mechanism (compiled with C_0), which is the release at clip C_t scaled by
# C_0/C_t for Laplace's L1 clip and noise (both homogeneous in C), and the aggregator scales
# the report back.
ADAPTIVE_CLIP_MECHANISMS = ("laplace", "none")
# The levers' switches (a run with one on runs alone, not in a program of settings).
ADAPTIVE_LEVERS = ("adaptive_clip", "step_from_noise", "public_eval_every")
# Presets. "paper" follows paper 000 section 4 exactly (the dataclass defaults). "tuned" is
# our improvement (docs/pgc-a3c-fidelity.md explains why the paper preset stalls): the task's
# shaped reward (CartPole's "failure", which a bias-having critic can fit; a task without one:
# its own reward), on-policy sampled actions, standardized advantages, and Adam at
# the aggregator (post-processing, so the guarantee is unchanged). "paper-code" is the paper
# preset read through the public TF1 A3C CartPole code whose every section-4 setting it shares
# (docs/pgc-a3c-fidelity.md): the aggregator applies the mean report with TF1's
# RMSPropOptimizer (decay 0.99, eps 1e-10, squared average starting at 1, lr = η = 0.5) and
# the task's shaped reward (CartPole: 0 per step, -1 on a fall). Both are outside the agents'
# mechanism: same ε.
# "tuned-ldp" is "tuned" for small ε (issue 18; measured in benchmarks/RESULTS.md): every report
# is its own Adam step (|B| = 1: averaging noisy reports wastes submissions when Adam already
# normalizes the step), 3 agents per round (less staleness), a wider network, and an L2 clip of
# 0.05 for PrivUnit2/PrivUnitG. Server-side changes are post-processing; the clip and the
# network change what an agent randomizes, never the mechanism's ε.
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "paper-code": {
        "server_optimizer": "rmsprop",
        "learning_rate": 0.5,
        "rmsprop_decay": 0.99,
        "rmsprop_eps": 1e-10,
        "rmsprop_initial_scale": 1.0,
        "reward": "shaped",
    },
    "tuned": {
        "reward": "shaped",
        "action_selection": "sample",
        "use_bias": True,
        "normalize_advantage": True,
        "server_optimizer": "adam",
        "learning_rate": 0.01,
        "explore_start": 0.0,
        "gamma": 0.95,
        "hidden": 8,
        "value_coef": 0.1,
    },
}
PRESETS["tuned-ldp"] = {**PRESETS["tuned"], "parallel_agents": 3, "hidden": 16}
# "tuned-ldp2" (issue 42; benchmarks/log/16-ldp-variance-reduction.md) is "tuned-ldp" with 8
# hidden units (d = 67 instead of 131): every report's clip binds (‖∇‖ is 90-2,500× C), so a
# report carries a unit of signal whatever the network, while the mechanism's error grows with
# d; on the tuning seeds fewer trials stalled (29/30 against 23/30). Same ε.
PRESETS["tuned-ldp2"] = {**PRESETS["tuned-ldp"], "hidden": 8}
# "continuous" (issue 39) is for a continuous-action task (a Gaussian head, privrl.nets.heads),
# measured on gymnax Pendulum-v1 in benchmarks/RESULTS.md: a learned, state-free log-std (a
# state-dependent one collapsed), the task's own reward scaled by 0.05 so the shared network's
# value error does not drown the policy's gradient (0.1 stalled 2 of 5 seeds, 0.05 none of
# 10), γ = 0.9 with GAE λ = 0.9 (a short horizon: Pendulum's reward is dense and immediate), a
# wider network, an entropy bonus (without it σ collapsed on some seeds) and Adam on the mean
# of |B| = 9 reports (one step per round: |B| = 1 steps were noisier and stalled more seeds).
# Issue 51: it starts close to a uniformly random policy (`uniform_start`; the network's own
# start, σ = 1 around a Glorot mean, was below random on Pendulum, MountainCarContinuous and
# the untuned benchmark's `reach`: benchmarks/log/24-untuned.md).
PRESETS["continuous"] = {
    "reward": "env",
    "action_selection": "sample",
    "use_bias": True,
    "normalize_advantage": True,
    "server_optimizer": "adam",
    "learning_rate": 0.001,
    "explore_start": 0.0,
    "gamma": 0.9,
    "gae_lambda": 0.9,
    "reward_scale": 0.05,
    "hidden": 128,
    "value_coef": 0.5,
    "entropy_coef": 0.01,
    "log_std": "parameter",
    "uniform_start": True,
}
# "adaptive" (issue 51): private defaults that adapt to the task instead of being tuned for
# it: "tuned"'s learner (the task's shaped reward, sampled actions, biases, advantages
# standardized on the agent's own episode, Adam at the aggregator) with a small network (8
# hidden units: the LDP noise grows with d) and the levers: the clip follows the median of the
# agents' gradient norms (its bit costs 10 % of each report's ε, counted), the step size is
# set from the mechanism's noise level, and the aggregator keeps the best policy it has seen
# on the task's public simulator, reverting and halving its step when the policy collapses.
# A continuous-action task gets a state-free log-std (the network's ignores it on a discrete
# one). Every task's policy starts uniform (`uniform_start`): a Glorot start, played without
# learning where the private step is small, was below random on the untuned benchmark's
# `corridor` (benchmarks/log/24-untuned.md). Each report is the policy's gradient alone
# (`critic` "none"): the actor-critic report of a task with long episodes and large returns
# was nearly all critic (benchmarks/log/26-report.md). Measured in benchmarks/RESULTS.md
# ("Adaptive private defaults").
PRESETS["adaptive"] = {
    **PRESETS["tuned"],
    "hidden": 8,
    "log_std": "parameter",
    "uniform_start": True,
    "critic": "none",
    "adaptive_clip": True,
    "step_from_noise": True,
    "public_eval_every": 20,
}
# Per preset and mechanism: (clip C, buffer |B|). The non-private baseline (ε = ∞, Table 1's
# Laplace row) is the Laplace pipeline without noise: L1 clip to C/2, no noise.
# PrivUnit2/PrivUnitG (not in the paper; privrl.privacy.ldp_vector) clip the L2 norm to C: the
# default C = 0.005 is Laplace's L1 radius C/2, so their ball contains Laplace's.
MECHANISM_DEFAULTS: dict[str, dict[str, tuple[float, int]]] = {
    "paper": {"laplace": (0.01, 1), "prs": (1.0, 100), "privunit": (0.005, 1),
              "privunitg": (0.005, 1), "none": (0.01, 1)},
    "paper-code": {"laplace": (0.01, 1), "prs": (1.0, 100), "privunit": (0.005, 1),
                   "privunitg": (0.005, 1), "none": (0.01, 1)},
    "tuned": {"laplace": (0.01, 10), "prs": (1.0, 10), "privunit": (0.005, 10),
              "privunitg": (0.005, 10), "none": (0.01, 10)},
    "tuned-ldp": {"laplace": (0.01, 1), "prs": (1.0, 1), "privunit": (0.05, 1),
                  "privunitg": (0.05, 1), "none": (0.01, 1)},
    "continuous": {"laplace": (0.01, 9), "prs": (1.0, 9), "privunit": (0.05, 9),
                   "privunitg": (0.05, 9), "none": (0.01, 9)},
    "adaptive": {"laplace": (0.01, 9), "prs": (1.0, 9), "privunit": (0.05, 9),
                 "privunitg": (0.05, 9), "none": (0.01, 9)},
}
MECHANISM_DEFAULTS["tuned-ldp2"] = dict(MECHANISM_DEFAULTS["tuned-ldp"])
# ProjUnit and seed-compressed PrivUnitG (privrl.privacy.ldp_compact) estimate what PrivUnitG
# does with a few bytes per report: they take PrivUnitG's C and |B|.
for _defaults in MECHANISM_DEFAULTS.values():
    _defaults |= {name: _defaults["privunitg"] for name in ("projunit", "privunitg-seed")}


@dataclass(frozen=True)
class PGCA3CConfig(Config):
    """Every hyperparameter of a PGC-A3C run. Defaults follow the paper (section 4).

    `epsilon` is each agent's total budget; with `submissions_per_agent` T > 1 every report uses
    ε/T (paper 3.2.1), the pure ε the ledger enforces by basic composition. With
    `budget_composition` "optimal" the budget is (ε, `delta`) instead, enforced by the optimal
    composition theorem, and every report uses the largest ε_0 whose T-fold composition fits
    it (more than ε/T: less noise for the same (ε, δ)). `clip` and `buffer_size` left as None
    take the preset's value for the mechanism (`MECHANISM_DEFAULTS`); `d_hat` None is the
    paper's ⌊ε/2.5⌋ rule. Build a non-paper preset with `PGCA3CConfig.from_preset("tuned",
    ...)`.
    """

    preset: str = option(
        "paper", choices=("paper", "paper-code", "tuned", "tuned-ldp", "tuned-ldp2",
                          "continuous", "adaptive"),
        help="paper: paper 000's settings exactly (the default, as for every privrl run "
        "command: paper fidelity first; `make run` asks for tuned). paper-code: the paper's "
        "settings with TF1 RMSProp at the aggregator and the task's shaped reward (the public "
        "code the paper's settings match). tuned: our improved settings (the task's shaped "
        "reward, sampled actions, biases, normalized advantages, Adam at the aggregator; see "
        "docs/pgc-a3c-fidelity.md). tuned-ldp: tuned for small ε (|B| = 1, P = 3, hidden "
        "16, L2 clip 0.05 for privunit/privunitg; docs/ldp-mechanisms.md); tuned-ldp2: "
        "tuned-ldp with 8 hidden units. continuous: for a continuous-action (Box) task: a "
        "state-free log-std, GAE, γ = 0.9, scaled reward (docs/environments.md). adaptive: "
        "private defaults that adapt to the task (issue 51): tuned's learner with 8 hidden "
        "units reporting the policy's gradient alone (--critic none), --adaptive-clip, "
        "--step-from-noise and --public-eval-every 20. Options "
        "given explicitly override it.")
    mechanism: str = option(
        "laplace", choices=MECHANISMS, user_callable=True,
        help="Local randomizer for each gradient report: laplace (L1 clip + Laplace noise), "
        "prs (projected random sign), privunit / privunitg (PrivUnit2 / PrivUnitG: unbiased "
        "ε-LDP vector estimates, L2 clip; docs/ldp-mechanisms.md), projunit / privunitg-seed "
        "(ProjUnit: 72-byte uploads; seed-compressed PrivUnitG: 8-byte uploads, ε with an "
        "ideal generator; docs/ldp-mechanisms.md), none (non-private ε = ∞ baseline: "
        "clipped, no noise; NO privacy guarantee), or your own module:callable (its declared "
        "guarantee, not verified by privrl; docs/ldp-mechanisms.md).")
    epsilon: float | None = option(
        5.0, help="Each agent's total privacy budget ε over the run (> 0, finite; the "
        "protected unit: one agent, every report it submits). Default 5. Not allowed with "
        "--mechanism none.")
    epsilon_per_report: float | None = option(
        None, help="Instead of splitting --epsilon over an agent's submissions: the ε of each "
        "report (> 0, finite); --epsilon is then the cap the ledger enforces, and must afford "
        "every report.", unit="ε")
    clip: float | None = option(
        None, help="Clip size C (> 0). Default: 0.01 for laplace and none, 1 for prs, 0.005 "
        "(an L2 radius) for the PrivUnit family (privunit, privunitg, projunit, "
        "privunitg-seed; tuned-ldp: 0.05).")
    buffer_size: int | None = option(
        None, flag="--buffer", help="Aggregator buffer size |B|: θ is updated with the mean of "
        "|B| reports. Default: the preset's (paper: 1 for laplace and none, 100 for prs; "
        "tuned: 10; tuned-ldp: 1).")
    d_hat: int | None = option(
        None, help="PRS projected dimension d̂ (1 ≤ d̂ ≤ 112). Default: max(1, min(d, "
        "⌊ε/2.5⌋)).")
    submissions_per_agent: int = option(
        1, help="T reports per agent, each with ε/T (sequential composition; paper 3.2.1), "
        "or, with --budget-composition optimal, the largest ε_0 whose T-fold optimal "
        "composition is (ε, δ)-LDP.")
    budget_composition: str = option(
        "basic", choices=COMPOSITIONS,
        help="How the ledger enforces each agent's budget over its pure ε-LDP reports. basic "
        "(default): the pure ε, Σ of the reports' ε. optimal: an (ε, δ) at --delta by the "
        "optimal composition theorem (Kairouz, Oh & Viswanath 2015), which admits more "
        "reports, or larger ε per report, for the same ε. privacy.json states both and which "
        "is enforced.")
    delta: float = option(
        1e-5, help="δ of the optimal composition of an agent's reports: stated beside the "
        "pure ε, and the budget's δ with --budget-composition optimal.")
    parallel_agents: int = option(
        9, help="P agents start from the same snapshot of θ; their reports are applied in "
        "turn (9: the paper's asynchronous threads).")
    submissions: int = option(
        90_000, help="Stop after N submissions per trial (the paper's cap: 90000).")
    trials: int = option(1, help="Independent trials, run vectorized.")
    seed: int = option(0, help="Random seed (same seed, same results).")
    trial_block: int = option(
        10, help="The most trials a round computes together: a CPU cache holds about 10 of "
        "the paper's; an accelerator wants thousands. Part of what fixes a trial's floats.")
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)
    audit_plugin: bool = option(
        True, help="A user's mechanism (module:callable) is audited before the run: a quick "
        "privrl audit of one release (seconds) whose lower bound on ε is recorded beside the "
        "declared ε, and a run whose declaration it refutes stops before it starts.")
    secure_noise: bool = option(
        False, help="Float-safe noise: exact discrete Laplace on a grid from the OS CSPRNG, "
        "the input clipped in integers (no low-bit leak; slower; not reproducible; "
        "docs/secure-noise.md); laplace only.")
    shuffle: bool = option(
        False, help="Shuffle model: a trusted shuffler hands the aggregator each round's "
        "reports in random order without identities; privacy.json adds the central (ε, δ) "
        "after amplification by shuffling (FMT21). Amplification grows with "
        "--parallel-agents. The local ε is unchanged.")
    shuffle_delta: float = option(1e-5, help="δ of the central (ε, δ) stated under --shuffle.")
    learning_rate: float = option(
        0.5, help="η, the aggregator's step size (SGD in the paper).")
    gamma: float = option(0.99, help="Discount factor γ, in (0, 1].")
    value_coef: float = option(0.5, help="λ, the weight of the critic's loss.")
    critic: str = option(
        "shared", choices=CRITICS, help="shared (the paper's): the network has a value head "
        "beside the policy on a shared hidden layer, and each report is the gradient of the "
        "actor-critic loss over all of θ. none: no value head and no critic: the network is "
        "the policy alone (d smaller), its advantages the episode's discounted returns (with "
        "--normalize-advantage standardized on the agent's own episode), so each report, and "
        "the ε spent on it, carries the policy's gradient only. Where the critic's loss "
        "dominates the gradient (long episodes, large returns) the clipped actor-critic report "
        "is nearly all critic (benchmarks/log/26-report.md).")
    entropy_coef: float = option(0.01, help="β, the weight of the entropy bonus.")
    explore_start: float = option(
        0.5, help="α = max(0, explore_start − n / explore_decay): the chance of a random "
        "action at submission n.")
    explore_decay: float = option(1800.0, help="See --explore-start.", unit="submissions")
    hidden: int = option(16, help="Hidden units of the actor-critic network.")
    max_episode_steps: int | None = option(
        None, flag="--max-steps", help=max_steps_help("paper 000's CartPole-v0: 200"))
    gravities: tuple[float, ...] = option(
        (9.7, 9.8, 9.9), help="The default CartPole task's private gravities, one drawn per "
        "agent.")
    env: str | None = option(None, help=ENV_HELP)
    private_params: tuple[str, ...] = option((), flag="--private", help=PRIVATE_HELP)
    target_score: float | None = option(
        None, flag="--target-return", help="Target Θ of the FST and success ratio: the first "
        "submission n where the mean return of --score-window consecutive episodes reaches Θ "
        "(any finite number). Default: the task's (CartPole-v0's 195; a Gymnasium "
        "reward_threshold, e.g. -100 on Acrobot-v1); a task without one reports scores and "
        "no FST.")
    score_window: int = option(
        10, help="Window m (>= 1) of the moving average μ_n of the FST (the paper's: 10).")
    reward: str = option(
        "env", choices=REWARDS,
        help="What the agents learn from: env (the environment's reward), step (+1 per step), "
        "failure (-1 on termination, 0 otherwise) or goal (+1 once the return reaches "
        "--target-return, -1 on an earlier termination). failure and goal read termination "
        "as failure (CartPole's): on a task where terminating is success (Acrobot, "
        "FourRooms) use env. shaped: the task's shaped reward (CartPole's failure), env on a "
        "task without one. The score is the true return whatever this is.")
    action_selection: str = option(
        "argmax", choices=ACTIONS, help="argmax of π (the paper's) or sample from π.")
    use_bias: bool = option(False, help="Biases in the network (paper: none, d = 112).")
    normalize_advantage: bool = option(
        False, help="Standardize the advantages within each episode.")
    loss_reduction: str = option(
        "sum", choices=LOSS_REDUCTIONS, help="sum over the episode's steps (paper eq. 15-17) "
        "or mean (sum / steps). Under an active L1 clip both give the same report.")
    server_optimizer: str = option(
        "sgd", choices=SERVER_OPTIMIZERS, help="The aggregator's optimizer on the mean report "
        "(paper: sgd; rmsprop is TF1's RMSPropOptimizer).")
    rmsprop_decay: float = option(
        0.99, help="rmsprop: ν ← decay·ν + (1 − decay)·g², θ ← θ − η·g/√(ν + eps).")
    rmsprop_eps: float = option(1e-10, help="rmsprop: the eps of --rmsprop-decay's update.")
    rmsprop_initial_scale: float = option(1.0, help="rmsprop: ν's initial value.")
    rmsprop_momentum: float = option(
        0.0, help="rmsprop: TF1's momentum: mom ← m·mom + η·g/√(ν + eps), θ ← θ − mom.")
    adam_momentum: float = option(
        0.9, help="adam: β₁, the first-moment decay: each step follows the mean of about "
        "1/(1 − β₁) recent reports, averaging the mechanism's noise away (post-processing).")
    lr_decay_updates: float | None = option(
        None, help="The step size decays as learning_rate / √(1 + n / this) with the update "
        "count n (post-processing). Default: constant.", unit="updates")
    theta_ema: float | None = option(
        None, help="Polyak averaging β (post-processing): the agents get θ ← β·θ + (1 − β)·φ "
        "of the optimizer's weights φ. Default: none (θ = φ).")
    gae_lambda: float | None = option(
        None, help="GAE(λ) advantages and critic targets, λ in [0, 1]. Default: none, the "
        "paper's Ĝ − V (Monte-Carlo returns).")
    reward_scale: float = option(
        1.0, help="The learner's rewards are multiplied by it (not the score).")
    log_std: str = log_std_option()
    uniform_start: bool = uniform_start_option("policy layer's weights")
    # Levers that adapt a private run to its task (issue 51; the "adaptive" preset turns them
    # on). Each is post-processing or accounted in the same ε and stated in privacy.json.
    adaptive_clip: bool = option(
        False, help="Adaptive clipping (Andrew et al. 2021) under local DP: the clip starts at "
        "--clip and follows the --clip-quantile of the agents' gradient norms. Each report "
        "also releases its bit 1[norm <= clip] by randomized response at --clip-epsilon-share "
        "of the report's ε (the gradient gets the rest: same ε per report, counted by the "
        "ledger, stated in privacy.json); the aggregator moves the clip by C ← C·exp(−lr·("
        "estimated fraction − quantile)) after each round. laplace and none only; local "
        "runtime only.")
    clip_quantile: float = option(
        0.5, help="--adaptive-clip: the target fraction γ of agents whose gradient norm is "
        "within the clip, in (0, 1).")
    clip_lr: float = option(
        0.2, help="--adaptive-clip: the learning rate η_C > 0 of the geometric clip update.")
    clip_epsilon_share: float = option(
        0.1, help="--adaptive-clip: the fraction of each report's ε spent on its clip bit, in "
        "(0, 1).")
    episodes_per_report: int = option(
        1, help="E episodes per report: each agent plays E episodes (all on its own "
        "dynamics) and reports the mean of their gradients: one release, the same ε, more "
        "signal per unit of ε (E times the environment steps).")
    step_from_noise: bool = option(
        False, help="Set the aggregator's step size from the mechanism's known noise level "
        "(post-processing): η·s/(1 + s), s the signal-to-noise ratio of what one step "
        "follows (a report's clipped signal over its noise, times |B| and Adam's averaging "
        "window 1/(1 − β₁)).")
    public_eval_every: int | None = option(
        None, help="Every this many rounds, the aggregator plays its policy on the task's "
        "PUBLIC simulator (the environment's default parameters, no agent's data: "
        "post-processing), keeps the best candidate so far as the run's final policy, and "
        "when the policy collapses reverts to the best and multiplies its step by "
        "--backoff. Default: off. Local runtime only.", unit="rounds")
    public_eval_episodes: int = option(
        16, help="--public-eval-every: the public simulator's episodes per evaluation, >= 2 (the "
        "same episodes' keys for every candidate).")
    backoff: float = option(
        0.5, help="--public-eval-every: the step's multiplier at each revert, in (0, 1].")

    presets = PRESETS

    def resolved(self) -> PGCA3CConfig:
        """Fill in the preset's per-mechanism defaults and validate everything."""
        cfg = self
        check_preset(cfg.preset, PRESETS)
        if not is_user_mechanism(cfg.mechanism):  # a user's module:callable: Laplace's C, |B|
            one_of("mechanism", cfg.mechanism, MECHANISMS)
        if cfg.mechanism == "none":
            cfg = replace(cfg, epsilon=math.inf)
        defaults = MECHANISM_DEFAULTS[cfg.preset]
        clip, buffer = defaults.get(cfg.mechanism, defaults["laplace"])
        cfg = replace(cfg, clip=clip if cfg.clip is None else cfg.clip,
                      buffer_size=buffer if cfg.buffer_size is None else cfg.buffer_size)
        cfg.validate()
        return cfg

    def privacy_plan(self) -> PrivacyPlan:
        """What the request means (privrl.privacy.plan): each report's ε (ε/T by basic
        composition, or the largest ε_0 whose T-fold optimal composition is (ε, δ)-DP; or
        `epsilon_per_report` as given) and each agent's ledger, which enforces ε."""
        t = self.submissions_per_agent
        if self.mechanism == "none" or self.epsilon is None or math.isinf(self.epsilon):
            eps = math.inf if self.epsilon is None else self.epsilon
            return PrivacyPlan("none", t, self.delta, eps, eps / t, cap=eps,
                               composition=self.budget_composition)
        try:
            return plan_pure(PrivacyRequest(self.epsilon, self.epsilon_per_report, None,
                                            self.delta, None, self.budget_composition), t,
                             afford_all=True, release_delta=is_user_mechanism(self.mechanism))
        except PlanError as e:
            fail(e.field, e.message)

    def validate(self) -> None:
        if self.mechanism != "none":
            positive("epsilon", self.epsilon)
        elif self.epsilon_per_report is not None:
            fail("epsilon_per_report", "the non-private baseline has no ε")
        one_of("budget_composition", self.budget_composition, COMPOSITIONS)
        in_range("delta", self.delta, 0, 1, low_open=True, high_open=True)
        if self.budget_composition == "optimal" and self.mechanism == "none":
            fail("budget_composition", "the non-private baseline has no budget to compose")
        positive("clip", self.clip)
        if self.d_hat is not None:
            if self.mechanism != "prs":
                fail("d_hat", "only the prs mechanism takes d_hat")
            integer("d_hat", self.d_hat)
        for name in ("trials", "submissions", "parallel_agents", "buffer_size",
                     "submissions_per_agent", "score_window", "trial_block"):
            integer(name, getattr(self, name))
        if self.max_episode_steps is not None:
            integer("max_episode_steps", self.max_episode_steps)
        integer("seed", self.seed, 0)
        if self.target_score is not None:
            finite("target_score", self.target_score)
        if self.noise is not None:
            one_of("noise", self.noise, NOISE_MODES, "noise mode")
        if self.secure_noise and self.mechanism != "laplace":
            fail("secure_noise", "float-safe noise is for the laplace mechanism only, got "
                                 f"{self.mechanism}: prs adds no Laplace or Gaussian noise (it "
                                 "releases randomly flipped signs, a different leak analysis; "
                                 "docs/secure-noise.md), privunit/privunitg sample on the host "
                                 "in float64 (no discrete variant) and none adds no noise")
        if self.shuffle and self.mechanism == "none":
            fail("shuffle", "the non-private baseline has no local ε to amplify")
        if self.shuffle and self.submissions_per_agent > 1:
            # Agent ids are index // T, so one agent's T reports can share a round's batch, and
            # the per-batch amplification bound (one report per user) would not cover them.
            fail("shuffle", "needs submissions_per_agent = 1: an agent's reports may share a "
                            "round's batch, which the shuffle bound (one report per agent and "
                            "batch) does not cover")
        in_range("shuffle_delta", self.shuffle_delta, 0, 1, low_open=True, high_open=True)
        positive("learning_rate", self.learning_rate)
        positive("explore_decay", self.explore_decay)
        in_range("gamma", self.gamma, 0, 1, low_open=True)
        one_of("reward", self.reward, REWARDS)
        one_of("action_selection", self.action_selection, ACTIONS)
        one_of("loss_reduction", self.loss_reduction, LOSS_REDUCTIONS)
        one_of("server_optimizer", self.server_optimizer, SERVER_OPTIMIZERS)
        if self.server_optimizer == "rmsprop":
            in_range("rmsprop_decay", self.rmsprop_decay, 0, 1, high_open=True)
            positive("rmsprop_eps", self.rmsprop_eps)
            non_negative("rmsprop_initial_scale", self.rmsprop_initial_scale)
            in_range("rmsprop_momentum", self.rmsprop_momentum, 0, 1, high_open=True)
        in_range("adam_momentum", self.adam_momentum, 0, 1, high_open=True)
        if self.lr_decay_updates is not None:
            positive("lr_decay_updates", self.lr_decay_updates)
        if self.theta_ema is not None:
            in_range("theta_ema", self.theta_ema, 0, 1, high_open=True)
        if self.gae_lambda is not None:
            probability("gae_lambda", self.gae_lambda)
        positive("reward_scale", self.reward_scale)
        finite("reward_scale", self.reward_scale)
        one_of("log_std", self.log_std, LOG_STDS)
        one_of("critic", self.critic, CRITICS)
        check_uniform_start(self.uniform_start, self.log_std)
        probability("explore_start", self.explore_start)
        self._check_levers()
        CartPoleSpec(gravities=tuple(self.gravities))
        self.privacy_plan()  # the request as the plan reads it (refusals name their field)


    def _check_levers(self) -> None:
        """The adaptive levers' fields (issue 51)."""
        for name in ("adaptive_clip", "step_from_noise"):
            if not isinstance(getattr(self, name), bool):
                fail(name, f"must be true or false, got {getattr(self, name)!r}")
        in_range("clip_quantile", self.clip_quantile, 0, 1, low_open=True, high_open=True)
        positive("clip_lr", self.clip_lr)
        finite("clip_lr", self.clip_lr)
        in_range("clip_epsilon_share", self.clip_epsilon_share, 0, 1, low_open=True,
                 high_open=True)
        if self.adaptive_clip:
            if self.mechanism not in ADAPTIVE_CLIP_MECHANISMS:
                fail("adaptive_clip", f"adapts the clip of {' or '.join(ADAPTIVE_CLIP_MECHANISMS)}"
                                      f" reports, not {self.mechanism}")
            if self.secure_noise:
                fail("adaptive_clip", "the float-safe Laplace release clips on a fixed integer "
                                      "grid; adaptive clipping needs the float release")
        integer("episodes_per_report", self.episodes_per_report)
        if self.public_eval_every is not None:
            integer("public_eval_every", self.public_eval_every)
        integer("public_eval_episodes", self.public_eval_episodes, 2)
        in_range("backoff", self.backoff, 0, 1, low_open=True)

    def release_epsilons(self) -> tuple[float, float | None]:
        """(ε of each report's gradient release, ε of its adaptive-clip bit or None): the
        plan's ε per report, split by `privrl.privacy.plan.split_clip_bit` when the clip
        adapts under a mechanism (the two compose to the report's ε, what the ledger charges)."""
        eps = self.privacy_plan().epsilon_per_report
        if not self.adaptive_clip or self.mechanism == "none":
            return eps, None
        try:
            return split_clip_bit(eps, self.clip_epsilon_share)
        except PlanError as e:
            fail(e.field, e.message)
