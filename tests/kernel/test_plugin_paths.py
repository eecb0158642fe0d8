"""Issue 53, items 2 and 13: a user's file named as they write it (`./file.py:callable`,
`../dir/file.py:callable`, an absolute path) for --env, --mechanism and --model; the file's own
directory is importable while it loads (and only then); a plug-in factory that raises is one
line."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from privrl.config import ConfigError
from privrl.plugins import load_callable

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project: env/my_env53.py imports its sibling env/helper53.py; cwd is env/."""
    _write(tmp_path / "env" / "helper53.py", "SIZE = 3\n")
    _write(tmp_path / "env" / "my_env53.py", "import helper53\n\n"
           "def make():\n    return helper53.SIZE\n")
    monkeypatch.chdir(tmp_path / "env")
    for name in ("helper53", "my_env53"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


@pytest.mark.parametrize("form", ["./my_env53.py:make", "my_env53.py:make",
                                  "../env/my_env53.py:make", "{abs}/env/my_env53.py:make"])
def test_a_file_as_the_user_writes_it(project: Path, form: str) -> None:
    path_before = list(sys.path)
    fn = load_callable(form.format(abs=project), "env")
    assert fn() == 3  # its sibling module imported without PYTHONPATH
    assert sys.path == path_before


def test_a_relative_module_name_is_still_refused() -> None:
    with pytest.raises(ConfigError, match=r"expected module:callable or path/to/file\.py"):
        load_callable("..x:y", "env")


def test_every_documented_file_form_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """Each `--env/--mechanism/--model FILE.py:NAME` the docs show, with such a file there."""
    forms = set()
    for doc in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        forms |= set(re.findall(r"--(?:env|mechanism|model)[ =]([^\s`'\"]+\.py:\w+)",
                                doc.read_text()))
    assert "./my_env.py:make" in forms  # docs/environments.md's own form
    monkeypatch.chdir(tmp_path)
    for i, form in enumerate(sorted(forms)):
        where, _, name = form.rpartition(":")
        stem = f"doc_form53_{i}"
        _write(tmp_path / Path(where).parent / f"{stem}.py", f"def {name}():\n    return {i}\n")
        monkeypatch.delitem(sys.modules, stem, raising=False)
        assert load_callable(f"{Path(where).parent}/{stem}.py:{name}", "env")() == i, form


def test_a_mechanism_factory_that_raises_is_one_line(tmp_path: Path) -> None:
    from privrl.privacy.user import MechanismRequest, user_mechanism

    path = _write(tmp_path / "broken_mech53.py", "def make(request):\n"
                  "    raise ValueError('no such clip')\n")
    with pytest.raises(ConfigError) as e:
        user_mechanism(f"{path}:make", MechanismRequest(1.0, 0.0, 1.0, 4))
    assert e.value.field == "mechanism"
    assert "failed: ValueError: no such clip" in e.value.message
