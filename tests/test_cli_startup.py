"""Issue 53, item 10: a bad command line is refused before JAX, flax or a system is imported
(the one-line error took 3-13 s: the imports came before the parse), with one "Did you mean"
and no far-fetched suggestion. The time itself is measured in benchmarks/bench_cli_error.py."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
import typer.main

from privrl.cli import _LazyCommand, close_flags, source_flags
from privrl.main import build_app

_PROBE = """
import json, sys
from privrl.main import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("numpy", "jax", "flax", "optax", "gymnax", "gymnasium",
               "dp_accounting",
               "privrl.systems.pgc_a3c.algorithm", "privrl.systems.dpsgd_rl.reinforce")
               if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("args", [
    ["run", "pgc-a3c", "--bogus"],
    ["run", "pgc-a3c", "--hidden", "8", "--bogus=1"],  # after a valid flag and its value
    ["run", "dp-dqn", "--obs-bogus", "1"],  # a command with a nested config
    ["run", "pgc-a3"],
])
def test_a_bad_command_line_imports_no_jax(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                          text=True, timeout=120, check=False)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 2, "heavy": []}, (result, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_did_you_mean_is_said_once(capsys: pytest.CaptureFixture) -> None:
    from privrl.main import main

    assert main(["run", "pgc-a3"]) == 2
    assert capsys.readouterr().err.count("Did you mean") == 1


def test_suggestions_are_close_ones() -> None:
    known = ["--env", "--hidden-sizes", "--epsilon", "--episodes", "--out"]
    assert close_flags("--hidden", known) == ["--hidden-sizes"]  # it begins one
    assert close_flags("--hidden", ["--env", "--out"]) == []  # not --env: only "--" is shared
    assert close_flags("--epsilom", known) == ["--epsilon"]


def _lazy_commands(group: click.Group, path: str = "") -> list[tuple[str, _LazyCommand]]:
    found = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _lazy_commands(command, f"{path}{name} ")
        elif isinstance(command, _LazyCommand):
            found.append((path + name, command))
    return found


def test_flags_read_from_source_are_the_generated_ones() -> None:
    """The flags read from a config's source (no import) are exactly the options generated from
    the imported class, for every command: none refused that the command takes."""
    import inspect

    commands = _lazy_commands(typer.main.get_command(build_app()))
    assert len(commands) >= 10
    for name, command in commands:
        source = inspect.unwrap(command.callback)
        generated = {o for opt in source.click_options()
                     for o in (*opt.opts, *opt.secondary_opts) if o.startswith("--")}
        assert set(source_flags(source.cls_name, **source.opts)) == generated, name


_VALUES_PROBE = """
import contextlib, io, json, sys
import typer.main
from privrl.main import build_app, main
from privrl.cli import source_flags
import inspect
HEAVY = ("numpy", "jax", "flax", "optax", "gymnax", "gymnasium", "dp_accounting", "scipy")
run = typer.main.get_command(build_app()).commands["run"]
found = {}
needs = {"fedrl-text2action": ["--data", "."]}  # its required option, before the bad value
for name, command in run.commands.items():
    source = inspect.unwrap(command.callback)
    flags = source_flags(source.cls_name, **source.opts)
    for flag in ("--seed", "--epsilon", "--learning-rate"):
        if flag not in flags:
            continue
        err = io.StringIO()
        sys.argv = ["privrl", "run", name, *needs.get(name, []), flag, "-1"]
        with contextlib.redirect_stderr(err):
            code = main()  # the `privrl` process itself: its setup too
        found[f"{name} {flag}"] = [code, err.getvalue().strip(),
                                   sorted(m for m in HEAVY if m in sys.modules)]
# a value Theorem 5 itself refuses (dp-qlearning's every Theorem 5 parameter given)
err = io.StringIO()
sys.argv = ["privrl", "run", "dp-qlearning", "--delta", "1e-5", "--sensitivity-constant", "1",
            "--k", "5", "--epsilon", "2"]
with contextlib.redirect_stderr(err):
    code = main()
found["dp-qlearning Theorem-5 --epsilon"] = [code, err.getvalue().strip(),
                                             sorted(m for m in HEAVY if m in sys.modules)]
print(json.dumps(found))
"""


def test_a_bad_value_is_refused_before_jax() -> None:
    """Issue 53: a bad VALUE (not only a bad flag) is refused by the config's own checks
    before JAX, flax, gymnax, NumPy or dp-accounting is imported, for every `privrl run`
    command: their configs live in light modules. One interpreter tries them all in turn; the
    first command whose check imported a heavy module is the first listed with it."""
    done = subprocess.run([sys.executable, "-c", _VALUES_PROBE], capture_output=True,
                          text=True, timeout=120, check=False)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) >= 11 + 11 + 6 + 1, found  # each command's --seed, --learning-rate; --epsilon
    for case, (code, err, heavy) in found.items():
        flag = case.split()[-1]
        assert code == 2 and err.startswith("privrl: error: ") and "\n" not in err, \
            (case, code, err)
        # named: the flag (dp-qlearning's --epsilon: Theorem 5's --delta, required first)
        named = "--delta" if case == "dp-qlearning --epsilon" else flag  # (--delta first)
        assert err.startswith(f"privrl: error: {named}: ") or f"'{named}'" in err, (case, err)
        assert heavy == [], (case, heavy)


_TASK_PROBE = """
import contextlib, io, json, sys
from privrl.main import main
HEAVY = ("numpy", "jax", "flax", "optax", "gymnax", "gymnasium", "dp_accounting", "scipy")
found = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    sys.argv = ["privrl", "run", *args]
    with contextlib.redirect_stderr(err):
        code = main()
    found.append([args, code, err.getvalue().strip(),
                  sorted(m for m in HEAVY if m in sys.modules)])
print(json.dumps(found))
"""

# (arguments, the flag the one line names, what it says)
_TASK_CASES = [
    (["pgc-a3c", "--private", "gravity=2:1"], "--private", "low 2 > high 1"),
    (["pgc-a3c", "--private", "gravity"], "--private", "expected field=low:high"),
    (["fedpg-cen", "--private", "gravity=1:inf"], "--private", "must be finite"),
    (["dp-reinforce", "--private", "gravity=a:b"], "--private", "must be numbers"),
    (["fedpg-dec", "--env", "CartPole-v1"], "--env", "expected gymnax:<id>"),
    (["pgc-a3c", "--env", "gymnasium:"], "--env", "needs an id"),
    (["dp-dqn", "--env", "./no_such_env_file.py:make"], "--env", "no such file"),
    (["pgc-a3c", "--env", ".mod:make"], "--env", "expected module:callable"),
    (["pgc-a3c", "--mechanism", "./no_such_mechanism.py:make"], "--mechanism", "no such file"),
    (["ldp-reinforce", "--mode", "box", "--box-low", "3,0,0,0"], "--box-low", "low < high"),
    (["ldp-dqn", "--mode", "box", "--box-low", "1,1,1"], "--box-low", "same length"),
    # a registry id: gymnax's read from its installed source (importing gymnax imports JAX)
    (["pgc-a3c", "--env", "gymnax:CartPol-v1"], "--env",
     "unknown gymnax environment 'CartPol-v1'; known: CartPole-v1, "),
    (["dp-reinforce", "--env", "gymnax:NoSuch-v0"], "--env", "known: CartPole-v1, Pendulum-v1"),
    # a field gymnax's environment lacks: its params' fields read from its source (the default
    # task, gymnax's CartPole, and one named)
    (["pgc-a3c", "--private", "nosuch=1:2"], "--private",
     "gymnax:CartPole-v1 has no parameter 'nosuch' (it has: max_steps_in_episode, gravity, "),
    (["fedpg-cen", "--env", "gymnax:Pendulum-v1", "--private", "gravity=9:11"], "--private",
     "gymnax:Pendulum-v1 has no parameter 'gravity' (it has: max_steps_in_episode, max_speed, "),
    # Gymnasium's (its import brings NumPy, not JAX): last, they leave Gymnasium imported
    (["fedpg-cen", "--env", "gymnasium:CartPol-v1"], "--env",
     "cannot make Gymnasium environment 'CartPol-v1': Environment `CartPol` doesn't exist. "
     "Did you mean: `CartPole`?"),
    (["pgc-a3c", "--env", "gymnasium:CartPole-v9"], "--env", "It provides versioned "),
    # a field the environment lacks: Gymnasium's made by Gymnasium
    (["dp-reinforce", "--env", "gymnasium:CartPole-v1", "--private", "gravty=9:10"],
     "--private", "gymnasium:CartPole-v1's environment (CartPoleEnv) has no attribute 'gravty' "
     "(its numeric attributes: "),
]
_ALLOWED = {"gymnasium:": ["gymnasium", "numpy"]}  # what a case may import (none: nothing heavy)


def test_task_and_box_mistakes_are_refused_before_jax(tmp_path) -> None:
    """Issue 53, item 10: what a config's task and observation box say as text (the --env
    form and a file's presence, --private's field=low:high, the box's bounds) is refused before
    JAX, gymnax, Gymnasium or NumPy is imported (it took 5-9 CPU-s: the task was made first).
    One interpreter tries each in turn (the first case that imported a heavy module is the first
    listed with it). A registry id is checked before JAX too: gymnax's from its installed source,
    Gymnasium's by Gymnasium (NumPy, no JAX); so is a parameter field: gymnax's read from its
    source, Gymnasium's on the environment Gymnasium makes."""
    done = subprocess.run(
        [sys.executable, "-c", _TASK_PROBE, json.dumps([a for a, _, _ in _TASK_CASES])],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) == len(_TASK_CASES)
    for (args, code, err, heavy), (_, flag, says) in zip(found, _TASK_CASES, strict=True):
        assert code == 2 and err.startswith(f"privrl: error: {flag}: ") and "\n" not in err, \
            (args, code, err)
        assert says in err, (args, err)
        allowed = [m for prefix, names in _ALLOWED.items()
                   if any(a.startswith(prefix) for a in args) for m in names]
        assert set(heavy) <= set(allowed), (args, heavy)
    # a close id is suggested once, a far one not at all
    by_id = {args[-1]: err for args, _, err, _ in found}
    assert by_id["gymnax:CartPol-v1"].endswith("Did you mean 'CartPole-v1'?")
    assert "Did you mean" not in by_id["gymnax:NoSuch-v0"]
    assert by_id["gymnasium:CartPol-v1"].count("Did you mean") == 1


def test_every_run_command_takes_progress_and_its_interval() -> None:
    """Issue 53, item 5: without a terminal, one line every N seconds, N set by a flag: every
    `privrl run` command has --progress/--no-progress and --progress-every."""
    run = typer.main.get_command(build_app()).commands["run"]
    assert len(run.commands) >= 11
    for name, command in run.commands.items():
        shown = command.get_help(command.make_context(f"privrl run {name}", [],
                                                      resilient_parsing=True))
        assert "--progress-every" in shown and "--no-progress" in shown, name


def test_typer_builds_its_commands_from_the_click_privrl_imports() -> None:
    """privrl's pre-parse reads `click.Option`s: a typer that vendors its own click (0.26 on,
    capped in pyproject.toml) would refuse every flag of the command itself, `--out` too."""
    import typer.core

    assert issubclass(typer.core.TyperOption, click.Option)
    assert issubclass(typer.core.TyperCommand, click.Command)
