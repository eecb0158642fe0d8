"""One vocabulary across commands (issue 38): old flags are refused with their new name, and
every `privrl ...` command written in README.md, docs/*.md and benchmarks/RESULTS.md parses
with the real parser.

Nothing here trains: the rename check runs before the app is built, and the documented
commands are parsed with the command's `make_context`, which converts and checks every value but
invokes nothing.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from documents import FENCE, code_blocks, shell_commands
from privrl.cli import RENAMED, renamed_flag
from privrl.main import build_app, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md",
        *sorted((ROOT / "docs").glob("*.md"))]
GROUPS = ("run", "reproduce", "audit")


@pytest.fixture(scope="module")
def commands() -> dict[tuple[str, ...], Any]:
    """Every (click) command of `privrl` by its path: ("run", "pgc-a3c"), ("replay",), ..."""
    root = typer.main.get_command(build_app())
    out: dict[tuple[str, ...], Any] = {}
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        if hasattr(cmd, "commands"):
            out.update({(name, sub): c for sub, c in cmd.commands.items()})
        else:
            out[(name,)] = cmd
    return out


def _flags(cmd: Any) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")
            } | {"--help"}


def test_every_renamed_flag_is_refused_naming_its_new_name(commands, capsys):
    for path, table in RENAMED.items():
        assert path in commands, path
        flags = _flags(commands[path])
        for old, new in table.items():
            assert new in flags, f"{' '.join(path)}: {new} is not an option"
            assert old not in flags, f"{' '.join(path)}: {old} is still an option"
            for arg in ([old, "1"], [f"{old}=1"]):
                assert main([*path, "--no-progress", *arg]) == 2
                err = capsys.readouterr().err.strip().splitlines()
                assert err == [f"privrl: error: {old} was renamed {new}"], err


def test_a_renamed_flag_is_refused_only_on_its_own_command():
    assert renamed_flag(["run", "dp-qlearning", "--sigma", "1"]) == \
        "--sigma was renamed --gp-scale"
    assert renamed_flag(["run", "dp-reinforce", "--sigma", "1"]) == \
        "--sigma was renamed --noise-multiplier"
    assert renamed_flag(["run", "pgc-a3c", "--trials", "2"]) is None
    assert renamed_flag(["audit", "mechanism", "--budget", "2"]) is None
    assert renamed_flag(["run", "fedpg-cen", "--", "--budget"]) is None
    assert renamed_flag([]) is None


def _documented() -> list[tuple[str, int, str, bool]]:
    """(file, line, command, in a code block) for every `privrl <command> ...` in the docs:
    each command of a code block (`documents.shell_commands`), and each inline `privrl ...` in
    backticks of the prose."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for first, block in code_blocks(text):
            found += [(path.name, n, c, True) for n, c in shell_commands(block, first)]
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for n, line in enumerate(prose.splitlines(), 1):
            found += [(path.name, n, c, False) for c in re.findall(r"`(privrl [^`]+)`", line)]
    return found


DOCUMENTED = _documented()
PLACEHOLDER = re.compile(r"[<>\[\]|…]|\.\.\.|^[A-Z_]+$|^[A-Z]$")


def test_the_docs_are_read():
    assert len([d for d in DOCUMENTED if d[3]]) > 50
    assert "privrl run pgc-a3c --mechanism laplace --epsilon 5 --trials 20" in \
        {c for f, _, c, block in DOCUMENTED if f == "README.md" and block}


@pytest.mark.parametrize(("where", "line", "command", "block"), DOCUMENTED,
                         ids=[f"{f}:{n}" for f, n, _, _ in DOCUMENTED])
def test_documented_commands_parse(where, line, command, block, commands):
    """Every flag a documented command names exists on that command; a code-block command
    without placeholders (<x>, [--opt], a|b, ..., C) parses as written, values included."""
    try:
        tokens = shlex.split(command)[1:]
    except ValueError:
        tokens = command.split()[1:]
    path = tuple(tokens[:2]) if tokens[:1] and tokens[0] in GROUPS else tuple(tokens[:1])
    if path not in commands:
        assert block is False or len(path) < 2 or PLACEHOLDER.search(path[-1]), \
            f"{where}:{line}: no command {' '.join(path)}"
        return  # prose naming a group (`privrl run <name>`) or a list of commands
    cmd, args = commands[path], tokens[len(path):]
    flags = _flags(cmd)
    for arg in args:
        for name in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", arg):
            assert name in flags, f"{where}:{line}: {' '.join(path)} has no option {name}"
    if block and "--help" not in args and not any(PLACEHOLDER.search(a) for a in args):
        cmd.make_context(" ".join(("privrl", *path)), list(args), resilient_parsing=False)


def test_choice_enums_are_derived_from_the_library_value_sets():
    """A value set is written once (a tuple the library validates against); the CLI's choices
    come from it through `value_enum`, never from an enum class written out by hand."""
    import ast

    import privrl
    from privrl.choices import AUDIT_MECHANISMS, NOISE_MODES
    from privrl.systems.fedpg.choices import MECHANISMS
    from privrl.systems.pgc_a3c.choices import MECHANISMS as PGC_MECHANISMS

    src = Path(privrl.__file__).parent
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                assert not bases & {"StrEnum", "Enum"}, f"{path.name}: enum {node.name} by hand"
    from privrl.cli import NoiseMode

    assert tuple(e.value for e in NoiseMode) == NOISE_MODES
    # A generated option's choices are its field's declared value set.
    from privrl.audit.config import MechanismAudit
    from privrl.cli import field_options
    from privrl.systems.fedpg.config import FedPGConfig
    from privrl.systems.pgc_a3c.algorithm import PGCA3CConfig
    from privrl.systems.pgc_a3c.audit import PGCA3CAudit

    for cls, values in [(FedPGConfig, MECHANISMS), (PGCA3CConfig, PGC_MECHANISMS),
                        (MechanismAudit, AUDIT_MECHANISMS), (PGCA3CAudit, PGC_MECHANISMS)]:
        (mech,) = [o for o in field_options(cls) if o.field == "mechanism"]
        assert mech.meta["choices"] == values


def test_help_shows_defaults_without_escape_characters(commands):
    """Issue 53 item 8: typer escaped "[default: …]" for rich markup the help never uses, so
    every --help showed a literal "\\[default: …]". Every command's help, rendered: none."""
    shown = {}
    for path, cmd in commands.items():
        ctx = cmd.make_context(" ".join(("privrl", *path)), [], resilient_parsing=True)
        shown[path] = cmd.get_help(ctx)
        assert "\\[" not in shown[path], f"privrl {' '.join(path)} --help: {shown[path]}"
    assert "[default: local]" in shown[("run", "pgc-a3c")]  # the defaults are still shown
