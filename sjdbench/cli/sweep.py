"""`sjdbench sweep`: run a grid of configurations (plus their AR baselines); re-running resumes.
With --eval, each run is scored as it finishes (`SweepScorer`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.table import Table

from sjdbench.cli.console import err, fail, interrupted, interrupted_sweep, line, note, os_failure, out, say
from sjdbench.cli.progress import CliReporter, progress_bar
from sjdbench.cli.tables import latency_warnings, summary_table
from sjdbench.errors import Interrupted, UserError

if TYPE_CHECKING:  # the command line imports nothing heavy until a command runs
    from sjdbench.results.pairing import Speedup
    from sjdbench.run.plan import SweepPlan
    from sjdbench.run.sweep import SweepOutcome


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
    cluster_name: Optional[str] = typer.Option(
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
    from sjdbench.cli.eval import is_eval_word
    from sjdbench.cli.migrate import note_legacy_runs
    from sjdbench.results.pairing import as_speedup
    from sjdbench.run.executors import Cluster
    from sjdbench.run.plan import build_plan
    from sjdbench.run.sweep import execute_sweep

    try:
        cluster = Cluster(
            executor, cluster_name, partition, gpus_per_task, cpus_per_task, timeout_min, array_parallelism
        )
        eval_words = [w for w in overrides or [] if is_eval_word(w)]
        plan = build_plan(
            [w for w in overrides or [] if not is_eval_word(w)],
            add_baselines=not no_baseline,
            remote_gpus=cluster.remote_gpus,
        )
        scorer = SweepScorer(plan, eval_words) if evaluate or eval_words else None
        plan = scorer.plan if scorer else plan
        note_legacy_runs(plan.root)
        if dry_run:
            out.print(plan_table(plan))
            return
        for text in dict.fromkeys(t for p in plan.points for t in p.run.notes):
            note(text)
        with progress_bar(transient=False) as bar:
            task = bar.add_task("sweep", total=len(plan.points))
            reporter = CliReporter(bar if err.is_terminal else None, "sweep")
            seen: set[str] = set()

            def tick(result) -> None:
                if result.status != "merged":  # a merge follows its shards' runs: not a run of its own
                    seen.add(result.run_id)
                    bar.update(task, completed=len(seen))
                if not err.is_terminal:
                    line(f"sweep {plan.sweep_id}: {len(seen)}/{len(plan.points)} runs; {result.run_id} {result.status}")
                if scorer:
                    scorer.on_result(result)

            try:
                outcome = execute_sweep(plan, cluster, tick=tick, timing=timing, reporter=reporter)
            finally:
                reporter.close()
        speedups = {run_id: as_speedup(row) for run_id, row in outcome.pairings.items()}
        if scorer:
            scorer.finish(speedups)
    except UserError as error:
        fail(str(error))
    except Interrupted as error:
        interrupted(error)
    except KeyboardInterrupt:
        interrupted_sweep()
    except OSError as error:
        os_failure(error)
    print_outcome(plan, outcome, speedups)


def plan_table(plan: SweepPlan) -> Table:
    """--dry-run: every run of the plan, whether it is stored, its decoder and its overrides."""
    from sjdbench.run.plan import run_status

    table = Table(title=f"sweep {plan.sweep_id}: {len(plan.points)} runs", title_justify="left")
    for header in ("run", "status", "decoder", "overrides"):
        table.add_column(header)
    for point in plan.points:
        typed = point.label + ("  [AR baseline]" if point.baseline else "")
        table.add_row(point.run_id, run_status(point), point.decoder_label, typed)
    return table


def print_outcome(plan: SweepPlan, outcome: SweepOutcome, speedups: dict[str, Speedup]) -> None:
    """The counts line, the runs' table with their speedups, and a line per warning and failure
    (exit code 1 when a run failed)."""
    results, comparisons = outcome.results, outcome.comparisons
    summaries = [s for s in (p.run.store.summary() for p in plan.points) if s]
    say(f"sweep {plan.sweep_id}: {sweep_counts(plan, results, summaries)} -> {plan.directory}")
    marks = {
        run_id: ("" if entry["paired"] else "~") + ("!" if entry["busy_samples"] else "")
        for run_id, entry in comparisons.items()
    }
    out.print(summary_table("runs", summaries, speedups, marks))
    for text in latency_warnings(summaries):
        line(text)
    unpaired = sorted({entry["decoder"] for entry in comparisons.values() if not entry["paired"]})
    if unpaired:
        line(
            f"warning: the speedups of {', '.join(unpaired)} compare latencies timed apart from AR's "
            "(machine state may differ); rows decoded with --timing paired are compared side by side"
        )
    for result in results:
        if result.status == "skipped":
            line(f"warning: skipped {result.run_id}: {result.error}; re-run the sweep when it is free to finish it")
    failed = [r for r in results if r.status == "failed"]
    for result in failed:
        line(f"failed {result.run_id}: {result.error}")
    if failed:
        raise typer.Exit(1)


def sweep_counts(plan: SweepPlan, results: list, summaries: list[dict]) -> str:
    """One true line: how many runs the sweep has, what this command did to them, and how much of
    their prompt set they hold ("complete" only for runs that hold all of it)."""
    final: dict[str, str] = {}
    for result in results:
        if result.status != "merged":
            final[result.run_id] = result.status
    words = {"done": "already stored", "finished": "decoded now", "partial": "partial", "failed": "failed"}
    counts: dict[str, int] = {}
    for status in final.values():
        counts[words.get(status, status)] = counts.get(words.get(status, status), 0) + 1
    did = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    complete = sum(1 for s in summaries if s.get("complete"))
    partial = [s for s in summaries if not s.get("complete")]
    held = sorted({(s.get("n_samples"), s.get("n_wanted")) for s in partial}, key=str)
    shown = ", ".join(f"{n} of {w}" for n, w in held[:3]) + (", ..." if len(held) > 3 else "")
    if not summaries:
        parts = ["no run holds samples"]
    elif not complete:
        parts = [f"none holds its whole prompt set (they hold {shown} samples: data.limit)"]
    else:
        parts = [f"{complete} complete (the whole prompt set)"]
        if partial:
            parts.append(f"{len(partial)} not ({shown} samples: data.limit)")
    n = len(plan.points)
    return f"{n} run{'s' if n != 1 else ''} ({did}); {', '.join(parts)}"


class SweepScorer:
    """Scores each run of a sweep as it finishes, then fills in the comparisons (AR, noise floor)
    once every run is done. Adds the AR run at seed + eval.floor_seed_offset that the floor needs."""

    def __init__(self, sweep, eval_words: list[str]) -> None:
        from sjdbench.eval.evaluators.hashing import env_flag_offline
        from sjdbench.eval.evaluators.settings import compose_eval
        from sjdbench.run.plan import with_noise_floor_runs

        env_flag_offline()
        self.config = compose_eval(eval_words)
        self.plan = with_noise_floor_runs(sweep, self.config.floor_seed_offset)
        self.floor_runs = {p.run_id for p in self.plan.points} - {p.run_id for p in sweep.points}
        self.outcomes: list = []

    def on_result(self, result) -> None:
        if result.status in ("failed", "partial", "skipped"):
            return
        self._score([self.plan.root / "runs" / result.run_id])

    def _score(self, run_dirs: list[Path]) -> list:
        from sjdbench.cli.eval import report_outcome
        from sjdbench.eval.score import score

        def on_outcome(outcome) -> None:  # refusals are noted as they come
            if outcome.status == "refused":
                report_outcome(outcome)

        try:
            outcomes = score(run_dirs, self.config, on_outcome=on_outcome)
        except Exception as error:  # noqa: BLE001 - scoring never stops a sweep; the runs are safe
            note(f"scoring {', '.join(d.name for d in run_dirs)} failed: {type(error).__name__}: {error}")
            return []
        self.outcomes += outcomes
        return outcomes

    def finish(self, speedups: dict[str, Speedup]) -> None:
        """Score the runs that hold their final samples and print quality beside `speedups` (the
        sweep's, computed once)."""
        from sjdbench.cli.scores import outcome_table, quality_table
        from sjdbench.results.store import holds_final_samples

        done = [p.run.store.dir for p in self.plan.points if holds_final_samples(p.run.store.summary())]
        outcomes = self._score(done)
        for outcome in outcomes:  # the added seed+1 AR runs have no floor of their own: expected
            if outcome.doc and outcome.doc.get("pending") and outcome.run_id not in self.floor_runs:
                note(f"{outcome.run_id} {outcome.evaluator}: still waiting for {'; '.join(outcome.doc['pending'])}")
        table = quality_table(done, speedups)
        if table is not None:
            out.print(table)
        elif outcomes:
            out.print(outcome_table(outcomes))
