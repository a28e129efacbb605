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

SCHEMA = 1


def protocol_hash(protocol: dict) -> str:
    keyed = {k: v for k, v in protocol.items() if k != "versions"}
    text = json.dumps(keyed, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def score_path(run_dir: Path, evaluator: str, digest: str) -> Path:
    return Path(run_dir) / "scores" / f"{evaluator}-{digest}.json"


def read_score(path: Path) -> dict | None:
    """The score file's document; None when absent or damaged (not UTF-8, not JSON, not an object:
    `sjdbench eval` then scores again and rewrites it)."""
    from sjdbench.results.files import read_json

    return read_json(Path(path)).doc


def write_score(path: Path, doc: dict) -> None:
    from sjdbench.results.store import atomic_write_json

    atomic_write_json(path, doc)


def run_scores(run_dir: Path) -> list[dict]:
    """Every score file of a run (any evaluator, any protocol)."""
    folder = Path(run_dir) / "scores"
    docs = [read_score(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return [d for d in docs if d and d.get("schema") == SCHEMA]
