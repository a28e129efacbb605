"""Progress for people: a rich bar on a terminal, plain lines on stderr otherwise (one every few
seconds), fed by the runner's `Reporter` callbacks."""

from __future__ import annotations

import time
from typing import Optional

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sjdbench.cli.console import err, line

PROGRESS_EVERY_S = 10.0  # plain progress lines (output not a terminal): at most one per this many seconds


class CliReporter:
    """The runner's progress (the callbacks of sjdbench.run.runner.Reporter) as a bar on a terminal
    or as plain lines."""

    def __init__(self, bar: Progress | None, label: str) -> None:
        self.bar, self.label = bar, label
        self.task = bar.add_task(label, total=None) if bar is not None else None
        self.started = time.perf_counter()
        self.last_line = 0.0
        self.first_done: Optional[int] = None

    def begin(self, label: str) -> None:
        self.label = label
        if self.bar is not None:
            self.bar.update(self.task, description=label, completed=0, total=None)

    def model_loading(self, name: str, device: str) -> None:
        if self.bar is None:
            line(f"loading model {name} on {device} …")

    def model_loaded(self, name: str, seconds: float) -> None:
        if self.bar is None:
            line(f"loaded {name} in {seconds:.1f} s")

    def sample_done(self, done: int, total: int, row: Optional[dict]) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)
            return
        now = time.perf_counter()
        if row is None:
            self.first_done, self.started = done, now
            line(f"{self.label}: {done}/{total} samples done, {total - done} to decode")
            self.last_line = now
            return
        if now - self.last_line < PROGRESS_EVERY_S and done < total:
            return
        self.last_line = now
        new = done - (self.first_done or 0)
        rate = (now - self.started) / max(new, 1)
        left = f", about {rate * (total - done):.0f} s left" if done < total else ""
        line(f"{self.label}: {done}/{total} samples ({rate:.2f} s/sample{left})")


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
