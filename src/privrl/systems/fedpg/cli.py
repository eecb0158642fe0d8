"""`privrl run fedpg-cen|fedpg-dec` and `privrl reproduce fedpg` (paper 004). """

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from privrl.choices import TOPOLOGIES
from privrl.cli import (
    AccountantName,
    AccountantOpt,
    AddressOpt,
    BudgetComposition,
    BudgetCompositionOpt,
    EnvOpt,
    MaxStepsOpt,
    Noise,
    NoiseMode,
    Out,
    PrivateOpt,
    Resume,
    Runtime,
    SecureNoise,
    Seed,
    ShowProgress,
    SweepSeed,
    flag_names,
    mechanism_option,
    parse_numbers,
    progress_bar,
    system_apps,
    value_enum,
)
from privrl.systems.fedpg.choices import ALGORITHMS, ATTACKS, MECHANISMS, ROBUST

if TYPE_CHECKING:
    from rich.table import Table

    from privrl.systems.fedpg.algorithm import FedPGConfig

run_app, reproduce_app = system_apps()
audit_app = typer.Typer(rich_markup_mode=None)  # `privrl audit fedpg`


FedPGMechanism = value_enum("FedPGMechanism", MECHANISMS)
FedPGTopology = value_enum("FedPGTopology", TOPOLOGIES)
FedPGAttack = value_enum("FedPGAttack", ATTACKS)
FedPGRobust = value_enum("FedPGRobust", ROBUST)
# Config fields whose flag is named otherwise.
_FLAGS = {"private_params": "--private", "budget": "--episodes",
          "max_episode_steps": "--max-steps"}


_FEDPG_MECHANISM_HELP = (
    "Randomizer for what each agent sends every round: none (default, as in the paper: NO "
    "privacy guarantee), laplace (L1 clip to C/2 + Laplace noise: pure ε-LDP per release), "
    "gaussian (L2 clip C + N(0, (σC)²) noise, composed by --accountant), or privunit / "
    "privunitg (PrivUnit2 / PrivUnitG, L2 clip C: unbiased ε-LDP vector estimates per "
    "release; docs/ldp-mechanisms.md), or distributed-gaussian (fedpg-cen only: user-level "
    "central DP, the Flower deployment's mechanism, simulated exactly: each agent clips to L2 "
    "norm C, rounds to integers and adds a discrete Gaussian share of the noise, modulo 2^b; "
    "the secure sum gives the server only their sum; --min-honest; docs/fedpg.md), or "
    "distributed-gaussian-continuous (a simulation: continuous shares over a real sum, "
    "--sampling-rate, --adaptive-clip), or central-gaussian (fedpg-cen only: the "
    "server is TRUSTED with every agent's clipped update and adds Gaussian noise to its "
    "--robust none|trimmed-mean|median aggregate, scaled to the rule's sensitivity; central "
    "DP; docs/byzantine.md), or your own module:callable (ε-LDP per "
    "release as it declares, not verified by privrl; docs/ldp-mechanisms.md).")


def _fedpg_config(algorithm: str, preset: str, epsilon_per_report: float | None = None,
                  **options: object) -> FedPGConfig:
    """The run's config: --epsilon is each agent's total over the run (the config's
    `epsilon`), --epsilon-per-report a pure mechanism's ε per release (its
    `epsilon_per_report`); the privacy plan (`FedPGConfig.privacy_plan`) reads them. `preset`'s
    fields are overridden only by the options given (not None)."""
    from privrl.config import ConfigError
    from privrl.systems.fedpg.config import FedPGConfig

    eps = options.get("epsilon")
    if eps is not None and options.get("noise_multiplier") is not None:
        raise ConfigError("--noise-multiplier", "give either --epsilon (σ is calibrated) or "
                                                "--noise-multiplier, not both")
    if epsilon_per_report is not None and eps is not None:
        raise ConfigError("--epsilon-per-report", "give either --epsilon (each agent's "
                          "total over the run) or --epsilon-per-report, not both")
    cfg = FedPGConfig.from_preset(preset, algorithm=algorithm,
                                  epsilon_per_report=epsilon_per_report, **options).resolved()
    from privrl.systems.fedpg.algorithm import FedPG

    # The task's episode and target filled in; a bad --env/--private fails here, first.
    return FedPG(cfg).config


def _fedpg_common(
    agents: int | None, budget: int | None, trials: int | None, batch_min: int | None,
    batch_max: int | None, minibatch: int | None, learning_rate: float | None,
    importance: str | None, importance_clip: float | None, mechanism: FedPGMechanism,
    epsilon: float | None, clip: float | None, seed: int, noise_multiplier: float | None,
    delta: float | None, gravities: str | None, accountant: str = "pld",
    epsilon_budget: float | None = None, budget_composition: str = "basic",
    env: str | None = None, private: list[str] | None = None, target_return: float | None = None,
    max_steps: int | None = None,
) -> dict:
    """The options both commands share, as config fields; None (an option not given) leaves
    the preset's value."""
    from privrl.config import ConfigError

    try:
        grav = None if gravities is None else tuple(float(g) for g in gravities.split(","))
    except ValueError:
        raise ConfigError("--gravities", f"must be comma-separated numbers, got {gravities!r}"
                          ) from None
    clip_default = 1.0 if mechanism is not FedPGMechanism.none else None
    return dict(agents=agents, budget=budget, trials=trials, batch_min=batch_min,
                batch_max=batch_max, minibatch=minibatch, learning_rate=learning_rate,
                importance=importance, importance_clip=importance_clip,
                mechanism=mechanism.value, epsilon=epsilon,
                clip=clip if clip is not None else clip_default, seed=seed,
                noise_multiplier=noise_multiplier, delta=delta, gravities=grav,
                accountant=accountant, epsilon_budget=epsilon_budget,
                budget_composition=budget_composition, env=env,
                private_params=tuple(private or ()), target_return=target_return,
                max_episode_steps=max_steps)


def _noise(noise: NoiseMode | None) -> str | None:
    return None if noise is None else noise.value


# Every option that sets a config field defaults to None: only a flag given overrides the
# --preset's field (FedPGConfig.from_preset). Each help states the effective default.
PresetOpt = Annotated[str, typer.Option(
    help="paper: FedPG-BR's CartPole setting exactly (the default). continuous: for a "
    "continuous-action (Box) task, e.g. --env gymnax:Pendulum-v1: a state-free learned "
    "log-std, γ = 0.9, hidden (64, 64), B_t ~ U{4..8}, ω truncated at 2, Adam 3e-4 "
    "(benchmarks/RESULTS.md). Options given explicitly override it.")]
AgentsOpt = Annotated[int | None, typer.Option(
    help="K agents (K = 1: a single SVRPG agent). Default 10.")]
EpisodesOpt = Annotated[int | None, typer.Option(
    help="Episodes each agent samples over the run. Default 5000 (FedPG-BR's).")]
TrialsOpt = Annotated[int | None, typer.Option(
    help="Independent trials, run vectorized. Default 1.")]
BatchMinOpt = Annotated[int | None, typer.Option(
    help="B_t is drawn uniformly from [batch-min, batch-max] every round (B > 0). Default: "
    "from the preset, 12 for paper, 4 for continuous.")]
BatchMaxOpt = Annotated[int | None, typer.Option(
    help="Upper end of B_t. Default: from the preset, 20 for paper (FedPG-BR's), 8 for "
    "continuous.")]
MinibatchOpt = Annotated[int | None, typer.Option(
    help="b: episodes per SCSG step (b > 0). Default 4.")]
LrOpt = Annotated[float | None, typer.Option(
    help="Adam step size. Default: from the preset, 1e-3 for paper (FedPG-BR's), 3e-4 for "
    "continuous.")]
ImportanceOpt = Annotated[str | None, typer.Option(
    help="Importance weight ω: step (per-step ratio, FedPG-BR's code; the default) or "
    "trajectory (the product over the episode, the paper's p(τ|θ₀)/p(τ|θ_n)).")]
IwClipOpt = Annotated[float | None, typer.Option(
    help="Truncate ω at this value. Default: from the preset, no truncation for paper, 2 for "
    "continuous.")]
MechOpt = Annotated[str, typer.Option(help=_FEDPG_MECHANISM_HELP,
                                                 parser=mechanism_option(FedPGMechanism))]
EpsOpt = Annotated[float | None, typer.Option(
    help="Each agent's total ε over the run (> 0, finite; the protected unit: one agent, "
    "every release it sends). laplace, privunit, privunitg: each agent releases once per "
    "round, so each release gets ε/R for the R rounds the episode budget allows at most (with "
    "--budget-composition optimal: the largest ε_0 whose R-fold optimal composition is "
    "(ε, --delta)), and the ledger enforces ε. gaussian: at --delta (σ is calibrated for the "
    "most rounds the budget allows). distributed-gaussian: user-level, at --delta, by the "
    "mechanism's own bound (the Flower run's); distributed-gaussian-continuous: by "
    "--accountant, Poisson sampling included; rounds beyond it are refused. Needs "
    "--mechanism.")]
EpsPerReportOpt = Annotated[float | None, typer.Option(
    help="laplace, privunit, privunitg, instead of --epsilon: the ε of each release (> 0, "
    "finite); the ledger composes an agent's releases (cap them with --epsilon-budget).")]
SigmaOpt = Annotated[float | None, typer.Option(
    help="gaussian: noise multiplier σ (noise std σ·C), instead of --epsilon. "
    "distributed-gaussian(-continuous): the std of the sum's noise over its sensitivity.")]
DeltaOpt = Annotated[float | None, typer.Option(
    help="gaussian: δ of the stated (ε, δ), in (0, 1). laplace: δ of the optimal composition "
    "stated beside the pure ε (the budget's δ with --budget-composition optimal). Default "
    "1e-5.")]
EpsBudgetOpt = Annotated[float | None, typer.Option(
    help="With --epsilon-per-report: a cap on each agent's ε over the run; the ledger refuses "
    "a round beyond it before anything is released, and the trial ends there (by "
    "--budget-composition). Default: none; the episode budget bounds the releases.")]
ClipOpt = Annotated[float | None, typer.Option(help="Clip C of the mechanism (default 1).")]
ShuffleOpt = Annotated[bool, typer.Option(
    help="fedpg-cen with laplace, privunit or privunitg: shuffle model; a trusted shuffler "
    "hands the server each round's K reports in random order without identities (simulated, "
    "its order seeded), and privacy.json adds the central (ε, δ) per round after "
    "amplification by shuffling (FMT21) and over the rounds (basic composition). "
    "Amplification grows with --agents.")]
ShuffleDeltaOpt = Annotated[float | None, typer.Option(
    help="δ of the per-round central (ε, δ) stated under --shuffle. Default 1e-5.")]
CenClipOpt = Annotated[float | None, typer.Option(
    help="Clip C of the mechanism (default 1; with --adaptive-clip the initial clip C_0).")]
GravOpt = Annotated[str | None, typer.Option(
    help="Heterogeneous dynamics: each agent's CartPole gravity is drawn (fixed per agent) "
    "from these comma-separated values. Default 9.8 for all. The default task only (with "
    "--env or --private: --private gravity=...).")]
TargetOpt = Annotated[float | None, typer.Option(
    help="The batch mean return that counts as solved (episodes to it are reported). "
    "Default: the task's (CartPole-v1's 475; a Gymnasium reward_threshold); a task without "
    "one reports returns only.")]


@run_app.command("fedpg-cen")
@flag_names(**_FLAGS)
def run_fedpg_cen_command(
    preset: PresetOpt = "paper",
    agents: AgentsOpt = None, episodes: EpisodesOpt = None, trials: TrialsOpt = None,
    batch_min: BatchMinOpt = None, batch_max: BatchMaxOpt = None,
    minibatch: MinibatchOpt = None, learning_rate: LrOpt = None,
    importance: ImportanceOpt = None,
    importance_clip: IwClipOpt = None, mechanism: MechOpt = FedPGMechanism.none,
    epsilon: EpsOpt = None, epsilon_per_report: EpsPerReportOpt = None, clip: CenClipOpt = None,
    noise_multiplier: SigmaOpt = None,
    delta: DeltaOpt = None, gravities: GravOpt = None, seed: Seed = 0, noise: Noise = None,
    secure_noise: SecureNoise = False, out: Out = None, progress: ShowProgress = True,
    accountant: AccountantOpt = AccountantName.pld,
    epsilon_budget: EpsBudgetOpt = None,
    budget_composition: BudgetCompositionOpt = BudgetComposition.basic,
    shuffle: ShuffleOpt = False, shuffle_delta: ShuffleDeltaOpt = None,
    sampling_rate: Annotated[float | None, typer.Option(
        help="distributed-gaussian-continuous: each agent takes part in a round with "
        "probability q "
        "(Poisson sampling, q in (0, 1]; amplifies privacy); unsampled agents play no "
        "episode and send their noise share only. Default: min(1, 50/K), an expected 50 "
        "agents per round.")] = None,
    min_honest: Annotated[int | None, typer.Option(
        help="distributed-gaussian(-continuous): noise shares are sized so that any m honest "
        "agents' shares carry the full noise; up to K − m agents may drop out or collude with "
        "the server at the stated ε (default m = K: none).")] = None,
    dp_rounds: Annotated[int | None, typer.Option(
        help="distributed-gaussian(-continuous) with --epsilon: calibrate σ for this many "
        "rounds instead of "
        "the most the episode budget allows (less noise); the privacy budget ends a trial "
        "that would run more.")] = None,
    adaptive_clip: Annotated[bool, typer.Option(
        "--adaptive-clip",
        help="distributed-gaussian-continuous: adaptive clipping (Andrew et al. 2021). The "
        "clip starts "
        "at --clip and follows the --clip-quantile of the sampled agents' update norms: each "
        "also sends the bit ‖μ‖ <= C_t through the secure sum (noised with std "
        "--clip-count-stddev), and C_{t+1} = C_t·exp(−lr·(noised fraction − quantile)). Same "
        "ε: σ is split between the update and the bits (docs/fedpg.md).")] = False,
    clip_quantile: Annotated[float | None, typer.Option(
        help="--adaptive-clip: target fraction γ of sampled agents whose update norm is "
        "within the clip, in (0, 1). Default 0.5 (the paper's: the median).")] = None,
    clip_lr: Annotated[float | None, typer.Option(
        help="--adaptive-clip: learning rate η_C > 0 of the geometric clip update. Default "
        "0.2 (the paper's).")] = None,
    clip_count_stddev: Annotated[float | None, typer.Option(
        help="--adaptive-clip: std σ_b of the noise on the sum of the clip bits; must exceed "
        "σ/2 (σ: the round's noise multiplier). Default q·K/20 (the paper's: expected "
        "agents per round / 20).")] = None,
    byzantine: Annotated[int | None, typer.Option(
        help="N of the K agents are Byzantine (which: drawn from --seed, fixed for the run, "
        "recorded in summary.json); they send what --attack says (docs/byzantine.md). "
        "Default 0.")] = None,
    attack: Annotated[FedPGAttack | None, typer.Option(
        help="What a Byzantine agent does: random-noise, random-action, sign-flip (−2.5× its "
        "gradient), zero-gradient, adaptive (pulls against the gradient by the filter's own "
        "slack), fedscspg (FedPG-BR's adaptive attack) or normalized (against the gradient at an "
        "honest norm, after Fang et al. 2025). Its message still passes through "
        "--mechanism unless --bypass-mechanism.")] = None,
    bypass_mechanism: Annotated[bool | None, typer.Option(
        "--bypass-mechanism", help="Byzantine agents skip their mechanism: each report is the "
        "attack's message itself, unclipped and without noise (the server checks only shape, "
        "dtype, finiteness). The guarantee stays each honest agent's.")] = None,
    attack_norm: Annotated[float | None, typer.Option(
        help="Rescale every Byzantine message to this L2 norm (needs --bypass-mechanism, or "
        "--mechanism none).")] = None,
    robust: Annotated[FedPGRobust, typer.Option(
        help="The server's rule over the K reports: none (the mean), fedpg-br (FedPG-BR's "
        "filter, its threshold widened by the mechanism's noise), median or trimmed-mean "
        "(coordinate-wise). Post-processing: the privacy guarantee is unchanged.")
    ] = FedPGRobust.none,
    filter_sigma: Annotated[float | None, typer.Option(
        help="fedpg-br: σ, the per-step spread of an honest estimate, scaled by the server's "
        "mean episode length. Default 0.06 (FedPG-BR's CartPole).")] = None,
    filter_delta: Annotated[float | None, typer.Option(
        help="fedpg-br: δ in V = 2 log(2K/δ). Default 0.6 (FedPG-BR's CartPole).")] = None,
    byzantine_alpha: Annotated[float | None, typer.Option(
        help="α < 1/2, the assumed Byzantine fraction: fedpg-br falls back to R2 when R1 keeps "
        "fewer than (1 − α)K; trimmed-mean drops ⌊αK⌋ per end. Default 0.4 (FedPG-BR's).")
    ] = None,
    env: EnvOpt = None, private: PrivateOpt = None, target_return: TargetOpt = None,
    max_steps: MaxStepsOpt = None,
    runtime: Annotated[Runtime, typer.Option(
        help="local: all agents vectorized in this process. flower: a local Flower "
        "deployment (--supernodes SuperNodes, each hosting agents a ≡ i mod N, TLS and "
        "SuperNode authentication), one trial: --mechanism none, gaussian, laplace, privunit "
        "or privunitg sends each agent's Report; distributed-gaussian (with --epsilon) runs "
        "a real secure sum (SecAgg+) of discrete Gaussian noise shares (docs/flower.md).",
        case_sensitive=False)] = Runtime.local,
    supernodes: Annotated[int, typer.Option(
        help="Flower runtime: SuperNodes (<= --agents; >= 3 for distributed-gaussian).",
        min=1, max=64)] = 4,
    threshold: Annotated[int | None, typer.Option(
        help="Flower runtime: SuperNodes that must survive a round for SecAgg+ to reveal its "
        "sum (a strict majority, <= N; default N − 1); the ε statement counts the agents they "
        "hold as the honest shares.")] = None,
    stage_timeout: Annotated[float, typer.Option(
        help="Flower runtime: seconds each SecAgg+ stage waits for replies; a SuperNode "
        "silent past it is dropped from the round.", min=1.0)] = 120.0,
) -> None:
    """FedPG-Cen (paper 004, Algorithm 1; FedPG-BR, its Byzantine filter with --robust
    fedpg-br) on CartPole-v1 or --env.

    K agents send policy-gradient estimates to a server, which averages them (or applies
    --robust) and takes SCSG steps with importance weights. Defaults (--preset paper):
    FedPG-BR's CartPole setting.
    """
    from privrl.runtime.output import check_out_dir

    check_out_dir(out)  # before the config, which may import --env's code
    if runtime is Runtime.flower and str(mechanism) == "distributed-gaussian":
        from privrl.config import ConfigError

        if sampling_rate not in (None, 1.0):
            raise ConfigError("--sampling-rate", "the Flower runtime's secure sum takes every "
                              "agent in every round (no amplification by sampling is claimed)")
        sampling_rate = 1.0
    cfg = _fedpg_config("cen", preset, epsilon_per_report, noise=_noise(noise),
                        secure_noise=secure_noise, sampling_rate=sampling_rate,
                        min_honest=min_honest,
                        shuffle=shuffle, shuffle_delta=shuffle_delta,
                        dp_rounds=dp_rounds, adaptive_clip=adaptive_clip,
                        clip_quantile=clip_quantile, clip_lr=clip_lr,
                        clip_count_stddev=clip_count_stddev, byzantine=byzantine,
                        attack=None if attack is None else attack.value, robust=robust.value,
                        filter_sigma=filter_sigma, filter_delta=filter_delta,
                        byzantine_alpha=byzantine_alpha, bypass_mechanism=bypass_mechanism,
                        attack_norm=attack_norm, **_fedpg_common(
        agents, episodes, trials, batch_min, batch_max, minibatch, learning_rate, importance,
        importance_clip, mechanism, epsilon, clip, seed, noise_multiplier, delta, gravities,
        accountant.value, epsilon_budget, budget_composition.value, env, private,
        target_return, max_steps))
    from privrl.systems.fedpg.runtimes import check_runtime

    check_runtime(cfg, runtime.value)  # the library's rules: the API refuses the same
    if runtime is Runtime.flower:
        _execute_cen_flower(cfg, out, supernodes, threshold, stage_timeout)
        return
    _execute_fedpg(cfg, out, progress)


def _execute_cen_flower(cfg: FedPGConfig, out: Path | None, supernodes: int,
                        threshold: int | None, stage_timeout: float) -> None:
    """FedPG-Cen on a local Flower deployment with a real secure sum (docs/flower.md)."""
    from rich.console import Console

    from privrl.config import ConfigError
    from privrl.runtime.output import new_run_dir, removed_if_left_empty, save

    try:
        import flwr  # noqa: F401
    except ImportError:
        raise ConfigError("--runtime", "the Flower runtime needs the flower extra: "
                          "pip install 'privrl[flower]'") from None
    from privrl.systems.fedpg.flower import plan_run, record, run_fedpg_cen_flower

    plan = plan_run(cfg, supernodes, threshold)  # refuses before anything starts
    console, err = Console(), Console(stderr=True)
    path = new_run_dir(out, f"fedpg-cen-flower-{cfg.mechanism}")
    summed = plan.mechanism is not None
    from privrl.privacy.record import planned

    bound = planned(cfg.privacy_plan())
    err.print(f"[bold]FedPG-Cen on Flower[/], K = {cfg.agents} agents on {supernodes} "
              f"SuperNodes (TLS, SuperNode authentication), " + (
                  f"SecAgg+ threshold {plan.threshold}" if summed else
                  f"each agent's {cfg.mechanism} Report") + (f"; {bound}" if bound else "")
              + f"; logs in {path}/logs")
    with removed_if_left_empty(path):
        run = run_fedpg_cen_flower(plan, path, stage_timeout)
    summary = save(record(run), path, command=["privrl", *sys.argv[1:]])
    console.print(f"{summary['rounds']} rounds, {summary['episodes_per_agent']} episodes per "
                  f"agent; server's last mean episode length "
                  f"{summary['final_server_mean_length']:.1f}; {summary['privacy']}")
    console.print(f"Results written to [bold]{path}[/] (config.json, metrics.csv, "
                  "privacy.json, summary.json, policy.npz, flower.json)")


@run_app.command("fedpg-dec")
@flag_names(**_FLAGS)
def run_fedpg_dec_command(
    topology: Annotated[FedPGTopology, typer.Option(
        help="Directed graph: ring (static k → k+1), exponential (time-varying one-peer "
        "exponential graph of SGP) or random (one random out-neighbour per node per round, "
        "strongly connected over every --window rounds).", case_sensitive=False)
    ] = FedPGTopology.ring,
    window: Annotated[int | None, typer.Option(
        help="Random topology: rounds over which the graph must be strongly connected "
        "(default max(3, ⌈2 log2 K⌉)).")] = None,
    preset: PresetOpt = "paper",
    agents: AgentsOpt = None, episodes: EpisodesOpt = None, trials: TrialsOpt = None,
    batch_min: BatchMinOpt = None, batch_max: BatchMaxOpt = None,
    minibatch: MinibatchOpt = None, learning_rate: LrOpt = None,
    importance: ImportanceOpt = None,
    importance_clip: IwClipOpt = None, mechanism: MechOpt = FedPGMechanism.none,
    epsilon: EpsOpt = None, epsilon_per_report: EpsPerReportOpt = None, clip: ClipOpt = None,
    noise_multiplier: SigmaOpt = None,
    delta: DeltaOpt = None, gravities: GravOpt = None, seed: Seed = 0, noise: Noise = None,
    secure_noise: SecureNoise = False, out: Out = None, progress: ShowProgress = True,
    accountant: AccountantOpt = AccountantName.pld,
    epsilon_budget: EpsBudgetOpt = None,
    budget_composition: BudgetCompositionOpt = BudgetComposition.basic,
    shuffle: ShuffleOpt = False,
    runtime: Annotated[Runtime, typer.Option(
        help="local: all nodes vectorized in this process. ray: every node a Ray actor, "
        "exchanging push-sum messages peer to peer (one trial; pip install 'privrl[ray]'). "
        "flower: refused (no peer-to-peer messages in Flower).",
        case_sensitive=False)] = Runtime.local,
    address: AddressOpt = None,
    env: EnvOpt = None, private: PrivateOpt = None, target_return: TargetOpt = None,
    max_steps: MaxStepsOpt = None,
) -> None:
    """FedPG-Dec (paper 004, Algorithm 2 with correct push-sum) on CartPole-v1 or --env.

    No server: every node runs the SCSG round from its de-biased z and gossips (x, w) to its
    out-neighbours on a directed graph (push-sum, column-stochastic mixing).
    """
    from privrl.config import ConfigError
    from privrl.runtime.output import check_out_dir

    check_out_dir(out)  # before the config, which may import --env's code
    cfg = _fedpg_config("dec", preset, epsilon_per_report,
                        topology=topology.value, window=window, noise=_noise(noise),
                        secure_noise=secure_noise, shuffle=shuffle,
                        **_fedpg_common(
        agents, episodes, trials, batch_min, batch_max, minibatch, learning_rate, importance,
        importance_clip, mechanism, epsilon, clip, seed, noise_multiplier, delta, gravities,
        accountant.value, epsilon_budget, budget_composition.value, env, private,
        target_return, max_steps))
    from privrl.systems.fedpg.algorithm import build_topology
    from privrl.systems.fedpg.runtimes import check_runtime

    check_runtime(cfg, runtime.value)  # the library's rules: the API refuses the same
    build_topology(cfg)  # a graph that is not strongly connected fails here, before running
    if runtime is Runtime.ray:
        from privrl.runtime.ray import require_ray

        require_ray()
        _execute_fedpg(cfg, out, progress, address=address, ray=True)
        return
    if address is not None:
        raise ConfigError("--address", "--address needs --runtime ray")
    _execute_fedpg(cfg, out, progress)


def _execute_fedpg(cfg: FedPGConfig, out: Path | None, show_progress: bool,
                   address: str | None = None, ray: bool = False) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from privrl.privacy.record import planned
    from privrl.runtime.output import new_run_dir, removed_if_left_empty
    from privrl.runtime.ray import ray_address
    from privrl.systems.fedpg import local as runner
    from privrl.systems.fedpg.algorithm import FedPG
    from privrl.systems.fedpg.byzantine import byzantine_agents

    FedPG(cfg)  # a mechanism it cannot build (a user's that fails) is refused before any output
    console, err = Console(), Console(stderr=True)
    label = runner.algorithm_label(cfg)
    stem = f"fedpg-{cfg.algorithm}" + (f"-{cfg.topology}" if cfg.algorithm == "dec" else "")
    # Ray nodes checkpoint into the run directory, so it exists before the run; locally it is
    # made after the run, so a failed run leaves nothing behind.
    path = new_run_dir(out, f"{stem}-ray-{cfg.mechanism}") if ray else None
    where = (f" on Ray (cluster {ray_address(address) or 'local'}, node checkpoints in {path})"
             if ray else "")
    # Each agent's whole-run ε where the plan bounds it before the run; the run's own ε (a
    # release's labelled per release) is stated with the results.
    bound = planned(cfg.privacy_plan())
    total = f", {bound}" if bound else ""
    ids = byzantine_agents(cfg)
    who = (f"agents {', '.join(map(str, ids))}" if len(ids) <= 10
           else "their ids in summary.json")
    byz = f", {cfg.byzantine} Byzantine ({cfg.attack}: {who})" if cfg.byzantine else ""
    byz += f", robust rule {cfg.robust}" if cfg.robust != "none" else ""
    err.print(f"[bold]{label}[/]{where} ({cfg.preset} preset), K = {cfg.agents}{byz}, "
              f"mechanism {cfg.mechanism}{total}; {cfg.trials} trial(s) × "
              f"{cfg.budget} episodes per agent")
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed:.0f}/{task.total} episodes/agent"),
                  TimeElapsedColumn(), console=err, disable=not show_progress) as bar:
        task = bar.add_task("training", total=cfg.budget)

        def update(done: float, total: int) -> None:
            bar.update(task, completed=done)

        if ray:
            from privrl.systems.fedpg.ray import run_fedpg_dec_ray

            with removed_if_left_empty(path):
                run, extra = run_fedpg_dec_ray(cfg, path / "nodes", address, progress=update)
        else:
            run = runner.run_fedpg(cfg, progress=update)
    if path is None:
        path = new_run_dir(out, f"{stem}-{cfg.mechanism}")
    summary = runner.save(run, path, command=["privrl", *sys.argv[1:]],
                          files={"ray.json": extra} if ray else None,
                          runtime="ray" if ray else "local")
    files = "config.json, metrics.csv, privacy.json, summary.json, policy.npz, plots/returns.png"
    if ray:
        files += ", ray.json (cluster, every node's gossip log)"
    console.print(fedpg_table(summary))
    console.print(f"Results written to [bold]{path}[/] ({files})")


def fedpg_table(summary: dict) -> Table:
    from rich.table import Table

    t = Table(title=f"{summary['label']} results", show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    med = summary["median_episodes_to_target"]
    rows = [
        ("privacy", summary["privacy"]),
        ("noise keys", summary["noise"]),
        ("agents K, topology", f"{summary['agents']}, {summary['topology']}"),
        ("trials × episodes/agent",
         f"{summary['trials']} × {summary['budget_episodes_per_agent']}"),
        *(() if summary["target_return"] is None else (
            (f"median episodes/agent to mean return ≥ {summary['target_return']:g}",
             "not reached" if med is None else f"{med:g}"),
            ("trials that reached it", f"{summary['reached_target']}/{summary['trials']}"))),
        ("final mean return (last 10 rounds)",
         ", ".join(f"{x:.4g}" for x in summary["final_mean_return"])),
        ("wall time", f"{summary['wall_seconds']:.1f} s (first round incl. compile "
                      f"{summary['compile_seconds']:.1f} s)"),
        ("rounds / s, episodes / s",
         f"{summary['rounds_per_second']:.1f}, {summary['episodes_per_second']:,.0f}"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


@reproduce_app.command("fedpg")
@flag_names(budget="--episodes", laplace_epsilons="--laplace-epsilons-per-report")
def reproduce_fedpg_command(
    trials: Annotated[int, typer.Option(help="Trials per setting (the issue: 10).")] = 10,
    episodes: Annotated[int, typer.Option(
        help="Episodes per agent over the run (FedPG-BR: 5000).")] = 5000,
    agents: Annotated[int, typer.Option(help="K agents (FedPG-BR: 10).")] = 10,
    gaussian_epsilons: Annotated[str, typer.Option(
        help="Comma-separated total ε per agent (δ = 1e-5) of the Gaussian variants of "
        "FedPG-Cen and FedPG-Dec (ring); empty: none.")] = "10,100",
    laplace_epsilons_per_report: Annotated[str, typer.Option(
        help="Comma-separated ε per release of the Laplace variants (each agent releases once "
        "per round); empty: none.")] = "100",
    seed: SweepSeed = 0,
    noise: Noise = None,
    out: Out = None,
    resume: Resume = None,
    one_program: Annotated[bool, typer.Option(
        "--one-program/--per-setting",
        help="Run the settings as compiled programs, FedPG-Cen's and FedPG-Dec's (default; the "
        "same results per setting as running each alone), or each setting alone in turn "
        "(each is saved as soon as it finishes).")] = True,
    progress: ShowProgress = True,
) -> None:
    """Paper 004: FedPG-Cen vs FedPG-Dec (ring, exponential, random) vs a single agent.

    Writes tables.md (episodes to a mean return of 475, final returns, rounds/s, episodes/s),
    plots/returns.png (mean return vs episodes per agent, band over trials), plots/private.png
    (Gaussian and Laplace variants), privacy.json and per-setting results; prints the table.
    """
    from privrl.config import ConfigError
    from privrl.runtime.output import check_out_dir

    check_out_dir(out)  # before the config, which may import --env's code
    from privrl.systems.fedpg.reproduce import FedPGSweep

    if out is not None and resume is not None:
        raise ConfigError("--resume", "give either --out (a new sweep) or --resume (an old one)")
    if resume is not None and not (resume / "sweep.json").is_file():
        raise ConfigError("--resume", f"{resume} holds no sweep (no sweep.json)")
    def numbers(text: str, option: str) -> tuple[float, ...]:
        try:
            return tuple(float(e) for e in text.split(",") if e.strip())
        except ValueError:
            raise ConfigError(option, f"must be comma-separated numbers, got {text!r}") from None

    cfg = FedPGSweep(trials=trials, budget=episodes, agents=agents, seed=seed,
                     gaussian_epsilons=numbers(gaussian_epsilons, "--gaussian-epsilons"),
                     laplace_epsilons=numbers(laplace_epsilons_per_report,
                                              "--laplace-epsilons-per-report"),
                     noise=None if noise is None else noise.value)
    cfg.validate()

    from rich.console import Console
    from rich.markdown import Markdown

    from privrl.runtime.output import new_run_dir
    from privrl.systems.fedpg.reproduce import run_sweep

    console, err = Console(), Console(stderr=True)
    path = resume if resume is not None else new_run_dir(out, "reproduce-fedpg")
    err.print(f"[bold]Reproducing paper 004[/]: {len(cfg.settings())} settings × {trials} "
              f"trials × {episodes:,} episodes per agent → {path}")
    with progress_bar(err, progress, "sweep") as (bar, task):
        def update(name: str, done: float, total: int) -> None:
            bar.update(task, completed=done, total=total, description=name)

        try:
            text = run_sweep(cfg, path, log=lambda m: bar.console.print(m), progress=update,
                             one_program=one_program)
        except KeyboardInterrupt:
            err.print(f"interrupted: finished settings are kept; continue with "
                      f"privrl reproduce fedpg --resume {path}")
            raise
    console.print(Markdown(text))
    console.print(f"Results written to [bold]{path}[/] (tables.md, tables.json, plots/, "
                  "privacy.json, settings/)")


AuditAlgorithm = value_enum("AuditAlgorithm", ALGORITHMS)
AuditMechanism = value_enum("AuditMechanism", ("laplace", "gaussian"))


@audit_app.command("fedpg")
@flag_names(budget="--episodes")
def audit_fedpg_command(
    algorithm: Annotated[AuditAlgorithm, typer.Option(
        help="cen: the agent sends its gradient estimate to the server; dec: a node releases "
        "its update to its peers.", case_sensitive=False)] = AuditAlgorithm.cen,
    mechanism: Annotated[str, typer.Option(
        help="laplace (audits --epsilon-per-report, one release's ε), gaussian (audits one "
        "release's (ε, δ) when σ is calibrated to each agent's total --epsilon over the run), "
        "or your own module:callable (audits --epsilon-per-report, as it declares).",
        parser=mechanism_option(AuditMechanism))
    ] = AuditMechanism.laplace,
    epsilon: Annotated[str | None, typer.Option(
        help="gaussian: each agent's total ε over the run, values to audit (comma-separated). "
        "Default 0.5,1,2,5,10.")] = None,
    epsilon_per_report: Annotated[str | None, typer.Option(
        help="laplace: the ε of one release, values to audit (comma-separated). Default "
        "0.5,1,2,5,10.")] = None,
    clip: ClipOpt = None,
    delta: DeltaOpt = 1e-5,
    episodes: EpisodesOpt = 5000,
    robust: Annotated[FedPGRobust, typer.Option(
        help="cen: the server's robust rule (fedpg-br, median, trimmed-mean); the attacker "
        "then sees its μ_t over all K agents' reports (the canary is one of them), to confirm "
        "the rule is post-processing. Default none: the attacker sees the one report.")
    ] = FedPGRobust.none,
    samples: Annotated[int, typer.Option(
        help="Reports per world (half choose the attack's threshold, half bound ε).")
    ] = 20_000,
    confidence: Annotated[float, typer.Option(help="Confidence of each lower bound.")] = 0.95,
    seed: SweepSeed = 0,
    out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """End-to-end audit: a canary agent (what it sends replaced by a vector beyond the clip) vs
    an ordinary agent playing its own private CartPole episodes; an attacker who sees one
    report bounds ε from below. Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    from dataclasses import replace

    from privrl.audit.cli import execute_audit
    from privrl.audit.mechanism import check_audit_settings
    from privrl.config import ConfigError, positive
    from privrl.runtime.output import check_out_dir

    check_out_dir(out)  # before the config, which may import --env's code
    from privrl.systems.fedpg.algorithm import FedPGConfig
    from privrl.systems.fedpg.audit import audit_fedpg

    flag, given = (("--epsilon-per-report", epsilon_per_report)
                   if mechanism is not AuditMechanism.gaussian else ("--epsilon", epsilon))
    other = {"--epsilon": epsilon, "--epsilon-per-report": epsilon_per_report}
    wrong = next(f for f in other if f != flag)
    if other[wrong] is not None:
        raise ConfigError(wrong, f"the {mechanism.value} audit takes {flag}")
    epsilons = parse_numbers("0.5,1,2,5,10" if given is None else given, flag)
    config = FedPGConfig.from_preset("paper", algorithm=algorithm.value,
                                     mechanism=mechanism.value, epsilon=1.0,
                                     clip=1.0 if clip is None else clip, delta=delta,
                                     budget=episodes, robust=robust.value)
    for e in epsilons:  # every setting validated (σ calibrated) before any draw
        positive(flag, e)
        try:
            replace(config, epsilon=e).resolved()
        except ConfigError as err:
            raise ConfigError(flag if err.field == "epsilon" else err.field, err.message) from err
    check_audit_settings(samples, confidence)
    execute_audit(
        f"[bold]audit fedpg-{algorithm.value}[/] {mechanism.value}: ε ∈ "
        f"{{{', '.join(f'{e:g}' for e in epsilons)}}}, {samples:,} reports per world",
        lambda progress_fn: audit_fedpg(config, epsilons, seed=seed, samples=samples,
                                        confidence=confidence, progress=progress_fn),
        f"audit-fedpg-{algorithm.value}-{mechanism.value}",
        {"system": f"fedpg-{algorithm.value}", "mechanism": mechanism.value,
         "epsilons": list(epsilons), "clip": config.clip, "delta": delta, "budget": episodes,
         "robust": robust.value, "samples": samples, "confidence": confidence, "seed": seed},
        out, progress)
