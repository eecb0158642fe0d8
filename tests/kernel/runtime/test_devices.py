"""Process setup (privrl.runtime.devices): the compilation cache's directory."""

from __future__ import annotations


def test_a_cache_others_may_write_is_not_used(tmp_path, monkeypatch, capsys) -> None:
    """A compiled program runs when loaded: a cache directory others may write into could hold
    a planted one, so privrl does not use it (issue 43, item 11); a new one is made private."""
    import os

    from privrl.runtime.devices import use_compilation_cache

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
