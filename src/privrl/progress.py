"""Progress a person can read, one implementation for every system's run (issue 53 item 5).

A run reports `progress(done, total)` as it goes, and where it can also the figures a person
wants to see: the mean return so far and the ε spent (`emit`). `RunProgress` shows them:

* in a terminal, a rich bar (units done of the total, mean return, ε spent, elapsed, ETA);
* without one (nohup, a batch job, a file), one plain line every `every` seconds, and at the end;
* before the first report, the run is compiling: a "compiling …" line, and when the first
  report comes, how long compiling (with the first chunk of work) took.

The count never passes its total (a run that overshoots by a round shows total/total). The
Python API takes `progress=` as a callback, or True for this display on stderr (`as_progress`).
Nothing here imports JAX.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["DEFAULT_EVERY", "RunProgress", "as_progress", "emit", "figures_text", "record_epsilon",
           "spent_max"]

DEFAULT_EVERY = 30.0  # seconds between two lines without a terminal


def emit(progress: Callable[..., Any] | None, done: float, total: float | None,
         mean_return: float | None = None, epsilon: float | None = None,
         description: str | None = None) -> None:
    """Report to `progress`: with the figures where it takes them (`RunProgress`; and what is
    running, `description`, where given), else as `progress(done, total)` (a user's
    two-argument callback)."""
    if progress is None:
        return
    if getattr(progress, "takes_figures", False):
        named = {} if description is None else {"description": description}
        progress(done, total, mean_return=mean_return, epsilon=epsilon, **named)
    else:
        progress(done, total)


def spent_max(ledger: Any) -> float | None:
    """The most ε any one unit of a `PrivacyLedger` has spent so far (its composition's), for
    progress; None before any release."""
    value = ledger.summary()["per_agent_epsilon"]["max"]
    return None if value is None else float(value)


def record_epsilon(record: dict[str, Any]) -> float | None:
    """The ε a privacy record (privacy.json, `privrl.privacy.record.privacy_record`) states of
    the releases it counts, for progress; None where it states no guarantee."""
    guarantee = record.get("guarantee")
    return None if not guarantee else guarantee.get("epsilon")


def figures_text(mean_return: float | None, epsilon: float | None) -> str:
    """"mean return 21.3, ε spent 2.5" (the parts that are known)."""
    parts = []
    if mean_return is not None and math.isfinite(mean_return):
        parts.append(f"mean return {mean_return:.4g}")
    if epsilon is not None:
        parts.append("ε spent ∞" if math.isinf(epsilon) else f"ε spent {epsilon:.4g}")
    return ", ".join(parts)


class RunProgress:
    """The display (module doc). Callable as `progress(done, total, mean_return=, epsilon=)`,
    and as a rich Progress's `update(task, completed=, total=, description=)` for the callers
    written for one. `live`: a terminal bar (default: whether the console is a terminal)."""

    takes_figures = True

    def __init__(self, console: Any, show: bool = True, description: str = "training",
                 unit: str = "", every: float = DEFAULT_EVERY, live: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not every > 0:
            raise ValueError(f"every must be > 0 seconds, got {every!r}")
        self.console, self.show, self.description, self.unit = console, show, description, unit
        self.every, self.clock = float(every), clock
        self.live = bool(getattr(console, "is_terminal", False)) if live is None else live
        self._bar: Any = None
        self._task: Any = None
        self._start = self._last = 0.0
        self._compiled = False
        self._state: tuple[float, float | None, str] = (0.0, None, "")

    # --- the context ------------------------------------------------------------------------
    def __enter__(self) -> RunProgress:
        self._start = self._last = self.clock()
        if not self.show:
            return self
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(),
                MofNCompleteColumn(), TextColumn(self.unit), TextColumn("{task.fields[figures]}"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=self.console)
            self._bar.__enter__()
            self._task = self._bar.add_task("compiling …", total=None, figures="")
        else:
            self._print(f"{self.description}: compiling …")
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.show:
            return
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None
        elif exc[0] is None and self._state[1] is not None:
            self._line()  # the last figures, whatever the interval

    # --- reports ----------------------------------------------------------------------------
    def __call__(self, done: float, total: float | None, mean_return: float | None = None,
                 epsilon: float | None = None, description: str | None = None) -> None:
        if total is not None:
            done = min(done, total)
        figures = figures_text(mean_return, epsilon) or self._state[2]
        self._state = (done, total, figures)
        if description is not None:
            self.description = description
        if not self.show:
            return
        now = self.clock()
        if not self._compiled:
            self._compiled = True
            self._print(f"compiled (and ran the first chunk) in {now - self._start:.1f} s")
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total, figures=figures,
                             description=self.description)
        elif now - self._last >= self.every:
            self._last = now
            self._line()

    def update(self, task: Any = None, completed: float | None = None,
               total: float | None = None, description: str | None = None, **_: Any) -> None:
        """A rich Progress's update, for callers written for one (None: unchanged)."""
        self(self._state[0] if completed is None else completed,
             total if total is not None else self._state[1], description=description)

    def _line(self) -> None:
        done, total, figures = self._state
        count = f"{done:g}" + ("" if total is None else f"/{total:g}")
        unit = f" {self.unit}" if self.unit else ""
        tail = f", {figures}" if figures else ""
        self._print(f"{self.description}: {count}{unit}{tail}, "
                    f"{self.clock() - self._start:.0f} s")

    def _print(self, text: str) -> None:
        console = self._bar.console if self._bar is not None else self.console
        console.print(text, markup=False, highlight=False)


@contextmanager
def as_progress(progress: Callable[..., Any] | bool | None, description: str = "training",
                unit: str = "") -> Iterator[Callable[..., Any] | None]:
    """The API's `progress=`: a callback as it is, True for a `RunProgress` on stderr,
    None/False for none."""
    if progress is True:
        from rich.console import Console

        with RunProgress(Console(stderr=True, file=sys.stderr), True, description,
                         unit) as shown:
            yield shown
    elif progress is False or progress is None:
        yield None
    elif callable(progress):
        yield progress
    else:
        raise TypeError(f"progress must be a callback or a bool, got {type(progress).__name__}")
