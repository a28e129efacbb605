"""`sjdbench` command line: collects key=value overrides and prints; the library does the work."""
from __future__ import annotations

import logging
import sys
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from sjdbench.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Benchmark speculative Jacobi decoding of autoregressive text-to-image models.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one physical line per message, even in logs

OVERRIDES_HELP = "Hydra overrides, e.g. model=toy decoder=sjd_vp decoder.window=32 data=smoke seed=0"


def fail(message: str) -> None:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(2)


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def summary_table(title: str, summaries: list[dict]) -> Table:
    """The run's headline numbers; narrow enough for an 80-column terminal."""
    from rich import box

    legend = ("step x = AR tokens / NFE; accept = accepted / verified drafts (acc.old: without fresh init "
              "drafts); len = tokens per iteration; growth = accepted drafts that rose N iterations running; "
              "sec = latency per image")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, caption=legend,
                  caption_justify="left")
    columns = [
        ("decoder", "decoder", 0), ("W", "window", 0), ("n", "n_samples", 0), ("NFE", "nfe_mean", 1),
        ("step x", "step_compression", 2), ("accept", "acceptance_rate", 2),
        ("acc.old", "acceptance_rate_no_fresh", 2), ("len", "mean_accepted_length", 2),
        ("growth", "growth_share", 2), ("sec", "latency_s_mean", 3),
    ]
    for header, _, _ in columns:
        table.add_column(header, justify="left" if header == "decoder" else "right", no_wrap=True)
    for summary in summaries:
        table.add_row(*[_fmt(summary.get(key), digits) for _, key, digits in columns])
    return table


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    show_config: bool = typer.Option(False, "--show-config", help="Print the composed config and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Decode every prompt of a data set with one model and decoder; resumable."""
    from sjdbench.config import compose_run, decoder_spec, to_yaml
    from sjdbench.identity import label
    from sjdbench.runner import execute

    try:
        from sjdbench.cli_eval import reject_eval_words

        reject_eval_words(overrides or [])
        config = compose_run(overrides or [])
        if show_config:
            console.print(to_yaml(config), highlight=False, markup=False)
            return
        for note in decoder_spec(config).unused_settings():
            err_console.print(f"note: {note}", highlight=False, markup=False)
        from sjdbench.config import results_root

        note_legacy_runs(results_root(config))
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), console=console, disable=quiet or not console.is_terminal, transient=True,
        ) as bar:
            task = bar.add_task(f"{config.model.name} / {label(config)}", total=None)

            def report(done: int, total: int, row) -> None:
                bar.update(task, completed=done, total=total)

            outcome = execute(config, progress=report)
    except UserError as error:
        fail(str(error))
    verb = {"complete": "already complete (nothing redone)", "finished": "finished", "partial": "partial"}[outcome.status]
    console.print(f"run {outcome.run_id} {verb}: {outcome.new_samples} new samples -> {outcome.run_dir}", highlight=False)
    console.print(summary_table("summary", [outcome.summary]))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sweep(
    overrides: Optional[List[str]] = typer.Argument(None, help="Grid in Hydra's override grammar: decoder=sjd,sjd_vp "
                                                    "decoder.window=16,32,64 seed=range(0,3) decoder=glob(sjd*) +sweep=window",
                                                    show_default=False),
    executor: str = typer.Option("local", "--executor", "-e", help="local | submitit | ray"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the grid and which runs exist; run nothing."),
    no_baseline: bool = typer.Option(False, "--no-baseline", help="Do not add the AR baseline runs."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="submitit cluster: slurm (auto-detected) | local | debug"),
    partition: Optional[str] = typer.Option(None, "--partition", help="Slurm partition."),
    gpus_per_task: int = typer.Option(1, "--gpus-per-task", help="GPUs per run (Slurm/Ray)."),
    timeout_min: int = typer.Option(240, "--timeout-min", help="Slurm time limit per run."),
    array_parallelism: int = typer.Option(64, "--array-parallelism", help="Max Slurm array tasks at once."),
    evaluate: bool = typer.Option(False, "--eval", help="Score each run when it finishes (eval=<preset>, eval.<key>=...; "
                                  "default: by model and data) and add the seed+1 AR run the noise floor needs."),
) -> None:
    """Run a grid of configurations (plus their AR baselines); re-running resumes."""
    from sjdbench.cli_eval import SweepScorer, is_eval_word
    from sjdbench.sweep import build_plan, execute_sweep, run_status

    try:
        eval_words = [w for w in overrides or [] if is_eval_word(w)]
        plan = build_plan([w for w in overrides or [] if not is_eval_word(w)], add_baselines=not no_baseline)
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
        slurm = {"partition": partition, "gpus_per_task": gpus_per_task, "timeout_min": timeout_min,
                 "array_parallelism": array_parallelism}
        with Progress(
            TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            console=console, disable=not console.is_terminal,
        ) as bar:
            task = bar.add_task("runs", total=len(plan.points))
            tick = (lambda r: (bar.advance(task), scorer.on_result(r))) if scorer else (lambda r: bar.advance(task))
            results = execute_sweep(plan, executor, tick=tick, cluster=cluster, slurm=slurm)
        if scorer:
            scorer.finish()
    except UserError as error:
        fail(str(error))
    counts = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    console.print(f"sweep {plan.sweep_id}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                  + f" -> {plan.directory}", highlight=False)
    from sjdbench.store import RunStore

    summaries = [RunStore(plan.directory.parent.parent, p.run_id).summary() for p in plan.points]
    console.print(summary_table("runs", [s for s in summaries if s]))
    failed = [r for r in results if r.status == "failed"]
    for result in failed:
        err_console.print(f"[red]failed[/] {result.run_id}: {result.error}", highlight=False)
    if failed:
        raise typer.Exit(1)


def note_legacy_runs(root) -> None:
    """One line when the store holds runs keyed by an older sjdbench (they are not resumed)."""
    from sjdbench.migrate import legacy_runs

    count = len(legacy_runs(root))
    if count:
        err_console.print(f"note: {root} holds {count} run(s) from an older sjdbench, keyed differently and not "
                          f"resumed; `sjdbench migrate --results-dir {root}` re-keys them", highlight=False, markup=False)


@app.command()
def migrate(
    results_dir: Optional[str] = typer.Option(None, "--results-dir", help="Results root (default: results or $SJDBENCH_RESULTS)."),
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
def list_choices(group: Optional[str] = typer.Argument(None, help="A config group, e.g. decoder. Omit for all.")) -> None:
    """List config groups and their choices (decoder parts with their knobs and defaults)."""
    from sjdbench.config import available_groups, group_choices
    from sjdbench.decoding.parts import default_spec

    try:
        groups = [group.replace(".", "/")] if group else available_groups()
        for name in groups:
            choices = group_choices(name)
            if name.startswith("decoder/"):
                kind = name.split("/")[1]
                described = []
                for choice in choices:
                    knobs = default_spec(kind, choice).knobs()
                    described.append(choice + (f" ({', '.join(f'{k}={v}' for k, v in knobs.items())})" if knobs else ""))
                choices = described
            console.print(f"[bold]{name}[/]: {', '.join(choices)}", highlight=False)
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


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted: finished samples are saved; re-run the same command to resume")
        sys.exit(130)
