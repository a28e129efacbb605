"""`sjdbench` command line: collects key=value overrides and prints; the library does the work.

Every mistake in the input ends in one line on stderr (`error: what was wrong; how to fix it`),
exit code 2, before any model loads; Ctrl-C ends with "interrupted after k/n samples" and exit
code 130, with every finished sample on disk. On a terminal a progress bar shows; otherwise (logs,
CI, Slurm) progress goes to stderr as plain lines, one every few seconds.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from sjdbench.errors import Interrupted, UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Benchmark speculative Jacobi decoding of autoregressive text-to-image models.",
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,  # plain help and errors: no boxes in logs, no "<bool>" after flags
    pretty_exceptions_enable=False,
)
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 132)  # logs: tables whole, not cut at 80
err_console = Console(stderr=True, soft_wrap=True)  # one physical line per message, even in logs

OVERRIDES_HELP = "Hydra overrides, e.g. model=toy decoder=sjd_vp decoder.window=32 data=smoke seed=0"
PROGRESS_EVERY_S = 10.0  # plain progress lines (output not a terminal): at most one per this many seconds


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"error: {message}", highlight=False, markup=False)
    raise typer.Exit(code)


def interrupted(error: Interrupted) -> None:
    err_console.print(
        f"interrupted after {error.done}/{error.total} samples — re-run the same command to resume",
        highlight=False,
        markup=False,
    )
    raise typer.Exit(130)


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def summary_table(title: str, summaries: list[dict], speedups: dict | None = None) -> Table:
    """The run's headline numbers; narrow enough for an 80-column terminal. Latencies taken on a busy
    machine are marked `!`; speedups not timed side by side with AR are marked `~`."""
    from rich import box

    legend = (
        "step x = AR tokens / NFE; accept = accepted / verified drafts (acc.old: without fresh init "
        "drafts); len = tokens per iteration; growth = accepted drafts that rose N iterations running; "
        "sec = latency per image (! = some timed on a busy machine)"
    )
    if speedups is not None:
        legend += "; vs AR = AR latency / latency, geometric mean over prompts (~ = not timed side by side with AR)"
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, caption=legend, caption_justify="left"
    )
    columns = [
        ("decoder", "decoder", 0),
        ("W", "window", 0),
        ("n", "n_samples", 0),
        ("NFE", "nfe_mean", 1),
        ("step x", "step_compression", 2),
        ("accept", "acceptance_rate", 2),
        ("acc.old", "acceptance_rate_no_fresh", 2),
        ("len", "mean_accepted_length", 2),
        ("growth", "growth_share", 2),
        ("sec", "latency_s_mean", 3),
    ]
    headers = [h for h, _, _ in columns] + (["vs AR"] if speedups is not None else [])
    for header in headers:
        table.add_column(header, justify="left" if header == "decoder" else "right", no_wrap=True)
    for summary in summaries:
        cells = [_fmt(summary.get(key), digits) for _, key, digits in columns]
        if summary.get("busy_samples"):
            cells[-1] += "!"
        if speedups is not None:
            entry = speedups.get(summary.get("run_id"))
            if entry and entry.get("speedup") is not None:
                cells.append(
                    f"{entry['speedup']:.2f}"
                    + ("" if entry["paired"] else "~")
                    + ("!" if entry["busy_samples"] else "")
                )
            else:
                cells.append("-")
        table.add_row(*cells)
    return table


def latency_warnings(summaries: list[dict]) -> list[str]:
    """One line naming the runs whose latencies were taken on a busy machine (none: no line)."""
    flagged = [s for s in summaries if s.get("busy_samples")]
    if not flagged:
        return []
    busy = sum(s["busy_samples"] for s in flagged)
    total = sum(s.get("n_samples") or 0 for s in flagged)
    load = max((s.get("load_1m_max") or 0) for s in flagged)
    names = ", ".join(str(s.get("decoder")) for s in flagged)
    return [
        f"warning: {busy} of {total} samples ({names}) were timed while the machine was busy (load average up to "
        f"{load}, above the cores available); those latencies are not to be trusted: re-time on a quiet machine "
        "(see README, Reproducibility and performance)"
    ]


class CliReporter:
    """Progress for people: a rich bar on a terminal, plain lines on stderr otherwise."""

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

    def _line(self, text: str) -> None:
        err_console.print(text, highlight=False, markup=False)

    def model_loading(self, name: str, device: str) -> None:
        if self.bar is None:
            self._line(f"loading model {name} on {device} …")

    def model_loaded(self, name: str, seconds: float) -> None:
        if self.bar is None:
            self._line(f"loaded {name} in {seconds:.1f} s")

    def sample_done(self, done: int, total: int, row: Optional[dict]) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)
            return
        now = time.perf_counter()
        if row is None:
            self.first_done, self.started = done, now
            self._line(f"{self.label}: {done}/{total} samples done, {total - done} to decode")
            self.last_line = now
            return
        if now - self.last_line < PROGRESS_EVERY_S and done < total:
            return
        self.last_line = now
        new = done - (self.first_done or 0)
        rate = (now - self.started) / max(new, 1)
        left = f", about {rate * (total - done):.0f} s left" if done < total else ""
        self._line(f"{self.label}: {done}/{total} samples ({rate:.2f} s/sample{left})")


def _progress_bar(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=quiet or not err_console.is_terminal,
        transient=True,
    )


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    overrides: Optional[List[str]] = typer.Argument(
        None, help=OVERRIDES_HELP, show_default=False, metavar="KEY=VALUE..."
    ),
    show_config: bool = typer.Option(False, "--show-config", help="Print the composed config and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or progress lines."),
) -> None:
    """Decode every prompt of a data set with one model and decoder; resumable."""
    from sjdbench.config import compose_run, decoder_spec, results_root, to_yaml
    from sjdbench.identity import label
    from sjdbench.runner import Reporter, execute

    try:
        from sjdbench.cli_eval import reject_eval_words

        reject_eval_words(overrides or [])
        config = compose_run(overrides or [])
        if show_config:
            console.print(to_yaml(config), highlight=False, markup=False)
            return
        for note in decoder_spec(config).unused_settings():
            err_console.print(f"note: {note}", highlight=False, markup=False)
        note_legacy_runs(results_root(config))
        with _progress_bar(quiet) as bar:
            name = f"{config.model.name} / {label(config)}"
            reporter = Reporter() if quiet else CliReporter(bar if err_console.is_terminal else None, name)
            outcome = execute(config, progress=reporter)
    except UserError as error:
        fail(str(error))
    except Interrupted as error:
        interrupted(error)
    except OSError as error:  # an I/O failure outside the store's own checks
        fail(f"{error.strerror or error}{f': {error.filename}' if error.filename else ''}")
    summary = outcome.summary
    verb = {"complete": "already complete (nothing redone)", "finished": "finished", "partial": "partial"}[
        outcome.status
    ]
    of_set = f"; {summary.get('n_samples', 0)} of {summary.get('n_wanted')} samples of the prompt set stored"
    console.print(
        f"run {outcome.run_id} {verb}: {outcome.new_samples} new samples -> {outcome.run_dir}{of_set}", highlight=False
    )
    console.print(summary_table("summary", [summary]))
    for line in latency_warnings([summary]):
        err_console.print(line, highlight=False, markup=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sweep(
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="Grid in Hydra's override grammar: decoder=sjd,sjd_vp "
        "decoder.window=16,32,64 seed=range(0,3) decoder=glob(sjd*) +sweep=window",
        show_default=False,
        metavar="KEY=VALUES...",
    ),
    executor: str = typer.Option("local", "--executor", "-e", help="local | submitit | ray"),
    timing: Optional[str] = typer.Option(
        None,
        "--timing",
        help="paired (AR and each decoder interleaved prompt by prompt; "
        "the local default) | single (one run after another; the default for submitit "
        "and ray). Same as sweep.timing=...",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the grid and which runs exist; run nothing."),
    no_baseline: bool = typer.Option(False, "--no-baseline", help="Do not add the AR baseline runs."),
    cluster: Optional[str] = typer.Option(
        None,
        "--cluster",
        help="submitit cluster: slurm (the default; refused when no "
        "Slurm answers) | local | debug (both on this machine)",
    ),
    partition: Optional[str] = typer.Option(None, "--partition", help="Slurm partition."),
    gpus_per_task: Optional[int] = typer.Option(
        None, "--gpus-per-task", help="GPUs per job (default: 1 on Slurm; elsewhere 1 for CUDA runs, 0 for CPU runs)."
    ),
    cpus_per_task: int = typer.Option(8, "--cpus-per-task", help="CPUs per Slurm job."),
    timeout_min: int = typer.Option(240, "--timeout-min", help="Time limit per job (Slurm, submitit local)."),
    array_parallelism: int = typer.Option(64, "--array-parallelism", help="Max Slurm array tasks at once."),
    evaluate: bool = typer.Option(
        False,
        "--eval",
        help="Score each run when it finishes (eval=<preset>, eval.<key>=...; "
        "default: by model and data) and add the seed+1 AR run the noise floor needs.",
    ),
) -> None:
    """Run a grid of configurations (plus their AR baselines); re-running resumes."""
    from sjdbench.cli_eval import SweepScorer, is_eval_word
    from sjdbench.sweep import build_plan, execute_sweep, latency_comparisons, run_status

    try:
        on_slurm = executor == "submitit" and (cluster or "slurm") == "slurm"
        remote_gpus = (1 if gpus_per_task is None else gpus_per_task) if on_slurm else None
        eval_words = [w for w in overrides or [] if is_eval_word(w)]
        plan = build_plan(
            [w for w in overrides or [] if not is_eval_word(w)], add_baselines=not no_baseline, remote_gpus=remote_gpus
        )
        scorer = SweepScorer(plan, eval_words) if evaluate or eval_words else None
        plan = scorer.plan if scorer else plan
        note_legacy_runs(plan.directory.parent.parent)
        if dry_run:
            table = Table(title=f"sweep {plan.sweep_id}: {len(plan.points)} runs", title_justify="left")
            for header in ("run", "status", "decoder", "overrides"):
                table.add_column(header)
            for point in plan.points:
                typed = point.label + ("  [AR baseline]" if point.baseline else "")
                table.add_row(point.run_id, run_status(point), point.decoder_label, typed)
            console.print(table)
            return
        if gpus_per_task is None:
            cuda = any(
                p.config.device.startswith("cuda") or (p.config.device == "auto" and _cuda_visible())
                for p in plan.points
            )
            gpus_per_task = 1 if on_slurm or cuda else 0
        slurm = {
            "partition": partition,
            "gpus_per_task": gpus_per_task,
            "timeout_min": timeout_min,
            "array_parallelism": array_parallelism,
            "cpus_per_task": cpus_per_task,
        }
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err_console,
            disable=not err_console.is_terminal,
        ) as bar:
            task = bar.add_task("sweep", total=len(plan.points))
            reporter = CliReporter(bar if err_console.is_terminal else None, "sweep")
            count = {"n": 0}

            def tick(result) -> None:
                count["n"] += 1
                bar.advance(task)
                if not err_console.is_terminal:
                    err_console.print(
                        f"sweep {plan.sweep_id}: {count['n']}/{len(plan.points)} runs; {result.run_id} {result.status}",
                        highlight=False,
                        markup=False,
                    )
                if scorer:
                    scorer.on_result(result)

            results = execute_sweep(
                plan, executor, tick=tick, cluster=cluster, slurm=slurm, timing=timing, reporter=reporter
            )
        if scorer:
            scorer.finish()
        speedups = latency_comparisons(plan)
    except UserError as error:
        fail(str(error))
    except Interrupted as error:
        interrupted(error)
    except KeyboardInterrupt:
        err_console.print(
            "interrupted — re-run the same command to resume; finished samples are saved", highlight=False, markup=False
        )
        raise typer.Exit(130) from None
    except OSError as error:  # an I/O failure outside the store's own checks
        fail(f"{error.strerror or error}{f': {error.filename}' if error.filename else ''}")
    counts = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    console.print(
        f"sweep {plan.sweep_id}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" -> {plan.directory}",
        highlight=False,
    )
    from sjdbench.store import RunStore

    summaries = [s for s in (RunStore(plan.directory.parent.parent, p.run_id).summary() for p in plan.points) if s]
    console.print(summary_table("runs", summaries, speedups))
    for line in latency_warnings(summaries):
        err_console.print(line, highlight=False, markup=False)
    unpaired = sorted({entry["decoder"] for entry in speedups.values() if not entry["paired"]})
    if unpaired:
        err_console.print(
            f"warning: the speedups of {', '.join(unpaired)} compare latencies timed apart from AR's "
            "(machine state may differ); rows decoded with --timing paired are compared side by side",
            highlight=False,
            markup=False,
        )
    failed = [r for r in results if r.status == "failed"]
    for result in failed:
        err_console.print(f"failed {result.run_id}: {result.error}", highlight=False, markup=False)
    if failed:
        raise typer.Exit(1)


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def note_legacy_runs(root) -> None:
    """One line when the store holds runs keyed by an older sjdbench (they are not resumed)."""
    from sjdbench.migrate import legacy_runs

    count = len(legacy_runs(root))
    if count:
        err_console.print(
            f"note: {root} holds {count} run(s) from an older sjdbench, keyed differently and not "
            f"resumed; `sjdbench migrate --results-dir {root}` re-keys them",
            highlight=False,
            markup=False,
        )


@app.command()
def migrate(
    results_dir: Optional[str] = typer.Option(
        None, "--results-dir", help="Results root (default: results or $SJDBENCH_RESULTS)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would move; change nothing."),
) -> None:
    """Re-key runs written by an older sjdbench under today's run ids (nothing is lost or mixed)."""
    import os
    from pathlib import Path

    from sjdbench.migrate import migrate_store

    root = Path(results_dir or os.environ.get("SJDBENCH_RESULTS") or "results")
    try:
        moves = migrate_store(root, dry_run=dry_run)
    except UserError as error:
        fail(str(error))
    for move in moves:
        console.print(f"{move.old_id} -> {move.new_id or '-'}: {move.status}", highlight=False)
    console.print(f"{len(moves)} run(s) from an older sjdbench in {root}", highlight=False)


@app.command("list")
def list_choices(
    group: Optional[str] = typer.Argument(None, help="A config group, e.g. decoder. Omit for all."),
) -> None:
    """List config groups and their choices (decoder parts with their knobs and defaults)."""
    from sjdbench.config import available_groups, group_choices
    from sjdbench.decoding.registry import default_spec

    try:
        groups = [group.replace(".", "/")] if group else available_groups()
        for name in groups:
            choices = group_choices(name)
            if name.startswith("decoder/"):
                kind = name.split("/")[1]
                described = []
                for choice in choices:
                    knobs = default_spec(kind, choice).knobs()
                    described.append(
                        choice + (f" ({', '.join(f'{k}={v}' for k, v in knobs.items())})" if knobs else "")
                    )
                choices = described
            console.print(f"{name}: {', '.join(choices)}", highlight=False, markup=False)
    except UserError as error:
        fail(str(error))


def _mount_report() -> None:
    from sjdbench.cli_report import report

    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(report)


_mount_report()


def _mount_evaluation() -> None:
    from sjdbench.cli_eval import data_app, eval_command

    app.command("eval", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(eval_command)
    app.add_typer(data_app, name="data", help="Public prompt sets: download with a pinned checksum.")


_mount_evaluation()


def _mount_optional() -> None:
    try:
        from sjdbench.toy_cli import toy_app
    except ImportError:
        return
    app.add_typer(toy_app, name="toy", help="Train the embedded toy model and its toy CLIP.")


_mount_optional()


def _click_errors():
    try:
        from typer._click import exceptions  # typer >= 0.20 carries its own click
    except ImportError:
        from click import exceptions
    return exceptions


def main() -> None:
    """The console script: usage errors (unknown option, missing value) also end in one line."""
    errors = _click_errors()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = app(standalone_mode=False)
    except errors.UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `sjdbench`: the help, not an error
            error.show()
            sys.exit(0)
        words = [w for w in sys.argv[1:2] if w in ("run", "sweep", "list", "migrate", "toy")]
        err_console.print(
            f"error: {error.format_message()} (see `sjdbench {' '.join(words + ['--help'])}`)",
            highlight=False,
            markup=False,
        )
        code = 2
    except errors.ClickException as error:
        err_console.print(f"error: {error.format_message()}", highlight=False, markup=False)
        code = error.exit_code
    except (typer.Abort, getattr(errors, "Abort", typer.Abort)):
        code = 130
    except KeyboardInterrupt:
        err_console.print(
            "interrupted — re-run the same command to resume; finished samples are saved", highlight=False, markup=False
        )
        code = 130
    sys.exit(code if isinstance(code, int) else 0)
