"""Read the results store into pandas: one row per run, one row per sample, one row per score file.

A run directory holds config.yaml, env.json, samples*.jsonl (one per shard), summary.json (written
last) and, once evaluated, scores/<evaluator>-<protocol_hash>.json. Runs are read from these files
only, never by re-composing configs, so a report also reads stores written by other versions; runs
written before run ids followed the built decoder (no `schema` in env.json) are listed as legacy.

`load_runs` is the one reader of the store's runs (report, eval, sweep and run tables, and the
Python API's `sjdbench.load_runs`); `paired_runs` adds each run's speedup over its AR baseline.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sjdbench.config.identity import SampleFacts
from sjdbench.results.decoders import flatten_spec, is_ar, is_greedy, is_lossless, part_chain
from sjdbench.results.pairing import find_baseline, pair_all, pair_key, timing_of
from sjdbench.results.store import USABLE, RunStore, read_jsonl, run_status

log = logging.getLogger(__name__)

DRAFT_TRACES = "draft_traces.jsonl"  # written beside a run by sjdbench.report.draft_traces


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as error:
        log.warning("%s is unreadable (%s); ignored", path, error)
        return None


def _read_yaml(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as error:
        log.warning("%s is unreadable (%s); ignored", path, error)
        return {}


def _count_rows(run_dir: Path) -> int:
    return sum(1 for path in run_dir.glob("samples*.jsonl") for _ in read_jsonl(path))


def read_run(run_dir: Path) -> dict[str, Any]:
    """One run as a flat record: its summary fields, env.json (as env.*), its decoder spec flattened
    (as spec.*), what it pairs on, and whether it is complete."""
    summary = _read_json(run_dir / "summary.json")
    env = _read_json(run_dir / "env.json") or {}
    config = _read_yaml(run_dir / "config.yaml")
    status = run_status(summary, env)
    facts = SampleFacts.stored(config, env, summary or {})
    record: dict[str, Any] = dict(summary or {})
    spec = record.get("decoder_spec") or env.get("decoder_spec")
    record.update(
        {
            "run_id": run_dir.name,
            "run_dir": str(run_dir),
            "status": status,
            # rows present: the summary's count for a run it covers; counted for the others (to list them)
            "n_rows": record.get("n_samples") if status in USABLE else _count_rows(run_dir),
            "model": record.get("model") or (config.get("model") or {}).get("name"),
            "data": record.get("data") or (config.get("data") or {}).get("name"),
            "decoder": record.get("decoder") or (config.get("decoder") or {}).get("name"),
            "decoder_spec": spec,
            "chain": part_chain(spec),
            "is_ar": is_ar(spec),
            "greedy": is_greedy(spec),
            # the parts' own claim, recorded by the runner; derived from the stored spec for older runs
            "lossless": bool(record["decoder_lossless"]) if "decoder_lossless" in record else is_lossless(spec),
            "samples_per_prompt": config.get("samples_per_prompt", 1),
            "model_options": (config.get("model") or {}).get("options") or {},
            # what its samples share with its AR baseline, and the baseline's id (results.pairing)
            "sample_facts": dataclasses.asdict(facts) if facts else None,
            "pair_key": pair_key(facts),
            "has_draft_traces": (run_dir / DRAFT_TRACES).exists(),
        }
    )
    record.setdefault("window", (spec or {}).get("window"))
    for key, value in env.items():
        if key != "decoder_spec":
            record[f"env.{key}"] = value
    for key, value in flatten_spec(spec).items():
        record[f"spec.{key}"] = value
    return record


def load_runs(root: Path) -> pd.DataFrame:
    """Every run directory under root/runs, whatever its status (complete, finished, incomplete, legacy)."""
    run_dirs = (
        sorted(p for p in (Path(root) / "runs").glob("*") if p.is_dir()) if (Path(root) / "runs").is_dir() else []
    )
    records = [read_run(d) for d in run_dirs if (d / "env.json").exists() or (d / "summary.json").exists()]
    return pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=["run_id", "status"])


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
    """Every sample row of the given runs, flat, with the run's identity columns in front (only the
    given row columns, when named)."""
    frames = []
    for run in runs.itertuples(index=False):
        rows = RunStore(Path(run.run_dir).parent.parent, run.run_id).rows()
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
    store = load_runs(root)
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
]


def _ci(pair: Any) -> tuple[float | None, float | None]:
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        return pair[0], pair[1]
    return None, None


def read_score(path: Path, run_id: str) -> dict | None:
    """One score file (schema 1) as a flat record; files of another schema are skipped with a log line."""
    doc = _read_json(path)
    if not doc:
        return None
    if doc.get("schema") != 1 or "value" not in doc or "evaluator" not in doc:
        log.warning("%s is not a schema-1 score file; ignored", path)
        return None
    lo, hi = _ci(doc.get("ci95"))
    paired = doc.get("paired_vs_ar") or {}
    delta_lo, delta_hi = _ci(paired.get("ci95"))
    floor = doc.get("noise_floor") or {}
    return {
        "run_id": doc.get("run_id", run_id),
        "evaluator": doc["evaluator"],
        "metric": doc.get("metric", doc["evaluator"]),
        "lower_is_better": bool(doc.get("lower_is_better", False)),
        "value": doc["value"],
        "ci_lo": lo,
        "ci_hi": hi,
        "n": doc.get("n"),
        "protocol_hash": doc.get("protocol_hash", path.stem.rpartition("-")[2]),
        "ar_run_id": paired.get("ar_run_id"),
        "delta": paired.get("delta"),
        "delta_lo": delta_lo,
        "delta_hi": delta_hi,
        "n_pairs": paired.get("n_pairs"),
        "noise_floor": floor.get("value"),
        "noise_floor_how": floor.get("how"),
        "per_sample": doc.get("per_sample"),
        "file": str(path),
    }


def load_scores(runs: pd.DataFrame) -> pd.DataFrame:
    records = []
    for run in runs.itertuples(index=False):
        for path in sorted((Path(run.run_dir) / "scores").glob("*.json")):
            record = read_score(path, run.run_id)
            if record:
                records.append(record)
    return pd.DataFrame.from_records(records, columns=SCORE_COLUMNS)


def load_draft_traces(run_dir: str | Path) -> list[dict]:
    """Rows of draft_traces.jsonl: per traced sample, every verified draft with its probability
    trajectory and whether it was accepted."""
    return read_jsonl(Path(run_dir) / DRAFT_TRACES)
