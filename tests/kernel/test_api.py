"""The public Python API: every listed name resolves, and `import privrl` starts no JAX."""

import subprocess
import sys

import privrl


def test_every_public_name_resolves_to_its_module():
    for name in privrl.__all__:
        value = getattr(privrl, name)
        assert value.__name__ == name
        assert value.__module__ == privrl._API[name], name
    assert set(privrl.__all__) <= set(dir(privrl))


def test_unknown_name_is_an_attribute_error():
    try:
        privrl.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("privrl.NoSuchThing resolved")


def test_importing_privrl_loads_no_jax_and_no_system():
    code = ("import sys, privrl\n"
            "print(sorted(m for m in sys.modules if m.startswith(('jax', 'privrl.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
