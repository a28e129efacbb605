"""`sjdbench eval`: score finished runs (toy CLIP/FD/objects, CLIP-Score, FID, KID); resumable.

Runs are chosen with the selection grammar `report` uses (sjdbench.results.select): run ids and
patterns, run/sweep/results folders, filters on summary fields, `results_dir=` for the store.
Nothing scored is an error: a selection that matches no finished run, or runs every evaluator
refused, ends in one line and exit code 2.
"""

from __future__ import annotations

import os
from typing import List, Optional

import typer

from sjdbench.cli.console import fail, note, out, table
from sjdbench.errors import UserError
from sjdbench.results.root import ENV


def is_eval_word(word: str) -> bool:
    """eval=<preset>, eval.<key>=..., eval/<group>=...: evaluation settings, not run overrides."""
    key = word.partition("=")[0].lstrip("+~")
    return key == "eval" or key.startswith(("eval.", "eval/"))


def reject_eval_words(words: list[str]) -> None:
    """`run` decodes only: evaluation settings belong to `eval` or `sweep --eval`."""
    found = [w for w in words if is_eval_word(w)]
    if found:
        raise UserError(
            f"{found[0]}: `sjdbench run` does not score; score its run with `sjdbench eval <run_id> "
            f"{found[0]}` (or sweep with --eval)"
        )


def report_outcome(outcome) -> None:
    """A note for a refused score or one whose comparisons wait for another run."""
    if outcome.status == "refused":
        note(f"{outcome.run_id}: {outcome.message}")
    elif outcome.status == "scored" and outcome.message:
        note(f"{outcome.run_id}: {outcome.message}")
    elif outcome.doc and outcome.doc.get("pending") and outcome.status != "present":
        note(f"{outcome.run_id} {outcome.evaluator}: waiting for {'; '.join(outcome.doc['pending'])}")


def eval_command(
    targets: Optional[List[str]] = typer.Argument(
        None,
        help="Run ids (or globs like 'toy-sjd-*'), run/sweep/results folders, filters (model=toy seed=0 "
        "decoder=sjd,lantern; the grammar of `sjdbench report`), results_dir=DIR, and eval=<preset> / "
        "eval.<key>=<value> settings.",
        show_default=False,
    ),
    results_dir: Optional[str] = typer.Option(
        None, "--results-dir", help="The store, as results_dir=DIR (default: $SJDBENCH_RESULTS, else results)."
    ),
    show_config: bool = typer.Option(False, "--show-config", help="Print the composed eval config and exit."),
    equivalence_margin: Optional[List[str]] = typer.Option(
        None,
        "--equivalence-margin",
        metavar="EVALUATOR=M",
        help="Quality table: equivalence to AR within ±M for lossless decoders, as `sjdbench report` "
        "(repeatable; default one CLIP point).",
    ),
) -> None:
    """Score finished runs: toy CLIP/FD/objects (model=toy), CLIP-Score, FID, KID; resumable."""
    from omegaconf import OmegaConf

    from sjdbench.cli.scores import outcome_table, quality_table, run_speedups
    from sjdbench.eval.evaluators.hashing import env_flag_offline
    from sjdbench.eval.evaluators.settings import compose_eval
    from sjdbench.eval.metrics.equivalence import parse_margins
    from sjdbench.eval.score import score

    env_flag_offline()  # before anything imports huggingface_hub
    words = targets or []
    try:
        margins = parse_margins(equivalence_margin or [])
        config = compose_eval([w for w in words if is_eval_word(w)])
        if show_config:
            out.print(OmegaConf.to_yaml(OmegaConf.structured(config)), highlight=False, markup=False)
            return
        runs = [w for w in words if not is_eval_word(w)]
        if not runs and results_dir is None and not os.environ.get(ENV):
            raise UserError(
                "name the runs to score: run ids, run/sweep/results folders, filters like model=toy, or a whole "
                f"store (results_dir=DIR, --results-dir DIR or ${ENV}; e.g. `sjdbench eval results model=toy`)"
            )
        selected = select_finished(runs, results_dir)
        outcomes = score(selected, config, on_outcome=report_outcome)
        if not any(o.status in ("scored", "present", "updated") for o in outcomes):
            reasons = sorted({o.message for o in outcomes if o.message})
            raise UserError(
                f"nothing was scored in {len(selected)} run(s): {'; '.join(reasons[:2]) or 'no evaluator applies'}"
            )
        speedups = run_speedups(selected)
    except UserError as error:
        fail(str(error))
    table(outcome_table(outcomes))
    quality = quality_table(selected, speedups, margins)
    if quality is not None:
        table(quality)


def select_finished(words: list[str], results_dir: str | None = None) -> list:
    """The folders of the finished runs the words select (results.select, without adding AR
    baselines: eval scores what it is given, and reads the baselines it compares with from the
    store). A run named exactly that is not finished is an error; others are skipped with a note."""
    from pathlib import Path

    from sjdbench.results.runs import runs_frame
    from sjdbench.results.select import parse_selection, select_runs
    from sjdbench.results.store import USABLE

    selection = parse_selection(words, results_dir, command="eval")
    chosen = select_runs(runs_frame(selection.root, rows=True), selection, baselines=False)
    usable = chosen[chosen["status"].isin(USABLE)]
    for _, run in chosen[~chosen["status"].isin(USABLE)].iterrows():
        why = "written by an older sjdbench (`sjdbench migrate` re-keys it)" if run["status"] == "legacy" else None
        if run["run_id"] in selection.named:
            raise UserError(f"run {run['run_id']} is {why or 'not finished; re-run its command to finish it'}")
        note(f"{run['run_id']} skipped: {why or 'not finished'}")
    if usable.empty:
        raise UserError(f"no finished run matches {selection.describe()} in {selection.root}; finish its runs first")
    return [Path(d) for d in usable["run_dir"]]
