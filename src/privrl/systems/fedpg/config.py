"""FedPG's configuration: `FedPGConfig` (every hyperparameter of a run, FedPG-BR's CartPole
setting by default), its presets, its validation (one small named check per concern), and what
is derived from a config alone: Dec's graph, the lanes a Cen round computes, and whether
several settings can run as one program."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from privrl.choices import (
    ACCOUNTANTS,
    COMPOSITIONS,
    DEFAULT_ACCOUNTANT,
    LOG_STDS,
    NOISE_MODES,
    TOPOLOGIES,
)
from privrl.config import (
    ACCOUNTANT_HELP,
    ENV_HELP,
    NOISE_HELP,
    PRIVATE_HELP,
    Config,
    check_preset,
    fail,
    in_range,
    integer,
    log_std_option,
    max_steps_help,
    one_of,
    option,
    other_field,
    positive,
    uniform_start_option,
)
from privrl.envs.cartpole import CartPoleSpec
from privrl.plugins import is_user_mechanism
from privrl.privacy.plan import (
    PlanError,
    PrivacyPlan,
    PrivacyRequest,
    no_privacy,
    plan_discrete,
    plan_gaussian,
    plan_pure,
)
from privrl.systems.fedpg.choices import ALGORITHMS, ATTACKS, MECHANISMS, ROBUST

if TYPE_CHECKING:
    from privrl.federation.topology import Topology

# Noise calibrated by an accountant: the local Gaussian (LDP per agent) and the distributed
# Gaussian (user-level central DP on the securely aggregated sum, privrl.privacy.distributed).
# central-gaussian: a server trusted with the clipped updates adds the noise to its robust
# aggregate (privrl.privacy.central; docs/byzantine.md).
ACCOUNTED_MECHANISMS = ("gaussian", "distributed-gaussian", "distributed-gaussian-continuous",
                        "central-gaussian")
# The secure sums of noise shares (fedpg-cen): distributed-gaussian, the deployment's distributed
# discrete Gaussian over a sum modulo 2^b (privrl.privacy.discrete_sum: every agent in every
# round, calibrated by its own zCDP bound), simulated exactly in a local run; and
# distributed-gaussian-continuous, a simulation only: continuous Gaussian shares over a real
# sum (privrl.privacy.distributed), with Poisson sampling of agents and adaptive clipping.
DISTRIBUTED_MECHANISMS = ("distributed-gaussian", "distributed-gaussian-continuous")
# Pure ε-LDP per release (ε per release, composed by the ledger), unlike the Gaussian.
PURE_MECHANISMS = ("laplace", "privunit", "privunitg")
# distributed-gaussian-continuous's default sampling: this many agents per round in expectation.
DEFAULT_PARTICIPANTS = 50
IMPORTANCE = ("step", "trajectory")
OPTIMIZERS = ("adam", "sgd")
# "paper": FedPG-BR's CartPole setting (the dataclass defaults). "continuous" (issue 39): for a
# continuous-action task (a Gaussian head), measured on gymnax Pendulum-v1 in
# benchmarks/RESULTS.md (it does not reach PGC-A3C's returns there): a learned, state-free
# log-std, γ = 0.9 (Pendulum's reward is dense: a short horizon's reward-to-go, whitened per
# episode, says which actions helped), a wider network, smaller batches (B_t ~ U{4..8}: more
# rounds for the same episodes), importance weights truncated at 2 (a Gaussian's per-step
# ratios are unbounded) and Adam at 3e-4 (1e-3 oscillated between −450 and −1,300). Its
# policy starts close to the uniform one (`uniform_start`, issue 51: FedPG's own Glorot-like
# start played below random on MountainCarContinuous, private and not; benchmarks/RESULTS.md).
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "continuous": {"log_std": "parameter", "gamma": 0.9, "hidden": (64, 64),
                   "batch_min": 4, "batch_max": 8, "importance_clip": 2.0,
                   "learning_rate": 3e-4, "uniform_start": True},
}
# "adaptive" (issue 51): FedPG-Cen's private levers that adapt to the task, both
# post-processing: the server's step size set from the mechanism's known noise level
# (`step_from_noise`), and the best candidate on the task's public simulator kept every 10
# rounds, reverting and halving the step when the policy collapses (`public_eval_every`);
# on "paper"'s learner. "adaptive-continuous": the same levers on "continuous"'s learner.
# --adaptive-clip (distributed-gaussian-continuous's, its ε counted) is added by hand: it
# belongs to one mechanism. Measured in benchmarks/RESULTS.md (issue 51's levers).
ADAPTIVE_LEVERS: dict[str, Any] = {"step_from_noise": True, "public_eval_every": 10}
PRESETS["adaptive"] = dict(ADAPTIVE_LEVERS)
PRESETS["adaptive-continuous"] = {**PRESETS["continuous"], **ADAPTIVE_LEVERS}
# "fleet" (issue 51): FedPG-Cen for a large fleet at a small user-level ε, what `privrl plan
# fedpg-cen` recommends: the secure sum's Gaussian with Poisson sampling of agents
# (distributed-gaussian-continuous; q·K = 50 agents a round by default, DEFAULT_PARTICIPANTS):
# the noise on the mean, σ_q·C/(qK), is 1.15-1.5x that of every agent in every round's
# at the same rounds (amplification by sampling), while a round computes 1/q fewer agents, so
# a K = 1,000 run fits 10 minutes on 2 cores (benchmarks/log/28-fedcen.md); the clip follows
# the agents' median norm (adaptive_clip, its bits in the same ε). On paper's learner.
# "fleet-continuous": continuous's learner with a small network (16, 16) (the sum's noise
# grows with d: d = 4,418 under (64, 64) on a 1-D reaching task) and Adam at 1e-3 (fewer,
# noisier steps). The step is the preset's own (Adam's step per coordinate does not grow
# with the noise; the plan's noise-shrunk step left reach at its start, log 26-fedrows).
FLEET_MECHANISM: dict[str, Any] = {"mechanism": "distributed-gaussian-continuous",
                                   "adaptive_clip": True}
# fleet-continuous's report: B_t ~ U{12..20} episodes (paper's, not continuous's U{4..8}),
# and the server's SCSG minibatch b = 11, which keeps its mean inner steps (B_t + b)/b near
# continuous's 2.5: under the sum's noise an agent's report of more episodes carries more
# signal per unit of its clip (the noise is σ·C, whatever the report holds), while more inner
# steps would reuse each round's noise more times (Pendulum: B_t ~ U{12..20} with b = 4, five
# inner steps a round, fell below random; benchmarks/log/30-fedcen.md).
FLEET_REPORT: dict[str, Any] = {"batch_min": 12, "batch_max": 20, "minibatch": 11}
PRESETS["fleet"] = dict(FLEET_MECHANISM)
PRESETS["fleet-continuous"] = {**PRESETS["continuous"], "hidden": (16, 16),
                               "learning_rate": 1e-3, **FLEET_REPORT, **FLEET_MECHANISM}


def is_pure_mechanism(mechanism: str) -> bool:
    """A pure ε-LDP mechanism, ε per release: laplace, privunit, privunitg or a user's own
    (privrl.privacy.user, asked for that ε with δ = 0)."""
    return mechanism in PURE_MECHANISMS or is_user_mechanism(mechanism)

@dataclass(frozen=True)
class FedPGConfig(Config):
    """Every hyperparameter of a FedPG run; defaults: FedPG-BR's CartPole-v1 setting.

    `budget` is the number of episodes each agent samples (B_t plus, for Cen, the server's
    N_t·b, so that Cen, Dec and a single agent are compared at equal samples per learner).
    `inner_steps` None draws N_t ~ Geom(b/(B_t+b)) on {1, 2, ...}; an integer fixes it (SVRPG).
    Privacy (what each agent sends, once per round; the request is read by
    privrl.privacy.plan, `privacy_plan()`): `epsilon` is always each agent's TOTAL ε over the
    run. laplace, privunit, privunitg (pure ε-LDP per release, composed by the ledger): the
    total is split over the most rounds the episode budget allows (ε/R, or by the optimal
    composition with `budget_composition` "optimal"; `resolved()` fills in
    `epsilon_per_report`) and the ledger enforces it; or give `epsilon_per_report` (one
    release's ε) instead, capped by `epsilon_budget` if given. gaussian: L2 clip `clip` and
    `noise_multiplier` σ (noise std σ·clip), or instead `epsilon` at `delta`, for which σ is
    calibrated over the most rounds the budget allows, by `accountant` (pld: the exact
    analytic Gaussian composition; rdp: RDP), the one that also states the run's ε.
    distributed-gaussian (Cen only): user-level central DP; every agent
    clips its μ_tᵏ to `clip`, rounds it to integers and adds a discrete Gaussian share of the
    noise, the server sees only the sum modulo 2^b, whose noise over the sensitivity is σ
    (`noise_multiplier`, or calibrated from `epsilon` at `delta` for `dp_rounds`, default the
    most rounds the budget allows, by the mechanism's own bound); every agent takes part in
    every round; shares are sized so that any `min_honest` (default K) of them carry the
    full noise. The same mechanism as a Flower deployment's: privrl.privacy.discrete_sum.
    distributed-gaussian-continuous (a simulation): the same with continuous Gaussian shares
    over a real sum, each agent taking part with probability `sampling_rate` (Poisson), by
    `accountant`. See privrl.privacy.distributed.
    `adaptive_clip` (distributed-gaussian-continuous only): the clip follows the
    `clip_quantile` γ of the sampled agents' update norms (Andrew et al. 2021), starting from
    `clip`, with learning rate `clip_lr` η_C; the clip bits' sum is noised with std
    `clip_count_stddev` σ_b (None: q·K/20), and σ (the round's noise multiplier, calibrated
    as without it) is split into the update's z_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2) and the bits' σ_b.
    """

    algorithm: str = option("cen", cli=False, choices=ALGORITHMS,
                            help="cen (a server, Algorithm 1) or dec (push-sum, Algorithm 2).")
    preset: str = option(
        "paper", choices=tuple(PRESETS), help="paper: FedPG-BR's CartPole setting exactly. "
        "continuous: for a continuous-action (Box) task, e.g. --env gymnax:Pendulum-v1: a "
        "state-free learned log-std, γ = 0.9, hidden (64, 64), B_t ~ U{4..8}, ω truncated at "
        "2, Adam 3e-4 (benchmarks/RESULTS.md). adaptive (fedpg-cen): paper's learner with "
        "--step-from-noise and --public-eval-every 10; adaptive-continuous: continuous's "
        "with the same. fleet (fedpg-cen, a large fleet at a small ε; give --epsilon): "
        "paper's learner, --mechanism distributed-gaussian-continuous (50 agents a round in "
        "expectation: amplified by sampling) with --adaptive-clip; fleet-continuous: "
        "continuous's with hidden (16, 16), Adam 1e-3 and reports of B_t ~ U{12..20} "
        "episodes (--minibatch 11: the server's inner steps as continuous's), the same "
        "mechanism. Options given "
        "explicitly override it.")
    topology: str = option(
        "ring", choices=TOPOLOGIES, help="fedpg-dec's directed graph: ring (static k → k+1), "
        "exponential (time-varying one-peer exponential graph of SGP) or random (one random "
        "out-neighbour per node per round, strongly connected over every --window rounds).")
    window: int | None = option(
        None, help="Random topology: rounds over which the graph must be strongly connected. "
        "Default: max(3, ⌈2 log2 K⌉).")
    agents: int = option(10, help="K agents (K = 1: a single SVRPG agent).")
    hidden: tuple[int, ...] = option((16, 16), help="Hidden layer sizes of the policy.")
    gamma: float = option(0.999, help="Discount factor γ.")
    batch_min: int = option(12, help="B_t is drawn uniformly from [batch-min, batch-max] "
                            "every round (B > 0).")
    batch_max: int = option(20, help="Upper end of B_t (FedPG-BR's: 20).")
    minibatch: int = option(4, help="b: episodes per SCSG step (b > 0).")
    inner_steps: int | None = option(
        None, help="N_t, the SCSG steps per round. Default: drawn ~ Geom(b/(B_t + b)) on "
        "{1, 2, ...} (an integer fixes it: SVRPG).")
    learning_rate: float = option(1e-3, help="The optimizer's step size (FedPG-BR's: 1e-3).")
    optimizer: str = option("adam", choices=OPTIMIZERS, help="The policy's optimizer.")
    importance: str = option(
        "step", choices=IMPORTANCE, help="Importance weight ω: step (per-step ratio, "
        "FedPG-BR's code) or trajectory (the product over the episode, the paper's "
        "p(τ|θ₀)/p(τ|θ_n)).")
    importance_clip: float | None = option(
        None, help="Truncate ω at this value. Default: no truncation.")
    max_episode_steps: int | None = option(
        None, flag="--max-steps", help=max_steps_help("CartPole-v1's 500"))
    gravities: tuple[float, ...] = option(
        (9.8,), help="Heterogeneous dynamics: each agent's CartPole gravity is drawn (fixed "
        "per agent) from these values. The default task only (with --env or --private: "
        "--private gravity=...).")
    env: str | None = option(None, help=ENV_HELP)
    private_params: tuple[str, ...] = option((), flag="--private", help=PRIVATE_HELP)
    budget: int = option(5000, flag="--episodes", help="Episodes each agent samples over the "
                         "run (FedPG-BR's: 5000).")
    trials: int = option(1, help="Independent trials, run vectorized.")
    seed: int = option(0, help="Random seed (same seed, same results).")
    mechanism: str = option(
        "none", choices=MECHANISMS, user_callable=True,
        help=(
        "Randomizer for what each agent sends every round: none (default, as in the paper: NO "
        "privacy guarantee), laplace (L1 clip to C/2 + Laplace noise: pure ε-LDP per release), "
        "gaussian (L2 clip C + N(0, (σC)²) noise, composed by --accountant), or privunit / "
        "privunitg (PrivUnit2 / PrivUnitG, L2 clip C: unbiased ε-LDP vector estimates per release; "
        "docs/ldp-mechanisms.md), or distributed-gaussian (fedpg-cen only: user-level central DP, "
        "the Flower deployment's mechanism, simulated exactly: each agent clips to L2 norm C, "
        "rounds to integers and adds a discrete Gaussian share of the noise, modulo 2^b; the secure"
        " sum gives the server only their sum; --min-honest; docs/fedpg.md), or "
        "distributed-gaussian-continuous (a simulation: continuous shares over a real sum, "
        "--sampling-rate, --adaptive-clip), or central-gaussian (fedpg-cen only: the server is "
        "TRUSTED with every agent's clipped update and adds Gaussian noise to its --robust "
        "none|trimmed-mean|median aggregate, scaled to the rule's sensitivity; central DP; "
        "docs/byzantine.md), or your own module:callable (ε-LDP per release as it declares, not "
        "verified by privrl; docs/ldp-mechanisms.md)."))
    epsilon: float | None = option(
        None, help="Each agent's total ε over the run (> 0, finite; the protected unit: one "
        "agent, every release it sends). laplace, privunit, privunitg: each agent releases "
        "once per round, so each release gets ε/R for the R rounds the episode budget allows "
        "at most (with --budget-composition optimal: the largest ε_0 whose R-fold optimal "
        "composition is (ε, --delta)), and the ledger enforces ε. gaussian: at --delta (σ is "
        "calibrated for the most rounds the budget allows). distributed-gaussian: "
        "user-level, at --delta, by the mechanism's own bound (the Flower run's); "
        "distributed-gaussian-continuous: by --accountant, Poisson sampling included; rounds "
        "beyond it are refused. Needs --mechanism.")
    audit_plugin: bool = option(
        True, help="A user's mechanism (module:callable) is audited before the run: a quick "
        "privrl audit of one release (seconds) whose lower bound on ε is recorded beside the "
        "declared ε, and a run whose declaration it refutes stops before it starts.")
    epsilon_per_report: float | None = option(
        None, help="laplace, privunit, privunitg, instead of --epsilon: the ε of each release "
        "(> 0, finite); the ledger composes an agent's releases (cap them with "
        "--epsilon-budget). A run's config.json holds the split of its --epsilon here.",
        unit="ε")
    clip: float | None = option(
        None, help="Clip C of the mechanism (with --adaptive-clip the initial clip C_0). "
        "Default: 1 with a mechanism.")
    noise_multiplier: float | None = option(
        None, help="gaussian: noise multiplier σ (noise std σ·C), instead of --epsilon. "
        "distributed-gaussian(-continuous): the std of the sum's noise over its sensitivity.")
    delta: float = option(
        1e-5, help="gaussian: δ of the stated (ε, δ), in (0, 1). laplace: δ of the optimal "
        "composition stated beside the pure ε (the budget's δ with --budget-composition "
        "optimal).")
    accountant: str = option(DEFAULT_ACCOUNTANT, choices=ACCOUNTANTS, help=ACCOUNTANT_HELP)
    epsilon_budget: float | None = option(
        None, help="With --epsilon-per-report: a cap on each agent's ε over the run; the "
        "ledger refuses a round beyond it before anything is released, and the trial ends "
        "there (by --budget-composition). Default: none; the episode budget bounds the "
        "releases.")
    budget_composition: str = option(
        "basic", choices=COMPOSITIONS, help="How the ledger enforces each agent's budget over "
        "its pure ε-LDP releases. basic: the pure ε, Σ of the releases' ε. optimal: an (ε, δ) "
        "at --delta by the optimal composition theorem (Kairouz, Oh & Viswanath 2015). "
        "privacy.json states both and which is enforced.")
    target_return: float | None = option(
        None, help="The batch mean return that counts as solved (episodes to it are "
        "reported). Default: the task's (CartPole-v1's 475; a Gymnasium reward_threshold); a "
        "task without one reports returns only.")
    noise: str | None = option(None, choices=NOISE_MODES, help=NOISE_HELP)
    secure_noise: bool = option(
        False, help="Float-safe noise for laplace or gaussian: exact discrete noise on a grid "
        "from the OS CSPRNG, the input clipped in integers (no low-bit leak; slower; not "
        "reproducible; docs/secure-noise.md).")
    sampling_rate: float | None = option(
        None, help="distributed-gaussian-continuous: each agent takes part in a round with "
        "probability q "
        "(Poisson sampling, q in (0, 1]; amplifies privacy); unsampled agents play no episode "
        "and send their noise share only. Default: min(1, 50/K), an expected 50 agents per "
        "round.")
    min_honest: int | None = option(
        None, help="distributed-gaussian(-continuous): noise shares are sized so that any m "
        "honest agents' shares carry the full noise; up to K − m agents may drop out or "
        "collude with the server at the stated ε (default m = K: none).")
    roster: bool = option(
        True, help="Flower runtime, distributed-gaussian: each SuperNode signs its SecAgg+ keys "
        "with its own identity key and shares only with peers on the fleet's roster, which "
        "whoever deploys the agents hands every node (here privrl, which starts them): a "
        "server that adds SuperNodes of its own or substitutes a node's keys is refused. "
        "--no-roster: Flower's SecAgg+ as is (against such a server, a node's message is "
        "protected by its own agents' noise shares only; docs/threat-model.md).")
    dp_rounds: int | None = option(
        None, help="distributed-gaussian(-continuous) with --epsilon: calibrate σ for this many "
        "rounds "
        "instead of the most the episode budget allows (less noise); the privacy budget ends "
        "a trial that would run more.")
    shuffle: bool = option(
        False, help="fedpg-cen with laplace, privunit or privunitg: shuffle model; a trusted "
        "shuffler hands the server each round's K reports in random order without identities "
        "(simulated, its order seeded), and privacy.json adds the central (ε, δ) per round "
        "after amplification by shuffling (FMT21) and over the rounds (basic composition). "
        "Amplification grows with --agents.")
    shuffle_delta: float = option(
        1e-5, help="δ of the per-round central (ε, δ) stated under --shuffle.")
    adaptive_clip: bool = option(
        False, help=(
        "distributed-gaussian-continuous: adaptive clipping (Andrew et al. 2021). The clip starts "
        "at --clip and follows the --clip-quantile of the sampled agents' update norms: each also "
        "sends the bit ‖μ‖ <= C_t through the secure sum (noised with std --clip-count-stddev), and"
        " C_{t+1} = C_t·exp(−lr·(noised fraction − quantile)). Same ε: σ is split between the "
        "update and the bits (docs/fedpg.md)."))
    clip_quantile: float = option(
        0.5, help="--adaptive-clip: target fraction γ of sampled agents whose update norm is "
        "within the clip, in (0, 1) (the paper's: the median).")
    clip_lr: float = option(
        0.2, help="--adaptive-clip: learning rate η_C > 0 of the geometric clip update (the "
        "paper's: 0.2).")
    clip_count_stddev: float | None = option(
        None, help="--adaptive-clip: std σ_b of the noise on the sum of the clip bits; must "
        "exceed σ/2 (σ: the round's noise multiplier). Default q·K/20 (the paper's: expected "
        "agents per round / 20).")
    byzantine: int = option(
        0, help="N of the K agents are Byzantine (which: drawn from --seed, fixed for the run, "
        "recorded in summary.json); they send what --attack says (docs/byzantine.md).")
    attack: str | None = option(
        None, choices=ATTACKS, help="What a Byzantine agent does: random-noise, "
        "random-action, sign-flip (−2.5× its gradient), zero-gradient, adaptive (pulls "
        "against the gradient by the filter's own slack), fedscspg (FedPG-BR's adaptive "
        "attack) or normalized (against the gradient at an honest norm, after Fang et al. "
        "2025). Its message still passes through --mechanism unless --bypass-mechanism.")
    robust: str = option(
        "none", choices=ROBUST, help="The server's rule over the K reports: none (the mean), "
        "fedpg-br (FedPG-BR's filter, its threshold widened by the mechanism's noise), median "
        "or trimmed-mean (coordinate-wise). Post-processing: the privacy guarantee is "
        "unchanged.")
    filter_sigma: float = option(
        0.06, help="fedpg-br: σ, the per-step spread of an honest estimate, scaled by the "
        "server's mean episode length (FedPG-BR's CartPole: 0.06).")
    filter_delta: float = option(
        0.6, help="fedpg-br: δ in V = 2 log(2K/δ) (FedPG-BR's CartPole: 0.6).")
    byzantine_alpha: float = option(
        0.4, help="α < 1/2, the assumed Byzantine fraction: fedpg-br falls back to R2 when R1 "
        "keeps fewer than (1 − α)K; trimmed-mean drops ⌊αK⌋ per end (FedPG-BR's: 0.4).")
    bypass_mechanism: bool = option(
        False, help="Byzantine agents skip their mechanism: each report is the attack's "
        "message itself, unclipped and without noise (the server checks only shape, dtype, "
        "finiteness). The guarantee stays each honest agent's.")
    attack_norm: float | None = option(
        None, help="Rescale every Byzantine message to this L2 norm (needs "
        "--bypass-mechanism, or --mechanism none).")
    # Levers that adapt a private FedPG-Cen run to its task (issue 51; the "adaptive" preset
    # turns them on): post-processing, privrl.federation.adapt.
    step_from_noise: bool = option(
        False, help="fedpg-cen: the server's step size from the mechanism's noise level: "
        "η·s/(1 + s), s the signal-to-noise ratio of the K averaged reports over the "
        "optimizer's window (laplace, gaussian, the distributed Gaussians, none). "
        "Post-processing.")
    public_eval_every: int | None = option(
        None, help="fedpg-cen, local runtime: every this many rounds the server plays its "
        "policy on the task's PUBLIC simulator (default parameters, no agent's data), keeps "
        "the best so far as the final policy, and reverts to it, lowering its step by "
        "--backoff, when the policy collapses. Post-processing. Default: off.")
    public_eval_episodes: int = option(
        16, help="--public-eval-every: episodes per evaluation on the public simulator.")
    backoff: float = option(
        0.5, help="--public-eval-every: the step's multiplier in (0, 1] after a collapse.")
    log_std: str = log_std_option()
    uniform_start: bool = uniform_start_option(needs_log_std=False)

    presets = PRESETS

    @property
    def learners(self) -> int:
        """Parallel SCSG loops: the server (Cen) or every node (Dec)."""
        return 1 if self.algorithm == "cen" else self.agents

    def max_rounds(self) -> int:
        """An upper bound on the rounds the budget allows (each costs >= B_min + b·N_min)."""
        n_min = 1 if self.inner_steps is None else self.inner_steps
        return math.ceil(self.budget / (self.batch_min + self.minibatch * n_min)) + 1

    def round_episodes(self) -> tuple[float, float]:
        """The mean and standard deviation of the episodes one round takes from the budget
        (B_t + b·N_t; B_t uniform on [batch_min, batch_max], N_t ~ Geom(b/(B_t + b)) on
        {1, 2, ...}, so E[b·N_t | B_t] = B_t + b and Var = B_t(B_t + b); or N_t fixed)."""
        bs = range(self.batch_min, self.batch_max + 1)
        b = self.minibatch
        if self.inner_steps is None:
            cond = [(2 * x + b, x * (x + b)) for x in bs]  # (E, Var) of a round given B_t
        else:
            cond = [(x + b * self.inner_steps, 0.0) for x in bs]
        mean = sum(m for m, _ in cond) / len(cond)
        var = sum(v + m * m for m, v in cond) / len(cond) - mean * mean
        return mean, math.sqrt(max(var, 0.0))

    def calibration_rounds(self) -> int:
        """The rounds an accounted mechanism's σ is calibrated for."""
        return self.max_rounds() if self.dp_rounds is None else self.dp_rounds

    def validate(self) -> None:
        """Every field, one concern at a time (the first failing check's one-line error)."""
        self._check_choices()
        self._check_sizes()
        self._check_learning()
        self._check_window()
        self._check_mechanism()
        self._check_adaptive_clip()
        self._check_levers()
        self._check_distributed()
        self._check_task()
        self._check_shuffle()
        self._check_byzantine()

    @property
    def pure_mechanism(self) -> bool:
        """`is_pure_mechanism` of this config's mechanism."""
        return is_pure_mechanism(self.mechanism)

    def _check_choices(self) -> None:
        """Each field that names one of a fixed set, and float-safe noise's family."""
        one_of("algorithm", self.algorithm, ALGORITHMS)
        check_preset(self.preset, PRESETS)
        one_of("log_std", self.log_std, LOG_STDS)
        if not isinstance(self.uniform_start, bool):
            fail("uniform_start", f"must be true or false, got {self.uniform_start!r}")
        one_of("topology", self.topology, TOPOLOGIES)
        if not is_user_mechanism(self.mechanism):  # a user's module:callable: pure ε-LDP
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

    def _check_sizes(self) -> None:
        """The counts: agents, batches, steps, budget, trials, seed, layer widths."""
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
        if self.max_episode_steps is not None:
            integer("max_episode_steps", self.max_episode_steps)
        if not self.hidden or any(isinstance(h, bool) or not isinstance(h, int) or h < 1
                                  for h in self.hidden):
            fail("hidden", f"must be positive layer widths, got {self.hidden!r}")

    def _check_learning(self) -> None:
        """The optimizer's and the estimator's reals."""
        positive("learning_rate", self.learning_rate)
        in_range("gamma", self.gamma, 0, 1, low_open=True)
        if self.importance_clip is not None:
            positive("importance_clip", self.importance_clip)

    def _check_window(self) -> None:
        """`window` belongs to fedpg-dec's random topology."""
        if self.window is not None:
            if self.topology != "random" or self.algorithm != "dec":
                fail("window", "only the random topology of fedpg-dec takes it")
            integer("window", self.window)

    def _check_mechanism(self) -> None:
        """The mechanism's parameters: the privacy request, as the plan reads it (none takes
        no ε; a pure ε-LDP mechanism a total or per-report ε; an accounted one a total ε or
        σ, and δ), and the clip."""
        one_of("budget_composition", self.budget_composition, COMPOSITIONS)
        self.privacy_plan(calibrate=False)
        if self.mechanism != "none":
            positive("clip", self.clip)

    def privacy_request(self) -> PrivacyRequest:
        """The user's privacy request in this config (privrl.privacy.plan)."""
        return PrivacyRequest(self.epsilon, self.epsilon_per_report, self.noise_multiplier,
                              self.delta, self.epsilon_budget, self.budget_composition,
                              self.accountant)

    def privacy_plan(self, calibrate: bool = True) -> PrivacyPlan:
        """What the request means for this run (privrl.privacy.plan): each release's ε or σ
        (`calibrate` False: σ only if given), and each agent's ledger on every runtime. An
        agent releases at most once per round, at most `max_rounds()` rounds."""
        req, rounds = self.privacy_request(), self.max_rounds()
        try:
            if self.mechanism == "none":
                return no_privacy(req, rounds)
            if self.pure_mechanism:  # a user's may be (ε, δ) under an (ε, δ) budget
                return plan_pure(req, rounds, release_delta=is_user_mechanism(self.mechanism))
            if self.mechanism == "distributed-gaussian":
                # σ is planned with the update's length, which the mechanism knows
                # (privrl.systems.fedpg.algorithm.discrete_sum_mechanism); here the request is
                # checked and the ledger given.
                return plan_discrete(req, self.calibration_rounds())
            if not calibrate and self.noise_multiplier is None and self.epsilon is not None:
                req = replace(req, noise_multiplier=1.0)  # checks the request only
            if self.mechanism == "distributed-gaussian-continuous":
                # The sum's sensitivity under zero-out is clip itself: σ is the accountant's z.
                return plan_gaussian(req, self.calibration_rounds(), self.sampling_rate)
            if self.mechanism == "central-gaussian":
                # The noise is z·S with S the rule's own sensitivity: σ is the accountant's z.
                return plan_gaussian(req, rounds)
            # The accountant's multiplier is std / sensitivity; the L2 ball's sensitivity is
            # 2·clip, so the mechanism's σ (std / clip) is twice it.
            return plan_gaussian(req, rounds, sensitivity=2.0)
        except PlanError as e:
            fail(e.field, e.message)

    def _check_task(self) -> None:
        """`env` and `private_params` as text (the task checks the rest when it is made), and
        the default CartPole's gravities, which no other task takes."""
        try:
            CartPoleSpec(gravities=tuple(self.gravities))
        except ValueError as e:
            fail("gravities", str(e))
        if (self.env is not None or self.private_params) and tuple(self.gravities) != (9.8,):
            fail("gravities", "sets the default CartPole task's per-agent gravity; on another "
                              "task or with private parameters make gravity one of them "
                              "(gravity=v1,v2)")

    def _check_shuffle(self) -> None:
        """The shuffle model: fedpg-cen with a pure ε-LDP mechanism."""
        if self.shuffle and self.algorithm != "cen":
            fail("shuffle", "fedpg-cen only: FedPG-Dec has no server whose view a shuffler "
                            "could hide identities from (each peer knows its in-neighbours)")
        if self.shuffle and not self.pure_mechanism:
            fail("shuffle", f"needs a pure ε-LDP mechanism ({', '.join(PURE_MECHANISMS)}), got "
                            f"mechanism={self.mechanism!r}: "
                            + {"none": "no mechanism has no local ε to amplify",
                               "distributed-gaussian": "the server already sees only the sum",
                               "distributed-gaussian-continuous": "the server already sees "
                                                                  "only the sum",
                               }.get(self.mechanism, "the amplification bound here (FMT21) "
                                                     "is for pure ε₀-LDP reports"))
        in_range("shuffle_delta", self.shuffle_delta, 0, 1, low_open=True, high_open=True)

    def _check_byzantine(self) -> None:
        """Byzantine agents and the robust rule: fedpg-cen only; no per-report rule where the
        server sees only a sum."""
        integer("byzantine", self.byzantine, 0)
        if self.byzantine >= self.agents:
            fail("byzantine", f"must be < K = {self.agents} agents, got {self.byzantine}")
        if self.byzantine and self.attack is None:
            fail("attack", f"required with byzantine = {self.byzantine} (one of "
                           f"{', '.join(ATTACKS)})")
        if self.attack is not None:
            one_of("attack", self.attack, ATTACKS)
            if not self.byzantine:
                fail("attack", "needs byzantine >= 1 (no agent would attack)")
        one_of("robust", self.robust, ROBUST, "robust rule")
        positive("filter_sigma", self.filter_sigma)
        in_range("filter_delta", self.filter_delta, 0, 1, low_open=True, high_open=True)
        in_range("byzantine_alpha", self.byzantine_alpha, 0, 0.5, low_open=True,
                 high_open=True)
        self._check_off_mechanism()
        if (self.byzantine or self.robust != "none") and self.algorithm != "cen":
            fail("robust" if self.robust != "none" else "byzantine",
                 "fedpg-cen only: FedPG-Dec has no server to filter reports (Byzantine-robust "
                 "gossip is not implemented)")
        if self.mechanism == "central-gaussian":
            if self.algorithm != "cen":
                fail("mechanism", "central-gaussian: a trusted server aggregates the clipped "
                                  "updates: fedpg-cen only")
            if self.robust == "fedpg-br":
                fail("robust", "with central-gaussian the filter's mean has sensitivity C, the "
                               "diameter of the clipped updates' ball (any kept subset), K times "
                               "the mean's; use none, trimmed-mean or median")
        if self.robust != "none" and self.mechanism in DISTRIBUTED_MECHANISMS:
            fail("robust", f"{self.mechanism}: the server sees only the secure sum of the "
                           "agents' updates, so no per-agent filter or robust rule can run "
                           "(use a per-agent LDP mechanism, or robust none)")
        if self.robust == "fedpg-br" and self.mechanism not in ("none", "gaussian", "laplace",
                                                                "privunit"):
            fail("robust", f"fedpg-br's threshold needs a bound on the mechanism's noise; none "
                           f"is derived for mechanism={self.mechanism!r} (use median or "
                           "trimmed-mean)")

    def _check_off_mechanism(self) -> None:
        """bypass_mechanism and attack_norm: an attacker's report that no mechanism bounds."""
        if not isinstance(self.bypass_mechanism, bool):
            fail("bypass_mechanism", f"must be true or false, got {self.bypass_mechanism!r}")
        if self.bypass_mechanism:
            if not self.byzantine:
                fail("bypass_mechanism", "needs byzantine >= 1 (no agent would bypass it)")
            if self.mechanism in ("none", *DISTRIBUTED_MECHANISMS, "central-gaussian"):
                fail("bypass_mechanism", "only a per-agent LDP mechanism (laplace, gaussian, "
                                         "privunit, privunitg or a user's) can be bypassed; "
                                         f"mechanism={self.mechanism!r} has no per-agent "
                                         "report to forge")
        if self.attack_norm is not None:
            positive("attack_norm", self.attack_norm)
            if not self.byzantine:
                fail("attack_norm", "needs byzantine >= 1 (no agent would attack)")
            if self.mechanism != "none" and not self.bypass_mechanism:
                fail("attack_norm", "the mechanism's clip would undo it: give bypass_mechanism "
                                    "(or mechanism none)")
            if self.attack == "zero-gradient":
                fail("attack_norm", "zero-gradient sends 0, which has no direction to rescale")

    def _check_adaptive_clip(self) -> None:
        """adaptive_clip's own fields; it belongs to distributed-gaussian-continuous on
        fedpg-cen."""
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
                                  "aggregated sum: fedpg-cen with "
                                  "distributed-gaussian-continuous only")
        if self.mechanism != "distributed-gaussian-continuous":
            fail("adaptive_clip", "adaptive clipping needs "
                                  "mechanism='distributed-gaussian-continuous' "
                                  f"(the clip bits travel in its secure sum), got "
                                  f"mechanism={self.mechanism!r}")
        in_range("clip_quantile", self.clip_quantile, 0, 1, low_open=True, high_open=True)
        positive("clip_lr", self.clip_lr)
        if self.clip_count_stddev is not None:
            positive("clip_count_stddev", self.clip_count_stddev)

    def _check_levers(self) -> None:
        """The post-processing levers (issue 51): fedpg-cen's server only."""
        for name in ("step_from_noise",):
            if not isinstance(getattr(self, name), bool):
                fail(name, f"must be true or false, got {getattr(self, name)!r}")
        if self.public_eval_every is not None:
            integer("public_eval_every", self.public_eval_every)
        integer("public_eval_episodes", self.public_eval_episodes, 2)
        in_range("backoff", self.backoff, 0, 1, low_open=True)
        if self.algorithm != "cen":
            for name, on in (("step_from_noise", self.step_from_noise),
                             ("public_eval_every", self.public_eval_every is not None)):
                if on:
                    fail(name, "fedpg-cen's server only (fedpg-dec has no server)")
        known = ("none", "laplace", "gaussian", *DISTRIBUTED_MECHANISMS)
        if self.step_from_noise and self.mechanism not in known:
            fail("step_from_noise", f"knows the noise level of {', '.join(known)}, not "
                                    f"{self.mechanism}")

    def _check_distributed(self) -> None:
        """The distributed mechanisms' own fields and the combinations that make no sense."""
        mech = self.mechanism
        if self.dp_rounds is not None:
            if mech not in DISTRIBUTED_MECHANISMS or self.epsilon is None:
                fail("dp_rounds", "the rounds σ is calibrated for: "
                                  "distributed-gaussian(-continuous) with epsilon only")
            integer("dp_rounds", self.dp_rounds)
        if mech not in DISTRIBUTED_MECHANISMS:
            if self.sampling_rate is not None:
                fail("sampling_rate", "agent sampling is part of the "
                                      "distributed-gaussian-continuous mechanism only, not of "
                                      f"mechanism={mech!r}")
            if self.min_honest is not None:
                fail("min_honest", "noise shares belong to the distributed-gaussian(-continuous)"
                                   f" mechanisms only, not to mechanism={mech!r}")
            return
        if self.algorithm != "cen":
            fail("mechanism", f"{mech} protects a sum that a server aggregates: "
                              "fedpg-cen only (fedpg-dec has no aggregate; use gaussian)")
        if self.agents < 2:
            fail("agents", f"{mech} needs K >= 2 agents: a secure sum of one "
                           "agent's message is that message (use --mechanism gaussian)")
        if mech == "distributed-gaussian" and self.sampling_rate not in (None, 1.0):
            fail("sampling_rate", "distributed-gaussian takes every agent in every round (its "
                                  "deployment's secure sum claims no amplification by "
                                  "sampling); Poisson sampling is "
                                  "distributed-gaussian-continuous's")
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
        """Validated, with the plan's per-release parameter filled in: a pure mechanism's
        `epsilon_per_report` (split from the total), an accounted one's `noise_multiplier`
        (calibrated from ε)."""
        if self.clip is None and self.mechanism != "none":  # the field's documented default
            return replace(self, clip=1.0).resolved()
        self.validate()
        if self.mechanism == "distributed-gaussian" and self.sampling_rate is None:
            return replace(self, sampling_rate=1.0).resolved()
        if self.mechanism == "distributed-gaussian-continuous" and self.sampling_rate is None:
            return replace(self, sampling_rate=min(1.0, DEFAULT_PARTICIPANTS / self.agents)
                           ).resolved()
        if self.adaptive_clip and self.clip_count_stddev is None:
            return replace(self, clip_count_stddev=self.sampling_rate * self.agents / 20
                           ).resolved()
        if self.pure_mechanism and self.epsilon_per_report is None:
            return replace(self, epsilon_per_report=self.privacy_plan().epsilon_per_report)
        if (self.mechanism not in ACCOUNTED_MECHANISMS or self.noise_multiplier is not None
                or self.mechanism == "distributed-gaussian"):
            # distributed-gaussian's ε is calibrated with the update's length, by the
            # mechanism (privrl.systems.fedpg.algorithm.discrete_sum_mechanism)
            self._check_count_stddev()
            return self
        sigma = self.privacy_plan().noise_multiplier
        if self.mechanism == "gaussian":
            return replace(self, noise_multiplier=sigma)
        return replace(self, noise_multiplier=sigma).resolved()

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
SETTING_FIELDS = ("mechanism", "epsilon", "epsilon_per_report", "clip", "noise_multiplier",
                  "delta", "accountant", "topology", "window", "epsilon_budget",
                  "budget_composition")
# They are also the releases every program of FedPG settings computes, and every run that
# could join one (`privacy.mechanisms.setting_release`): the same compiled arithmetic in both.
ONE_PROGRAM_MECHANISMS = ("none", "laplace", "gaussian")
# The sampled secure sum joins a program of several settings that all use it, at one fleet
# (K and q are shapes and lanes: `participant_slots`, the K shares) and one initial clip C_0:
# σ, or z_Δ and σ_b, as each trial's data (`SumSettingParams`). Alone it keeps its own
# compiled constants (its floats as before, its other runtimes unchanged); XLA folds them into
# the adaptive clip's products, so in a program a setting's floats match its own run's to
# float32 rounding only (the same keys and draws; tests/systems/fedpg/test_settings.py).
ONE_PROGRAM_SUMS = ("distributed-gaussian-continuous",)
SUM_SETTING_FIELDS = (*(f for f in SETTING_FIELDS if f != "clip"), "clip_count_stddev")


def one_program_field(configs: Sequence[FedPGConfig]) -> str | None:
    """The config field that keeps resolved `configs` from running as one program (None: they
    can): they must differ only in SETTING_FIELDS and use none, laplace or gaussian without
    float-safe noise; or, several settings all of the sampled secure sum (ONE_PROGRAM_SUMS),
    differ only in SUM_SETTING_FIELDS."""
    sums = len(configs) > 1 and all(c.mechanism in ONE_PROGRAM_SUMS for c in configs)
    for cfg in configs:
        if len(configs) > 1 and cfg.robust == "fedpg-br":  # its threshold is the mechanism's
            return "robust"
        if len(configs) > 1 and cfg.step_from_noise:  # its step is the mechanism's
            return "step_from_noise"
        if cfg.mechanism not in ONE_PROGRAM_MECHANISMS and not sums:
            return "mechanism"
        if cfg.secure_noise:
            return "secure_noise"
    return other_field(configs, SUM_SETTING_FIELDS if sums else SETTING_FIELDS)


def build_topology(cfg: FedPGConfig) -> Topology:
    """Dec's communication graph, validated before anything runs."""
    from privrl.federation.topology import TopologyError, make_topology  # NumPy: a run's

    try:
        return make_topology(cfg.topology, cfg.agents, cfg.max_rounds(), cfg.seed, cfg.window)
    except TopologyError as e:
        fail("topology", str(e))



def participant_slots(agents: int, q: float | None) -> int:
    """Lanes computed per round under Poisson sampling: the mean q·K plus 6 standard
    deviations (P(more sampled) < 1e-8), at most K."""
    if q is None or q >= 1:
        return agents
    return min(agents, math.ceil(q * agents + 6 * math.sqrt(q * (1 - q) * agents)) + 1)

