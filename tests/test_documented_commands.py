"""Every `privrl` command the documentation shows runs, at a tiny size (issue 50: "documented
commands cannot rot").

The commands are read from the documents when the tests are collected, so that a new or edited
command is tested as written: every `privrl ...` line of README.md's code blocks, every
`privrl ...` or `make <target>` span of benchmarks/RESULTS.md's "Headline" table, and the
Makefile's `run` target (a `make <target>` stands for that target's `privrl` commands). Each
runs in this process (`privrl.main.main`, so JAX is imported once and the programs it compiles
are shared through the session's cache) with its run lengths shrunk (`TINY`) and `--out` in a
temporary directory; it must exit 0 and write what README's "What every run writes" table
promises. A placeholder argument `runs/<...>-...` (`privrl replay runs/pgc-a3c-ray-...`) stands
for the directory the command before it in the same code block wrote.

Commands with `--runtime ray` or `--runtime flower` start processes of their own: they are
marked `processes` (the Makefile runs them in that stage). A `../shared/data/...` path reads
the data in place, beside the clone; without it the command is skipped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from documents import code_blocks, shell_commands, words

ROOT = Path(__file__).resolve().parents[1]
README, RESULTS, MAKEFILE = (ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md",
                             ROOT / "Makefile")

# The run lengths every command that takes them is shrunk to (added where the command leaves
# them at their default; a documented value that is smaller stays). Small but valid: a smaller
# one is refused.
TINY = {
    "--trials": 1, "--submissions": 18, "--episodes": 4, "--epochs": 1,
    "--trials-reinforce": 1, "--trials-dqn": 1, "--updates-per-epoch": 20,
    "--steps-per-epoch": 2, "--max-steps": 20, "--folds": 0,
}
# Sizes of the problem, not of the run: shrunk only where the document writes a larger one
# (a command's own default is its smallest sensible size: FedPG's topologies need its agents).
SMALLER = {
    "--agents": 40,  # not fewer: adaptive clipping's default count noise (q·K/20) needs K ≥ 40
}
# On a runtime that starts a process per agent or node (each a Python start that imports JAX and
# compiles: the documented PGC-A3C Ray command with its nine agent actors cost 134 CPU-s), how
# many run at once is a size of the run too: set where the command takes it, written or not.
# Several processes at once, their routing and their faults are tests/systems/*/test_ray.py's and
# *_deployment.py's.
PROCESSES = {
    "ray": {"--agents-in-flight": 1,  # PGC-A3C's agent actors (the algorithm keeps its round)
            "--agents": 2},  # FedPG-Dec's nodes, one actor each
    "flower": {"--supernodes": 1},
}
# A flag whose value needs more than that: SecAgg+ needs 3 SuperNodes (fedpg.flower.plan_run).
NEEDS_WITH = {("--mechanism", "distributed-gaussian"): {"--supernodes": 3}}
# Where one command needs more than `TINY` gives, and why.
NEEDS = {
    ("reproduce", "dpsgd-rl"): {"--episodes": 25},  # its solve window is 25 episodes
    # FedPG-Dec's random graph must be strongly connected over its window of rounds (7 here),
    # which a run of fewer rounds does not have (refused)
    ("reproduce", "fedpg"): {"--episodes": 24},
}
# What a command's directory holds besides README's run files: (command words) → files.
WRITES = {("reproduce",): ("sweep.json", "tables.md"),
          ("audit",): ("audit.json", "audit.md", "audit.csv")}
PLACEHOLDER = re.compile(r"^runs/\S*\.\.\.$")  # `runs/pgc-a3c-ray-...`


@dataclass(frozen=True)
class Documented:
    """A `privrl` command as written (its words after `privrl`), where it is written, and the
    commands after it that read its directory (`PLACEHOLDER`)."""

    words: tuple[str, ...]
    where: str
    then: tuple[tuple[str, ...], ...] = field(default=())

    @property
    def runtime(self) -> str | None:
        w = self.words
        return w[w.index("--runtime") + 1] if "--runtime" in w[:-1] else None


def _make_target(target: str) -> list[tuple[str, ...]]:
    """The `privrl` commands of the Makefile's `target` recipe."""
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n?)*)", MAKEFILE.read_text(), re.M)
    assert m, f"Makefile has no target {target}"
    return [words(c) for _, c in shell_commands(m.group(1))]


def documented() -> list[Documented]:
    """Every documented command, each once (the first place it is written)."""
    found: list[Documented] = []
    for _, block in code_blocks(README.read_text()):
        for _, command in shell_commands(block):
            said = words(command)
            if any(PLACEHOLDER.match(w) for w in said):
                assert found and found[-1].where == "README.md", f"{said}: no run before it"
                found[-1] = Documented(found[-1].words, "README.md", (*found[-1].then, said))
            else:
                found.append(Documented(said, "README.md"))
    headline = RESULTS.read_text().split("\n## Headline\n", 1)[1].split("\n## ", 1)[0]
    for span in re.findall(r"`([^`\n]+)`", headline):
        said = shlex.split(span)
        if said[:1] == ["make"] and len(said) == 2:
            found += [Documented(w, f"RESULTS.md Headline (make {said[1]})")
                      for w in _make_target(said[1])]
        elif said[:1] == ["privrl"]:
            found.append(Documented(tuple(said[1:]), "RESULTS.md Headline"))
    found += [Documented(w, "Makefile run") for w in _make_target("run")]
    unique: dict[tuple[str, ...], Documented] = {}
    for d in found:
        unique.setdefault(d.words, d)
    return list(unique.values())


def _command(words: tuple[str, ...]) -> tuple[object, tuple[str, ...]]:
    """The click command `privrl WORDS` names, and its path (e.g. ('run', 'pgc-a3c'))."""
    import click
    import typer

    from privrl.main import build_app

    cmd, path = typer.main.get_command(build_app()), []
    for w in words:
        if not (isinstance(cmd, click.Group) and w in cmd.commands):
            break
        cmd = cmd.commands[w]
        path.append(w)
    return cmd, tuple(path)


def shrink(words: tuple[str, ...], out: Path | None) -> list[str]:
    """`words` with every run length the command takes set to its tiny size (`TINY`, `NEEDS`),
    `--out` (if it takes one) and no progress bar; `../shared` paths resolved from the repository
    root, where the documented commands run."""
    cmd, path = _command(words)
    takes = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    args = [str(ROOT / w) if w.startswith("../shared/") else w for w in words]
    runtime = words[words.index("--runtime") + 1] if "--runtime" in words[:-1] else None
    processes = PROCESSES.get(runtime, {})
    for (flag, value), needs in NEEDS_WITH.items():
        if flag in words[:-1] and words[words.index(flag) + 1] == value:
            processes = {o: needs.get(o, size) for o, size in processes.items()}
    for option, size in (TINY | SMALLER | processes | NEEDS.get(path, {})).items():
        if option not in takes:
            continue
        if option in args:
            i = args.index(option) + 1
            if not args[i].isdigit() or int(args[i]) > size:
                args[i] = str(size)
        elif option not in SMALLER or option in processes:
            args += [option, str(size)]
    if out is not None and "--out" in takes:
        args += ["--out", str(out)]
    if "--no-progress" in takes:
        args.append("--no-progress")
    return args


def _files(words: tuple[str, ...]) -> tuple[str, ...]:
    """What the command's directory must hold: a `privrl run`'s, README's table of what every
    run writes (its files; `plots/` is not written by every system); a sweep's or an audit's,
    `WRITES`."""
    if words[0] == "run":
        table = README.read_text().split("## What every run writes", 1)[1].split("\n## ", 1)[0]
        return tuple(f for f in re.findall(r"^\| `([^`]+)` \|", table, re.M)
                     if not f.endswith("/"))
    return next((files for head, files in WRITES.items() if words[:len(head)] == head), ())


def _cases() -> list:
    """One case per command line run: two documented commands that shrink to the same words
    (RESULTS' `privrl reproduce pgc-a3c` and README's with its trials and submissions) run once."""
    cases, run = [], set()
    for d in documented():
        ran = (tuple(shrink(d.words, None)), d.then)
        if ran in run:
            continue
        run.add(ran)
        marks = []
        if d.runtime in ("ray", "flower"):
            marks.append(pytest.mark.processes)
        if any(w.startswith("../shared/") and not (ROOT / w).exists() for w in d.words):
            marks.append(pytest.mark.skip(reason="its data (../shared/data) is not beside the "
                                                 "clone"))
        cases.append(pytest.param(d, id=" ".join(d.words), marks=marks))
    return cases


def test_the_documents_show_commands_of_every_kind() -> None:
    """The parsing finds what the documents hold: a change of their format that hid commands
    from these tests fails here."""
    found = documented()
    heads = {d.words[:2] for d in found}
    assert {("run", "pgc-a3c"), ("run", "fedpg-cen"), ("reproduce", "pgc-a3c"),
            ("audit", "mechanism")} <= heads
    assert {d.where for d in found} >= {"README.md", "RESULTS.md Headline"}
    assert set(_make_target("run")) <= {d.words for d in found}
    assert any(d.then and d.then[0][0] == "replay" for d in found)
    assert len(found) >= 20
    assert _files(("run", "pgc-a3c")) == ("config.json", "metrics.csv", "privacy.json",
                                          "summary.json", "policy.npz")


def test_ray_and_flower_commands_start_the_fewest_processes() -> None:
    """`shrink` sets how many processes a Ray or Flower command starts, written or not."""
    def value(words: tuple[str, ...], option: str) -> str:
        args = shrink(words, None)
        return args[args.index(option) + 1]

    assert value(("run", "pgc-a3c", "--runtime", "ray"), "--agents-in-flight") == "1"
    assert value(("run", "fedpg-dec", "--runtime", "ray", "--agents", "9"), "--agents") == "2"
    assert value(("run", "pgc-a3c", "--runtime", "flower", "--supernodes", "4"),
                 "--supernodes") == "1"
    assert value(("run", "fedpg-cen", "--runtime", "flower", "--mechanism",
                  "distributed-gaussian"), "--supernodes") == "3"
    assert value(("run", "fedpg-cen", "--runtime", "flower", "--agents", "20"), "--agents") == "20"
    assert "--agents" not in shrink(("run", "fedpg-dec"), None)  # a local run keeps its agents


@pytest.mark.parametrize("doc", _cases())
def test_a_documented_command_runs_at_a_tiny_size(doc: Documented, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  request: pytest.FixtureRequest) -> None:
    from privrl import main as cli

    if doc.runtime == "ray":
        request.getfixturevalue("ray_cluster")
    if doc.runtime is not None:
        request.getfixturevalue("children_compile_as_tests")
    out = tmp_path / "run"
    args = shrink(doc.words, out)
    rc = cli.main(args)
    err = capsys.readouterr().err
    assert rc == 0, f"{doc.where}: privrl {' '.join(args)} exited {rc}: {err[-2000:]}"
    for name in _files(doc.words):
        assert (out / name).is_file(), f"privrl {' '.join(args)} wrote no {name}"
    for then in doc.then:  # the commands that read its directory
        args = shrink(tuple(str(out) if PLACEHOLDER.match(w) else w for w in then), None)
        rc = cli.main(args)
        err = capsys.readouterr().err
        assert rc == 0, f"{doc.where}: privrl {' '.join(args)} exited {rc}: {err[-2000:]}"
