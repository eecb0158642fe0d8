"""The capability statements agree (issue 53 item 6): which `privrl run` command takes which
action space and runtime, as the code's table (`privrl.choices.ACTION_SPACES`, each system's
`check_runtime`) has it, as the learners behave, and as docs/environments.md's table, README.md
and every command's --env help say. Nothing trains: learners are only built (on gymnax
Pendulum-v1, a Box task) or refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from privrl.choices import ACTION_SPACES, CONTINUOUS_COMMANDS
from privrl.config import ConfigError
from privrl.main import build_app

ROOT = Path(__file__).resolve().parents[1]
NO_ENV = ("dp-qlearning", "fedrl")


def _doc_table() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "environments.md").read_text()
    section = text[text.index("## Which command takes what"):]
    section = section[:section.index("\n## ", 4)]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def _runtimes(command: str) -> str:
    """The runtimes whose check_runtime admits the command's default config (one trial)."""
    if command.startswith("pgc"):
        from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
        from privrl.systems.pgc_a3c.runtimes import check_runtime

        cfg = PGCA3CConfig(trials=1).resolved()
    elif command.startswith("fedpg"):
        from privrl.systems.fedpg.config import FedPGConfig
        from privrl.systems.fedpg.runtimes import check_runtime

        cfg = FedPGConfig(algorithm=command.split("-")[1], trials=1).resolved()
    else:
        return "local"  # no --runtime option
    ok = []
    for runtime in ("local", "ray", "flower"):
        try:
            check_runtime(cfg, runtime)
            ok.append(runtime)
        except ConfigError:
            pass
    return ", ".join(ok)


def test_the_docs_table_is_the_codes():
    table = _doc_table()
    assert set(table) == set(ACTION_SPACES) | set(NO_ENV)
    for command, (actions, env, runtimes) in table.items():
        if command in NO_ENV:
            assert (actions, env) == ("its own task", "none"), command
        else:
            assert actions == ", ".join(ACTION_SPACES[command]), command
            assert env == "gymnax, Gymnasium, your callable", command
        assert runtimes == _runtimes(command), command


def test_readme_and_the_env_help_name_the_same_continuous_commands():
    readme = (ROOT / "README.md").read_text()
    para = readme[readme.index("Continuous (Box) actions"):]
    para = para[:para.index("\n\n")]
    first = para[:para.index(" (`pgc-a3c --preset")]
    assert re.findall(r"`([a-z0-9-]+)`", first) == list(CONTINUOUS_COMMANDS)
    root = typer.main.get_command(build_app())
    run = root.commands["run"]  # type: ignore[attr-defined]
    for command in ACTION_SPACES:
        cmd = run.commands[command]
        env = next(p for p in cmd.params if "--env" in p.opts)
        assert f"continuous (Box) actions, e.g. gymnax:Pendulum-v1, for " \
               f"{', '.join(CONTINUOUS_COMMANDS)}." in env.help, command
    docs = (ROOT / "docs" / "environments.md").read_text()
    # the contradictions issue 53 found: no blanket "discrete actions" claim, no "not supported"
    assert "with discrete actions" not in docs
    assert "Continuous actions for PGC-A3C, FedPG" not in docs


def _build(command: str, env: str) -> None:
    if command == "pgc-a3c":
        from privrl.systems.pgc_a3c.algorithm import PGCA3C, PGCA3CConfig

        PGCA3C(PGCA3CConfig(env=env))
    elif command.startswith("fedpg"):
        from privrl.systems.fedpg.algorithm import FedPG, FedPGConfig

        FedPG(FedPGConfig(algorithm=command.split("-")[1], env=env))
    elif command.endswith("reinforce"):
        from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

        Reinforce(ReinforceConfig(env=env, dp=command == "dp-reinforce"))
    else:
        from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig

        DQN(DQNConfig(env=env, dp=command == "dp-dqn"))


@pytest.mark.parametrize("command", list(ACTION_SPACES))
def test_the_learners_take_what_the_table_says(command):
    if "continuous" in ACTION_SPACES[command]:
        _build(command, "gymnax:Pendulum-v1")
    else:
        with pytest.raises(ConfigError, match="continuous actions"):
            _build(command, "gymnax:Pendulum-v1")
