"""Process setup (privrl.compute.devices): the compilation cache's directory."""

from __future__ import annotations


def test_a_cache_others_may_write_is_not_used(tmp_path, monkeypatch, capsys) -> None:
    """A compiled program runs when loaded: a cache directory others may write into could hold
    a planted one, so privrl does not use it (issue 43, item 11); a new one is made private."""
    import os

    from privrl.compute.devices import use_compilation_cache

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert use_compilation_cache(str(shared)) is None
    assert "others may write into it" in capsys.readouterr().err
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ
    fresh = tmp_path / "mine" / "jax"
    assert use_compilation_cache(str(fresh)) == str(fresh)
    assert (fresh.stat().st_mode & 0o777) == 0o700


def test_cpu_computations_run_inline_only_if_asked_before_the_backend() -> None:
    """`run_cpu_inline` (issue 39: a Gymnasium step's policy call queued onto a worker thread
    cost ~3× its CPU) turns JAX's queued CPU dispatch off only before the backend exists, and
    not at all under PRIVRL_CPU_DISPATCH=queued; a fresh process (the setting is read once).
    About 2 CPU-s (a JAX import)."""
    import os
    import subprocess
    import sys

    script = (
        "import jax, jax.numpy as jnp\n"
        "from privrl.compute.devices import run_cpu_inline\n"
        "flag = lambda: jax.config.read('jax_cpu_enable_async_dispatch')\n"
        "assert flag()\n"
        "first = run_cpu_inline()\n"
        "print(first, flag())\n"
        "jnp.zeros(1).block_until_ready()  # the backend exists from here on\n"
        "jax.config.update('jax_cpu_enable_async_dispatch', True)\n"
        "print(run_cpu_inline(), flag())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PRIVRL_CPU_DISPATCH"}
    run = lambda e: subprocess.run([sys.executable, "-c", script], env=e, check=True,  # noqa: E731
                                   capture_output=True, text=True).stdout.split()
    assert run(env) == ["True", "False", "False", "True"]
    queued = run({**env, "PRIVRL_CPU_DISPATCH": "queued"})
    assert queued[:2] == ["False", "True"]


def test_cpu_computations_run_inline_once_jax_is_imported() -> None:
    """The `privrl` process asks for inline dispatch before JAX is imported (it refuses a bad
    value first): `run_cpu_inline_once_imported` imports nothing and sets it as JAX's import
    ends (once, however often it is asked). About 2 CPU-s (a JAX import)."""
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from privrl.compute.devices import run_cpu_inline_once_imported\n"
        "run_cpu_inline_once_imported(); run_cpu_inline_once_imported()\n"
        "hooks = [f for f in sys.meta_path if type(f).__name__ == '_AfterImport']\n"
        "print('jax' in sys.modules, len(hooks))\n"
        "import jax\n"
        "print(jax.config.read('jax_cpu_enable_async_dispatch'), len(sys.meta_path) == "
        "len(set(sys.meta_path)) and not any(f in sys.meta_path for f in hooks))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PRIVRL_CPU_DISPATCH"}
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["False", "1", "False", "True"]


def test_the_privrl_process_runs_cpu_computations_inline(monkeypatch, tmp_path) -> None:
    """The `privrl` command's process setup asks for inline CPU dispatch once a command is
    about to run (not for --help or a refused command line: those import no JAX); a caller of
    `main(argv)` keeps its own settings, as for the garbage collector."""
    import sys

    import privrl.main as entry

    calls: list[str] = []
    monkeypatch.setattr(entry, "run_cpu_inline_once_imported", lambda: calls.append("inline"))
    monkeypatch.setattr(entry, "tune_garbage_collector", lambda: calls.append("gc"))
    monkeypatch.setattr(sys, "argv", ["privrl", "--help"])
    assert entry.main() == 0
    assert calls == []
    monkeypatch.setattr(sys, "argv", ["privrl", "replay", str(tmp_path)])
    assert entry.main() == 2  # not a run directory: the command ran, after the setup
    assert calls == ["inline", "gc"]
    calls.clear()
    assert entry.main(["replay", str(tmp_path)]) == 2
    assert calls == []
    # a `privrl run` command checks its values first: the collector waits for the computing
    # (privrl.cli.computing), which a refused value never reaches
    monkeypatch.setattr(sys, "argv", ["privrl", "run", "pgc-a3c", "--epsilon", "-1"])
    assert entry.main() == 2
    assert calls == ["inline"]
