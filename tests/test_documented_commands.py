"""Every `privrl` command the documentation shows runs, at a tiny size (issue 50: "documented
commands cannot rot").

The commands are read from the documents when the tests are collected, so that a new or edited
command is tested as written: every `privrl ...` line of README.md's code blocks, every
`privrl ...` or `make <target>` span of benchmarks/RESULTS.md's "Headline" table, and the
Makefile's `run` target (a `make <target>` stands for that target's `privrl` commands). Each
runs in this process (`privrl.main.main`, so JAX is imported once and the programs it compiles
are shared through the session's cache) with its run lengths shrunk (`TINY`, `NEEDS`), a
sweep's lists cut to one value (`SWEEPS`) and `--out` in a temporary directory; it must exit
0 and write what README's "What every run writes" table promises. A placeholder argument
`runs/<...>-...` (`privrl replay runs/pgc-a3c-ray-...`) stands for the directory the command
before it in the same code block wrote.

Commands with `--runtime ray` or `--runtime flower` start processes of their own: they are
marked `processes` (the Makefile runs them in that stage). Two Flower commands are run by the
deployment tests instead (`documents.CARRIED`: the PGC-A3C command and FedPG-Cen's secure sum),
which inject their faults and checks into the same deployment, so that each deployment starts
once; they run them as this module does (`documents.run_documented`). A `../shared/data/...`
path reads the data in place, beside the clone; without it the command is skipped.

The documents are read, and each command shrunk, by tests/documents.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from documents import (
    CARRIED,
    ROOT,
    Documented,
    _make_target,
    carried,
    carrier,
    documented,
    promised_files,
    run_documented,
    shrink,
)


def _cases() -> list:
    """One case per command line run: two documented commands that shrink to the same words
    (RESULTS' `privrl reproduce pgc-a3c` and README's with its trials and submissions) run once;
    a command a deployment test runs (`CARRIED`) is not a case here."""
    cases, run = [], set()
    for d in documented():
        ran = (tuple(shrink(d.words, None)), d.then)
        if ran in run or carrier(d) is not None:
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
    assert promised_files(("run", "pgc-a3c")) == ("config.json", "metrics.csv",
                                                  "privacy.json", "summary.json", "policy.npz")


def test_the_flower_commands_the_deployment_tests_run_are_documented() -> None:
    """Each deployment test's command (`CARRIED`) is a documented one, in a test module that
    runs it; every other documented Flower command is a case of this module's."""
    carriers = {d.words: carrier(d) for d in documented() if d.runtime == "flower"}
    assert sorted(t for t in carriers.values() if t) == sorted(CARRIED.values())
    for test in CARRIED.values():
        assert carrier(carried(test)) == test
        assert "run_documented(" in (ROOT / test).read_text()
    run_here = {p.values[0].words for p in _cases()}
    assert {w for w, t in carriers.items() if t is None} <= run_here
    assert not {w for w, t in carriers.items() if t} & run_here


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
    # a deployment test's own settings (documents.CARRIED), written or not
    settings = {"--noise": "seeded", "--submissions": 4}
    assert shrink(("run", "pgc-a3c", "--noise", "secret"), None, settings)[2:8] == [
        "--noise", "seeded", "--trials", "1", "--submissions", "4"]


@pytest.mark.parametrize("doc", _cases())
def test_a_documented_command_runs_at_a_tiny_size(doc: Documented, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  request: pytest.FixtureRequest) -> None:
    if doc.runtime == "ray":
        request.getfixturevalue("ray_cluster")
    if doc.runtime is not None:
        request.getfixturevalue("children_compile_as_tests")
    run_documented(doc, tmp_path / "run", lambda: capsys.readouterr().err)
