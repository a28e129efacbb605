"""The tables `eval` and `sweep --eval` print: each score file with its comparisons, and quality
beside speed per run (the speedup over AR and its N from sjdbench.results.pairing, as every command
prints it, and for metrics with an equivalence margin whether a lossless decoder is shown
equivalent to AR within it: sjdbench.eval.metrics.equivalence)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich import box
from rich.table import Table
from rich.text import Text

from sjdbench.cli.tables import speedup_cells

if TYPE_CHECKING:
    from sjdbench.results.pairing import Speedup


def _g(value, digits: int = 3) -> str:
    """A number in `digits` significant digits ("-" for none)."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def _fixed(value, decimals: int) -> str:
    return "-" if value is None else f"{value:.{decimals}f}"


def _signed(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:+.{digits}g}"


def _interval(ci, digits: int = 3) -> str:
    return f"[{ci[0]:.{digits}g}, {ci[1]:.{digits}g}]" if ci else ""


def _fd_vs_floor(doc: dict) -> str:
    other, floor = doc.get("extra", {}).get("vs_ar_other_seed"), doc.get("noise_floor")
    if other is None:
        return "-"
    return f"{other:.3g}" + (f" ({floor['value']:.3g})" if floor else "")


def _score_table(title: str, caption: str) -> Table:
    """The compact style of the score tables: a title and caption flush left, one space between columns."""
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        caption=Text(caption),
        caption_justify="left",
    )


def outcome_table(outcomes) -> Table:
    caption = (
        "value [bootstrap 95 % CI over prompts]; Δ vs AR: paired difference with the AR run; floor: the same "
        "comparison between two AR runs that differ only in their seeds (set metrics: their distance)"
    )
    table = _score_table("scores", caption)
    for header in ("decoder", "evaluator", "N", "value [CI]", "Δ vs AR [CI]", "floor"):
        table.add_column(
            header,
            justify="left" if header in ("decoder", "evaluator") else "right",
            no_wrap=header not in ("value [CI]", "Δ vs AR [CI]"),
        )
    for outcome in outcomes:
        doc = outcome.doc
        if doc is None:
            continue
        paired, floor = doc.get("paired_vs_ar"), doc.get("noise_floor")
        delta = f"{_signed(paired['delta'])} {_interval(paired.get('ci95'))}" if paired else "-"
        name = str(doc.get("decoder") or doc["run_id"]) + (f" s{doc['seed']}" if doc.get("seed") else "")
        table.add_row(
            *map(
                Text,
                (
                    name,
                    doc["evaluator"],
                    str(doc["n"]),
                    f"{_g(doc['value'])} {_interval(doc.get('ci95'))}",
                    delta,
                    _g(floor["value"]) if floor else "-",
                ),
            )
        )
    return table


def current_scores(run: Path) -> tuple[dict, dict[str, dict]]:
    """(the run's record as the store reads it, evaluator -> its current score document): scores of
    the samples the run holds now (results.runs.is_current), the latest written when several
    protocols are current; superseded files are never shown. Each file is read once."""
    from sjdbench.results.runs import check_rows, current_score_docs, read_run

    record = check_rows(read_run(run))
    return record, current_score_docs(record)


def _clip_delta(doc: dict) -> str:
    pair = doc.get("paired_vs_ar")
    if not pair:
        return "-"
    ci = pair.get("ci95")
    return f"{pair['delta']:+.1f}" + (f" [{ci[0]:.1f},{ci[1]:.1f}]" if ci else "")


def _delta(doc: dict) -> str:
    pair = doc.get("paired_vs_ar")
    return f"{_signed(pair['delta'])} {_interval(pair.get('ci95'))}".strip() if pair else "-"


# evaluator -> (value header, value cell, comparison header, comparison cell)
Cell = Callable[[dict], str]
COLUMNS: dict[str, tuple[str, Cell, str, Cell]] = {
    "toy_clip": ("CLIP", lambda d: _fixed(d.get("value"), 1), "Δ CLIP [CI]", _clip_delta),
    "toy_fd": ("FD", lambda d: _g(d.get("value")), "FD AR' (floor)", _fd_vs_floor),
    "toy_objects": (
        "obj",
        lambda d: _fixed(d.get("value"), 2),
        "Δ obj",
        lambda d: f"{d['paired_vs_ar']['delta']:+.2f}" if d.get("paired_vs_ar") else "-",
    ),
}
ORDER = ("toy_clip", "toy_fd", "toy_objects", "clip_score", "fid", "kid")
TOY_CAPTION = (
    "CLIP: toy CLIP-Score, Δ = paired difference with AR [bootstrap 95 % CI over prompts]; FD: toy FD "
    "against renders of the same captions; FD AR': FD between this run and the seed+1 AR run, beside "
    "the noise floor (FD between the two AR runs); obj: captioned shapes drawn in the captioned "
    "colour, Δ vs AR"
)
SPEED_CAPTION = "vs AR: latency speedup over the AR baseline [95 % bootstrap CI] over N paired prompts"
EQUIVALENCE_CAPTION = (
    "equiv. ±m: shown equivalent to AR within ±m by two one-sided tests (α = 0.05: the 90 % paired-t interval "
    "of the per-prompt difference inside the margin), else not shown; asked of lossless decoders only"
)


def _equivalence_cell(record: dict, doc: dict | None, baseline: tuple[dict, dict[str, dict]], margin: float) -> str:
    """TOST of this run's per-sample values against its AR baseline's (the baseline's record and
    current score documents), paired when both scores share a protocol."""
    from sjdbench.eval.metrics.equivalence import claimed, equivalence

    ar_record, ar_docs = baseline
    is_ar, lossless, greedy = (bool(record.get(key)) for key in ("is_ar", "lossless", "greedy"))
    if doc is None or not claimed(is_ar, lossless, greedy, bool(ar_record.get("greedy"))):
        return "-"
    theirs = ar_docs.get(doc["evaluator"]) or {}
    same = theirs.get("protocol_hash") == doc.get("protocol_hash")
    shown = equivalence(doc.get("per_sample"), theirs.get("per_sample") if same else None, margin).equivalent
    return "equivalent" if shown else "not shown"


def _columns(name: str) -> tuple[str, Cell, str, Cell]:
    return COLUMNS.get(name) or (name, lambda d: _g(d.get("value")), f"Δ {name} [CI]", _delta)


def quality_table(
    runs: list[Path], speedups: dict[str, Speedup], margins: dict[str, float | None] | None = None
) -> Table | None:
    """decoder | step x | vs AR [CI] | N | each evaluator's value and its comparison (and, for a
    metric with an equivalence margin, the equivalence to AR), for the runs that have scores; None
    when none has."""
    from sjdbench.eval.metrics.equivalence import margin_for, margin_text

    rows: list[tuple[dict, dict, dict[str, Any], Path]] = []
    for run in runs:
        record, scores = current_scores(run)
        if scores:  # the record holds summary.json's fields, its statistics recomputed from the rows
            rows.append((record | {"n_samples": record.get("n_rows")}, record, scores, run))
    if not rows:
        return None
    present = {name for _, _, scores, _ in rows for name in scores}
    evaluators = [n for n in ORDER if n in present] + sorted(present - set(ORDER))
    margin_of: dict[str, float] = {}
    for name in evaluators:
        metric = next(str(scores[name].get("metric", "")) for _, _, scores, _ in rows if name in scores)
        margin = margin_for(name, metric, margins)
        if margin is not None:
            margin_of[name] = margin
    toy = any(n in COLUMNS for n in evaluators)
    sizes = sorted({str(summary.get("n_samples")) for summary, _, _, _ in rows})
    caption = (TOY_CAPTION + "; " if toy else "") + SPEED_CAPTION + ("; " + EQUIVALENCE_CAPTION if margin_of else "")
    table = _score_table(f"quality beside speed (N = {', '.join(sizes)} per run)", caption)
    headers = ["decoder", "step x", "vs AR [95% CI]", "N"]
    for name in evaluators:
        value_header, _, compare_header, _ = _columns(name)
        headers += [value_header, compare_header]
        if name in margin_of:
            headers.append(f"equiv. ±{margin_text(margin_of[name])}")
    for header in headers:
        table.add_column(header, justify="left" if header == "decoder" else "right", no_wrap=True)

    def order(row):
        return (row[0].get("decoder_family") != "ar", row[0].get("seed", 0), str(row[0].get("decoder")))

    # the AR baselines' records and scores: those of the table's own rows are read already
    baselines: dict[Path, tuple[dict, dict[str, dict]]] = {run: (record, scores) for _, record, scores, run in rows}

    def baseline_of(run: Path, doc: dict) -> tuple[dict, dict[str, dict]]:
        """The AR baseline's record and current scores, read once per table."""
        ar_id = (doc.get("paired_vs_ar") or {}).get("ar_run_id")
        folder = run.parent / ar_id if isinstance(ar_id, str) else None
        if folder is None or not folder.is_dir():
            return {}, {}
        if folder not in baselines:
            baselines[folder] = current_scores(folder)
        return baselines[folder]

    for summary, record, scores, run in sorted(rows, key=order):
        name = str(summary.get("decoder")) + (f" s{summary['seed']}" if summary.get("seed") else "")
        cells = [name, f"{summary.get('step_compression', 0):.2f}", *speedup_cells(speedups.get(summary["run_id"]))]
        for evaluator in evaluators:
            _, value, _, compare = _columns(evaluator)
            doc = scores.get(evaluator)
            cells += [value(doc), compare(doc)] if doc else ["-", "-"]
            if evaluator in margin_of:
                baseline = baseline_of(run, doc) if doc else ({}, {})
                cells.append(_equivalence_cell(record, doc, baseline, margin_of[evaluator]))
        table.add_row(*map(Text, cells))
    return table


def run_speedups(runs: list[Path]) -> dict[str, Speedup]:
    """run_id -> speedup over its AR baseline in its store (results.pairing), for the quality table."""
    from sjdbench.results.pairing import as_speedup
    from sjdbench.results.runs import speedups

    by_root: dict[Path, list[str]] = {}
    for run in runs:
        by_root.setdefault(run.parent.parent, []).append(run.name)
    out: dict[str, Speedup] = {}
    for root, ids in by_root.items():
        out.update({run_id: as_speedup(row) for run_id, row in speedups(root, ids).items()})
    return out
