"""`sjdbench run`: decode every prompt of a data set with one model and decoder; resumable."""

from __future__ import annotations

from typing import List, Optional

import typer

from sjdbench.cli.console import err, fail, interrupted, line, note, os_failure, out, say, table
from sjdbench.cli.progress import CliReporter, progress_bar
from sjdbench.cli.tables import latency_warnings, summary_table
from sjdbench.errors import Interrupted, UserError

OVERRIDES_HELP = "Hydra overrides, e.g. model=toy decoder=sjd_vp decoder.window=32 data=smoke seed=0"


def run(
    overrides: Optional[List[str]] = typer.Argument(
        None, help=OVERRIDES_HELP, show_default=False, metavar="KEY=VALUE..."
    ),
    show_config: bool = typer.Option(False, "--show-config", help="Print the composed config and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or progress lines."),
) -> None:
    """Decode every prompt of a data set with one model and decoder; resumable."""
    from sjdbench.cli.eval import reject_eval_words
    from sjdbench.cli.migrate import note_legacy_runs
    from sjdbench.config.resolve import resolve_run
    from sjdbench.config.schema import compose_run, to_yaml
    from sjdbench.run.runner import execute_runs

    try:
        reject_eval_words(overrides or [])
        config = compose_run(overrides or [], typed=True)
        if show_config:
            out.print(to_yaml(config), highlight=False, markup=False)
            return
        spec = resolve_run(config)
        for text in [*spec.decoder.unused_settings(), *spec.notes]:
            note(text)
        note_legacy_runs(spec.root)
        with progress_bar(quiet) as bar:
            name = f"{config.model.name} / {spec.label}"
            reporter = CliReporter(bar if err.is_terminal else None, name, quiet=quiet)
            try:
                outcome = execute_runs([spec], None, reporter, "single")[0]
            finally:
                reporter.close()
        speed, marks = _speedup_vs_ar(spec.root, outcome.run_id)
    except UserError as error:
        fail(str(error))
    except Interrupted as error:
        interrupted(error)
    except OSError as error:
        os_failure(error)
    summary = outcome.summary
    say(f"run {outcome.run_id} {outcome_text(outcome)} -> {outcome.run_dir}; {held_text(summary)}")
    table(summary_table("summary", [summary], speed, marks))
    for text in latency_warnings([summary]):
        line(text)


def outcome_text(outcome) -> str:
    """What this command did to the run, in words that do not claim more than it did."""
    if outcome.status == "done":
        return "already stored (nothing decoded)"
    return f"{outcome.status}: {outcome.new_samples} new sample{'s' if outcome.new_samples != 1 else ''}"


def held_text(summary: dict) -> str:
    """How much of the prompt set the run holds: "complete" only when it holds all of it."""
    held, wanted = summary.get("n_samples", 0), summary.get("n_wanted")
    whole = "complete: the whole set" if summary.get("complete") else "not complete: a data.limit selection"
    return f"{held} of {wanted} samples of the prompt set stored; {whole}"


def _speedup_vs_ar(root, run_id: str):
    """({run_id: Speedup}, {run_id: marks}) when the store holds the run's AR baseline (another
    run), else (None, None): the table then has no speedup columns."""
    from sjdbench.results.pairing import as_speedup
    from sjdbench.results.runs import speedups

    pairing = speedups(root, [run_id]).get(run_id)
    if not pairing or pairing["ar_run_id"] in (None, run_id) or pairing["speedup"] is None:
        return None, None
    marks = ("" if pairing["paired"] else "~") + ("!" if pairing["busy_samples"] else "")
    return {run_id: as_speedup(pairing)}, {run_id: marks}
