"""Progress for people: a rich bar on a terminal, plain lines on stderr otherwise (one every few
seconds), fed by the runner's `Reporter` callbacks (run/reporting.py).

When the output is not a terminal (logs, CI, Slurm), a heartbeat line comes at least every
HEARTBEAT_S seconds while something is in progress (a model loading, a sample decoding), so a
single long sample of a large model never looks like a hang. The decoding loop has no callback of
its own: a timer thread beside it prints what the reporter last heard, and stops with `close`.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sjdbench.cli.console import err, line
from sjdbench.run.reporting import Reporter

PROGRESS_EVERY_S = 10.0  # plain progress lines (output not a terminal): at most one per this many seconds
HEARTBEAT_S = 15.0  # ... and at least one per this many seconds while something is in progress
TICK_S = 1.0  # how often the heartbeat thread looks


class CliReporter(Reporter):
    """The runner's progress (the callbacks of sjdbench.run.reporting.Reporter) as a bar on a terminal
    or as plain lines with a heartbeat; `quiet`: notes only. Call `close` when the work is over."""

    def __init__(self, bar: Progress | None, label: str, quiet: bool = False) -> None:
        self.bar, self.label, self.quiet = bar, label, quiet
        self.task = bar.add_task(label, total=None) if bar is not None else None
        self.started = time.perf_counter()
        self.last_line = time.perf_counter()
        self.first_done: Optional[int] = None
        self.busy, self.busy_since = "", 0.0  # what is in progress, for the heartbeat
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def plain(self) -> bool:
        return self.bar is None and not self.quiet

    def _say(self, text: str) -> None:
        with self._lock:
            self.last_line = time.perf_counter()
            line(text)

    def _working(self, what: str) -> None:
        """Something is in progress from now on (empty: nothing): the heartbeat speaks of it."""
        with self._lock:
            self.busy, self.busy_since = what, time.perf_counter()
        if what and self.plain and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="sjdbench-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                now = time.perf_counter()
                if self.busy and now - self.last_line >= HEARTBEAT_S:
                    self.last_line = now
                    line(f"{self.label}: {self.busy} ({now - self.busy_since:.0f} s so far)")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def note(self, text: str) -> None:
        self._say(f"note: {text}")

    def begin(self, label: str) -> None:
        self.label = label
        if self.bar is not None and self.task is not None:  # a bar has its task
            self.bar.update(self.task, description=label, completed=0, total=None)

    def model_loading(self, name: str, device: str) -> None:
        if self.plain:
            self._say(f"loading model {name} on {device} …")
        self._working(f"still loading model {name}")

    def model_loaded(self, name: str, seconds: float) -> None:
        self._working("")
        if self.plain:
            self._say(f"loaded {name} in {seconds:.1f} s")

    def sample_done(self, done: int, total: int, row: Optional[dict]) -> None:
        self._working(f"{done}/{total} samples; the next one is still decoding" if done < total else "")
        if self.bar is not None and self.task is not None:  # a bar has its task
            self.bar.update(self.task, completed=done, total=total)
            return
        if self.quiet:
            return
        now = time.perf_counter()
        if row is None:
            self.first_done, self.started = done, now
            self._say(f"{self.label}: {done}/{total} samples done, {total - done} to decode")
            return
        if now - self.last_line < PROGRESS_EVERY_S and done < total:
            return
        new = done - (self.first_done or 0)
        rate = (now - self.started) / max(new, 1)
        left = f", about {rate * (total - done):.0f} s left" if done < total else ""
        self._say(f"{self.label}: {done}/{total} samples ({rate:.2f} s/sample{left})")


def progress_bar(quiet: bool = False, transient: bool = True) -> Progress:
    """A bar on stderr, shown only on a terminal (and not with --quiet)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=quiet or not err.is_terminal,
        transient=transient,
    )
