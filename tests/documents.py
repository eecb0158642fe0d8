"""The `privrl` commands the documents show, read one way for every test that checks them
(tests/test_cli_vocabulary.py parses them all; tests/test_documented_commands.py runs
README's, the Headline's and the Makefile's)."""

from __future__ import annotations

import re
import shlex

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
