"""`sjdbench report`: tables, figures, Parquet and one HTML page from the results store."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from sjdbench.cli.console import fail, line, note, out, say, table, warn
from sjdbench.errors import UserError


def report(
    filters: Optional[List[str]] = typer.Argument(
        None,
        show_default=False,
        help="Which runs: model=toy data=toy decoder=sjd,sjd_vp decoder.window=16,32 seed=0, a sweep id, run ids "
        "or folders, results_dir=DIR (the grammar of `sjdbench eval`). Default: every run in results/ (or "
        "$SJDBENCH_RESULTS).",
    ),
    out_dir: Optional[str] = typer.Option(None, "--out", "-o", help="Output folder (default: <results_dir>/report)."),
    every_run: bool = typer.Option(False, "--every-run", help="Main table: every run, not only the presets' defaults."),
    trace_drafts: int = typer.Option(
        0,
        "--trace-drafts",
        metavar="K",
        help="First replay K prompts of each sampled decoder run that has no draft "
        "traces, to plot accepted vs rejected draft trajectories (loads the model).",
    ),
    reference: Optional[str] = typer.Option(
        None,
        "--reference",
        metavar="NAME",
        help="Also put each run beside the matching row of a published table, e.g. sjd_pac_readme (`sjdbench "
        "list reference`; or a reference YAML file): both values, ours/published and every setting that differs; "
        "written to reference-<name>.md and reference-<name>.csv in the report folder.",
    ),
    equivalence_margin: Optional[List[str]] = typer.Option(
        None,
        "--equivalence-margin",
        metavar="EVALUATOR=M",
        help="Quality tables: test lossless decoders for equivalence to AR within ±M in the score's units "
        "(two one-sided tests, α = 0.05); repeatable, e.g. toy_clip=0.5; EVALUATOR=none turns one off. "
        "Default: one CLIP point (toy_clip=1, clip_score=1 on the 100·max(cos, 0) scale, 0.01 on the raw cosine).",
    ),
) -> None:
    """Tables (md, LaTeX, CSV), figures (PNG, SVG), runs/samples Parquet and report.html from stored runs."""
    from sjdbench.eval.metrics.equivalence import parse_margins
    from sjdbench.report.build import build_report
    from sjdbench.report.render import to_rich

    if trace_drafts < 0:
        fail("--trace-drafts must be >= 0 (the number of prompts to replay per run)")
    if reference is not None and not reference.strip():
        fail("--reference needs a table name, e.g. --reference sjd_pac_readme (`sjdbench list reference` lists them)")
    if out_dir is not None and not out_dir.strip():
        fail("--out needs a folder, e.g. --out report/ (leave it out for <results_dir>/report)")
    try:
        margins = parse_margins(equivalence_margin or [])
        target = Path(out_dir).expanduser() if out_dir is not None else None
        result = build_report(
            filters or [],
            target,
            every_run=every_run,
            trace=trace_drafts,
            progress=line,
            reference=reference,
            margins=margins,
        )
    except UserError as error:
        fail(str(error))
    for main in result.main:
        table(to_rich(main))
        for text in main.warnings:
            line(text)
    for published in result.reference:
        table(to_rich(published))
        for text in published.notes:
            say(text)
    for text in result.warnings:
        warn(text)
    for text in result.unused:
        line(f"not used: {text}")
    for text in result.skipped:
        note(text)
    for path in [*result.figures, *result.files]:
        out.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)  # one line per file
