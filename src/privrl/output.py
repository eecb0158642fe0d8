"""Writing what a run leaves behind: a fresh run directory, JSON, CSV, plots, tables."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from privrl.config import ConfigError, json_safe
from privrl.policy import FILE as POLICY_FILE
from privrl.policy import SavedPolicy
from privrl.runfile import json_text, versions, write_json  # noqa: F401 (run output's API)

if TYPE_CHECKING:
    from privrl.evaluation import Verdict

T = TypeVar("T")


class OutputDirError(ValueError):
    """The requested output directory cannot be used (it exists and is not empty)."""


def new_run_dir(out: str | os.PathLike | None, stem: str, root: str = "runs") -> Path:
    """A new, empty run directory. An explicit `out` must not exist or be empty; without one,
    `runs/<stem>-<time>` is used with a numeric suffix if that name is taken. Never overwrites.
    """
    if out is not None:
        check_out_dir(out)
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        return path
    stem = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in stem)  # module:callable
    base = Path(root) / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, i = base, 1
    while True:
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            i += 1
            path = base.with_name(f"{base.name}-{i}")


@contextmanager
def removed_if_left_empty(path: Path) -> Iterator[Path]:
    """For a run directory made before its run (a Ray run checkpoints into it): if the run
    fails before any file was written in it, it is removed again, so a failed run leaves
    nothing behind (a cluster that cannot be joined, a bad option found late)."""
    try:
        yield path
    except BaseException:
        if path.is_dir() and not any(p.is_file() or p.is_symlink() for p in path.rglob("*")):
            shutil.rmtree(path)
        raise


def check_out_dir(out: str | os.PathLike | None) -> None:
    """Validate --out before any computation (same rule as `new_run_dir`)."""
    if out is None:
        return
    path = Path(out)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise OutputDirError(f"--out: {path} exists and is not an empty directory; "
                             "choose a new path (results are never overwritten)")
    if path.exists():
        return
    # It will be created after the run: check now that it can be (no file on its way, a
    # writable directory to make it in), by making and removing a probe where it would go.
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputDirError(f"--out: {path} cannot be created: {parent} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".privrl-probe-", dir=parent))
    except OSError as e:
        raise OutputDirError(f"--out: {path} cannot be created in {parent} "
                             f"({e.strerror or e})") from None


def csv_writer(header: str, rows: Callable[[], Iterable[str]]) -> Callable[[Path], None]:
    """A metrics.csv writer for `RunRecord.metrics`: the header line, then each row line
    (formatted by the system, so every system keeps its own number formats)."""

    def write(path: Path) -> None:
        with path.open("w") as f:
            f.write(header + "\n")
            for row in rows():
                f.write(row + "\n")

    return write


def hold_last(x: np.ndarray) -> np.ndarray:
    """Forward-fill NaNs along the last axis (a stopped seed keeps its last value)."""
    x = np.array(x, dtype=float)
    for row in x.reshape(-1, x.shape[-1]):
        last = np.nan
        for i, v in enumerate(row):
            if np.isnan(v):
                row[i] = last
            else:
                last = v
    return x


def plot_title(system: str, env: str | None, privacy: str,
               policy: SavedPolicy | None = None) -> str:
    """A run's plot title: the system, the task (its env id; a config that names none: the
    task the saved `policy` was trained on) and the mechanism with its ε or σ."""
    if env is None and policy is not None:
        env = policy.description.get("env")
    return f"{system} on {env or 'its default task'}\n{privacy}"


def plural(n: int, word: str) -> str:
    """'1 seed', '3 seeds'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def draw_random(ax: Any, random: float | None) -> None:
    """The random policy's mean return as a horizontal line (`privrl.evaluation`), if known."""
    if random is not None:
        ax.axhline(random, color="tab:red", ls=":", lw=1.0,
                   label=f"random policy: {random:.4g}")


def plot_curves(path: Path, curves: dict[str, np.ndarray], title: str, xlabel: str,
                ylabel: str, target: float | None = None, window: int = 25,
                random: float | None = None) -> None:
    """Per label, a (seeds, T) array: moving average over `window`, mean over seeds and an
    interquartile band; a seed that stopped early (NaN) holds its last smoothed value.
    `ylabel` names one value ("evaluation return"); the axis says it is the mean over the
    window. `random`: the random policy's return, drawn as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, y in curves.items():
        y = np.atleast_2d(np.asarray(y, dtype=float))
        if y.shape[1] >= window:
            kernel = np.ones(window) / window
            smooth = np.stack([np.convolve(hold_last(r), kernel, "valid") for r in y])
            x = np.arange(window, y.shape[1] + 1)
        else:
            smooth, x = hold_last(y), np.arange(1, y.shape[1] + 1)
        smooth_over = window if y.shape[1] >= window else 1
        line = ax.plot(x, np.nanmean(smooth, 0), lw=1.2,
                       label=f"{label}, mean of {plural(y.shape[0], 'seed')}")[0]
        if y.shape[0] > 1:
            lo, hi = np.nanpercentile(smooth, [25, 75], axis=0)
            ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=0.8, label=f"solved: {target:g}")
    draw_random(ax, random)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"mean {ylabel}\nover the last {plural(smooth_over, xlabel)}"
                  if curves and smooth_over > 1 else ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def open_sweep(out: Path, sweep: dict[str, Any]) -> None:
    """Create (or, to resume, check) a sweep directory: sweep.json records its options, and a
    directory holding a sweep with other options is refused (ConfigError on `resume`)."""
    out.mkdir(parents=True, exist_ok=True)
    meta = out / "sweep.json"
    if meta.exists():
        data = json.loads(meta.read_text())
        # "config": how dpsgd-rl's sweeps recorded their options before they used this
        saved = data["sweep"] if "sweep" in data else data["config"]
        # an option added since the sweep began (absent from sweep.json) matches at None
        if {k: v for k, v in sweep.items() if k in saved or v is not None} != saved:
            raise ConfigError("resume", f"{out} holds a sweep with different options: {saved}")
    else:
        write_json(meta, {"sweep": sweep, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                          "versions": versions()})


def run_setting(out: Path, name: str, write: Callable[[Path], T],
                log: Callable[[str], None]) -> T | None:
    """One setting of a resumable sweep, in out/settings/<name>: None (logged) if it is complete
    already; otherwise `write(tmp)` fills a fresh partial directory, which then replaces the
    setting's directory atomically, so a setting is either complete or absent."""
    final = out / "settings" / name
    if (final / "summary.json").exists():
        log(f"{name}: done earlier, skipped")
        return None
    tmp = out / "settings" / f".{name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    result = write(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return result


def write_run_config(path: Path, algorithm: str, config: dict[str, Any], seed: int,
                     command: list[str] | None, **extra: Any) -> None:
    """config.json of a run: the algorithm, its full config, seed, command line, time, versions,
    and any runner-specific `extra` (devices, topology, maps, ...)."""
    write_json(path / "config.json", {
        "algorithm": algorithm, "config": config, "seed": seed, **extra, "command": command,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "versions": versions()})


# --- the run directory -----------------------------------------------------------------------
FileWriter = Callable[[Path], None]


@dataclass
class RunRecord:
    """What one run leaves behind, so that one writer (`save`) lays out every system's run
    directory the same way. Systems compute it (summary, privacy record) and describe how to
    write their own tables and plots; `save` decides what goes where.

    metrics writes metrics.csv at the path it is given (None: the run has no metrics table);
    plots maps a file name in plots/ to the function drawing it; run_info holds extra
    config.json fields (devices, topology, maps, ...); files extra JSON documents by name;
    policy each trial's trained policy (privrl.policy: policy.npz); runtime where the
    parties ran (privacy.json's `trust_domain`).
    """

    algorithm: str
    config: dict[str, Any]
    seed: int
    summary: dict[str, Any]
    privacy: dict[str, Any]
    metrics: FileWriter | None = None
    plots: dict[str, FileWriter] = field(default_factory=dict)
    run_info: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    policy: SavedPolicy | None = None
    runtime: str = "local"

    def __post_init__(self) -> None:
        # Refused here, before anything is written: an unknown runtime, a second trust domain.
        from privrl.privacy.record import trust_domain  # JAX-free CLI imports: no JAX here

        trust_domain(self.runtime)
        if "trust_domain" in self.privacy:
            raise ValueError("a privacy record names its trust domain only through "
                             "RunRecord.runtime")

    def paths(self) -> list[str]:
        """The files `save` writes, relative to the run directory."""
        return ["config.json", *(["metrics.csv"] if self.metrics is not None else []),
                "privacy.json", "summary.json", *self.files,
                *([POLICY_FILE] if self.policy is not None else []),
                *(f"plots/{name}" for name in self.plots)]


def save(record: RunRecord, path: Path, command: list[str] | None = None) -> dict[str, Any]:
    """Write a run directory: config.json, metrics.csv, privacy.json, summary.json, the extra
    files, the trained policy (policy.npz) and plots/. The directory may hold other things (a
    Ray run's logs) but none of these files: a run never overwrites results. Returns the summary.
    Written for a run that failed (`keeping_work`), summary.json and privacy.json say so."""
    _refuse_existing(path, record.paths())
    stopped = _STOPPED.get()
    write_run_config(path, record.algorithm, record.config, record.seed, command,
                     **record.run_info)
    if record.metrics is not None:
        record.metrics(path / "metrics.csv")
    privacy = with_trust_domain(record)
    summary = record.summary
    if stopped is not None:
        privacy = {**privacy, "stopped": stopped}
        summary = {**summary, "stopped": stopped}
    write_json(path / "privacy.json", privacy)
    write_json(path / "summary.json", summary)
    for name, doc in record.files.items():
        write_json(path / name, doc)
    if record.policy is not None:
        record.policy.write(path / POLICY_FILE)
    for name, plot in record.plots.items():
        plot(path / "plots" / name)
    return summary


def save_setting(record: RunRecord, path: Path) -> dict[str, Any]:
    """One setting of a sweep: summary.json, privacy.json, the bare config.json (the
    sweep's sweep.json holds the command and versions; tables are drawn from the summaries)
    and the trained policy (policy.npz)."""
    policy = [POLICY_FILE] if record.policy is not None else []
    _refuse_existing(path, ["config.json", "privacy.json", "summary.json", *policy])
    write_json(path / "summary.json", record.summary)
    write_json(path / "privacy.json", with_trust_domain(record))
    write_json(path / "config.json", record.config)
    if record.policy is not None:
        record.policy.write(path / POLICY_FILE)
    return record.summary


def with_trust_domain(record: RunRecord) -> dict[str, Any]:
    """The run's privacy record with the trust domain its runtime gave its parties."""
    from privrl.privacy.record import trust_domain

    return {**record.privacy, "trust_domain": trust_domain(record.runtime)}


def _refuse_existing(path: Path, names: list[str]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    taken = [n for n in names if (path / n).exists()]
    if taken:
        raise OutputDirError(f"{path} already holds {', '.join(taken)}; results are never "
                             "overwritten")


class SavesRunDir:
    """A run's result in the Python API: `save(out)` writes the run directory the CLI writes
    (the same `RunRecord`, the same writer), and `privacy` is its privacy.json (with the
    statement). A system's result class defines `record()`."""

    def record(self) -> RunRecord:
        raise NotImplementedError

    def verdict(self) -> Verdict | None:
        """Whether the run learned: its final returns against a random policy's
        (`privrl.evaluation.verdict`); None for a run without a random baseline."""
        return None

    @property
    def random_return(self) -> float | None:
        """A uniform-random policy's mean return on the run's task (summary.json's
        `random_return`); None without a baseline."""
        v = self.verdict()
        return None if v is None else v.random

    @property
    def learned(self) -> bool | None:
        """Whether the final return is above random by its confidence bound (summary.json's
        `learned`); None without a baseline."""
        v = self.verdict()
        return None if v is None else v.learned

    @property
    def privacy_record(self) -> dict[str, Any]:
        """privacy.json of this run: the statement, the mechanism, the ledger, the account."""
        return json_safe(self.record().privacy)

    def save(self, out: str | os.PathLike, command: list[str] | None = None) -> Path:
        """Write config.json, metrics.csv, privacy.json, summary.json, policy.npz and plots/
        into `out` (a new or empty directory, as --out: results are never overwritten)."""
        check_out_dir(out)
        path = new_run_dir(out, "")
        save(self.record(), path, command)
        return path


def save_if_asked(result: T, out: str | os.PathLike | None) -> T:
    """A runner's `out=` argument: the result's run directory written into `out` (None:
    nothing written). The runner checks `out` with `check_out_dir` before it computes."""
    if out is not None:
        result.save(out)  # type: ignore[attr-defined]
    return result


# --- a run that fails keeps what it did -------------------------------------------------------
# A run loop states after each chunk of work how its result is made from what it has done so
# far (`work_so_far`); a command runs it inside `keeping_work`, which, when the run fails with
# some work done, writes that result with the command's own writer and says where. One place
# for every system: a loop adds one call, the writers are the ones a finished run uses.

_WORK: ContextVar[list[Callable[[], Any] | None] | None] = ContextVar("privrl_work",
                                                                      default=None)
_STOPPED: ContextVar[dict[str, str] | None] = ContextVar("privrl_stopped", default=None)


def work_so_far(build: Callable[[], list[Any]]) -> None:
    """A run loop's results so far: `build()` makes them (one per setting, the results a
    finished run returns, from the chunks completed) should the run fail from here on; outside
    `keeping_work`, nothing."""
    slot = _WORK.get()
    if slot is not None:
        slot[0] = build


@contextmanager
def work_on_failure(take: Callable[[], Any]) -> Iterator[None]:
    """For a run loop whose results live in other processes (a Ray run's actors: gone once the
    run shuts its cluster down): should the loop raise, `take()` reads its result so far from
    them there and then, and `work_so_far` keeps it for `keeping_work`, which writes it. Outside
    `keeping_work` nothing is read; when `take()` fails too, the failure goes on as it was."""
    try:
        yield
    except Exception:
        if _WORK.get() is not None:
            try:
                done = take()
            except Exception:
                done = None
            if done is not None:
                work_so_far(lambda: [done])
        raise


class RunFailedError(RuntimeError):
    """A run failed after some work; what it had done is written in `path`."""

    def __init__(self, path: Path, error: BaseException) -> None:
        super().__init__(f"the run failed ({type(error).__name__}: "
                         f"{' '.join(str(error).split())[:300]}); what it had done is kept in "
                         f"{path} (config.json, metrics so far, the policy so far, privacy.json "
                         "counting every release made)")
        self.path = path


@contextmanager
def keeping_work(make_dir: Callable[[], Path], write: Callable[[Any, Path], Any]
                 ) -> Iterator[None]:
    """Run a command's run (of one setting) inside: should it fail (an exception, not an
    interruption or a refusal of the user's input) after a chunk of work, the run loop's result
    so far is written by `write(result, make_dir())`, summary.json and privacy.json marked
    "stopped", and
    RunFailedError (from the failure) says where. With no work done, or when writing fails, the
    failure goes on as it was."""
    slot: list[Callable[[], Any] | None] = [None]
    token = _WORK.set(slot)
    try:
        yield
    except Exception as error:
        if slot[0] is None or _refusal(error):
            raise
        stopped = {"error": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}",
                   "note": "the run failed before its end; this is what it had done: the "
                           "metrics and policy of the work completed, and the privacy "
                           "record of every release made (a release in the failed step "
                           "counted as made)"}
        marker = _STOPPED.set(stopped)
        try:
            (result,) = slot[0]()
            path = make_dir()
            write(result, path)
        except Exception:
            raise error from None
        finally:
            _STOPPED.reset(marker)
        raise RunFailedError(path, error) from error
    finally:
        _WORK.reset(token)


def _refusal(error: Exception) -> bool:
    """Whether `error` is a refusal (an invalid input, a privacy budget) rather than a crash."""
    import sys

    ledger = sys.modules.get("privrl.privacy.ledger")
    return isinstance(error, (ConfigError, OutputDirError)) or (
        ledger is not None and isinstance(error, ledger.BudgetExceededError))
