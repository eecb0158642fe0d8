"""`privrl run dp-reinforce|dp-dqn|ldp-reinforce|ldp-dqn` and `privrl reproduce dpsgd-rl`
(paper 003)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from privrl.cli import (
    AccountantName,
    AccountantOpt,
    EnvOpt,
    MaxStepsOpt,
    Noise,
    Out,
    PrivateOpt,
    Resume,
    SecureNoise,
    Seed,
    ShowProgress,
    SweepSeed,
    flag_names,
    parse_numbers,
    progress_bar,
    system_apps,
    value_enum,
)
from privrl.systems.dpsgd_rl.choices import DQN_OPTIMIZERS, OBS_MODES

run_app, reproduce_app = system_apps()
audit_app = typer.Typer(rich_markup_mode=None)  # `privrl audit dp-reinforce`

Trials = Annotated[int, typer.Option(help="Independent trials, run vectorized.")]
Episodes = Annotated[int, typer.Option(help="Training episodes at most (stops when solved).")]
Delta = Annotated[float, typer.Option(help="δ of the stated (ε, δ), in (0, 1).")]


SolveTargetOpt = Annotated[float | None, typer.Option(
    "--target-return", help="Solved when the mean of 25 consecutive greedy evaluation returns "
    "reaches this (training stops there). Default: the task's (CartPole-v1's 475; a Gymnasium "
    "reward_threshold); a task without one is never solved and reports returns.")]
ObsMode = value_enum("ObsMode", [m for m in OBS_MODES if m != "none"])
# Renamed config fields' flags, shared by every DP-SGD command.
_FLAGS = {"seeds": "--trials", "target_epsilon": "--epsilon", "max_epsilon": "--epsilon-budget",
          "max_episode_steps": "--max-steps", "solve_threshold": "--target-return",
          "private_params": "--private"}


def _dp_options(noise_multiplier: float | None, epsilon: float | None) -> dict[str, Any]:
    from privrl.config import ConfigError

    if noise_multiplier is not None and epsilon is not None:
        raise ConfigError("--epsilon", "give either --noise-multiplier or --epsilon")
    return {"dp": True, "noise_multiplier": 1.0 if noise_multiplier is None else noise_multiplier,
            "target_epsilon": epsilon}


def _execute(algorithm: str, algo_cls: Any, config: Any, out: Path | None,
             show: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from privrl.runtime.output import check_out_dir, new_run_dir
    from privrl.systems.dpsgd_rl.local import run_episodic, save

    check_out_dir(out)
    algo = algo_cls.settings_algorithm([config])
    cfg = algo.config
    err, console = Console(stderr=True), Console()
    if cfg.dp:
        sig = f"DP-SGD σ = {cfg.noise_multiplier:.4g}, C = {cfg.clip:g}"
        if cfg.target_epsilon is not None:
            sig += f" (calibrated to ε = {cfg.target_epsilon:g} at δ = {cfg.delta:g})"
    else:
        sig = f"LDP observations: {cfg.obs.mode}"
    err.print(f"[bold]{algorithm}[/] ({cfg.preset} preset), {sig}; {cfg.seeds} trial(s) × "
              f"≤ {cfg.episodes} episodes")
    with progress_bar(err, show, "training", unit="episodes") as (bar, task):
        result = run_episodic(algo, algorithm, progress=lambda d, t: bar.update(
            task, completed=d, total=t))
    path = new_run_dir(out, f"{algorithm}-{cfg.preset}")
    summary = save(result, path, command=["privrl", *sys.argv[1:]])
    t = Table(title=f"{algorithm} results", header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    med = summary["median_episodes_to_solve"]
    target = summary["solve_threshold"]
    rows = [
        *(() if target is None else (
            (f"solved trials (mean of {cfg.solve_window} evaluations ≥ {target:g})",
             f"{summary['solved_seeds']}/{summary['seeds']}"),
            ("median episodes to solve", "not solved" if med is None else f"{med:g}"))),
        ("final evaluation return (mean of the last 25)",
         "none" if summary["final_eval_mean"] is None else f"{summary['final_eval_mean']:.4g}"),
        ("updates", ", ".join(map(str, summary["updates"]))),
        ("wall time", f"{summary['wall_seconds']:.1f} s on {summary['devices']} device(s)"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    console.print(f"Model: {summary['privacy_model']}")
    console.print(f"Observations: {summary['privacy_observations']}")
    if "noise" in summary:
        console.print(summary["noise"])
    if summary["stopped_by_max_epsilon"]:
        console.print(f"[bold]Stopped by --epsilon-budget {cfg.max_epsilon:g}[/] after "
                      f"{max(summary['updates'])} updates; results kept.")
    console.print(f"Results written to [bold]{path}[/] (config.json, metrics.csv, "
                  "privacy.json, summary.json, policy.npz, plots/eval_returns.png)")


@run_app.command("dp-reinforce")
@flag_names(**_FLAGS)
def run_dp_reinforce(
    noise_multiplier: Annotated[float | None, typer.Option(
        help="Noise multiplier σ: N(0, σ²C²) on the sum of clipped episode gradients. "
        "Default 1. 0 clips without noise (no guarantee).")] = None,
    epsilon: Annotated[float | None, typer.Option(
        help="Each episode's total ε at --delta over the run (the protected unit: one "
        "episode, every update that uses it); σ is calibrated to it (instead of "
        "--noise-multiplier).")] = None,
    epsilon_budget: Annotated[float | None, typer.Option(
        help="Refuse any update that would take an episode's ε above this cap.")] = None,
    clip: Annotated[float, typer.Option(help="C: L2 bound of each episode's gradient.")] = 1.0,
    delta: Delta = 1e-5,
    accountant: AccountantOpt = AccountantName.pld,
    batch_episodes: Annotated[int, typer.Option(help="Episodes per update.")] = 1,
    secure_noise: SecureNoise = False, noise: Noise = None,
    episodes: Episodes = 1000, trials: Trials = 1, seed: Seed = 0, out: Out = None,
    progress: ShowProgress = True, env: EnvOpt = None, private: PrivateOpt = None,
    max_steps: MaxStepsOpt = None, target_return: SolveTargetOpt = None,
) -> None:
    """DP-SGD REINFORCE on CartPole-v1 (paper 003) or --env: the unit of privacy is one
    episode."""
    from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

    cfg = ReinforceConfig.from_preset(
        "paper", **_dp_options(noise_multiplier, epsilon), max_epsilon=epsilon_budget,
        clip=clip, delta=delta, accountant=accountant.value, batch_episodes=batch_episodes,
        secure_noise=secure_noise, noise=None if noise is None else noise.value,
        episodes=episodes, seeds=trials, seed=seed, env=env, private_params=tuple(private or ()),
        max_episode_steps=max_steps, solve_threshold=target_return)
    _execute("dp-reinforce", Reinforce, cfg, out, progress)


DQNOptimizer = value_enum("DQNOptimizer", DQN_OPTIMIZERS)


@run_app.command("dp-dqn")
@flag_names(sampling_probability="--q", **_FLAGS)
def run_dp_dqn(
    preset: Annotated[str, typer.Option(
        help="paper: the slides' settings (AdamW). dp-sgd: ours, SGD with momentum, which "
        "learns under DP noise. dp-solve: ours, dp-sgd with a 16-16 network, double DQN and "
        "--pause-at 500, which solves CartPole at ε = 8 per transition (docs/dpsgd-rl.md). "
        "Options given explicitly override it.")
    ] = "paper",
    noise_multiplier: Annotated[float | None, typer.Option(
        help="Noise multiplier σ: N(0, σ²C²) on the sum of clipped per-transition gradients. "
        "Default 1. 0 clips without noise (no guarantee).")] = None,
    epsilon: Annotated[float | None, typer.Option(
        help="Each transition's total ε at --delta over the run (the protected unit: one "
        "stored transition, every update that samples it); σ is calibrated to it (instead "
        "of --noise-multiplier).")] = None,
    epsilon_budget: Annotated[float | None, typer.Option(
        help="Stop training before an update would take a transition's ε above this cap.")
    ] = None,
    clip: Annotated[float | None, typer.Option(
        help="C: L2 bound of each transition's gradient. Default: the preset's (10).")] = None,
    delta: Delta = 1e-5,
    q: Annotated[float | None, typer.Option(
        help="Poisson sampling probability per stored transition. Default: batch size / "
        "buffer size (paper 0.0128, dp-sgd 0.0512).")] = None,
    optimizer: Annotated[DQNOptimizer | None, typer.Option(
        help="adamw (AMSGrad) or sgd (heavy-ball momentum). Default: the preset's.")] = None,
    learning_rate: Annotated[float | None, typer.Option(
        help="Default: the preset's (paper 1e-4, dp-sgd 0.003).")] = None,
    momentum: Annotated[float | None, typer.Option(
        help="SGD momentum in [0, 1). Default: the preset's (0.9).")] = None,
    double_dqn: Annotated[bool | None, typer.Option(
        "--double-dqn/--no-double-dqn", help="Double DQN targets: the next action chosen by "
        "the online network, valued by the target network. Default: off.")] = None,
    lr_decay_updates: Annotated[int | None, typer.Option(
        help="Decay the learning rate linearly over this many updates to lr × "
        "--lr-final-fraction, then hold it. Default: constant.")] = None,
    lr_final_fraction: Annotated[float | None, typer.Option(
        help="The decayed learning rate as a fraction of the first, in [0, 1]. "
        "Default 0.1.")] = None,
    pause_at: Annotated[float | None, typer.Option(
        help="Make no updates during a training episode when the previous greedy evaluation "
        "returned at least this (post-processing: no privacy cost). Default: never.")] = None,
    accountant: AccountantOpt = AccountantName.pld,
    secure_noise: Annotated[bool, typer.Option(
        "--secure-noise", help="Float-safe discrete Gaussian noise from the OS CSPRNG "
        "(docs/secure-noise.md); needs --q 1 (no subsampling) and --accountant rdp.")] = False,
    noise: Noise = None,
    episodes: Episodes = 1000, trials: Trials = 1, seed: Seed = 0, out: Out = None,
    progress: ShowProgress = True, env: EnvOpt = None, private: PrivateOpt = None,
    max_steps: MaxStepsOpt = None, target_return: SolveTargetOpt = None,
) -> None:
    """DP-SGD DQN on CartPole-v1 (paper 003) or --env: the unit of privacy is one
    transition."""
    from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig

    cfg = DQNConfig.from_preset(
        preset, **_dp_options(noise_multiplier, epsilon), max_epsilon=epsilon_budget, clip=clip,
        delta=delta, sampling_probability=q, accountant=accountant.value,
        optimizer=None if optimizer is None else optimizer.value, learning_rate=learning_rate,
        momentum=momentum, double_dqn=double_dqn, lr_decay_updates=lr_decay_updates,
        lr_final_fraction=lr_final_fraction, pause_at=pause_at, secure_noise=secure_noise,
        noise=None if noise is None else noise.value, episodes=episodes, seeds=trials,
        seed=seed, env=env, private_params=tuple(private or ()), max_episode_steps=max_steps,
        solve_threshold=target_return)
    _execute("dp-dqn", DQN, cfg, out, progress)


def _obs_privacy(mode: Any, iqr_scale: float, noise_multiplier: float, delta: float,
                 box_low: str | None, box_high: str | None) -> Any:
    from privrl.systems.dpsgd_rl.ldp_obs import CARTPOLE_BOX, ObservationPrivacy

    return ObservationPrivacy(
        mode=mode.value, sigma=iqr_scale, noise_multiplier=noise_multiplier, delta=delta,
        box_low=(parse_numbers(box_low, "--box-low") if box_low else CARTPOLE_BOX[0]),
        box_high=(parse_numbers(box_high, "--box-high") if box_high else CARTPOLE_BOX[1]))


LdpMode = Annotated[ObsMode, typer.Option(
    help="sigma: the slides' N(0, (σ·IQR)²) noise, σ = --iqr-scale (NO formal guarantee); box: "
    "clip to a box, Gaussian noise of std --noise-multiplier × its diagonal ((ε, δ)-LDP per "
    "state).")]
LdpIqrScale = Annotated[float, typer.Option(
    help="sigma mode: the noise std σ in IQR units (>= 0; the slides' σ, no clip, so not a "
    "noise multiplier).")]
LdpMultiplier = Annotated[float, typer.Option(
    help="box mode: noise multiplier σ, the noise std / the box diagonal (the L2 bound of a "
    "clipped state; > 0).")]
BoxLow = Annotated[str | None, typer.Option(
    help="box mode: comma-separated lower bounds, one per observation component. Default "
    "(CartPole's) -2.4,-3,-0.2095,-3.5.")]
BoxHigh = Annotated[str | None, typer.Option(
    help="box mode: comma-separated upper bounds, one per observation component. Default "
    "(CartPole's) 2.4,3,0.2095,3.5.")]


def _ldp_command(name: str, algorithm: str) -> None:
    """Register `privrl run <name>`: `algorithm` seeing only locally privatized states."""

    @run_app.command(name, help=f"{algorithm.upper() if algorithm == 'dqn' else 'REINFORCE'} "
                     "on CartPole-v1 (or --env, with --mode box and its bounds) seeing only "
                     "locally privatized states (paper 003).")
    @flag_names(**{"obs.mode": "--mode", "obs.sigma": "--iqr-scale", "obs.delta": "--delta",
                   "private_params": "--private", "seeds": "--trials",
                   "max_episode_steps": "--max-steps", "solve_threshold": "--target-return",
                   "obs.secure": "--secure-noise",
                   "obs.noise_multiplier": "--noise-multiplier",
                   "obs.box_low": "--box-low", "obs.box_high": "--box-high"})
    def command(
        mode: LdpMode = ObsMode.sigma, iqr_scale: LdpIqrScale = 0.1,
        noise_multiplier: LdpMultiplier = 1.0, delta: Delta = 1e-5,
        box_low: BoxLow = None, box_high: BoxHigh = None, noise: Noise = None,
        secure_noise: Annotated[bool, typer.Option(
            "--secure-noise", help="box mode: float-safe discrete Gaussian observation noise "
            "from the OS CSPRNG (docs/secure-noise.md); its ε is RDP's (the RDP accountant "
            "composes each episode's states). Slow: one host call per observation.")] = False,
        episodes: Episodes = 1000, trials: Trials = 1, seed: Seed = 0, out: Out = None,
        progress: ShowProgress = True, accountant: AccountantOpt = AccountantName.pld,
        env: EnvOpt = None, private: PrivateOpt = None, max_steps: MaxStepsOpt = None,
        target_return: SolveTargetOpt = None,
    ) -> None:
        from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
        from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

        algo_cls, cfg_cls = {"reinforce": (Reinforce, ReinforceConfig),
                             "dqn": (DQN, DQNConfig)}[algorithm]
        cfg = cfg_cls.from_preset(
            "paper",
            obs=replace(_obs_privacy(mode, iqr_scale, noise_multiplier, delta, box_low, box_high),
                        secure=secure_noise),
            noise=None if noise is None else noise.value, episodes=episodes, seeds=trials,
            seed=seed, accountant="rdp" if secure_noise else accountant.value, env=env,
            private_params=tuple(private or ()), max_episode_steps=max_steps,
            solve_threshold=target_return)
        _execute(name, algo_cls, cfg, out, progress)


_ldp_command("ldp-reinforce", "reinforce")
_ldp_command("ldp-dqn", "dqn")


@reproduce_app.command("dpsgd-rl")
@flag_names(seeds_reinforce="--trials-reinforce", seeds_dqn="--trials-dqn")
def reproduce_dpsgd_rl(
    trials_reinforce: Annotated[int, typer.Option(help="Trials per REINFORCE setting.")] = 5,
    trials_dqn: Annotated[int, typer.Option(help="Trials per DQN setting.")] = 3,
    episodes: Episodes = 1000,
    algorithms: Annotated[str, typer.Option(
        help="Comma-separated: reinforce, dqn.")] = "reinforce,dqn",
    seed: Seed = 0,
    noise: Noise = None,
    out: Out = None,
    resume: Resume = None,
    one_program: Annotated[bool, typer.Option(
        "--one-program/--per-setting",
        help="Run the settings as three compiled programs, REINFORCE's, DP-SGD DQN's and LDP "
        "DQN's (default; the same results per setting as running each alone), or each setting "
        "alone in turn (each is saved as soon as it finishes).")] = True,
    progress: ShowProgress = True,
) -> None:
    """Paper 003's study: DP-SGD σ ∈ {0, .1, .2, .4, .6} and LDP σ ∈ {0, .01, .1, .2, .3, 2, 5}
    for REINFORCE and DQN; writes tables.md (σ → ε, episodes to solve) and plots/."""
    from rich.console import Console
    from rich.markdown import Markdown

    from privrl.config import ConfigError
    from privrl.runtime.output import check_out_dir, new_run_dir
    from privrl.systems.dpsgd_rl.reproduce import SweepConfig, run_sweep

    if out is not None and resume is not None:
        raise ConfigError("--resume", "give either --out (a new sweep) or --resume (an old one)")
    if resume is not None and not (resume / "sweep.json").is_file():
        raise ConfigError("--resume", f"{resume} holds no sweep (no sweep.json)")
    cfg = SweepConfig(seeds_reinforce=trials_reinforce, seeds_dqn=trials_dqn, episodes=episodes,
                      seed=seed, algorithms=tuple(a.strip() for a in algorithms.split(",")),
                      noise=None if noise is None else noise.value)
    cfg.validate()
    check_out_dir(out)
    path = resume if resume is not None else new_run_dir(out, "reproduce-dpsgd-rl")
    err = Console(stderr=True)
    err.print(f"[bold]Reproducing paper 003[/]: {len(cfg.settings())} settings → {path}")
    with progress_bar(err, progress, "sweep", unit="episodes") as (bar, task):
        run_sweep(cfg, path, progress=lambda n, d, t: bar.update(
            task, completed=d, total=t, description=n), log=lambda m: bar.console.print(m),
            one_program=one_program)
    Console().print(Markdown((path / "tables.md").read_text()))
    Console().print(f"Results written to [bold]{path}[/] (tables.md, plots/, settings/)")


@audit_app.command("dp-reinforce")
@flag_names(epsilons="--epsilon", target_epsilon="--epsilon")
def audit_dp_reinforce_command(
    epsilon: Annotated[str, typer.Option(
        help="Per-episode ε values to audit (comma-separated); σ is calibrated to each.")
    ] = "1,2,5,10",
    canaries: Annotated[int, typer.Option(
        help="Gradient canaries m, each in the run with probability 1/2.")] = 1000,
    guesses: Annotated[int | None, typer.Option(
        help="k: the attacker guesses 'in' for the k highest scores and 'out' for the k "
        "lowest. Default: canaries / 10.")] = None,
    episodes: Annotated[int, typer.Option(
        help="Training episodes (= updates) of each audited run.")] = 100,
    clip: Annotated[float, typer.Option(help="C: L2 bound of each episode's gradient.")] = 1.0,
    batch_episodes: Annotated[int, typer.Option(help="Episodes per update.")] = 1,
    delta: Delta = 1e-5,
    accountant: AccountantOpt = AccountantName.pld,
    confidence: Annotated[float, typer.Option(help="Confidence of each lower bound.")] = 0.95,
    seed: SweepSeed = 0,
    out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """One-run audit (Steinke, Nasr & Jagielski 2023): canaries in a real DP-REINFORCE run, an
    attacker who sees every released noisy gradient; bounds the per-episode ε from below.
    Writes audit.json, audit.csv, audit.md and plots/audit.png."""
    from dataclasses import replace

    from privrl.audit.cli import execute_audit
    from privrl.runtime.output import check_out_dir
    from privrl.systems.dpsgd_rl.audit import audit_config, audit_dp_reinforce, check_audit
    from privrl.systems.dpsgd_rl.reinforce import ReinforceConfig

    epsilons = parse_numbers(epsilon, "--epsilon")
    k = check_audit(canaries, guesses, confidence)
    config = ReinforceConfig.from_preset(
        "paper", dp=True, clip=clip, delta=delta, accountant=accountant.value,
        batch_episodes=batch_episodes, episodes=episodes, seed=seed)
    for e in epsilons:  # every setting validated (and σ calibrated) before any training
        audit_config(replace(config, target_epsilon=e))
    check_out_dir(out)
    execute_audit(
        f"[bold]audit dp-reinforce[/]: ε ∈ {{{', '.join(f'{e:g}' for e in epsilons)}}}, "
        f"{canaries:,} canaries, {episodes} updates per run",
        lambda progress_fn: audit_dp_reinforce(
            config, epsilons, seed=seed, canaries=canaries, guesses=guesses,
            confidence=confidence, progress=progress_fn),
        "audit-dp-reinforce",
        {"system": "dp-reinforce", "epsilons": list(epsilons), "canaries": canaries,
         "guesses": k, "episodes": episodes, "clip": clip, "batch_episodes": batch_episodes,
         "delta": delta, "accountant": accountant.value, "confidence": confidence,
         "seed": seed}, out, progress, unit="runs")
