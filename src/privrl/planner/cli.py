"""`privrl plan SYSTEM --env ENV --epsilon E [--agents K] [--private FIELD=LOW:HIGH ...]`."""

from __future__ import annotations

from typing import Annotated

import typer

from privrl.cli import Out, Settings, ShowProgress, config_command, progress_bar, value_enum
from privrl.planner.choices import SYSTEMS

top_app = typer.Typer(rich_markup_mode=None)  # `privrl plan`
PlanSystem = value_enum("PlanSystem", SYSTEMS)


@config_command(top_app, "plan", "privrl.planner.api:PlanConfig", algorithms=("plan",))
def plan_command(
    settings: Settings,
    system: Annotated[PlanSystem, typer.Argument(  # type: ignore[valid-type]
        help="The system to plan: pgc-a3c, dp-reinforce or fedpg-cen.", case_sensitive=False)],
    out: Out = None,
    progress: ShowProgress = True,
) -> None:
    """What ε and fleet size K a task needs, planned on its PUBLIC simulator only.

    A short pilot measures gradient norms, their spread and the non-private learning speed;
    the plan recommends the clip, reports per agent, the update batch and the step size, and
    the fleet K at which the task learns at --epsilon (or, with --agents, the smallest ε at
    which K does); one sweep over (ε, K) checks it and draws the frontier. Writes plan.json
    and plan.png into a new directory; the last line printed is the recommended `privrl run`.
    The plan looks at no agent's data: tuning on it would cost privacy.
    """
    from rich.console import Console

    from privrl.output import check_out_dir
    from privrl.planner.api import SIMULATOR_ONLY, plan, task_of

    check_out_dir(out)
    config = settings.build()
    config.validate()
    task_of(config)  # a bad --env or --private: one line, before anything is printed
    name = system.value
    err, console = Console(stderr=True), Console()
    err.print(f"[bold]privrl plan {name}[/] on {config.env} at ε = {config.epsilon:g}"
              + (f", K = {config.agents:,}" if config.agents else ""))
    err.print(SIMULATOR_ONLY, markup=False)
    with progress_bar(err, progress, "pilot", unit="") as (bar, task):
        result = plan(name, config, "auto" if out is None else out,
                      progress=lambda what, done, total: bar.update(
                          task, description=what, completed=done, total=total),
                      log=lambda m: bar.console.print(m))
    _print(console, result)


def _print(console: object, result: object) -> None:
    from privrl.planner.api import fraction_of
    from privrl.planner.command import run_command

    c, r = console, result
    rec, p = r.recommendation, r.pilot  # type: ignore[attr-defined]
    say = c.print  # type: ignore[attr-defined]
    say(f"Pilot: d = {p['dim']}, gradient {p['norm'].upper()} norm quantiles 10/50/90 % = "
        + " / ".join(f"{x:.3g}" for x in p["norm_quantiles"])
        + f"; random return {p['random_return']:.4g} (95% interval "
        + " to ".join(f"{x:.4g}" for x in p["random_return_ci"])
        + f", {p['random_episodes']:,} episodes); non-private {p['nonprivate_return']:.4g}"
        + (f", {p['episodes_to_learn']:.0f} episodes to learn" if p["episodes_to_learn"]
           else ", did not learn"), markup=False)
    say(f"Recommended: {rec['mechanism']} ε = {rec['epsilon']:g}, K = {rec['agents']:,}, clip "
        f"{rec['clip']:.4g}, {rec['reports_per_agent']} report(s) per agent, "
        f"{rec['batch']} per update, step size {rec['learning_rate']:.3g}", markup=False)
    if r.smallest_epsilon is not None:  # type: ignore[attr-defined]
        say(f"Smallest ε at which K = {rec['agents']:,} learns (model): "
            f"{r.smallest_epsilon:.3g}", markup=False)  # type: ignore[attr-defined]
    fr = r.frontier  # type: ignore[attr-defined]
    if fr is not None:
        say("Frontier (fraction of the non-private improvement over random; rows ε, "
            "columns K):", markup=False)
        say("  ε \\ K  " + "".join(f"{k:>10,}" for k in fr.agents), markup=False)
        for e, row in zip(fr.epsilons, fr.final_return, strict=True):
            cells = [fraction_of(y, fr.random_return, n)
                     for y, n in zip(row, fr.nonprivate_return, strict=True)]
            say(f"  {e:<7g}" + "".join("         –" if x is None else f"{x:>10.2f}"
                                        for x in cells), markup=False)
    ck = r.check  # type: ignore[attr-defined]
    if ck is not None and "agents" in ck:
        where = f"at ε = {ck['epsilon']:g}, K = {ck['agents']:,}" + (
            f" (the swept K nearest the recommended {rec['agents']:,})"
            if ck["agents"] != rec["agents"] else "")
        got = ck["fraction_of_nonprivate_improvement"]
        if got is not None:
            where += (f": {got:.2f} of the non-private improvement over random, mark "
                      f"{ck['target_fraction']:g}")
        say(f"The sweep confirms: it learns {where}." if r.learns  # type: ignore
            else f"The sweep did NOT confirm the recommendation {where} (see the frontier)."
            if r.learns is not None else  # type: ignore[attr-defined]
            f"The sweep cannot judge the recommendation {where}: its non-private line did "
            "not end above random there.", markup=False)
    elif ck is not None:
        say(f"The sweep did not check the recommendation: {ck['note']}.", markup=False)
    for note in r.notes:  # type: ignore[attr-defined]
        say(f"Note: {note}", markup=False)
    files = "plan.json, plan.png" if (r.path / "plan.png").exists() else "plan.json"  # type: ignore
    say(f"Plan written to {r.path} ({files})", markup=False)  # type: ignore
    say(run_command(r.system, r.fields), markup=False, soft_wrap=True)  # type: ignore
