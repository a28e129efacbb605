"""Read the results store into pandas: one row per run, one row per sample, one row per score file.

A run directory holds config.yaml, env.json, samples*.jsonl (one per shard), summary.json (written
last) and, once evaluated, scores/<evaluator>-<protocol_hash>.json. Runs are read from these files
only, never by re-composing configs, so a report also reads stores written by other versions; runs
written before run ids followed the built decoder (no `schema` in env.json) are listed as legacy.

`runs_frame` is the one reader of the store's runs (report, eval, sweep and run tables, and the
Python API's `sjdbench.load_runs`); `paired_runs` adds each run's speedup over its AR baseline.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from sjdbench.errors import UserError
from sjdbench.results.decoders import flatten_spec, is_ar, is_greedy, is_lossless, needs, part_chain
from sjdbench.results.files import (
    ENV_TYPES,
    SUMMARY_TYPES,
    config_problem,
    describe_bad_lines,
    read_json,
    read_rows,
    read_yaml,
    samples_sha,
    summary_disagreement,
)
from sjdbench.results.pairing import find_baseline, pair_all, pair_key, timing_of
from sjdbench.results.scorefile import SCORE_TYPES, score_problem, score_record
from sjdbench.results.store import (
    SCHEMA,
    USABLE,
    RunStore,
    check_marker,
    check_readable,
    newer_text,
    read_jsonl,
    run_status,
)
from sjdbench.results.summary import STAT_FIELDS, summarize
from sjdbench.runkey import SampleFacts

log = logging.getLogger(__name__)

DRAFT_TRACES = "draft_traces.jsonl"  # written beside a run by sjdbench.report.draft_traces


DAMAGED, NEWER = "damaged", "newer"  # statuses of runs no command reads: `problem` says why and what to do


def _facts(config: dict, env: dict, summary: dict) -> tuple[SampleFacts | None, str | None]:
    try:
        return SampleFacts.stored(config, env, summary), None
    except (TypeError, ValueError, AttributeError) as error:
        return None, f"config.yaml holds a setting of the wrong type ({error})"


def _files(run_dir: Path) -> tuple[dict, dict, dict, list[str], int | None]:
    """(summary, env, config, problems, newer schema) of a run folder's JSON and YAML files."""
    summary_read = read_json(run_dir / "summary.json", SUMMARY_TYPES)
    env_read = read_json(run_dir / "env.json", ENV_TYPES)
    config_read = read_yaml(run_dir / "config.yaml")
    summary, env, config = summary_read.doc or {}, env_read.doc or {}, config_read.doc or {}
    problems = [f"{name} {read.problem}" for name, read in (("summary.json", summary_read), ("env.json", env_read))]
    problems = [p for p, read in zip(problems, (summary_read, env_read)) if read.problem]
    if config_read.problem:
        problems.append(f"config.yaml {config_read.problem}")
    elif config_read.doc is not None and config_problem(config):
        problems.append(f"config.yaml {config_problem(config)}")
    disagreement = summary_disagreement(summary, env, config) if not problems else None
    if disagreement:
        problems.append(disagreement)
    has_samples = any(run_dir.glob("samples*.jsonl"))
    if config_read.missing and (summary or has_samples):
        problems.append("config.yaml is missing")
    if env_read.missing and (summary or has_samples):
        problems.append("env.json is missing")
    schemas = [doc.get("schema") for doc in (summary, env)]
    newer = max((s for s in schemas if isinstance(s, int) and not isinstance(s, bool) and s > SCHEMA), default=None)
    return summary, env, config, problems, newer


def read_run(run_dir: Path) -> dict[str, Any]:
    """One run as a flat record: its summary fields, env.json (as env.*), its stored decoder identity
    flattened (as spec.*), what it pairs on, and its status. Never raises: a run written by a newer sjdbench
    has status `newer`, a damaged one `damaged`, each with `problem` naming the file, the damage and
    the fix (the commands that read runs refuse such a run with that line when they select it)."""
    run_dir = Path(run_dir)
    summary, env, config, problems, newer = _files(run_dir)
    facts, wrong = _facts(config, env, summary)
    if wrong and not any(p.startswith("config.yaml") for p in problems):
        problems.append(wrong)
    status = run_status(summary or None, env or None)
    record: dict[str, Any] = dict(summary)
    stored = record.get("decoder_spec") or env.get("decoder_spec")  # ResolvedDecoder.identity(), as written
    decoder_identity = stored if isinstance(stored, dict) else None
    model_section, data_section = config.get("model"), config.get("data")
    record.update(
        {
            "run_id": run_dir.name,
            "run_dir": str(run_dir),
            "status": status,
            "problem": None,
            "problems": problems,
            "rows_checked": False,
            # rows present: the summary's count until the rows are read (`check_rows`)
            "n_rows": record.get("n_samples") if status in USABLE else _count_rows(run_dir),
            "model": record.get("model") or _name(model_section),
            "data": record.get("data") or _name(data_section),
            "decoder": record.get("decoder") or _name(config.get("decoder")),
            "decoder_spec": decoder_identity,
            "chain": part_chain(decoder_identity),
            "is_ar": is_ar(decoder_identity),
            "needs": needs(decoder_identity),  # besides the model: nothing, or a trained drafter
            # greedy by its verifier, or by its sampling (temperature 0: argmax draws)
            "greedy": is_greedy(decoder_identity) or (env.get("sampling") or {}).get("temperature") == 0,
            # the parts' own claim, recorded by the runner; derived from the stored identity for older runs
            "lossless": bool(record["decoder_lossless"])
            if "decoder_lossless" in record
            else is_lossless(decoder_identity),
            "samples_per_prompt": config.get("samples_per_prompt", 1),
            "batch_size": record.get("batch_size", config.get("batch_size", 1)),
            "model_options": (model_section.get("options") or {}) if isinstance(model_section, dict) else {},
            # what its samples share with its AR baseline, and the baseline's id (results.pairing)
            "sample_facts": dataclasses.asdict(facts) if facts else None,
            "pair_key": pair_key(facts),
            "has_draft_traces": (run_dir / DRAFT_TRACES).exists(),
        }
    )
    if newer is not None:
        record.update(status=NEWER, problem=newer_text(f"run {run_dir.name}", newer))
    elif problems and status != "legacy":
        record.update(status=DAMAGED, problem=damage_text(run_dir, problems))
    record.setdefault("window", (decoder_identity or {}).get("window"))
    for key, value in env.items():
        if key != "decoder_spec":
            record[f"env.{key}"] = value
    for key, value in flatten_spec(decoder_identity).items():
        record[f"spec.{key}"] = value
    return record


def _name(section: Any) -> str | None:
    return section.get("name") if isinstance(section, dict) else None


def damage_text(run_dir: Path, problems: list[str]) -> str:
    """One line: the run, what is damaged, and the two ways out."""
    return (
        f"run {run_dir.name} is damaged: {'; '.join(problems)}; re-run the command that wrote it (`sjdbench run` "
        "rebuilds summary.json, env.json and config.yaml, sets unreadable sample lines aside and decodes what is "
        f"missing), or move {run_dir} out of the store"
    )


def _count_rows(run_dir: Path) -> int:
    return len(RunStore(run_dir.parent.parent, run_dir.name).rows())


def _whole(value: Any) -> int | None:
    """A count read from a record or a frame row (where pandas may hold it as a float), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if value != int(value):
        return None
    return int(value)


def _in_set(rows: list[dict], record: dict) -> list[dict]:
    """The rows of the run's prompt set (what its summary counts): prompt ids below the set's size."""
    spp, wanted = _whole(record.get("samples_per_prompt")), _whole(record.get("n_wanted"))
    if spp is None or wanted is None or spp < 1:
        return rows
    size = wanted // spp
    return [r for r in rows if r["prompt_id"] < size and r.get("sample", 0) < spp]


def check_rows(record: dict[str, Any]) -> dict[str, Any]:
    """The record with what its sample files hold: lines that are no sample row, and a summary that
    counts more rows than are present, make it damaged; rows written after the summary make it
    incomplete (interrupted, or being written now); for a usable run every statistic is recomputed
    from the rows present (`n_samples` counts them), so nothing shown comes from a summary alone."""
    if record.get("rows_checked") or record["status"] in (NEWER, "legacy"):
        return record
    run_dir = Path(record["run_dir"])
    store = RunStore(run_dir.parent.parent, run_dir.name)
    problems = []
    for path in store.sample_files():
        read = read_rows(path)
        if read.bad:
            problems.append(describe_bad_lines(path.name, read.bad))
    rows = _in_set(store.rows(), record)
    out = {**record, "rows_checked": True, "n_rows": len(rows)}
    out["samples_sha"] = samples_sha((r["prompt_id"], r.get("sample", 0), str(r.get("prompt", ""))) for r in rows)
    counted = record.get("n_samples")
    if isinstance(counted, int) and len(rows) < counted and record["status"] != DAMAGED:
        problems.append(f"summary.json counts {counted} samples but the sample files hold {len(rows)}")
    if problems:
        problems = [*record.get("problems", []), *problems]
        return {**out, "status": DAMAGED, "problems": problems, "problem": damage_text(run_dir, problems)}
    if out["status"] not in USABLE:
        return out
    if isinstance(counted, int) and len(rows) > counted:
        why = "being written now" if store.being_written() else "interrupted after its summary was written"
        return {**out, "status": "incomplete", "incomplete_why": why}
    try:
        fresh = summarize(rows)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # rows of an older sjdbench lack fields
        fresh = {}  # its summary stands: it was computed from these same rows (counted above)
    out.update({key: value for key, value in fresh.items() if key in STAT_FIELDS})
    return out


def runs_frame(root: Path, rows: bool = False) -> pd.DataFrame:
    """Every run directory under root/runs, whatever its status (complete, finished, incomplete,
    legacy, damaged, newer). With `rows`, each run's sample files are read too (`check_rows`): what
    report, eval and the Python API show; without, statuses come from the summaries (what run and
    sweep need to pair a run they just wrote). A store whose schema marker is newer or damaged is
    refused with one line."""
    check_readable(Path(root), files=False)  # its folders; readers checked its files when they selected
    check_marker(Path(root))
    runs = Path(root) / "runs"
    run_dirs = sorted(p for p in runs.glob("*") if p.is_dir()) if runs.is_dir() else []
    wanted = ("env.json", "summary.json", "config.yaml")
    records = [
        read_run(d) for d in run_dirs if any((d / name).exists() for name in wanted) or any(d.glob("samples*.jsonl"))
    ]
    if rows:
        records = [check_rows(r) for r in records]
    return pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=["run_id", "status", "problem"])


def _flat_row(row: dict) -> dict:
    """Nested dicts of a sample row (machine, timing, meta) become dotted columns; lists stay lists,
    except the generated tokens, kept as int32 arrays (a 5,000-prompt run of 1,000-token images is
    5M ints: compact arrays, not Python lists)."""
    flat = {}
    for key, value in row.items():
        if key == "tokens" and isinstance(value, list):
            flat[key] = np.asarray(value, dtype=np.int32)
        elif isinstance(value, dict):
            for inner, v in value.items():
                flat[f"{key}.{inner}"] = v
        else:
            flat[key] = value
    return flat


# what pairing reads: per-sample latency, or for batched runs the streams' throughput
TIMING_COLUMNS = [
    "prompt_id",
    "sample",
    "latency_s",
    "timing.session",
    "machine.busy",
    "stream.id",
    "stream.images",
    "stream.decode_s",
    "stream.batch_size",
]


def load_samples(runs: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """Every sample row of the given runs' prompt sets (what their summaries count: a row whose
    prompt id is not in the set is never exported or paired), flat, with the run's identity columns
    in front (only the given row columns, when named)."""
    frames = []
    for run in runs.itertuples(index=False):
        rows = _in_set(RunStore(Path(run.run_dir).parent.parent, run.run_id).rows(), run._asdict())
        if not rows:
            continue
        flat = [_flat_row(r) for r in rows]
        if columns is not None:
            flat = [{k: r.get(k) for k in columns} for r in flat]
        frame = pd.DataFrame.from_records(flat)
        frame.insert(0, "run_id", run.run_id)
        frame.insert(1, "model", run.model)
        frame.insert(2, "data", run.data)
        frame.insert(3, "decoder", run.decoder)
        frame.insert(4, "window", run.window)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["run_id", "prompt_id", "sample", "latency_s"])
    return pd.concat(frames, ignore_index=True)


def with_baselines(chosen: pd.DataFrame, store: pd.DataFrame) -> pd.DataFrame:
    """`chosen` and the AR baselines (in `store`) of its runs."""
    ids = set(chosen["run_id"])
    for _, run in chosen.iterrows():
        baseline = find_baseline(run, store)
        if baseline is not None:
            ids.add(baseline["run_id"])
    return store[store["run_id"].isin(ids)]


def paired_runs(chosen: pd.DataFrame, store: pd.DataFrame, timing: bool = False) -> pd.DataFrame:
    """The pairings (results.pairing.pair_all) of the chosen runs against their baselines in the
    store, reading only the rows' timing columns; with `timing`, also how far each speedup can be
    trusted (results.pairing.timing_of: paired, paired_samples, samples, busy_samples)."""
    samples = load_samples(with_baselines(chosen, store), columns=TIMING_COLUMNS)
    pairings = pair_all(chosen, samples, store)
    if timing:
        by_run = dict(list(samples.groupby("run_id"))) if not samples.empty else {}
        empty = samples.iloc[0:0]
        trust = [
            timing_of(by_run.get(p.ar_run_id, empty), by_run.get(p.run_id, empty))
            for p in pairings.itertuples(index=False)
        ]
        pairings = pd.concat([pairings, pd.DataFrame(trust, index=pairings.index)], axis=1)
    return pairings


def speedups(root: Path, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """run_id -> its pairing (ar_run_id, speedup, speedup_lo, speedup_hi, speedup_n, and the timing
    trust of `paired_runs`), each run paired against the whole store at root: what `run`, `sweep`
    and `eval` print (and `report` computes the same way)."""
    store = runs_frame(root)
    if store.empty:
        return {}
    chosen = store[store["run_id"].isin(run_ids) & store["status"].isin(USABLE)]
    if chosen.empty:
        return {}
    usable = store[store["status"].isin(USABLE)]
    pairings = paired_runs(chosen, usable, timing=True).astype(object).where(lambda f: f.notna(), None)
    return {row["run_id"]: row.to_dict() for _, row in pairings.iterrows()}


SCORE_COLUMNS = [
    "run_id",
    "evaluator",
    "metric",
    "lower_is_better",
    "value",
    "ci_lo",
    "ci_hi",
    "n",
    "protocol_hash",
    "ar_run_id",
    "delta",
    "delta_lo",
    "delta_hi",
    "n_pairs",
    "noise_floor",
    "noise_floor_how",
    "per_sample",
    "file",
    "samples_sha256",
]


def is_current(score: dict, run: dict) -> bool:
    """Whether a score is of the samples its run holds now: the samples' hash it records (or, for
    score files that record none, their count) equals the run's. A run that grew after it was
    scored has a stale score until `sjdbench eval` scores it again."""
    held = run.get("samples_sha")
    if score.get("samples_sha256") and isinstance(held, str):
        return score["samples_sha256"] == held
    return score.get("n") == run.get("n_rows")


@dataclass
class Scores:
    """The score files of some runs: the current ones (a frame of SCORE_COLUMNS), and one line per
    superseded (kept on disk, never shown) and per damaged file."""

    current: pd.DataFrame
    superseded: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)


def _score_files(run: dict) -> Iterator[tuple[Path, dict | None, str | None]]:
    """(path, document, problem) of each score file of a run, each read once: the document when it
    is a score file this sjdbench reads, else None and why not."""
    folder = Path(run["run_dir"]) / "scores"
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        read = read_json(path, SCORE_TYPES)
        problem = read.problem or score_problem(read.doc or {})
        yield path, (None if problem else read.doc), problem


def current_score_docs(run: dict) -> dict[str, dict]:
    """evaluator -> the score document of the samples the run (a record of `check_rows`) holds now
    (`is_current`); of several current protocols, the latest written. Damaged files are left out."""
    current = []
    for path, doc, _ in _score_files(run):
        if doc is not None and is_current(score_record(doc, path, run["run_id"]), run):
            current.append((path.stat().st_mtime, doc))
    return {doc["evaluator"]: doc for _, doc in sorted(current, key=lambda item: item[0])}


def read_scores(runs: pd.DataFrame) -> Scores:
    records: list[dict]
    stale: list[dict]
    records, stale, damaged = [], [], []
    for run in runs.to_dict("records"):
        for path, doc, problem in _score_files(run):
            if doc is None:
                damaged.append(f"{path} {problem}")
                continue
            record = score_record(doc, path, run["run_id"])
            (records if is_current(record, run) else stale).append(record)
    current = pd.DataFrame.from_records(records, columns=SCORE_COLUMNS)
    fresh = {(r["run_id"], r["evaluator"]) for r in records}
    held = runs.set_index("run_id")["n_rows"].to_dict() if "n_rows" in runs else {}
    grouped: dict[tuple[str, bool], list[dict]] = {}
    for record in stale:  # one line per run: superseded (a current score exists) or stale (none does)
        key = (record["run_id"], (record["run_id"], record["evaluator"]) in fresh)
        grouped.setdefault(key, []).append(record)
    lines = []
    for (run_id, superseded), files in sorted(grouped.items()):
        names = ", ".join(sorted(Path(r["file"]).name for r in files))
        counts = "/".join(sorted({str(r["n"]) for r in files}))
        what = f"run {run_id}: {len(files)} score file{'s' if len(files) > 1 else ''} over {counts} samples ({names})"
        if superseded:
            lines.append(
                f"{what}: superseded by scores of the {held.get(run_id)} samples it holds now (kept, not shown)"
            )
        else:
            lines.append(
                f"{what}: stale, the run holds {held.get(run_id)} samples now; `sjdbench eval {run_id}` scores them "
                "(kept, not shown)"
            )
    return Scores(current, lines, damaged)


def load_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """The current score files of these runs (one row per file); a damaged one is refused with one
    line naming it and the fix."""
    scores = read_scores(runs)
    if scores.damaged:
        more = f" (and {len(scores.damaged) - 1} more)" if len(scores.damaged) > 1 else ""
        raise UserError(
            f"score file {scores.damaged[0]}{more}; `sjdbench eval` scores the run again and rewrites it, "
            "or delete the file"
        )
    return scores.current


def load_draft_traces(run_dir: str | Path) -> list[dict]:
    """Rows of draft_traces.jsonl: per traced sample, every verified draft with its probability
    trajectory and whether it was accepted."""
    return read_jsonl(Path(run_dir) / DRAFT_TRACES)
