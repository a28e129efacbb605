"""Our runs beside a published table (`sjdbench report --reference NAME`, `sjdbench.compare_reference`).

Each usable run of the selection is put beside one published row of the same method: the row whose
preset is the run's decoder family, on the run's model and data set where the table has them. Where
it has not (the toy, a model the source did not use), the run still gets the closest row of its
method, and every setting that differs is named, so the user sees how far their setting is from the
published one; settings the source does not state are listed as such, never taken as equal.

Both values of a line are the report's own: step compression and NFE from the run's sample rows (the
runs frame), the latency speedup from its pairing with its AR baseline (results.pairing, as every
command pairs), FID and CLIP-Score from its current score files (on the toy: its stand-ins toy_fd
and toy_clip, named on the line). The ratio is ours / published; against a span the source states in
words ("2x to 3x", "up to 2.56x") it is given against each end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sjdbench.reference.schema import METRICS, NOT_STATED, MetricKind, Published, PublishedRow, ReferenceTable
from sjdbench.report.render import to_markdown
from sjdbench.report.tables import Table, quality_digits, slug
from sjdbench.results.decoders import setting_name
from sjdbench.results.pairing import as_speedup
from sjdbench.results.store import atomic_write_text

# our evaluators that give each published quality metric (the toy's stand-ins last)
OUR_EVALUATORS = {"fid": ("fid", "toy_fd"), "clip": ("clip_score", "toy_clip")}

# the stated settings compared with a run's (our_settings), each as (shown as, Settings field)
COMPARED = (
    ("resolution", "resolution"),
    ("W", "window"),
    ("top-k", "top_k"),
    ("CFG", "cfg"),
    ("temperature", "temperature"),
    ("prompts", "data_size"),
    ("GPU", "gpu"),
)

LABELS = ["#", "published row", "our run", "metric", "ours", "published", "ours/published"]


@dataclass
class Ours:
    """One of our values for a metric line: the number, its CI and N where it has them, its text,
    and where it comes from (samples, pairing, or the evaluator that scored it)."""

    value: float | None
    text: str
    origin: str
    lo: float | None = None
    hi: float | None = None
    n: int | None = None
    protocol: str | None = None  # the score's own description of how it was computed


@dataclass
class Comparison:
    """A reference table held against runs: one frame row per (run, metric line), with every number
    in full (the CSV, `sjdbench.compare_reference`), and the table shown on the terminal and in the
    report files, whose notes name the differing settings per pair and the runs and rows left alone."""

    reference: ReferenceTable
    frame: pd.DataFrame
    table: Table


@dataclass
class Differences:
    """A run's settings against those a published row states."""

    differ: list[str] = field(default_factory=list)  # "W: 16 vs 64"
    same: list[str] = field(default_factory=list)  # names of the stated settings that agree
    unstated: list[str] = field(default_factory=list)  # names of the settings the source does not state


# -- our settings -----------------------------------------------------------------------------------


def _present(value: Any) -> bool:
    if value is None:
        return False
    return not (isinstance(value, float) and math.isnan(value))


def text(value: Any) -> str:
    """A setting or value for people: 3.0 -> '3', 0.1 -> '0.1', True -> 'yes', None -> '–'."""
    if not _present(value):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def _same(ours: Any, theirs: Any) -> bool:
    numbers = (int, float)
    if isinstance(ours, numbers) and isinstance(theirs, numbers) and not isinstance(ours, bool):
        return math.isclose(float(ours), float(theirs), rel_tol=1e-9)
    return _present(ours) and str(ours).strip().lower() == str(theirs).strip().lower()


def our_settings(run: pd.Series) -> dict[str, Any]:
    """The settings of a stored run under the names of `Settings`, read as the report reads runs."""
    options = run.get("model_options")
    sampling = run.get("env.sampling")
    options = options if isinstance(options, dict) else {}
    sampling = sampling if isinstance(sampling, dict) else {}
    samples, per_prompt = run.get("n_samples"), run.get("samples_per_prompt")
    prompts = None
    if _present(samples) and _present(per_prompt) and int(per_prompt) > 0:
        prompts = int(samples) // int(per_prompt)
    device = str(run.get("env.device") or run.get("device") or "cpu")
    gpu = run.get("env.gpu")
    if not _present(gpu):
        gpu = "none (cpu)" if device.startswith("cpu") else f"{device} (model not recorded)"
    return {
        "resolution": options.get("resolution"),
        "window": run.get("window"),
        "top_k": sampling.get("top_k"),
        "cfg": sampling.get("cfg_scale"),
        "temperature": sampling.get("temperature"),
        "data_size": prompts,
        "gpu": gpu,
    }


# knobs whose null means "the model's value", by where env.json records the value in use
RESOLVED_KNOBS = {"verifier.k": "lantern_k", "verifier.d_thr": "gsd_d_thr"}


def differences(row: PublishedRow, run: pd.Series, protocols: list[str] | None = None) -> Differences:
    """How a run's settings compare with those a published row states: the ones that differ (as
    'W: 16 vs 64'), the ones that agree, and the ones the source does not state. protocols: our
    scores' descriptions beside the row's quality figures."""
    out = Differences()

    def check(name: str, ours: Any, theirs: Any, shown: str | None = None) -> None:
        if not _present(theirs) or theirs == NOT_STATED:
            out.unstated.append(name)
        elif _same(ours, theirs):
            out.same.append(name)
        else:
            out.differ.append(f"{name}: {text(ours)} vs {shown or text(theirs)}")

    settings = row.settings
    variant = settings.model_variant
    model = f"{row.model} ({variant})" if row.model and variant != NOT_STATED else None
    check("model", run.get("model"), row.model, model)
    check("data", run.get("data"), row.data)
    mine = our_settings(run)
    for name, key in COMPARED:
        check(name, mine[key], getattr(settings, key))
    for knob, theirs in settings.knobs.items():
        ours, recorded = run.get(f"spec.{knob}"), RESOLVED_KNOBS.get(knob)
        if not _present(ours) and recorded:  # a null knob took the model's value when built: env.json has it
            ours = run.get(f"env.{recorded}")
        check(setting_name(knob), ours, theirs)
    check("lossless", bool(run.get("lossless")), row.lossless)
    if protocols:
        check("metric protocol", "; ".join(protocols), settings.metric_protocol)
    return out


def _distance(row: PublishedRow, run: pd.Series) -> tuple[bool, bool, int, int]:
    """How far a row is from a run: its model first, then its data set, then (more agreeing stated
    settings first, so a row is not preferred for stating less) the settings that differ."""
    found = differences(row, run)
    return (row.model != run.get("model"), row.data != run.get("data"), -len(found.same), len(found.differ))


def _family(run: pd.Series) -> str:
    family = run.get("decoder_family")
    if isinstance(family, str) and family:
        return family
    return "ar" if bool(run.get("is_ar")) else "custom"


# -- our values -------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def our_values(kind: MetricKind, run: pd.Series, pairing: dict, scores: pd.DataFrame) -> list[Ours]:
    """Our values for one published metric: one, or one per score file where a run holds several
    scores of that kind (other protocols); a value of None where the store has none yet."""
    if kind.key == "step_compression":
        value = _number(run.get("step_compression"))
        return [Ours(value, _fmt(value, 2), "samples")]
    if kind.key == "nfe":
        value = _number(run.get("nfe_mean"))
        return [Ours(value, _fmt(value, 2), "samples")]
    if kind.key == "latency_speedup":
        speedup = as_speedup(pairing)
        return [Ours(speedup.value, speedup.text(), "pairing", speedup.lo, speedup.hi, speedup.n or None)]
    evaluators = OUR_EVALUATORS[kind.key]
    own = scores[(scores["run_id"] == run["run_id"]) & scores["evaluator"].isin(evaluators)] if len(scores) else scores
    if own.empty:
        return [Ours(None, "not scored", "not scored")]
    own = own.assign(_order=own["evaluator"].map(evaluators.index)).sort_values(["_order", "protocol_hash"])
    out = []
    several = len(own) > 1
    for score in own.to_dict("records"):
        value = float(score["value"])
        digits = quality_digits([value])
        lo, hi = _number(score.get("ci_lo")), _number(score.get("ci_hi"))
        interval = f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]" if lo is not None and hi is not None else ""
        shown = _fmt(value, digits) + interval
        origin = score["evaluator"] + (f" {str(score['protocol_hash'])[:6]}" if several else "")
        n = score.get("n")
        out.append(Ours(value, shown, origin, lo, hi, int(n) if _present(n) else None, str(score.get("metric") or "")))
    return out


def _number(value: Any) -> float | None:
    return float(value) if _present(value) and not isinstance(value, bool) else None


def ratios(ours: float | None, published: Published) -> tuple[float | None, float | None, float | None, str]:
    """(ours / value, ours / low, ours / high, text) against a published figure or span."""

    def over(theirs: float | None) -> float | None:
        return None if ours is None or theirs is None or theirs == 0 else ours / theirs

    point, vs_low, vs_high = over(published.value), over(published.low), over(published.high)
    if published.value is not None:
        shown = _fmt(point, 2)
    elif vs_low is not None and vs_high is not None:
        shown = f"{vs_high:.2f}–{vs_low:.2f}"
    elif vs_high is not None:
        shown = f"{vs_high:.2f} (vs max)"
    elif vs_low is not None:
        shown = f"{vs_low:.2f} (vs min)"
    else:
        shown = "–"
    return point, vs_low, vs_high, shown


# -- matching and the table ----------------------------------------------------------------------


def match(reference: ReferenceTable, runs: pd.DataFrame) -> tuple[list[tuple[int, pd.Series]], list[str]]:
    """(row index, run) pairs, each run beside the closest row of its method (ties: the row first in
    the table), ordered as the table is; and one line per kind of run or row left without a partner."""
    pairs: list[tuple[int, pd.Series]] = []
    orphans: dict[str, int] = {}
    for _, run in runs.sort_values("run_id").iterrows():
        family = _family(run)
        candidates = [i for i, row in enumerate(reference.rows) if row.preset == family]
        if not candidates:
            orphans[family] = orphans.get(family, 0) + 1
            continue
        best = min(candidates, key=lambda i: (_distance(reference.rows[i], run), i))
        pairs.append((best, run))
    pairs.sort(key=lambda pair: (pair[0], pair[1]["run_id"]))
    lines = []
    if orphans:
        listed = ", ".join(f"{name} ({count} run{'s' if count > 1 else ''})" for name, count in sorted(orphans.items()))
        lines.append(f"no row of {reference.name} runs the decoder of: {listed}")
    no_preset = list(dict.fromkeys(row.method for row in reference.rows if row.preset is None))
    if no_preset:
        lines.append(f"no sjdbench preset, so no run of ours beside: {', '.join(no_preset)}")
    families = {_family(run) for _, run in runs.iterrows()}
    idle = [f"{row.preset} ({row.method})" for row in reference.rows if row.preset and row.preset not in families]
    idle = list(dict.fromkeys(idle))
    if idle:
        lines.append(f"no selected run of: {', '.join(idle)}")
    return pairs, lines


FRAME_COLUMNS = [
    "reference",
    "pair",
    "run_id",
    "decoder",
    "model",
    "data",
    "method",
    "preset",
    "published_model",
    "published_data",
    "metric",
    "ours",
    "ours_lo",
    "ours_hi",
    "ours_n",
    "ours_from",
    "published",
    "published_min",
    "published_max",
    "ratio",
    "ratio_vs_min",
    "ratio_vs_max",
    "differs",
    "not_stated",
    "checked",
    "source",
]


def compare(reference: ReferenceTable, runs: pd.DataFrame, pairings: pd.DataFrame, scores: pd.DataFrame) -> Comparison:
    """Each run beside its published row: the frame (numbers in full) and the table to show."""
    pairs, unmatched = match(reference, runs)
    by_run = {p["run_id"]: p for p in pairings.to_dict("records")} if len(pairings) else {}
    records, shown, notes = [], [], []
    unscored = False
    for number, (index, run) in enumerate(pairs, start=1):
        row = reference.rows[index]
        lines = []
        for kind in METRICS:
            published = row.metrics.get(kind.key)
            if published is None:
                continue
            for ours in our_values(kind, run, by_run.get(run["run_id"], {}), scores):
                lines.append((kind, published, ours))
                unscored |= kind.key in OUR_EVALUATORS and ours.value is None
        protocols = list(dict.fromkeys(o.protocol for k, _, o in lines if k.key in OUR_EVALUATORS and o.protocol))
        found = differences(row, run, protocols)
        window = "" if bool(run.get("is_ar")) else f" W={text(run.get('window'))}"
        ours_label = f"{run.get('decoder')}{window} ({run.get('model')}, {run.get('data')})"
        for position, (kind, published, ours) in enumerate(lines):
            point, vs_low, vs_high, ratio_text = ratios(ours.value, published)
            records.append(
                {
                    "reference": reference.name,
                    "pair": number,
                    **{key: run.get(key) for key in ("run_id", "decoder", "model", "data")},
                    "method": row.method,
                    "preset": row.preset,
                    "published_model": row.model,
                    "published_data": row.data,
                    "metric": kind.key,
                    **{"ours": ours.value, "ours_lo": ours.lo, "ours_hi": ours.hi, "ours_n": ours.n},
                    "ours_from": ours.origin,
                    **{"published": published.value, "published_min": published.low, "published_max": published.high},
                    **{"ratio": point, "ratio_vs_min": vs_low, "ratio_vs_max": vs_high},
                    "differs": "; ".join(found.differ),
                    "not_stated": ", ".join(found.unstated),
                    "checked": row.checked,
                    "source": reference.source_of(row).text(),
                }
            )
            plain = ours.origin in ("samples", "pairing", "not scored")
            metric = kind.header if plain else f"{kind.header} (ours: {ours.origin})"
            head = [f"#{number}", row.label(), ours_label] if position == 0 else ["", "", ""]
            shown.append([*head, metric, ours.text, published.text(), ratio_text])
        notes.append(_pair_note(number, ours_label, run["run_id"], row, found))
    notes.append(f"source: {reference.source.text()}")
    notes += list(dict.fromkeys(f"source: {r.source.text()}" for r in reference.rows if r.source is not None))
    if unscored:
        notes.append("not scored: the run holds no score of that kind yet (`sjdbench eval <run id>` scores it)")
    notes += list(reference.notes) + unmatched
    table = Table(
        f"reference-{slug(reference.name)}",
        f"{reference.title}: our runs beside it",
        LABELS,
        [],
        pd.DataFrame(shown, columns=LABELS),
        notes=notes,
    )
    frame = pd.DataFrame.from_records(records, columns=FRAME_COLUMNS).astype({"pair": int, "ours_n": "Int64"})
    return Comparison(reference, frame, table)


def _pair_note(number: int, ours: str, run_id: str, row: PublishedRow, found: Differences) -> str:
    parts = [f"#{number}: {ours} [{run_id}] vs {row.label()}"]
    parts.append("differs: " + "; ".join(found.differ) if found.differ else "no stated setting differs")
    if found.unstated:
        parts.append(f"not stated there: {', '.join(found.unstated)}")
    if row.note:
        parts.append(f"note: {row.note}")
    if not row.checked:
        parts.append("its figures are not yet checked against the source (checked: false)")
    return " — ".join(parts)


def write_comparison(comparison: Comparison, out: Path) -> list[Path]:
    """reference-<name>.md (the table as shown, with its notes) and reference-<name>.csv (the frame:
    every number in full) in the report folder, each written atomically."""
    stem = f"reference-{slug(comparison.reference.name)}"
    markdown, csv = out / f"{stem}.md", out / f"{stem}.csv"
    atomic_write_text(markdown, to_markdown(comparison.table))
    atomic_write_text(csv, comparison.frame.to_csv(index=False))
    return [markdown, csv]
