"""Issue 51 item 4: private learning on tasks nobody tuned for, with `privrl plan`'s settings.

Tasks: gymnax Acrobot-v1, MountainCar-v0, Pendulum-v1, MountainCarContinuous-v0; Gymnasium
CartPole-v1 (stepped on the host); two small tasks written here, `corridor` (discrete, a
private slip probability) and `reach` (continuous, a private actuator gain). Each has a private
parameter drawn per agent from a range.

Rows per task, each run non-private and private with the settings `privrl.planner.plan` gives
from the task's public simulator (no sweep: the run here is the check):
- pgc-a3c at ε = 5 and ε = 1 per agent (Laplace LDP), K from the plan;
- fedpg-cen at user-level ε = 2 with K = 1,000 (distributed Gaussian);
- dp-reinforce at ε = 5 per episode, K (episodes) from the plan; and the same plan with the
  `adaptive` preset's levers on (its row: the kept policy's return on fresh public episodes).
A row's episodes are capped (--max-episodes; the table says where): the issue asks for runs of
at most 10 minutes on 2 cores.

Output: one table, the fraction of the non-private improvement over random each private row
reaches, (private − random)/(non-private − random), with the fleet size and the wall time.
"random" is `privrl.evaluation.random_returns` (every run's baseline) over --random-episodes
episodes (2,000; the plan's pilot's, 1,000 since session 10, is recorded beside it).
Runnable in parts (--task, --system) and resumable: each row is a JSON file in --out, and a row
already there is skipped.

    nice -n 10 python benchmarks/untuned.py --out benchmarks/untuned-out --task reach
    python benchmarks/untuned.py --out benchmarks/untuned-out --table
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
from jax import Array

# --- the two small tasks, each with a private parameter ---------------------------------------


@struct.dataclass
class CorridorState(environment.EnvState):
    x: Array
    time: int


@struct.dataclass
class CorridorParams(environment.EnvParams):
    slip: float = 0.1  # the chance a move goes the other way (private per agent)
    length: float = 0.5
    max_steps_in_episode: int = 40


class Corridor(environment.Environment[CorridorState, CorridorParams]):
    """Discrete: from x = 0, reach x = length (0.5: five net steps right) with steps of 0.1
    (actions: left, stay, right); reward −0.02 per step, +1 at the goal (terminal); a move goes
    the other way with probability `slip`; 40 steps."""

    @property
    def default_params(self) -> CorridorParams:
        return CorridorParams()

    def step_env(self, key: Array, state: CorridorState, action: Any, params: CorridorParams
                 ) -> tuple[Array, CorridorState, Array, Array, dict]:
        move = (jnp.asarray(action, jnp.float32) - 1.0) * 0.1
        slipped = jax.random.uniform(key) < params.slip
        x = jnp.clip(state.x + jnp.where(slipped, -move, move), -params.length, params.length)
        state = CorridorState(x=x, time=state.time + 1)
        goal = x >= params.length - 1e-6
        reward = jnp.where(goal, 1.0, -0.02)
        return self.get_obs(state, params), state, reward, self.is_terminated(state, params), {}

    def reset_env(self, key: Array, params: CorridorParams) -> tuple[Array, CorridorState]:
        state = CorridorState(x=jnp.float32(0.0), time=0)
        return self.get_obs(state, params), state

    def get_obs(self, state: CorridorState, params: Any = None, key: Any = None) -> Array:
        return jnp.stack([state.x, state.time / 40.0]).astype(jnp.float32)

    def is_terminated(self, state: CorridorState, params: CorridorParams) -> Array:
        return (state.x >= params.length - 1e-6) | (state.time >= params.max_steps_in_episode)

    @property
    def name(self) -> str:
        return "Corridor"

    @property
    def num_actions(self) -> int:
        return 3

    def action_space(self, params: CorridorParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(3)

    def observation_space(self, params: CorridorParams) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


@struct.dataclass
class ReachState(environment.EnvState):
    x: Array
    target: Array
    time: int


@struct.dataclass
class ReachParams(environment.EnvParams):
    gain: float = 1.0  # the actuator's gain (private per agent)
    max_steps_in_episode: int = 30


class Reach(environment.Environment[ReachState, ReachParams]):
    """Continuous: a point at x₀ ~ U(−1, 1) moves by 0.2·gain·a, a ∈ [−1, 1], towards a
    target ~ U(−1, 1); reward −|x − target| per step, 30 steps."""

    @property
    def default_params(self) -> ReachParams:
        return ReachParams()

    def step_env(self, key: Array, state: ReachState, action: Any, params: ReachParams
                 ) -> tuple[Array, ReachState, Array, Array, dict]:
        a = jnp.clip(jnp.reshape(jnp.asarray(action, jnp.float32), ()), -1.0, 1.0)
        x = jnp.clip(state.x + 0.2 * params.gain * a, -2.0, 2.0)
        state = ReachState(x=x, target=state.target, time=state.time + 1)
        reward = -jnp.abs(x - state.target)
        return self.get_obs(state, params), state, reward, self.is_terminated(state, params), {}

    def reset_env(self, key: Array, params: ReachParams) -> tuple[Array, ReachState]:
        k1, k2 = jax.random.split(key)
        state = ReachState(x=jax.random.uniform(k1, (), minval=-1.0, maxval=1.0),
                           target=jax.random.uniform(k2, (), minval=-1.0, maxval=1.0), time=0)
        return self.get_obs(state, params), state

    def get_obs(self, state: ReachState, params: Any = None, key: Any = None) -> Array:
        return jnp.stack([state.x, state.target]).astype(jnp.float32)

    def is_terminated(self, state: ReachState, params: ReachParams) -> Array:
        return state.time >= params.max_steps_in_episode

    @property
    def name(self) -> str:
        return "Reach"

    def action_space(self, params: ReachParams | None = None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def observation_space(self, params: ReachParams) -> spaces.Box:
        return spaces.Box(-2.0, 2.0, (2,), jnp.float32)


def corridor() -> tuple[Corridor, CorridorParams]:
    env = Corridor()
    return env, env.default_params


def reach() -> tuple[Reach, ReachParams]:
    env = Reach()
    return env, env.default_params


# --- the benchmark ------------------------------------------------------------------------------
TASKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "acrobot": ("gymnax:Acrobot-v1", ("link_mass_1=0.8:1.2",)),
    "mountaincar": ("gymnax:MountainCar-v0", ("gravity=0.0022:0.0028",)),
    "pendulum": ("gymnax:Pendulum-v1", ("m=0.8:1.2",)),
    "mountaincar-continuous": ("gymnax:MountainCarContinuous-v0", ("power=0.0013:0.0017",)),
    "cartpole-gymnasium": ("gymnasium:CartPole-v1", ("gravity=9.7:9.9",)),
    "corridor": ("untuned:corridor", ("slip=0:0.2",)),
    "reach": ("untuned:reach", ("gain=0.5:1.5",)),
}
# (system, ε, K given or None: the plan's)
ROWS: list[tuple[str, float, int | None]] = [
    ("pgc-a3c", 5.0, None), ("pgc-a3c", 1.0, None), ("fedpg-cen", 2.0, 1000),
    ("dp-reinforce", 5.0, None)]


def row_name(system: str, epsilon: float) -> str:
    return f"{system}-eps{epsilon:g}"


def run_row(task: str, system: str, epsilon: float, agents: int | None, args: Any
            ) -> dict[str, Any]:
    """Plan on the simulator, then run the plan's settings private and non-private (one
    program where the task allows) and measure both against a random policy."""
    from dataclasses import asdict, replace

    from privrl.planner import systems as sy
    from privrl.planner.api import PlanConfig, fraction_of, plan, recommend_at, task_of

    env, private = TASKS[task]
    cfg = PlanConfig(env=env, private_params=private, epsilon=epsilon, agents=agents,
                     sweep=False, trials=args.trials, seed=args.seed,
                     pilot_episodes=args.pilot_episodes)
    t0, c0 = time.perf_counter(), time.process_time()
    result = plan(system, cfg, log=lambda m: None)
    plan_seconds, plan_cpu = time.perf_counter() - t0, time.process_time() - c0
    rec = sy.Recommendation(**result.recommendation)
    f = sy.facts(system, bool(task_of(cfg).head.continuous))
    per_agent = rec.reports_per_agent * f.episodes_per_report
    if system == "fedpg-cen":  # `fleet`: an agent plays in a round with probability q
        per_agent = per_agent * (sy.build_config(system, result.fields).resolved()
                                 .sampling_rate or 1.0)
    capped = rec.agents * per_agent > args.max_episodes
    if capped:  # the settings for the fleet that runs
        rec = recommend_at(result, max(1, int(args.max_episodes // per_agent)))
    print(f"  plan ({plan_seconds:.0f} s, {plan_cpu:.0f} CPU-s): K = {rec.agents:,} "
          f"(planned {result.recommendation['agents']:,}), {rec.reports_per_agent} reports of "
          f"{f.episodes_per_report} episodes per agent: {rec.agents * per_agent:,.0f} episodes per "
          f"setting and trial, 2 settings × {args.trials} trials", flush=True)
    nonprivate = replace(rec, mechanism="none", epsilon=math.inf)
    if system == "fedpg-cen":
        # the preset's own step size, not the plan's (set for the private row's noise): at
        # K = 1,000 on `reach` the plan's 8.6e-6 left the "non-private" row at random as well
        # (session 10, log 26-fedrows), which made the fraction meaningless
        nonprivate = replace(nonprivate, learning_rate=f.learning_rate)
        q = sy.build_config(system, result.fields).resolved().sampling_rate
        if q is not None and q < 1:
            # `fleet`: q·K Poisson-sampled agents a round; the reference plays as many agents
            # every round (no noise, so no sampling), the same episodes and rounds, rather
            # than all K: 1/q times the private row's work (session 11, log 28-fedcen)
            nonprivate = replace(nonprivate, agents=max(1, round(q * rec.agents)))
    levers = system == "pgc-a3c"
    if levers:
        # pgc-a3c: the private row runs the plan's recommended command (its levers on where the
        # plan turns them on: `adaptive` on a discrete task, with the best candidate on the
        # public simulator). The non-private row is the preset's own non-private learner (its
        # step size, |B| and clip; the pilot's settings) over the same episodes: the plan's
        # step is set for the private row's noise, and at a step from hopeless noise the
        # same-settings "non-private" row froze at its start (session 8's `reach` rows).
        from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig

        clip = PGCA3CConfig.from_preset(f.preset, mechanism="none").resolved().clip
        nonprivate = replace(nonprivate, agents=rec.agents * rec.reports_per_agent,
                             reports_per_agent=1, batch=f.batch,
                             learning_rate=f.learning_rate, clip=float(clip))
    configs = [sy.build_config(system, sy.config_fields(system, s, env, private, args.trials,
                                                       args.seed, levers=levers and i == 0))
               for i, s in enumerate((rec, nonprivate))]
    # A continuous task's reference is the better of two non-private learners over the same
    # episodes: the preset's critic (the discrete rows' reference) and the command's own
    # policy-only report (the pilot's learner). On Pendulum the first stayed near random where
    # the second learned (benchmarks/log/28-cont.md): a weak reference would inflate the
    # fraction.
    both = levers and bool(task_of(cfg).head.continuous)
    if both:
        configs.append(configs[1])
    if levers:  # the reference keeps the preset's critic (the pilot models the command's learner)
        configs[1] = replace(configs[1], critic="shared")
    t1, c1 = time.perf_counter(), time.process_time()
    private_curve, nonprivate_curve, *policy_only = sy.run_settings(
        system, configs, together=not task_of(cfg).host, final_policy=system == "dp-reinforce")
    wall, run_cpu = time.perf_counter() - t1, time.process_time() - c1
    random, random_se = random_of(task, args)
    final, np_final = private_curve.final(), nonprivate_curve.final()
    # each learner's last-10 % return at every tenth of its run: whether a reference fell
    # back (a constant step over a long run) shows here
    curves = {"private": checkpoints(private_curve), "nonprivate": checkpoints(nonprivate_curve),
              **({"nonprivate_policy_only": checkpoints(policy_only[0])} if policy_only else {})}
    references: dict[str, Any] = {}
    if both:
        references = {"nonprivate_critic_return": np_final,
                      "nonprivate_policy_only_return": policy_only[0].final()}
        np_final = max(references.values())
    if levers:
        # pgc-a3c: the reference is the best the non-private learners reached at any tenth of
        # the run (a last-10 % window), not only at its end: over the ε = 1 rows' long runs the
        # preset's constant step lets them fall back, on `reach` from -2.5 at 22,000 episodes
        # to -34 (below random) at 220,000 (benchmarks/log/30-cont1.md), which would leave
        # no improvement to take a fraction of. Never lower than the end: the fraction can
        # only fall.
        references["nonprivate_end_return"] = np_final
        np_final = max([np_final] + [r for name, c in curves.items() if name != "private"
                                     for _, r in c if math.isfinite(r)])
    adaptive: dict[str, Any] = {}
    if system == "dp-reinforce":  # the same plan with the `adaptive` preset's levers on
        fields = sy.reinforce_levers(sy.config_fields(system, rec, env, private, args.trials,
                                                      args.seed))
        t2, c2 = time.perf_counter(), time.process_time()
        curve = sy.run_settings(system, [sy.build_config(system, fields)], together=False)[0]
        kept = curve.final_policy if curve.final_policy is not None else curve.final()
        adaptive = {"adaptive_return": kept, "adaptive_curve_return": curve.final(),
                    "adaptive_fraction": fraction_of(kept, random, np_final),
                    "adaptive_seconds": time.perf_counter() - t2,
                    "adaptive_cpu_seconds": time.process_time() - c2, "adaptive_fields": fields,
                    # like for like: every final policy on the same fresh public episodes
                    "policy_returns": {"private": private_curve.final_policy,
                                       "nonprivate": nonprivate_curve.final_policy,
                                       "adaptive": curve.final_policy},
                    # their standard errors (25 episodes per trial): each row's own interval
                    "policy_returns_se": {"private": private_curve.final_policy_se,
                                          "nonprivate": nonprivate_curve.final_policy_se,
                                          "adaptive": curve.final_policy_se}}
    return {"task": task, "env": env, "private": list(private), "system": system,
            "epsilon": epsilon, "agents": rec.agents, "planned_agents":
            result.recommendation["agents"], "capped": capped,
            "recommendation": asdict(rec), "plan_fields": result.fields,
            "private_preset": configs[0].preset,
            "random_return": random, "random_return_se": random_se,
            "random_episodes": args.random_episodes,
            "pilot_random_return": result.pilot["random_return"],
            "nonprivate_return": np_final, "private_return": final,
            "pilot_nonprivate_return": result.pilot["nonprivate_return"],
            "fraction": fraction_of(final, random, np_final),
            "pilot_learned": result.pilot["episodes_to_learn"] is not None,
            "notes": list(result.notes), "plan_seconds": plan_seconds,
            "run_seconds": wall, "plan_cpu_seconds": plan_cpu, "run_cpu_seconds": run_cpu,
            "trials": args.trials, "curves": curves, **references, **adaptive}


def checkpoints(curve: Any, tenths: int = 10) -> list[list[float]]:
    """[episodes, the curve's last-10 % return up to them] at every tenth of its run."""
    end = float(curve.episodes[-1]) if len(curve.episodes) else 0.0
    return [[end * j / tenths, curve.final(upto=end * j / tenths)] for j in range(1, tenths + 1)]


def random_of(task: str, args: Any) -> tuple[float, float]:
    """(mean, standard error) of a uniformly random policy's return on `task` over
    --random-episodes episodes (`privrl.evaluation.random_returns`, every run's baseline): the
    plan's pilot measured 64 until session 10, whose mean was 0.15 off on `corridor` (−0.148
    against −0.295 from 2,000 episodes), enough to put a row at its random start "below
    random"; it now measures 1,000 (`PlanConfig.random_episodes`)."""
    from privrl.evaluation import random_returns
    from privrl.planner.api import PlanConfig, task_of

    env, private = TASKS[task]
    r = random_returns(task_of(PlanConfig(env=env, private_params=private, epsilon=1.0)),
                       args.random_episodes, args.seed)
    return float(r.mean()), float(r.std(ddof=1) / math.sqrt(r.size))


def table(out: Path) -> str:
    """The markdown table of every row in `out` (missing rows listed below it): per task and
    setting, random, non-private, private, the fraction, K, wall and CPU seconds (plan + run;
    CPU-s recorded since session 10)."""
    rows = {(d["task"], row_name(d["system"], d["epsilon"])): d
            for p in sorted(out.glob("*/*.json")) for d in [json.loads(p.read_text())]}
    lines = ["| task | setting | random | non-private | private | fraction | K "
             "| wall (plan + run) | CPU-s (plan + run) |", "|---|---|---|---|---|---|---|---|---|"]
    missing = []

    def cpu(d: dict[str, Any], run: str) -> str:
        if "plan_cpu_seconds" not in d:
            return "not recorded"
        return f"{d['plan_cpu_seconds']:.0f} + {d[run]:.0f}"

    for task in TASKS:
        for system, eps, _ in ROWS:
            d = rows.get((task, row_name(system, eps)))
            if d is None:
                missing.append(f"{task} / {row_name(system, eps)}")
                continue
            k = f"{d['agents']:,}" + (f" (plan: {d['planned_agents']:,}, capped)"
                                      if d["capped"] else "")
            head = (f"| {task} | {{}} | {d['random_return']:.4g} | {d['nonprivate_return']:.4g} "
                    f"| {{:.4g}} | {{}} | {k} | {d['plan_seconds']:.0f} + {{:.0f}} s | {{}} |")
            lines.append(head.format(f"{system} ε = {eps:g}", d["private_return"],
                                     _frac(d["fraction"]), d["run_seconds"],
                                     cpu(d, "run_cpu_seconds")))
            if "adaptive_return" in d:  # dp-reinforce's `adaptive` preset on the same plan
                lines.append(head.format(f"{system} ε = {eps:g} adaptive", d["adaptive_return"],
                                         _frac(d["adaptive_fraction"]), d["adaptive_seconds"],
                                         cpu(d, "adaptive_cpu_seconds")))
    if missing:
        lines += ["", "Missing rows: " + "; ".join(missing) + "."]
    return "\n".join(lines) + "\n"


def _frac(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="Rows' JSON files (resumable).")
    p.add_argument("--task", action="append", choices=tuple(TASKS), help="Only these tasks.")
    p.add_argument("--system", action="append", choices=("pgc-a3c", "fedpg-cen",
                                                          "dp-reinforce"))
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pilot-episodes", type=int, default=None)
    p.add_argument("--max-episodes", type=int, default=200_000,
                   help="Cap on a row's episodes (all agents together).")
    p.add_argument("--random-episodes", type=int, default=2000,
                   help="Episodes of the random policy each row is measured against.")
    p.add_argument("--table", action="store_true", help="Only print the table of --out.")
    args = p.parse_args(argv)
    if args.trials < 1 or args.max_episodes < 1 or args.random_episodes < 2:
        p.error("--trials and --max-episodes must be >= 1, --random-episodes >= 2")
    sys.path.insert(0, str(Path(__file__).parent))  # `untuned:corridor` for the tasks here
    if not args.table:
        for task in args.task or TASKS:
            for system, eps, agents in ROWS:
                if args.system and system not in args.system:
                    continue
                path = args.out / task / f"{row_name(system, eps)}.json"
                if path.exists():
                    print(f"{task} / {row_name(system, eps)}: done earlier, kept", flush=True)
                    continue
                print(f"{task} / {row_name(system, eps)} ...", flush=True)
                d = run_row(task, system, eps, agents, args)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(d, indent=1, allow_nan=True) + "\n")
                tmp.rename(path)
                print(f"  fraction {d['fraction']}, K {d['agents']}, "
                      f"{d['plan_seconds']:.0f} + {d['run_seconds']:.0f} s", flush=True)
    text = table(args.out)
    if args.out.is_dir():
        (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
