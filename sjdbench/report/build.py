"""`sjdbench report`: from the results store to tables, figures, Parquet and one HTML page.

    load (store -> frames) -> select (filters) -> pair (speedups) -> per model x data set:
    tables (main, ablations, per category, quality) + figures -> files in --out

Files: main.{md,tex,csv}, ablations.*, quality.*, categories.* (when there is something to put in
them), runs.parquet, samples.parquet, figures/<model>-<data>/*.{png,svg}, report.html and
provenance.json; with --reference NAME, our runs beside that published table (report.reference) in
reference-<NAME>.{md,csv}. Every file is written atomically; the report never writes into the store
except draft traces, when asked for (--trace-drafts).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from sjdbench.errors import UserError
from sjdbench.reference.load import load_reference
from sjdbench.reference.schema import ReferenceTable
from sjdbench.report import figures as figs
from sjdbench.report.html import FigureEntry, Section, page
from sjdbench.report.provenance import mixing_warnings, notes, timing_warnings, unused_runs
from sjdbench.report.reference import compare, write_comparison
from sjdbench.report.render import to_csv, to_latex, to_markdown
from sjdbench.report.tables import (
    Table,
    ablation_tables,
    category_tables,
    main_run_ids,
    main_table,
    quality_metrics,
    quality_tables,
    slug,
    with_numbers,
)
from sjdbench.results.files import describe_bad_lines, read_rows, trace_problem
from sjdbench.results.pairing import pair_all
from sjdbench.results.runs import DRAFT_TRACES, load_samples, load_scores, read_scores, runs_frame
from sjdbench.results.select import Selection, parse_selection, select_runs
from sjdbench.results.store import (
    USABLE,
    StoreError,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_folder,
)

LOSSLESS_NOTE = (
    "lossless: every part of the decoder claims to keep AR's distribution with the knobs it was given "
    "(exact or greedy verifier; resample, exact coupling, VP with its fused reference or a drafter's drafts; "
    "any init; a chain, a first-sibling tree or a drafter's tree), each claim tested against exact AR "
    "probabilities (tests/test_exactness.py, tests/test_drafter_proposal.py); "
    "greedy: equals greedy AR (sampling.temperature=0) token for token, so against a sampled AR it differs "
    "as greedy decoding does"
)


@dataclass
class Report:
    out: Path
    main: list[Table] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # tables, data and the page
    figures: list[Path] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)  # incomplete / legacy runs, one line each
    skipped: list[str] = field(default_factory=list)  # tables and figures with nothing to show, and why
    warnings: list[str] = field(default_factory=list)
    reference: list[Table] = field(default_factory=list)  # our runs beside a published table (--reference)


def _annotate(table: Table, runs: pd.DataFrame, samples: pd.DataFrame, pairings: pd.DataFrame) -> Table:
    """Provenance and warnings computed from exactly the runs behind the table's rows."""
    ids = set(table.frame["run_id"]) if "run_id" in table.frame else set(runs["run_id"])
    own = runs[runs["run_id"].isin(ids)]
    table.notes = notes(own) + ([LOSSLESS_NOTE] if "lossless" in table.labels else []) + table.notes
    table.warnings = mixing_warnings(own) + timing_warnings(own, samples, pairings[pairings["run_id"].isin(ids)])
    return table


def trace_drafts(runs: pd.DataFrame, prompts: int, progress: Callable[[str], None]) -> list[str]:
    """Record draft traces for the sampled decoder runs that have none; lines for the ones
    that cannot be traced here."""
    from sjdbench.report.draft_traces import record_run

    problems = []
    todo = runs[
        runs["status"].isin(USABLE)
        & ~runs["is_ar"].astype(bool)
        & ~runs["greedy"].astype(bool)
        & ~runs["has_draft_traces"].astype(bool)
    ]
    for _, run in todo.iterrows():
        try:
            record_run(Path(run["run_dir"]), prompts, progress)
        except UserError as error:
            problems.append(f"no draft traces for {run['run_id']}: {error}")
    return problems


def _arrow_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns pyarrow cannot type (dicts, mixed kinds) become JSON text; number lists stay lists."""
    import pyarrow as pa

    out = frame.copy()
    for column in out.columns:
        if out[column].dtype != object:
            continue
        try:
            pa.array(out[column].tolist())
            if out[column].map(lambda v: isinstance(v, dict)).any():
                raise pa.ArrowInvalid("dicts")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            out[column] = out[column].map(lambda v: None if v is None else json.dumps(v, sort_keys=True, default=str))
    return out


def _parquet(frame: pd.DataFrame, path: Path) -> Path:
    import io

    buffer = io.BytesIO()
    _arrow_safe(frame).to_parquet(buffer, engine="pyarrow", index=False)
    atomic_write_bytes(path, buffer.getvalue())
    return path


@dataclass
class Collected:
    """The store as the report sees it: the selected runs (every status), the ones holding samples, their
    sample rows, score files and AR pairings."""

    selected: pd.DataFrame
    runs: pd.DataFrame
    samples_all: pd.DataFrame
    samples: pd.DataFrame
    scores: pd.DataFrame
    pairings: pd.DataFrame
    superseded: list[str] = field(default_factory=list)  # score files kept on disk, not shown


def check_traces(runs: pd.DataFrame) -> None:
    """Draft traces are read as stored or not at all: a damaged draft_traces.jsonl is refused with one
    line (deleting it and replaying with --trace-drafts records it again)."""
    for run in runs[runs["has_draft_traces"].astype(bool)].to_dict("records"):
        path = Path(run["run_dir"]) / DRAFT_TRACES
        read = read_rows(path)
        problems = [describe_bad_lines(path.name, read.bad)] if read.bad else []
        problems += [f"{path.name} row {i + 1} {p}" for i, p in enumerate(map(trace_problem, read.rows)) if p][:1]
        if problems or read.torn_tail:
            raise UserError(
                f"run {run['run_id']}: {problems[0] if problems else f'{path.name} ends in a torn line'}; delete "
                f"{path} and run `sjdbench report ... --trace-drafts K` to replay its drafts again"
            )


def collect(selection: Selection) -> Collected:
    """The selected runs with their AR baselines (results.select), their samples, scores and speedups,
    each run paired against its baseline in the whole store (results.pairing), as every command pairs."""
    store = runs_frame(selection.root, rows=True)
    selected = select_runs(store, selection)
    runs = selected[selected["status"].isin(USABLE)].reset_index(drop=True)
    if runs.empty:
        raise UserError(
            f"the runs matching {selection.describe()} hold no samples yet ({len(selected)} runs); run "
            "their commands first"
        )
    samples_all = load_samples(selected)
    samples = samples_all[samples_all["run_id"].isin(runs["run_id"])]
    pairings = pair_all(runs, samples, store[store["status"].isin(USABLE)])
    check_traces(runs)
    scores = read_scores(runs)
    if scores.damaged:
        load_scores(runs)  # refuses, naming the first damaged file
    return Collected(selected, runs, samples_all, samples, scores.current, pairings, scores.superseded)


def build_report(
    words: list[str],
    out: Path | None = None,
    every_run: bool = False,
    trace: int = 0,
    progress: Callable[[str], None] | None = None,
    figures: bool = True,
    reference: str | None = None,
    margins: dict[str, float | None] | None = None,
) -> Report:
    published = load_reference(reference) if reference else None  # a bad name fails before any work
    filters = parse_selection(words, command="report")
    out = Path(out) if out else filters.root / "report"
    check_out(out)
    progress = progress or (lambda line: None)
    warnings = []
    if trace > 0:
        warnings = trace_drafts(select_runs(runs_frame(filters.root, rows=True), filters), trace, progress)
    store = collect(filters)
    try:
        out.mkdir(parents=True, exist_ok=True)  # first: an --out that cannot be created fails before any work
        return _build(filters, store, out, every_run, figures, warnings, published, margins)
    except StoreError as error:  # the store's own checks speak of results_dir; here it is --out
        raise UserError(f"{error.reason}; give --out a writable folder (--out DIR)") from None
    except OSError as error:
        raise UserError(
            f"cannot write the report to --out {out}: {error.strerror or error}; give --out a writable "
            "folder (--out DIR)"
        ) from None


OUT_FIX = "give --out a folder that can be created and written (--out DIR)"


def check_out(out: Path) -> None:
    """--out before anything is read or written: a folder, or where one can be created; not the
    store's own runs/ or sweeps/ (files written there would mix with runs)."""
    check_folder(out, "--out", OUT_FIX)
    if out.exists() and any(out.iterdir()) and (out / "runs").is_dir() and not (out / "report.html").exists():
        raise UserError(f"--out {out} is a results folder, not a report folder; {OUT_FIX}")
    resolved = out.resolve()
    for part in (resolved, *resolved.parents):
        if part.parent.name in ("runs", "sweeps") and (part.parent.parent / "store.json").exists():
            raise UserError(f"--out {out} is inside the store's {part.parent.name}/ folder; {OUT_FIX}")


def _build(
    filters: Selection,
    store: Collected,
    out: Path,
    every_run: bool,
    figures: bool,
    warnings: list[str],
    published: ReferenceTable | None = None,
    margins: dict[str, float | None] | None = None,
) -> Report:
    selected, runs, samples_all, samples = store.selected, store.runs, store.samples_all, store.samples
    scores, pairings = store.scores, store.pairings
    report = Report(out, unused=unused_runs(selected) + store.superseded, warnings=warnings)

    written: dict[str, list[Table]] = {"main": [], "ablations": [], "quality": [], "categories": []}
    sections = []
    for (model, data), group in runs.groupby(["model", "data"], sort=True):
        sections.append(
            _section(
                report,
                str(model),
                str(data),
                group.reset_index(drop=True),
                samples,
                scores,
                pairings,
                written,
                every_run,
                figures,
                margins,
            )
        )
    report.main = written["main"]

    for name, tables in written.items():
        if tables:
            report.files.append(_write(out / f"{name}.md", "".join(to_markdown(t) + "\n" for t in tables)))
            report.files.append(_write(out / f"{name}.tex", _latex_document(tables)))
            report.files.append(_write(out / f"{name}.csv", to_csv(tables)))
        elif name == "categories":
            report.skipped.append(
                "per-category tables: no sample row carries a Parti Category/Challenge (run data=parti to get them)"
            )
    if published is not None:
        comparison = compare(published, runs, pairings, scores)
        report.reference.append(comparison.table)
        report.files += write_comparison(comparison, out)
        sections.append(Section(comparison.table.title, [comparison.table], [], [], [], [], []))
    numbers = selected.merge(pairings, on="run_id", how="left")
    report.files.append(_parquet(numbers, out / "runs.parquet"))
    report.files.append(_parquet(samples_all, out / "samples.parquet"))
    provenance = {
        "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "results_dir": str(filters.root),
        "filters": filters.describe(),
        "runs": sorted(runs["run_id"]),
        "not_used": report.unused,
        "warnings": report.warnings,
        "tables": {t.name: {"notes": t.notes, "warnings": t.warnings} for ts in written.values() for t in ts},
        "reference": published.name if published is not None else None,
    }
    atomic_write_json(out / "provenance.json", provenance)
    report.files.append(out / "provenance.json")
    html_path = out / "report.html"
    header = [
        f"sjdbench report of {run_counts(runs, selected)} in {filters.root}, selected by {filters.describe()}; "
        f"generated {provenance['generated']}"
    ]
    listed = [str(p.relative_to(out)) for p in report.files] + ["report.html"]
    atomic_write_text(html_path, page("sjdbench report", header, report.warnings, report.unused, sections, listed))
    report.files.append(html_path)
    return report


def run_counts(runs: pd.DataFrame, selected: pd.DataFrame) -> str:
    """What the report holds, counted as it is: e.g. "6 runs (1 complete: its whole prompt set; 5
    finished over a data.limit selection of it), 2 more listed as not used"."""
    complete = int((runs["status"] == "complete").sum())
    finished = len(runs) - complete
    parts = []
    if complete:
        parts.append(f"{complete} complete: {'its' if complete == 1 else 'their'} whole prompt set")
    if finished:
        parts.append(f"{finished} finished over a data.limit selection of {'its' if finished == 1 else 'their'} set")
    text = f"{len(runs)} run{'s' if len(runs) != 1 else ''} ({'; '.join(parts)})"
    unused = len(selected) - len(runs)
    return text + (f", {unused} more listed as not used" if unused else "")


def _section(
    report: Report,
    model: str,
    data: str,
    group: pd.DataFrame,
    samples: pd.DataFrame,
    scores: pd.DataFrame,
    pairings: pd.DataFrame,
    written: dict,
    every_run: bool,
    figures: bool,
    margins: dict[str, float | None] | None = None,
) -> Section:
    key = (model, data)
    main = _annotate(main_table(group, pairings, scores, key, every_run), group, samples, pairings)
    ablations = [_annotate(t, group, samples, pairings) for t in ablation_tables(group, pairings, scores, key)]
    categories = [_annotate(t, group, samples, pairings) for t in category_tables(group, samples, key)]
    quality = [_annotate(t, group, samples, pairings) for t in quality_tables(group, scores, key, margins)]
    written["main"].append(main)
    written["ablations"] += ablations
    written["categories"] += categories
    written["quality"] += quality

    if not figures:
        return Section(f"{model} on {data}", [main], [], ablations, categories, quality, [])
    q_metrics, quality_frame = quality_metrics(scores, group["run_id"])
    numbers = with_numbers(group, pairings, quality_frame)
    main_numbers = main.frame
    own_samples = samples[samples["run_id"].isin(group["run_id"])]
    plots = [
        figs.fig_quality_vs_speed(numbers[numbers["run_id"].isin(main_run_ids(group)) | numbers["is_ar"]], q_metrics),
        figs.fig_trajectories(main_numbers, own_samples),
        figs.fig_speedup_vs_window(group, numbers),
        figs.fig_throughput_vs_batch(numbers),
        figs.fig_nfe_vs_growth_steps(group, numbers),
        figs.fig_acceptance_by_position(main_numbers),
        figs.fig_accepted_length_hist(main_numbers),
        figs.fig_growth(main_numbers),
        figs.fig_image_grid(main_numbers, own_samples),
    ]
    names = [
        "quality vs speed",
        "trajectories",
        "speedup vs W",
        "throughput vs batch size",
        "NFE vs N",
        "acceptance by position",
        "accepted lengths",
        "growth",
        "image grid",
    ]
    directory = report.out / "figures" / f"{slug(model)}-{slug(data)}"
    entries, skipped, figure_files = [], [], []
    for name, plot in zip(names, plots):
        if isinstance(plot, str):
            skipped.append(f"figure '{name}' for {model} on {data} skipped: {plot}")
            continue
        wide = plot.figure.get_size_inches()[0] > 8  # multi-panel figures and grids span the page
        paths = figs.write_plot(plot, directory)
        figure_files += paths
        relative = [str(p.relative_to(report.out)) for p in paths]
        entries.append(FigureEntry(plot.title, plot.caption, relative[0], relative[1:], wide))
    report.skipped += skipped
    report.figures += figure_files
    return Section(f"{model} on {data}", [main], entries, ablations, categories, quality, skipped)


def _write(path: Path, text: str) -> Path:
    atomic_write_text(path, text)
    return path


def _latex_document(tables: list[Table]) -> str:
    """Table environments only (to \\input into a paper that loads booktabs)."""
    head = "% generated by sjdbench report; needs \\usepackage{booktabs}\n"
    return head + "\n".join(to_latex(t) for t in tables)
