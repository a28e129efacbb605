"""`sjdbench` command line: collects key=value overrides and prints; the library does the work.

Every command is one file of this package and is registered here, in `build_app`, and nowhere
else; a command module imports nothing heavy until its command runs, so `sjdbench --help` and
listing stay fast. Every mistake in the input ends in one line on stderr (`error: what was wrong;
how to fix it`, sjdbench.cli.console.fail), exit code 2, before any model loads; Ctrl-C ends with
"interrupted after k/n samples" and exit code 130, with every finished sample on disk. On a
terminal a progress bar shows; otherwise (logs, CI, Slurm) progress goes to stderr as plain lines,
one every few seconds.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, cast

import typer

from sjdbench.cli import data, listing, migrate, phrases, report, run, sweep, toy
from sjdbench.cli import eval as scoring
from sjdbench.cli.console import line

EXTRA_WORDS = {"allow_extra_args": True, "ignore_unknown_options": True}  # key=value words pass through


def build_app() -> typer.Typer:
    """The `sjdbench` app with every command and command group."""
    app = typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        help="Benchmark speculative Jacobi decoding of autoregressive text-to-image models.",
        context_settings={"help_option_names": ["-h", "--help"]},
        rich_markup_mode=None,  # plain help and errors: no boxes in logs, no "<bool>" after flags
        pretty_exceptions_enable=False,
    )
    app.command("run", context_settings=EXTRA_WORDS)(run.run)
    app.command("sweep", context_settings=EXTRA_WORDS)(sweep.sweep)
    app.command("eval", context_settings=EXTRA_WORDS)(scoring.eval_command)
    app.command("report", context_settings=EXTRA_WORDS)(report.report)
    app.command("list")(listing.list_choices)
    app.command("migrate", context_settings=EXTRA_WORDS)(migrate.migrate)

    data_app = typer.Typer(help="Public prompt sets: download with a pinned checksum.", no_args_is_help=True)
    data_app.command("fetch")(data.fetch_command)
    app.add_typer(data_app, name="data", help="Public prompt sets: download with a pinned checksum.")

    toy_app = typer.Typer(help="The embedded toy model: training and calibration.", no_args_is_help=True)
    toy_app.command("train")(toy.train)
    toy_app.command("train-clip")(toy.train_clip)
    toy_app.command("train-drafter", context_settings=EXTRA_WORDS)(toy.train_drafter)
    toy_app.command("calibrate")(toy.calibrate)
    app.add_typer(toy_app, name="toy", help="Train the embedded toy model and its toy CLIP.")

    phrases_app = typer.Typer(help="Visual phrases for the phrases verifier (SJD-PV).", no_args_is_help=True)
    phrases_app.command("mine", context_settings=EXTRA_WORDS)(phrases.mine)
    app.add_typer(phrases_app, name="phrases", help="Mine a model's visual phrases from its AR runs.")
    return app


app = build_app()


def command_names() -> list[str]:
    """Every command and command group of the app, as typed after `sjdbench`."""
    # every command is registered with its function (`app.command(...)(function)`)
    names = [c.name or cast(Callable[..., Any], c.callback).__name__ for c in app.registered_commands]
    return names + [g.name for g in app.registered_groups if g.name]


def _click_errors() -> Any:
    """The click exceptions module typer raises: its own copy (typer >= 0.20) or click's."""
    try:
        from typer._click import exceptions as typer_click  # typer >= 0.20 carries its own click

        return typer_click
    except ImportError:
        from click import exceptions as click_exceptions

        return click_exceptions


class OneLine(logging.Formatter):
    """A library's log record as the command line's other lines: `warning: ...` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        text = " ".join(part.strip() for part in record.getMessage().splitlines() if part.strip())
        return f"{record.levelname.lower()}: {text}"


def main() -> None:
    """The console script: usage errors (unknown option, missing value) also end in one line."""
    errors = _click_errors()
    handler = logging.StreamHandler()
    handler.setFormatter(OneLine())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        code = app(standalone_mode=False)
    except errors.UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `sjdbench`: the help, not an error
            error.show()
            sys.exit(0)
        words = [w for w in sys.argv[1:2] if w in command_names()]
        line(f"error: {error.format_message()} (see `sjdbench {' '.join(words + ['--help'])}`)")
        code = 2
    except errors.ClickException as error:
        line(f"error: {error.format_message()}")
        code = error.exit_code
    except (typer.Abort, getattr(errors, "Abort", typer.Abort)):
        code = 130
    except KeyboardInterrupt:
        line("interrupted — re-run the same command to resume; finished samples are saved")
        code = 130
    sys.exit(code if isinstance(code, int) else 0)
