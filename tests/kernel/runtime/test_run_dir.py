"""A run directory's name from a stem that holds a user's `path/file.py:callable`: one new
directory directly under the root, its name without path separators or colons."""

from __future__ import annotations

from privrl.runtime.output import new_run_dir


def test_a_stem_with_a_module_path_names_one_directory(tmp_path):
    path = new_run_dir(None, "pgc-a3c-tuned-examples/own_mechanism.py:duchi-eps5",
                       root=str(tmp_path))
    assert path.parent == tmp_path and path.is_dir()
    assert path.name.startswith("pgc-a3c-tuned-examples_own_mechanism.py_duchi-eps5-")
    assert list(tmp_path.iterdir()) == [path]
