"""The `privrl` commands the documents show, read one way for every test that checks them
(tests/test_cli_vocabulary.py parses them all; tests/test_documented_commands.py runs
README's, the Headline's and the Makefile's, except the Flower commands a deployment test runs:
`CARRIED`), and how a documented command is run at a tiny size (`shrink`, `run_documented`)."""

from __future__ import annotations

import functools
import itertools
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^[ \t]*```[a-z]*\n(.*?)^[ \t]*```", re.S | re.M)  # indented in lists too
_PRIVRL = re.compile(r"\s*(?:\$ )?(?:\S*/)?(privrl(?:\s.*)?)$")  # `$ privrl`, `$(BIN)/privrl`


def shell_commands(text: str, first_line: int = 1) -> list[tuple[int, str]]:
    """(line, command) for each `privrl ...` line of a shell text (a code block, a Makefile
    recipe): continued lines joined, a `#` comment dropped; the command starts at `privrl`."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line, start = lines[i], first_line + i
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        m = _PRIVRL.match(line)
        if m:
            out.append((start, m.group(1).split(" #")[0].strip()))
        i += 1
    return out


def code_blocks(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each fenced code block of a Markdown text."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1))
            for m in re.finditer(FENCE, text)]


def words(command: str) -> tuple[str, ...]:
    """A `privrl ...` command's words after `privrl` (shell quoting as a shell reads it)."""
    return tuple(shlex.split(command)[1:])


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
    "--w2v-epochs": 1,  # Text2Action's word2vec training (gensim, on the host)
    "--samples": 2000,  # an audit's draws per input (its default: 10⁶, seconds of drawing)
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
    # DP-DQN calibrates σ to --epsilon over the releases a transition can take part in
    # (min(episodes × the episode's step cap, the buffer)): a PLD search that cost ~6 CPU-s
    # at 4 × 20 and ~1.6 at the buffer's 10,000, the count of the documented run itself (the
    # same σ). 20 episodes of CartPole's own 500-step cap reach it; the untrained policy's
    # episodes end after ~17 steps each (~350 in all), before the preset's first update (at
    # 1,000 stored), as at 4 × 20.
    ("run", "dp-dqn"): {"--episodes": 20, "--max-steps": 500},
}
# A sweep's or an audit's lists, each cut to one of its values (set whether or not the command
# writes the list): the same path, programs, tables and plots, for fewer settings; a setting
# more is compile time more (PGC-A3C's program grows with its settings' mechanisms) or draws.
SWEEPS = {
    # Laplace, PRS and the non-private run at one paper ε (the tables keep the paper's
    # numbers beside ours): 3 settings in one program instead of 9
    ("reproduce", "pgc-a3c"): {"--epsilon": "5"},
    # the audited-vs-claimed table at one claimed ε (each ε: its own calibrated mechanism,
    # compiled, and its draws)
    ("audit", "mechanism"): {"--epsilon": "1"},
    # the one-run audit's table at one per-episode ε (each ε: its own σ search, canary run
    # and `train` program): the same canaries, scores and bound, for 1 setting of 4
    ("audit", "dp-reinforce"): {"--epsilon": "1"},
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


@functools.cache
def documented() -> tuple[Documented, ...]:
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
    return tuple(unique.values())


@functools.cache
def _root() -> object:
    """`privrl`'s click command, built once: `shrink` runs for every documented command at
    collection and again for each case, and each build makes every command's options anew."""
    import typer

    from privrl.main import build_app

    return typer.main.get_command(build_app())


def _path(words: tuple[str, ...]) -> tuple[str, ...]:
    """The path of the click command `privrl WORDS` names (e.g. ('run', 'pgc-a3c'))."""
    import click

    cmd, path = _root(), []
    for w in words:
        if not (isinstance(cmd, click.Group) and w in cmd.commands):
            break
        cmd = cmd.commands[w]
        path.append(w)
    return tuple(path)


@functools.cache
def _takes(path: tuple[str, ...]) -> frozenset[str]:
    """The flags the command at `path` takes (its options are made anew at each read)."""
    cmd = _root()
    for w in path:
        cmd = cmd.commands[w]
    return frozenset(o for p in cmd.params for o in (*p.opts, *p.secondary_opts))


def shrink(words: tuple[str, ...], out: Path | None,
           settings: Mapping[str, object] | None = None) -> list[str]:
    """`words` with every run length the command takes set to its tiny size (`TINY`, `NEEDS`),
    `--out` (if it takes one) and no progress bar; `../shared` paths resolved from the repository
    root, where the documented commands run. `settings`: a deployment test's own values
    (`CARRIED`), set whether or not the command writes them."""
    path = _path(words)
    takes = _takes(path)
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
    for option, value in SWEEPS.get(path, {}).items():
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
    for option, value in (settings or {}).items():
        assert option in takes, f"privrl {' '.join(path)} takes no {option}"
        if option in args:
            args[args.index(option) + 1] = str(value)
        else:
            args += [option, str(value)]
    if out is not None and "--out" in takes:
        args += ["--out", str(out)]
    if "--no-progress" in takes:
        args.append("--no-progress")
    return args


def promised_files(words: tuple[str, ...]) -> tuple[str, ...]:
    """What the command's directory must hold: a `privrl run`'s, README's table of what every
    run writes (its files; `plots/` is not written by every system); a sweep's or an audit's,
    `WRITES`."""
    if words[0] == "run":
        table = README.read_text().split("## What every run writes", 1)[1].split("\n## ", 1)[0]
        return tuple(f for f in re.findall(r"^\| `([^`]+)` \|", table, re.M)
                     if not f.endswith("/"))
    return next((files for head, files in WRITES.items() if words[:len(head)] == head), ())


# Documented Flower commands that a deployment test runs, with its own faults and checks on
# the same deployment, so that each deployment starts once (each costs 50-145 CPU-s of its
# process tree: benchmarks/log/26-fold.md): (the command's first words, flag-value pairs it
# writes) → the test module. The first documented command these pick is that module's, not a
# case of tests/test_documented_commands.py, which checks that every key still picks one.
CARRIED: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], str] = {
    (("run", "pgc-a3c"), (("--runtime", "flower"),)):
        "tests/systems/pgc_a3c/test_flower_deployment.py",
    (("run", "fedpg-cen"), (("--runtime", "flower"), ("--mechanism", "distributed-gaussian"))):
        "tests/systems/fedpg/test_flower_deployment.py",
}


def picks(key: tuple[tuple[str, ...], tuple[tuple[str, str], ...]],
          words: tuple[str, ...]) -> bool:
    """Whether `words` start with the key's words and write each of its flags with its value."""
    head, pairs = key
    return words[:len(head)] == head and all(
        (flag, value) in itertools.pairwise(words) for flag, value in pairs)


def carrier(doc: Documented) -> str | None:
    """The deployment test that runs `doc` (`CARRIED`), or None."""
    for key, test in CARRIED.items():
        if next((d for d in documented() if picks(key, d.words)), None) == doc:
            return test
    return None


def carried(test: str | Path) -> Documented:
    """The documented command the deployment test module `test` (its path, or `__file__`)
    runs (`CARRIED`); fails if the documents no longer show one (then its checks need another
    run, or another command)."""
    test = Path(test).resolve().relative_to(ROOT).as_posix() if Path(test).is_absolute() \
        else str(test)
    key = next(k for k, t in CARRIED.items() if t == test)
    found = [d for d in documented() if picks(key, d.words)]
    assert found, f"no documented command is {key}: {test} has no command to run"
    return found[0]


def run_documented(doc: Documented, out: Path, stderr: Callable[[], str],
                   settings: Mapping[str, object] | None = None) -> list[str]:
    """`doc` run as tests/test_documented_commands.py runs every documented command: shrunk
    (with a carrier's own `settings` on top), in this process; it must exit 0 and write the
    files it promises, then the commands after it that read its directory. `stderr()`: what
    the command wrote there since the last call (pytest's capsys). Returns its arguments."""
    from privrl import main as cli

    args = shrink(doc.words, out, settings)
    rc = cli.main(args)
    assert rc == 0, f"{doc.where}: privrl {' '.join(args)} exited {rc}: {stderr()[-2000:]}"
    for name in promised_files(doc.words):
        assert (out / name).is_file(), f"privrl {' '.join(args)} wrote no {name}"
    for then in doc.then:  # the commands that read its directory
        more = shrink(tuple(str(out) if PLACEHOLDER.match(w) else w for w in then), None)
        rc = cli.main(more)
        assert rc == 0, f"{doc.where}: privrl {' '.join(more)} exited {rc}: {stderr()[-2000:]}"
    return args
