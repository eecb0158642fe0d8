"""The privacy boundary and the package's shape.

Aggregator-side code (privrl.federation) never imports environment, rollout, runtime or system
code: it sees only `Report`s. And no module of privrl imports another in a circle.
"""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import privrl
import privrl.federation

SRC = Path(privrl.__file__).parent
AGGREGATOR_SIDE = ["privrl.federation"] + [
    f"privrl.federation.{m.name}" for m in pkgutil.iter_modules(privrl.federation.__path__)]
AGENT_SIDE = ("privrl.envs", "privrl.systems", "privrl.runtime", "gymnax", "gymnasium")


def _fresh(code: str) -> str:
    """What `code` prints in a fresh interpreter (what it imports is all its own)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_every_federation_module_is_checked():
    # privrl.federation.flower: the Flower ServerApp, which runs in the aggregator operator's
    # process and must load no agent code either.
    assert {"privrl.federation.aggregator", "privrl.federation.vertical",
            "privrl.federation.gossip", "privrl.federation.flower"} <= set(AGGREGATOR_SIDE)


def test_importing_aggregator_side_loads_no_agent_code():
    """One fresh interpreter imports every aggregator-side module in turn: if together they load
    no agent-side module, none of them does (and each offender is named by the import that
    first loaded it)."""
    code = (
        "import importlib, sys\n"
        f"for module in {AGGREGATOR_SIDE!r}:\n"
        "    importlib.import_module(module)\n"
        f"    bad = sorted(m for m in sys.modules if m.startswith({AGENT_SIDE!r}))\n"
        "    if bad:\n"
        "        print(module, 'pulled in', ','.join(bad))\n"
        "        break\n"
    )
    said = _fresh(code)
    assert said == "", said


def test_a_flower_apps_reference_is_found_without_jax():
    """`flwr run` looks the bundle's app references up before submitting it (`find_spec`, which
    imports their parent packages): privrl and privrl.federation import no JAX, which would
    cost every `flwr run` a process's JAX import (benchmarks/log/26-fold.md)."""
    code = ("import sys\nfrom importlib.util import find_spec\n"
            "for ref in ('privrl.federation.flower', 'privrl.federation.flower_sum',\n"
            "            'privrl.systems.pgc_a3c.flower', 'privrl.systems.fedpg.flower'):\n"
            "    assert find_spec(ref) is not None, ref\n"
            "print(sorted(m for m in ('jax', 'numpy', 'flwr') if m in sys.modules))\n")
    said = _fresh(code)
    assert said == "[]", said


def test_the_processes_runtimes_start_import_no_accounting_library():
    """What a Ray actor, a Flower agent executor and a ServerApp import to start (their
    modules, and gymnax's CartPole) loads no dp-accounting, nor the scipy.stats and
    scipy.signal it imports, nor the seaborn (and pandas) and matplotlib.pyplot (and its
    figures) gymnax imports to render: each about 1 CPU-s of every such process's start
    (benchmarks/log/34-procs.md). dp-accounting loads on the first ε asked
    (privacy.accounting's `_dp`), the renderers on their first use (privrl.lazy)."""
    code = ("import sys\n"
            "import privrl.systems.fedpg.ray, privrl.systems.pgc_a3c.ray\n"
            "import privrl.systems.fedpg.flower, privrl.systems.pgc_a3c.flower\n"
            "import privrl.federation.flower, privrl.federation.flower_sum\n"
            "from privrl.envs import CartPoleSpec, make_cartpole\n"
            "make_cartpole(CartPoleSpec())\n"
            "print(sorted(m for m in ('dp_accounting', 'scipy.stats', 'scipy.signal', 'pandas',\n"
            "                          'matplotlib.figure') if m in sys.modules))\n")
    said = _fresh(code)
    assert said == "[]", said


def test_a_module_on_first_use_is_the_real_one(monkeypatch):
    """`privrl.lazy.OnFirstUse` (how gymnax's renderers wait): an `import` binds it without
    loading the module; its first name read loads the real one, which then takes its place."""
    import importlib.util

    from privrl.lazy import OnFirstUse

    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    stub = OnFirstUse("colorsys")
    stub.__spec__ = importlib.util.find_spec("colorsys")
    monkeypatch.setitem(sys.modules, "colorsys", stub)
    import colorsys

    assert colorsys is stub and "rgb_to_hsv" not in vars(stub)  # bound, not loaded
    assert colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)  # loaded, and forwarded
    assert sys.modules["colorsys"] is not stub and sys.modules["colorsys"].rgb_to_hsv


def _imports(path: Path, module: str) -> set[str]:
    """Absolute names of the modules `path` (module `module`) imports, lazily or not."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def test_federation_sources_import_nothing_agent_side():
    mods = _modules()
    for name, path in mods.items():
        if name.startswith("privrl.federation"):
            for imported in _imports(path, name):
                assert not imported.startswith(AGENT_SIDE), f"{name} imports {imported}"


def test_no_import_circles():
    """Every import (also one inside a function) is an edge; no strongly connected component
    of privrl's modules may have more than one member."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        edges = set()
        for imported in _imports(path, name):
            while imported and imported not in mods:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                edges.add(imported)
        graph[name] = edges
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def test_cli_modules_do_not_import_jax():
    """`privrl.main` imports every system's CLI; none may start JAX before main() has asked
    XLA for one host device per core."""
    code = "import sys, privrl.main\nprint('jax' in sys.modules)"
    assert _fresh(code) == "False"


def test_systems_import_no_other_system():
    """A system reads top to bottom in its own package: what two systems share lives in the
    kernel, never in one of them."""
    for name, path in _modules().items():
        parts = name.split(".")
        if len(parts) < 3 or parts[1] != "systems":
            continue
        own = ".".join(parts[:3])
        for imported in _imports(path, name):
            if imported.startswith("privrl.systems."):
                assert imported.startswith(own), f"{name} imports {imported}"


# The layers' nevers (shared/DESIGN.md): what each lower package may not import. compute/ is
# below envs/ (a rollout shards trials over devices); privacy/ imports nothing outside itself;
# envs/ imports no privacy and no runtime.
_NEVER = {
    "privrl.compute": ("privrl.envs", "privrl.privacy", "privrl.federation", "privrl.runtime",
                       "privrl.systems", "privrl.nets", "privrl.output", "privrl.policy"),
    "privrl.envs": ("privrl.privacy", "privrl.federation", "privrl.runtime", "privrl.systems",
                    "privrl.output"),
    "privrl.privacy": ("privrl.envs", "privrl.federation", "privrl.runtime", "privrl.systems",
                       "privrl.compute", "privrl.nets", "privrl.output", "privrl.policy"),
}


def test_layers_import_nothing_above_them():
    for name, path in _modules().items():
        for layer, never in _NEVER.items():
            if name == layer or name.startswith(layer + "."):
                for imported in _imports(path, name):
                    assert not imported.startswith(never), f"{name} imports {imported}"


def test_kernel_imports_no_system():
    for name, path in _modules().items():
        if name.startswith(("privrl.systems", "privrl.planner")) or name in ("privrl",
                                                                             "privrl.main"):
            # privrl.main merges the systems' commands; privrl's API names them lazily; the
            # planner (`privrl plan`) sits above the systems it plans for
            continue
        for imported in _imports(path, name):
            assert not imported.startswith("privrl.systems"), f"{name} imports {imported}"


def test_no_module_reads_or_writes_pickles():
    """Run files must not be able to run code when loaded: no privrl module imports a pickle
    library, and every np.load says allow_pickle=False (privrl.runfile holds saved state)."""
    for name, path in _modules().items():
        for imported in _imports(path, name):
            assert imported.split(".")[0] not in ("pickle", "cloudpickle", "dill", "joblib",
                                                  "shelve", "marshal"), \
                f"{name} imports {imported}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "load" and getattr(node.func.value, "id", "") == "np":
                kw = {k.arg: k.value for k in node.keywords}
                assert isinstance(kw.get("allow_pickle"), ast.Constant) \
                    and kw["allow_pickle"].value is False, \
                    f"{name}:{node.lineno} calls np.load without allow_pickle=False"
