"""Score files: `results/runs/<run_id>/scores/<evaluator>-<protocol_hash>.json`.

    {"schema": 1, "run_id", "evaluator", "metric", "lower_is_better", "value", "ci95": [lo, hi] | null,
     "n", "protocol": {...}, "protocol_hash", "per_sample": [{"prompt_id", "sample", "value"}] (per-sample
     metrics only), "paired_vs_ar": {"ar_run_id", "delta", "ci95", "n_pairs"} | null,
     "noise_floor": {"value", "how", "runs", ...} | null, "extra": {...}, "pending": [...]}

`protocol_hash` covers the whole protocol except library versions (recorded, not keyed), so a score
is computed once per protocol and found again by it. `pending` lists the comparisons that could not
be made yet (an AR run not finished); a later `sjdbench eval` fills them in without recomputing the
score itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sjdbench.results.files import read_json

SCHEMA = 1


def protocol_hash(protocol: dict) -> str:
    keyed = {k: v for k, v in protocol.items() if k != "versions"}
    text = json.dumps(keyed, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def score_path(run_dir: Path, evaluator: str, digest: str) -> Path:
    return Path(run_dir) / "scores" / f"{evaluator}-{digest}.json"


def write_score(path: Path, doc: dict) -> None:
    from sjdbench.results.store import atomic_write_json

    atomic_write_json(path, doc)


def _ci(pair: Any) -> tuple[float | None, float | None]:
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        return pair[0], pair[1]
    return None, None


SCORE_TYPES: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    "evaluator": (str,),
    "metric": (str,),
    "value": (int, float),
    "n": (int,),
    "protocol": (dict,),
    "lower_is_better": (bool,),
    "ci95": (list, type(None)),
    "paired_vs_ar": (dict, type(None)),
    "noise_floor": (dict, type(None)),
}


def score_problem(doc: dict) -> str | None:
    """Why a JSON object is not a score file this sjdbench reads (None: it is one)."""
    schema = doc.get("schema")
    if isinstance(schema, int) and schema > SCHEMA:
        return f"was written by a newer sjdbench (score schema {schema}; this one reads {SCHEMA}); upgrade it"
    if schema != SCHEMA or "value" not in doc or "evaluator" not in doc:
        return f"is not a score file (schema {SCHEMA} with evaluator and value)"
    return None


def read_score_file(path: Path) -> dict | None:
    """A score file's document; None when absent, damaged (not UTF-8, not JSON, not an object, a field
    of the wrong type) or of another schema (`sjdbench eval` then scores again and rewrites it)."""
    doc = read_json(Path(path), SCORE_TYPES).doc
    return None if doc is None or score_problem(doc) else doc


def score_record(doc: dict, path: Path, run_id: str) -> dict:
    """A score document as the flat record the store's score frame holds."""
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
        "samples_sha256": (doc.get("protocol") or {}).get("samples_sha256"),
    }
