"""Shared fixtures, and how the suite is split over pytest-xdist workers.

`make test` runs `pytest -n auto --dist loadgroup --no-loadscope-reorder`: every test runs
(the `slow` marker only names the long ones, for `make test-fast`). Here:

- each xdist worker asks XLA for one host device (the workers already use every core; a worker
  with one device per core would oversubscribe them);
- one JAX persistent compilation cache for the whole run, shared by the workers and the Ray
  actors, so a program compiled by one test is not compiled again by another (it starts
  empty on every run: nothing is carried over between runs);
- a module that defines a module- or session-scoped fixture runs whole in one worker, so the
  fixture is computed once, and the Ray tests share one worker and its Ray cluster (a custom
  xdist scheduler: see `pytest_xdist_make_scheduler`);
- the long tests are sent out first so that no worker is left with one at the end;
- the garbage collector leaves alone what exists once the tests are collected, and runs less
  often (`pytest_collection_finish`);
- the tests compiled without optimizations also compile without XLA's newer MLIR fusion
  emitters (`xla_cpu_use_fusion_emitters=false`) and under XLA CPU's compile-speed preset
  (`xla_cpu_opt_preset`), per compilation (`_UNOPTIMIZED`, `_fast_unoptimized_compiles`): both
  compile faster, and compiling is what those tests spend their time on (a test of a bit-for-bit
  promise between two programs, marked `product_compile`, keeps the product's preset).
  Optimized programs keep the default emitters, whose code runs faster, and running is what
  the learning tests spend theirs on;
- every compilation skips XLA's HLO verifier, which re-checks the module after each pass and
  changes nothing (`_EVERY_COMPILE`): about a tenth of an unoptimized compile's CPU;
- XLA optimizes only for the tests marked `learning` (long training runs, where execution time
  dominates), and then at LLVM's level 1, not 2 (it compiles faster, and their code is no
  slower where it matters; `learning(llvm_level=2)` where it is, as for FedPG-Dec's), unless
  the mark says `xla_optimize=False` (a learning test whose compiling costs more than
  optimization saves, found by timing each test); every
  other test, the Ray tests and their actors included, checks logic on tiny shapes, where
  compiling is most of the time, and optimization changes no result
  (`jax_disable_most_optimizations`, which compiles faster). A Ray test's driver and its
  actors compile alike, so a driver that replays the actors' arithmetic gets the same floats
  (and the actors compile as cheaply as the driver).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_CACHE_ENV = "PRIVRL_TEST_JAX_CACHE"
_ROOT = Path(__file__).resolve().parent.parent  # node ids are relative to it

if _WORKER is not None:
    # Before anything imports JAX (this conftest is imported before every test module).
    from privrl.compute.devices import use_host_devices

    use_host_devices(1)


def pytest_configure(config: pytest.Config) -> None:
    if _CACHE_ENV not in os.environ:
        # The controller (or a run without xdist): workers inherit the environment.
        os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="privrl-test-jax-cache-")
        config._privrl_cache_owner = True  # type: ignore[attr-defined]
    _fast_unoptimized_compiles()
    from privrl.compute.devices import run_cpu_inline

    run_cpu_inline()  # as the `privrl` process runs (before any test starts JAX's backend)
    if os.environ[_CACHE_ENV] == "off":  # PRIVRL_TEST_JAX_CACHE=off: compile everything
        return
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


# XLA CPU splits a program's LLVM code generation into parts compiled on parallel threads; on 2
# cores already busy with 2 workers that costs more CPU than it saves, so one part. And XLA
# re-verifies the whole HLO module after every pass of its pipelines (HloVerifier, an invariant
# checker: it reads the module and changes nothing), about a tenth of an unoptimized compile's
# CPU; the tests check privrl, not XLA, so they skip it: the programs compile to the same HLO,
# text for text (benchmarks/log/30-suite.md). Every compilation, and the children's XLA_FLAGS.
_EVERY_COMPILE = {"xla_cpu_parallel_codegen_split_count": 1,
                  "xla_disable_hlo_passes": "hlo-verifier"}
# What the compilations without optimizations add: the older fusion emitters and XLA CPU's
# compile-speed preset (it leaves out passes that spend compile time to buy run time; about a
# tenth of these tests' CPU: benchmarks/log/37-session-16.md). The tests check privrl's logic,
# and the processes a test starts compile alike (`_child_compile_env`), so a driver replaying
# their arithmetic gets the same floats; a test about the product's compiled program asks for
# the product's options itself (they win).
_UNOPTIMIZED = {"xla_cpu_use_fusion_emitters": False,
                "xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_COMPILE"}
# The preset changes the floats of some programs, so a promise that two programs (a chunked run
# and the whole run's program; the tests' replay and the installed command's) give the same
# floats, bit for bit, does not hold under it as it holds for the product: a test of such a
# promise is marked `product_compile` and compiles at the product's preset (pytest_runtest_setup).
_PRESET = ["CPU_OPT_PRESET_FAST_COMPILE"]
# LLVM's level for the optimized compiles of the running test: `learning(llvm_level=2)` asks for
# XLA's default, 2 (pytest_runtest_setup).
_LLVM_LEVEL = [1]


def _fast_unoptimized_compiles() -> None:
    """Every compilation made under `jax_disable_most_optimizations` also gets `_UNOPTIMIZED`
    (no MLIR fusion emitters, the compile-speed preset); every other one (the learning tests')
    asks LLVM for level 1 (unless the compilation asks for its own options: they win). JAX
    offers per-compilation XLA options only per `jit` (`compiler_options`), so the hook wraps
    the one function through which every compilation gets its options; if a JAX upgrade removes
    it, the tests still run, only slower."""
    import jax
    from jax._src import compiler

    original = getattr(compiler, "get_compile_options", None)
    if original is None:
        return

    @functools.wraps(original)
    def get_compile_options(*args: Any, env_options_overrides: dict | None = None,
                            **kwargs: Any) -> Any:
        extra = ({**_UNOPTIMIZED, "xla_cpu_opt_preset": _PRESET[0]}
                 if jax.config.read("jax_disable_most_optimizations")
                 else {"xla_backend_optimization_level": _LLVM_LEVEL[0]})
        # the random baseline's rollout asks for LLVM level 0, as in a run (at a learning
        # test's level it compiled ~5x slower: benchmarks/log/36-dpsgd.md)
        env_options_overrides = {**extra, **(env_options_overrides or {}), **_EVERY_COMPILE}
        return original(*args, env_options_overrides=env_options_overrides, **kwargs)

    compiler.get_compile_options = get_compile_options


def pytest_collection_finish(session: pytest.Session) -> None:
    """The garbage collector tuned as the `privrl` command tunes it, once every test module
    (and so privrl and JAX) is imported: `tune_garbage_collector` says why."""
    from privrl.compute.devices import tune_garbage_collector

    tune_garbage_collector()


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "_privrl_cache_owner", False) and os.environ[_CACHE_ENV] != "off":
        shutil.rmtree(os.environ.pop(_CACHE_ENV), ignore_errors=True)


@functools.cache
def _shares_fixtures(path: str) -> bool:
    """Whether the test module at `path` defines a fixture that outlives one test (typically a
    compiled program or a short training that several tests inspect)."""
    file = _ROOT / path
    text = file.read_text(encoding="utf-8") if file.is_file() else ""
    return any(f'scope="{s}"' in text for s in ("module", "package", "session"))


def _scope(nodeid: str) -> str:
    """The unit of work one xdist worker takes whole: the session's Ray cluster, a module
    whose tests share a fixture, or else one test."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/systems/") and path.endswith("/test_ray.py"):
        return "ray-cluster"
    if path == "tests/test_documented_commands.py" and "--runtime ray" in nodeid:
        return "ray-cluster"  # a documented Ray command, on the session's cluster
    return path if _shares_fixtures(path) else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadgroup, with the groups of `_scope`. (xdist 3.8's own loadgroup renames nodes
    through an attribute that pytest 9 no longer reads, so its xdist_group marks are lost.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return Grouped(config, log)


def _weight(item: pytest.Item) -> int:
    """Sent out in this order: 0, the Ray tests; 1, the slow ones; 2, modules sharing a
    fixture; 3, the rest."""
    scope = _scope(item.nodeid)
    if scope == "ray-cluster":
        return 0
    if item.get_closest_marker("slow"):
        return 1
    return 2 if scope != item.nodeid else 3


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures are set up, so that a fixture compiles like its test."""
    import jax

    learning = item.get_closest_marker("learning")
    optimized = learning is not None and learning.kwargs.get("xla_optimize", True)
    jax.config.update("jax_disable_most_optimizations", not optimized)
    _LLVM_LEVEL[0] = learning.kwargs.get("llvm_level", 1) if optimized else 1
    preset = ("CPU_OPT_PRESET_DEFAULT" if item.get_closest_marker("product_compile")
              else _UNOPTIMIZED["xla_cpu_opt_preset"])
    if preset != _PRESET[0]:
        # JAX's in-memory caches do not key on the hook's options: a program compiled at the
        # other preset must not be served (the persistent cache keys on them)
        jax.clear_caches()
        _PRESET[0] = preset


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The session's Ray cluster stops after its last test (the Ray tests run together, first:
    `_weight`), not when the session ends: its daemons (a GCS, a raylet, a log monitor, idle
    workers) keep polling meanwhile, about 1 CPU-s a minute idle and more after a run's actors
    have written their logs (benchmarks/log/23-suite.md)."""
    if _scope(item.nodeid) == "ray-cluster" and (
            nextitem is None or _scope(nextitem.nodeid) != "ray-cluster"):
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _scope(item.nodeid) == "ray-cluster":
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.processes)
        if item.nodeid.split("::")[0].endswith("_deployment.py"):  # a Flower deployment
            item.add_marker(pytest.mark.processes)
        if item.get_closest_marker("learning"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_weight)  # stable: collection order within one weight


def _child_compile_env(cache: str | None) -> dict[str, str]:
    """The environment under which a process a test starts (a Ray actor, a Flower app or
    agent executor) compiles as the tests do: without optimizations, with `_UNOPTIMIZED`, code
    generation in one part, no HLO verifier, every program in the session's
    cache (None: none).
    Cheaper, and a driver replaying the process's arithmetic gets the same floats."""
    env = {"JAX_DISABLE_MOST_OPTIMIZATIONS": "true",
           "XLA_FLAGS": " ".join(f"--{k}={str(v).lower() if isinstance(v, bool) else v}"
                                 for k, v in (_UNOPTIMIZED | _EVERY_COMPILE).items())}
    if cache is not None:
        env |= {"JAX_COMPILATION_CACHE_DIR": cache,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    return env


@pytest.fixture
def children_compile_as_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes this test starts compile as the tests do (`_child_compile_env`), with the
    session's cache when there is one."""
    cache = os.environ.get(_CACHE_ENV, "off")
    for name, value in _child_compile_env(None if cache == "off" else cache).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One real local Ray cluster (2 CPUs) for every Ray test of the session; its actors share
    the session's JAX compilation cache."""
    ray = pytest.importorskip("ray")
    cache = os.environ[_CACHE_ENV]
    if cache == "off":
        cache = str(tmp_path_factory.mktemp("jax-cache"))  # the actors' own, as before
    # The actors compile as the Ray tests' drivers do (pytest_runtest_setup and
    # _fast_unoptimized_compiles): without optimizations, without the MLIR fusion emitters, with
    # code generation in one part and no HLO verifier; every program they compile goes to the
    # cache, so that a restarted actor does not compile its programs again. They get that
    # environment from the raylet, which inherits this process's while Ray starts, not from a
    # job runtime_env: Ray starts a worker with a runtime_env through its setup_worker, which
    # imports Ray once more before the worker proper (about 0.3 CPU-s an actor).
    from privrl.runtime.ray import NO_IDLE_WORKERS

    with pytest.MonkeyPatch.context() as env:
        for name, value in _child_compile_env(cache).items():
            env.setenv(name, value)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _system_config=NO_IDLE_WORKERS)  # no prestarted workers the actors cannot use
    yield
    ray.shutdown()


class _Evil:
    """A pickle whose loading creates `marker` (loading it could as well run any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


@pytest.fixture
def plant_pickle(tmp_path: Path) -> Any:
    """`plant(path)` writes a malicious pickle at `path` and returns the marker file that
    unpickling it would create (the payload is first shown to work on another marker)."""
    import pickle

    probe = tmp_path / "payload-works"
    pickle.loads(pickle.dumps(_Evil(probe))).close()
    assert probe.exists()

    def plant(path: Path) -> Path:
        marker = tmp_path / f"pwned-{path.name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(_Evil(marker)))
        return marker

    return plant


class ReleaseCounter:
    """How many Reports a mechanism minted while a run was traced and executed.

    The count comes from a `jax.debug.callback` on every Report's value, which fires once per
    vmapped element and once per loop iteration, so it counts the releases the run made, not
    the times the code was traced. Read it after `jax.effects_barrier()` (`.calls` does it).
    """

    def __init__(self) -> None:
        self._calls = 0

    def add(self, _value: Any) -> None:
        self._calls += 1

    @property
    def calls(self) -> int:
        import jax

        jax.effects_barrier()
        return self._calls


@pytest.fixture
def count_releases(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`count_releases(owner, name="privatize")`: wrap `owner.<name>` (a mechanism class's
    method, or a release function where a module calls it, e.g. a system's module and
    "privatize_setting") so that every Report (or released array) it returns is counted;
    returns the ReleaseCounter."""

    def install(owner: Any, name: str = "privatize") -> ReleaseCounter:
        import jax

        counter = ReleaseCounter()
        original = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            released = original(*args, **kwargs)
            jax.debug.callback(counter.add, getattr(released, "value", released))
            return released

        monkeypatch.setattr(owner, name, counted)
        return counter

    return install


def _spying(module: Any, name: str, calls: list[tuple],
            change: Callable[[Any], Any] | None) -> Callable[..., Any]:
    """`module.<name>` (a release function `f(params, ...)`) recording every call."""
    import jax
    import numpy as np

    original = getattr(module, name)

    def record(*leaves: Any) -> None:
        calls.append((name, *(tuple(np.unique(np.asarray(v)).tolist()) for v in leaves)))

    def spy(params: Any, *args: Any) -> Any:
        leaves = jax.tree_util.tree_leaves(params)
        if any(isinstance(v, jax.core.Tracer) for v in leaves):
            jax.debug.callback(record, *leaves)  # traced data: its values at run time
        else:
            record(*leaves)
        return original(params if change is None else change(params), *args)

    return spy


@pytest.fixture
def spy_release(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`spy_release(module, *names, change=None)`: wrap each mechanism family's release
    function `module.<name>` so that every call appends (name, the distinct values of each
    parameter) to the returned list; `change(params)` (optional) is what it releases with."""

    def install(module: Any, *names: str, change: Callable[[Any], Any] | None = None
                ) -> list[tuple]:
        calls: list[tuple] = []
        for name in names:
            monkeypatch.setattr(module, name, _spying(module, name, calls, change))
        return calls

    return install


def _import_example(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """examples/<name>.py imported as the module `name`, registered in `sys.modules` for as long
    as `monkeypatch` lasts (so that `<name>:<callable>` environment specs and the example's
    dataclasses resolve)."""
    spec = importlib.util.spec_from_file_location(name, _ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_example(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`load_example(name)` imports examples/<name>.py as the module `name` for one test."""
    return lambda name: _import_example(name, monkeypatch)


@pytest.fixture(scope="session")
def walk() -> Iterator[Any]:
    """examples/byo_env.py's walker as a Task: −1 per step right, −2 per step left, private
    `drift` (a step moves x by ±drift, drawn in [0.6, 1.4]; the observation is (x/5, t/30))."""
    from privrl.envs.task import PrivateParam, Task

    with pytest.MonkeyPatch.context() as mp:
        env = _import_example("byo_env", mp).Walk()
        yield Task(env, env.default_params, "byo_env:Walk", (PrivateParam("drift", 0.6, 1.4),))


_GAUSS_PLUGIN = '''
import math

from scipy.optimize import brentq

from privrl.privacy.accounting import gaussian_epsilon
from privrl.privacy.mechanisms import GaussianMechanism


def make(request):
    """An honest (ε, δ) plug-in: the L2 Gaussian mechanism calibrated to the request (it
    needs a δ > 0: asked for δ = 0 it declares 1e-5, which a pure budget refuses)."""
    delta = request.delta or 1e-5
    z = math.exp(brentq(lambda lz: gaussian_epsilon(math.exp(lz), delta) - request.epsilon,
                        math.log(1e-3), math.log(1e4)))
    return GaussianMechanism(2.0 * z, request.clip, delta)
'''


@pytest.fixture
def gauss_plugin(tmp_path: Path) -> str:
    """A user's (ε, δ) plug-in mechanism, as `--mechanism` names it: an honest Gaussian
    calibrated to the request (issue 53 item 4)."""
    (tmp_path / "gauss_plugin.py").write_text(_GAUSS_PLUGIN)
    return f"{tmp_path}/gauss_plugin.py:make"


@pytest.fixture
def plot_titles(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The title of each figure saved while the test runs, by file name (the figure is still
    saved): what a run's plot says of itself (issue 53 item 7)."""
    import matplotlib.figure

    titles: dict[str, str] = {}
    original = matplotlib.figure.Figure.savefig

    def savefig(fig: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        titles[Path(path).name] = fig.axes[0].get_title()
        return original(fig, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return titles


@pytest.fixture
def fails_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Any:
    """`check(cmd, args, option)`: `privrl run CMD ARGS` exits 2 with one line of error that
    names `option`, before making its results directory."""
    from privrl import main as cli

    def check(cmd: str, args: list[str], option: str) -> None:
        out = tmp_path / "run"
        rc = cli.main(["run", cmd, *args, "--out", str(out), "--no-progress"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and option in err, err
        assert not out.exists()

    return check


@pytest.fixture
def call_grid() -> Iterator[Any]:
    """A Flower grid that delivers each message to its SuperNode's handler at once, in this
    process (no SuperLink): `call_grid({node_id: handler})`, nodes named as privrl's slots
    (privrl.federation.flower.SLOT + index). Messages name their run, as in a ServerApp's
    process. The tests of the Flower apps' message paths use it."""
    from flwr.proto.node_pb2 import NodeInfo
    from flwr.supercore.task_identity import TaskIdentity

    from privrl.federation.flower import SLOT

    class CallGrid:
        def __init__(self, handlers: dict[int, Any]) -> None:
            self.handlers = handlers
            self.sent: list[Any] = []

        def get_node_ids(self) -> list[int]:
            return list(self.handlers)

        def get_nodes(self) -> list[Any]:
            return [NodeInfo(node_id=n, name=f"{SLOT}{i}") for i, n in enumerate(self.handlers)]

        def send_and_receive(self, messages: list[Any], timeout: float | None = None
                             ) -> list[Any]:
            out = []
            for m in messages:  # a message's id is its object id, as Flower's grid sets it
                m.metadata.__dict__["_message_id"] = m.object_id
                self.sent.append(m)
                out.append(self.handlers[m.metadata.dst_node_id](m))
            return out

        def push_messages(self, messages: Any) -> list[str]:
            """Delivered at once; their replies wait for `pull_messages`."""
            self.replies = getattr(self, "replies", {})
            ids = []
            for m, r in zip(messages := list(messages), self.send_and_receive(messages),
                            strict=True):
                self.replies[m.metadata.message_id] = r
                ids.append(m.metadata.message_id)
            return ids

        def pull_messages(self, message_ids: Any) -> list[Any]:
            return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield CallGrid
    TaskIdentity._run_id = TaskIdentity._node_id = TaskIdentity._task_id = None


@pytest.fixture
def compiles() -> Any:
    """`with compiles() as names:` the names of the programs XLA compiles inside the block
    (JAX's backend-compile events; a program found in a cache sends none)."""
    import contextlib

    import jax.monitoring

    @contextlib.contextmanager
    def listening() -> Iterator[list[str]]:
        names: list[str] = []

        def listen(event: str, secs: float, fun_name: str = "?", **_: object) -> None:
            if event == "/jax/core/compile/backend_compile_duration":
                names.append(fun_name)

        jax.monitoring.register_event_duration_secs_listener(listen)
        try:
            yield names
        finally:
            jax.monitoring.unregister_event_duration_listener(listen)

    return listening
