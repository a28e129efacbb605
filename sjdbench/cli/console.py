"""The command line's one console pair and its one way to fail.

Results go to stdout (`out`); errors, notes, warnings and progress to stderr (`err`), each message
one physical line even when the output is not a terminal (logs, CI, Slurm). Every mistake in the
input ends in `fail`: `error: what was wrong; how to fix it` on stderr and exit code 2.
"""

from __future__ import annotations

import io
import sys
from typing import NoReturn

import typer
from rich.console import Console, RenderableType
from rich.measure import Measurement

from sjdbench.errors import Interrupted

out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 132)  # logs: tables whole, not cut at 80
err = Console(stderr=True, soft_wrap=True)  # one physical line per message, even in logs


def table(renderable: RenderableType) -> None:
    """A table on stdout: on a terminal at the terminal's width; otherwise (a log, a pipe, CI) at the
    table's own width, so that every row is one line and no column is cut to '…' (rich fits a table
    to the console's width by cutting cells, and a log has no width of its own)."""
    if out.is_terminal:
        out.print(renderable)
        return
    probe = Console(width=100_000, file=io.StringIO())
    natural = Measurement.get(probe, probe.options, renderable).maximum
    Console(width=max(natural, 80), soft_wrap=True, file=sys.stdout).print(renderable)


def line(text: str) -> None:
    """One plain line on stderr (no markup, no highlighting)."""
    err.print(text, highlight=False, markup=False)


def say(text: str) -> None:
    """One plain line on stdout."""
    out.print(text, highlight=False, markup=False)


def note(text: str) -> None:
    line(f"note: {text}")


def warn(text: str) -> None:
    line(f"warning: {text}")


def fail(message: str, code: int = 2) -> NoReturn:
    """End the command: `error: <message>` (its lines joined into one) and exit `code` (2: bad input)."""
    joined = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    line(f"error: {joined}")
    raise typer.Exit(code)


def interrupted(error: Interrupted) -> NoReturn:
    line(f"interrupted after {error.done}/{error.total} samples — re-run the same command to resume")
    raise typer.Exit(130)


def interrupted_sweep() -> NoReturn:
    line("interrupted — re-run the same command to resume; finished samples are saved")
    raise typer.Exit(130)


def os_failure(error: OSError) -> NoReturn:
    """An I/O failure outside the store's own checks, as one line."""
    fail(f"{error.strerror or error}{f': {error.filename}' if error.filename else ''}")
