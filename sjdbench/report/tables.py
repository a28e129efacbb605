"""The report's tables as data: which rows, which columns, what is best in each column.

A `Table` holds raw numbers (and CI bounds) in a DataFrame, string label columns that say what
each row is, and a `Metric` per number column with its precision and direction. Renderers (md,
LaTeX, CSV, HTML, terminal) only format; the choice of the best value per column is made here,
once, on the values as displayed, so every format bolds the same cells.

Tables per model x data set:
- main: each decoder at its preset's defaults (at the most common window), AR included; a run
  with other settings appears there only when its algorithm has no default run;
- ablations: runs of one algorithm (same proposal and verifier parts) whose settings differ, one
  table per swept setting around the reference point, rows labelled by the settings;
- per-category (Parti's Category and Challenge) when sample rows carry them;
- quality: each score with its CI, the paired difference to AR and the noise floor, and for
  lossless decoders whether they are shown equivalent to AR within the metric's margin (TOST).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sjdbench.eval.metrics.equivalence import ALPHA, claimed, equivalence, margin_for, margin_text
from sjdbench.results.decoders import is_ar, is_greedy, needs, setting_name
from sjdbench.results.pairing import NO_SPEEDUP, find_baseline, speedup
from sjdbench.statistics_table import REPORT, columned


@dataclass(frozen=True)
class Metric:
    key: str  # column of Table.frame (CI bounds in key_lo, key_hi when ci)
    header: str
    digits: int
    better: str | None = None  # "max" | "min" | None (no best marked)
    ci: bool = False

    @property
    def arrow(self) -> str:
        return {"max": "↑", "min": "↓"}.get(self.better or "", "")


@dataclass
class Table:
    name: str  # file-safe id, e.g. "main" or "ablation-toy-toy-sjd_vp-W"
    title: str
    labels: list[str]  # string columns that name the rows
    metrics: list[Metric]
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)  # provenance lines
    warnings: list[str] = field(default_factory=list)
    group: tuple[str, str] = ("", "")  # (model, data)

    def __post_init__(self) -> None:
        missing = [m.key for m in self.metrics if m.key not in self.frame]
        if missing:  # runs written before a field existed: shown as "–", never as another number
            self.frame = self.frame.assign(**dict.fromkeys(missing, np.nan))

    def rounded(self, metric: Metric) -> pd.Series:
        return self.frame[metric.key].apply(lambda v: round(float(v), metric.digits) if _present(v) else np.nan)

    def best(self, metric: Metric) -> pd.Series:
        """Rows holding the column's best value as displayed (ties all count); none without a
        direction or with fewer than two values."""
        if metric.better is None:
            return pd.Series(False, index=self.frame.index)
        values = self.rounded(metric)
        if values.notna().sum() < 2:
            return pd.Series(False, index=self.frame.index)
        target = values.max() if metric.better == "max" else values.min()
        return values == target

    def cell(self, row: pd.Series, metric: Metric, ci_format: str = "{} [{}, {}]") -> str:
        value = row.get(metric.key)
        if not _present(value):
            return "–"
        text = fmt(value, metric.digits)
        if metric.ci and _present(row.get(f"{metric.key}_lo")) and _present(row.get(f"{metric.key}_hi")):
            text = ci_format.format(
                text, fmt(row[f"{metric.key}_lo"], metric.digits), fmt(row[f"{metric.key}_hi"], metric.digits)
            )
        return text


def _present(value) -> bool:
    if value is None:
        return False
    try:
        return not math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def fmt(value, digits: int) -> str:
    return f"{float(value):.{digits}f}"


def quality_digits(values) -> int:
    """Two decimals for numbers like FID 30.79, more for small ones (KID 0.0035 -> 5)."""
    finite = [abs(float(v)) for v in values if _present(v) and float(v) != 0]
    if not finite:
        return 2
    return int(max(2, 2 - math.floor(math.log10(float(np.median(finite))))))


# the speedup over AR (sjdbench.results.pairing) and the prompts it pairs: always shown beside the
# latency it divides
PAIRING_METRICS = [Metric("speedup", "speedup", 2, "max", ci=True), Metric("speedup_n", "N paired", 0)]
PAIRED_WITH = "latency_s_mean"


def speed_metrics() -> list[Metric]:
    """The decoding statistics the report shows (the statistics table's, timing first), with the
    speedup beside the latency."""
    metrics = []
    for statistic in columned(REPORT):
        metrics.append(Metric(statistic.name, statistic.header, statistic.digits, statistic.better))
        if statistic.name == PAIRED_WITH:
            metrics += PAIRING_METRICS
    return metrics


# run-level settings that become label columns when they differ inside one table
RUN_SETTINGS = {
    "batch_size": "B",
    "seed": "seed",
    "samples_per_prompt": "samples/prompt",
    "n_samples": "n",
    "device": "device",
    "env.sampling": "sampling",
    "env.weights": "weights",
}


def _setting_text(value) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "–" if not _present(value) and not isinstance(value, str) else str(value)


def _varying_run_settings(runs: pd.DataFrame) -> list[str]:
    out = []
    for column in RUN_SETTINGS:
        if column in runs and runs[column].map(_setting_text).nunique() > 1:
            out.append(column)
    return out


# -- quality columns ------------------------------------------------------------------------------


def quality_metrics(scores: pd.DataFrame, run_ids) -> tuple[list[Metric], pd.DataFrame]:
    """One Metric per (evaluator, metric, protocol) scored for any of the runs, and a frame indexed
    by run_id with value and CI columns for each."""
    subset = scores[scores["run_id"].isin(list(run_ids))] if not scores.empty else scores
    if subset.empty:
        return [], pd.DataFrame(index=pd.Index([], name="run_id"))
    groups = subset.groupby(["evaluator", "metric", "protocol_hash"], sort=True)
    names = [name for (_, name, _), _ in groups]
    metrics, columns = [], {}
    for (evaluator, name, protocol), frame in groups:
        key = f"q:{evaluator}:{protocol}"
        header = name if names.count(name) == 1 else f"{name} ({evaluator}, {str(protocol)[:6]})"
        lower = bool(frame["lower_is_better"].iloc[0])
        metrics.append(Metric(key, header, quality_digits(frame["value"]), "min" if lower else "max", ci=True))
        indexed = frame.drop_duplicates("run_id").set_index("run_id")
        columns[key] = indexed["value"]
        columns[f"{key}_lo"] = indexed["ci_lo"]
        columns[f"{key}_hi"] = indexed["ci_hi"]
    return metrics, pd.DataFrame(columns)


# -- building the frames --------------------------------------------------------------------------


def with_numbers(runs: pd.DataFrame, pairings: pd.DataFrame, quality: pd.DataFrame) -> pd.DataFrame:
    """Runs with their speedup (pairing columns) and quality scores (quality_metrics' frame)."""
    frame = runs.merge(pairings, on="run_id", how="left")
    if not quality.empty:
        frame = frame.merge(quality, left_on="run_id", right_index=True, how="left")
    return frame


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """AR first, then lossless decoders, then lossy ones; by label and window inside each block."""
    keys = frame.assign(_ar=~frame["is_ar"].astype(bool), _lossy=~frame["lossless"].astype(bool))
    return keys.sort_values(["_ar", "_lossy", "decoder", "window", "run_id"]).drop(columns=["_ar", "_lossy"])


def _labelled(frame: pd.DataFrame, label_columns: dict[str, str]) -> pd.DataFrame:
    out = frame.copy()
    for column, header in label_columns.items():
        if column == "lossless":
            # a greedy verifier's claim is equality with greedy AR, not with the sampled baseline beside it
            specs = frame["decoder_spec"] if "decoder_spec" in frame else pd.Series(None, index=frame.index)
            greedy = specs.map(lambda spec: is_greedy(spec) and not is_ar(spec)).astype(bool)
            lossless = frame["lossless"].astype(bool)
            out[header] = np.where(lossless & greedy, "greedy", np.where(lossless, "yes", "no"))
        elif column == "needs" and "needs" not in frame:  # a frame made without it: read the stored decoders
            specs = frame["decoder_spec"] if "decoder_spec" in frame else pd.Series(None, index=frame.index)
            out[header] = specs.map(needs)
        else:
            out[header] = frame[column].map(_setting_text)
    return out


def main_run_ids(runs: pd.DataFrame) -> set[str]:
    """Runs of the main table: AR, each decoder at its preset's settings at the most common window
    of such runs, and every run of an algorithm (part chain) that has no such run."""
    decoders = runs[~runs["is_ar"].astype(bool)]
    defaults = decoders[(decoders["decoder"] == decoders["decoder_family"]) & (decoders["decoder_family"] != "custom")]
    chosen = set(runs.loc[runs["is_ar"].astype(bool), "run_id"])
    if not defaults.empty:
        window = defaults["window"].mode().sort_values().iloc[0]
        chosen |= set(defaults.loc[defaults["window"] == window, "run_id"])
    covered = set(runs.loc[runs["run_id"].isin(chosen), "chain"])
    chosen |= set(decoders.loc[~decoders["chain"].isin(covered), "run_id"])
    return chosen


def main_table(
    runs: pd.DataFrame, pairings: pd.DataFrame, scores: pd.DataFrame, group: tuple[str, str], every_run: bool = False
) -> Table:
    chosen = runs if every_run else runs[runs["run_id"].isin(main_run_ids(runs))]
    q_metrics, quality = quality_metrics(scores, chosen["run_id"])
    frame = _ordered(with_numbers(chosen, pairings, quality))
    labels = {"decoder": "decoder", "window": "W", "lossless": "lossless", "needs": "needs"}
    labels.update({c: RUN_SETTINGS[c] for c in _varying_run_settings(frame)})
    frame = _labelled(frame, labels).reset_index(drop=True)
    model, data = group
    return Table(
        f"main-{slug(model)}-{slug(data)}",
        f"{model} on {data}: decoders against AR",
        list(labels.values()),
        speed_metrics() + q_metrics,
        frame,
        group=group,
    )


def _setting_columns(runs: pd.DataFrame) -> list[str]:
    """Flat decoder settings that are knobs (not the part names that define the algorithm)."""
    columns = [c for c in runs.columns if c.startswith("spec.") and c != "spec.greedy"]
    return [c for c in columns if not c.endswith(".name") or c == "spec.init.name"]


def _varying(runs: pd.DataFrame, columns: list[str]) -> list[str]:
    return [c for c in columns if runs[c].dropna().map(_setting_text).nunique() > 1]


def _matches_reference(run: pd.Series, reference: dict, skip: str) -> bool:
    for column, value in reference.items():
        if column == skip or not _present_setting(run[column]):
            continue  # a knob the run does not read matches any reference value
        if _setting_text(run[column]) != value:
            return False
    return True


def ablation_tables(
    runs: pd.DataFrame, pairings: pd.DataFrame, scores: pd.DataFrame, group: tuple[str, str]
) -> list[Table]:
    """Per algorithm with runs at several settings: one table per varying setting (the runs at the
    reference values of every other setting), plus one over all settings for runs no slice covers."""
    tables = []
    decoders = runs[~runs["is_ar"].astype(bool)]
    main_ids = main_run_ids(runs)
    for chain, cluster in decoders.groupby("chain", sort=True):
        if len(cluster) < 2:
            continue
        dims = _varying(cluster, _setting_columns(cluster))
        if not dims:
            continue
        in_main = cluster[cluster["run_id"].isin(main_ids)]
        anchor = in_main.iloc[0] if len(in_main) == 1 else None
        reference = {}
        for column in dims:
            values = cluster[column].dropna().map(_setting_text)
            reference[column] = (
                _setting_text(anchor[column])
                if anchor is not None and _present_setting(anchor[column])
                else values.mode().sort_values().iloc[0]
            )
        families = sorted({f for f in cluster.get("decoder_family", pd.Series(dtype=str)).dropna() if f != "custom"})
        family = families[0] if len(families) == 1 else ", ".join(families) or chain
        covered: set[str] = set()
        slices = []
        for dim in dims:
            members = cluster[cluster.apply(lambda r: _matches_reference(r, reference, dim), axis=1)]
            if members[dim].dropna().map(_setting_text).nunique() >= 2:
                slices.append(([dim], members))
                covered |= set(members["run_id"])
        if set(cluster["run_id"]) - covered:
            slices.append((dims, cluster))
        for slice_dims, members in slices:
            tables.append(_ablation(members, slice_dims, chain, family, pairings, scores, group))
    return tables


def _present_setting(value) -> bool:
    return isinstance(value, str) or _present(value)


def _ablation(members, dims, chain, family, pairings, scores, group) -> Table:
    q_metrics, quality = quality_metrics(scores, members["run_id"])
    frame = with_numbers(members, pairings, quality)
    frame = frame.sort_values(dims, key=lambda s: s.map(_sort_key)).reset_index(drop=True)
    labels = {d: setting_name(d[len("spec.") :]) for d in dims}
    labels["decoder"] = "decoder"
    labels.update({c: RUN_SETTINGS[c] for c in _varying_run_settings(frame)})
    frame = _labelled(frame, labels)
    over = " × ".join(labels[d] for d in dims)
    model, data = group
    name = f"ablation-{slug(model)}-{slug(data)}-{slug(chain)}-{slug('-'.join(labels[d] for d in dims))}"
    return Table(
        name,
        f"{model} on {data}: {family} ({chain}) over {over}",
        list(labels.values()),
        speed_metrics() + q_metrics,
        frame,
        group=group,
    )


def _sort_key(value):
    """Numbers in numeric order, then text; missing last."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _present(value):
        return (0, float(value), "")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, 0.0, "")
    return (1, 0.0, str(value))


# -- per-category (Parti) -------------------------------------------------------------------------

CATEGORY_FIELDS = ("Category", "Challenge")


def category_column(samples: pd.DataFrame, name: str) -> str | None:
    """The samples column holding a prompt's Category / Challenge (meta.Category, meta.category,
    or a top-level column), if any."""
    for candidate in (f"meta.{name}", f"meta.{name.lower()}", name, name.lower()):
        if candidate in samples and samples[candidate].notna().any():
            return candidate
    return None


def category_tables(runs: pd.DataFrame, samples: pd.DataFrame, group: tuple[str, str]) -> list[Table]:
    """Per Parti Category and Challenge: step compression and paired speedup of each main-table
    decoder, computed from the samples of that category only."""
    tables = []
    chosen = runs[runs["run_id"].isin(main_run_ids(runs))]
    model, data = group
    for name in CATEGORY_FIELDS:
        column = category_column(samples, name)
        if column is None:
            continue
        own = samples[samples["run_id"].isin(chosen["run_id"])]
        decoders = _ordered(chosen[~chosen["is_ar"].astype(bool)])
        categories = sorted(own[column].dropna().astype(str).unique())
        for what, header in (("step_compression", "step compression"), ("speedup", "speedup")):
            rows = []
            for category in categories:
                here = own[own[column].astype(str) == category]
                row = {name: category, "n": here["prompt_id"].nunique()}
                for _, run in decoders.iterrows():
                    mine = here[here["run_id"] == run["run_id"]]
                    key = f"d:{run['run_id']}"
                    if what == "step_compression":
                        row[key] = (
                            mine["n_tokens"].sum() / mine["nfe"].sum() if len(mine) and mine["nfe"].sum() else np.nan
                        )
                    else:
                        ar_id = _baseline_id(run, runs)
                        result = speedup(here[here["run_id"] == ar_id], mine) if ar_id else NO_SPEEDUP
                        value = np.nan if result.value is None else result.value
                        row.update({key: value, f"{key}_lo": result.lo, f"{key}_hi": result.hi})
                rows.append(row)
            metrics = [
                Metric(f"d:{r['run_id']}", _decoder_header(r, decoders), 2, "max", ci=what == "speedup")
                for _, r in decoders.iterrows()
            ]
            frame = pd.DataFrame(rows)
            frame["n"] = frame["n"].astype(str)
            tables.append(
                Table(
                    f"{name.lower()}-{what}-{slug(model)}-{slug(data)}",
                    f"{model} on {data}: {header} per Parti {name}",
                    [name, "n"],
                    metrics,
                    frame,
                    group=group,
                )
            )
    return tables


def _baseline_id(run: pd.Series, runs: pd.DataFrame) -> str | None:
    baseline = find_baseline(run, runs)
    return None if baseline is None else baseline["run_id"]


def _decoder_header(run: pd.Series, decoders: pd.DataFrame) -> str:
    windows = decoders["window"].nunique()
    return run["decoder"] if windows == 1 else f"{run['decoder']} W={run['window']}"


# -- quality --------------------------------------------------------------------------------------


def quality_tables(
    runs: pd.DataFrame,
    scores: pd.DataFrame,
    group: tuple[str, str],
    margins: dict[str, float | None] | None = None,
) -> list[Table]:
    """Per evaluator: each scored run's value with CI, its paired difference to AR with CI, N, and
    the noise floor (e.g. FD between two AR seeds) against which a difference is read; for metrics
    with an equivalence margin (eval.metrics.equivalence; `margins` overrides the defaults), whether
    each lossless decoder is shown equivalent to its AR baseline within it."""
    subset = scores[scores["run_id"].isin(runs["run_id"])] if not scores.empty else scores
    tables = []
    model, data = group
    for (evaluator, name, protocol), frame in subset.groupby(["evaluator", "metric", "protocol_hash"], sort=True):
        merged = _ordered(
            runs.merge(frame.drop(columns=["n"]).rename(columns={"ar_run_id": "score_ar_run_id"}), on="run_id")
        )
        merged = merged.rename(columns={"ci_lo": "value_lo", "ci_hi": "value_hi"})
        merged["n"] = frame.set_index("run_id").reindex(merged["run_id"])["n"].map(_setting_text).to_numpy()
        digits = quality_digits(merged["value"])
        lower = bool(frame["lower_is_better"].iloc[0])
        metrics = [
            Metric("value", name, digits, "min" if lower else "max", ci=True),
            Metric("delta", "Δ vs AR", digits, None, ci=True),
            Metric("noise_floor", "noise floor", digits),
        ]
        labels = {"decoder": "decoder", "window": "W", "lossless": "lossless"}
        labelled = _labelled(merged, labels).reset_index(drop=True)
        columns = [*labels.values(), "n"]
        margin = margin_for(str(evaluator), str(name), margins)
        notes = []
        if margin is not None:
            header = f"equivalence (±{margin_text(margin)})"
            labelled[header] = equivalence_cells(merged, frame, runs, margin)
            columns.append(header)
            notes.append(equivalence_note(str(evaluator), margin))
        tables.append(
            Table(
                f"quality-{slug(model)}-{slug(data)}-{slug(evaluator)}-{str(protocol)[:8]}",
                f"{model} on {data}: {name} ({evaluator}, protocol {str(protocol)[:8]})",
                columns,
                metrics,
                labelled,
                notes=notes,
                group=group,
            )
        )
    return tables


def equivalence_cells(rows: pd.DataFrame, scores: pd.DataFrame, runs: pd.DataFrame, margin: float) -> list[str]:
    """Per quality-table row: TOST of its per-prompt differences to its AR baseline (the per-sample
    values of both score files) at ±margin; "–" where no equality is claimed (eval.metrics.equivalence)."""
    per_sample = scores.drop_duplicates("run_id").set_index("run_id")["per_sample"]
    greedy = runs.drop_duplicates("run_id").set_index("run_id")["greedy"].fillna(False).astype(bool)
    cells = []
    for _, row in rows.iterrows():  # in the order of `rows`
        ar_id = row.get("score_ar_run_id")
        ar_id = ar_id if isinstance(ar_id, str) else None
        if not claimed(bool(row["is_ar"]), bool(row["lossless"]), bool(row["greedy"]), bool(greedy.get(ar_id, False))):
            cells.append("–")
            continue
        theirs = per_sample.get(ar_id) if ar_id else None
        cells.append(equivalence(per_sample.get(row["run_id"]), theirs, margin).text())
    return cells


def equivalence_note(evaluator: str, margin: float) -> str:
    return (
        f"equivalence: two one-sided tests (TOST) at α = {ALPHA:g} each on the per-prompt differences to AR: "
        f"'equivalent to AR within ±{margin_text(margin)}' when the {100 * (1 - 2 * ALPHA):.0f} % paired-t "
        "interval of the mean difference lies inside the margin, 'not shown' otherwise (too few prompts, too "
        "much noise, or a real difference); asked of lossless decoders only (greedy ones against a greedy AR "
        f"run); set the margin with `sjdbench report --equivalence-margin {evaluator}=M`"
    )


def slug(text) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_") or "x"
