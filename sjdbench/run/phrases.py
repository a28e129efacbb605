"""Mining a model's visual phrases from its own AR samples (`sjdbench phrases mine`): the table the
`phrases` verifier (SJD-PV, sjdbench/decoding/verifiers/phrases.py) reads.

A phrase is a pair of tokens (a, b) written at consecutive positions of the decoding order (b right
after a: along a grid row, or a row's last token and the row-end token after it). The criterion is
co-occurrence: the pair was seen at least `min_count` times in the stored AR samples and its
pointwise mutual information log(c(a, b) T / (c(a) c(b))) is at least `min_pmi` (it occurs more often
than its tokens' own frequencies predict); the `max_pairs` most frequent such pairs are kept. The
table records where it came from (model, weights, the runs and samples read, the criterion) so a
result can be traced to the table it used.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sjdbench.errors import UserError


def ar_runs(results_dir: Path, model: str) -> list[str]:
    """The usable AR runs of `model` in a store (the model's own samples, undistorted by a decoder)."""
    from sjdbench.results.runs import USABLE, runs_frame

    frame = runs_frame(results_dir)
    if frame.empty:
        return []
    chosen = frame[(frame["model"] == model) & frame["is_ar"].astype(bool) & frame["status"].isin(USABLE)]
    return sorted(chosen["run_id"])


def mine(
    results_dir: Path, model: str, min_count: int = 5, min_pmi: float = 1.0, max_pairs: int = 4096
) -> dict[str, Any]:
    """The phrase table of `model` from the AR runs stored under `results_dir`."""
    from sjdbench.results.store import RunStore

    runs = ar_runs(results_dir, model)
    if not runs:
        raise UserError(
            f"no AR run of model '{model}' in {results_dir}; decode some first: "
            f"sjdbench run model={model} decoder=ar results_dir={results_dir}"
        )
    pairs: Counter = Counter()
    singles: Counter = Counter()
    samples, weights = 0, set()
    for run_id in runs:
        store = RunStore(results_dir, run_id)
        for row in store.rows():
            tokens = [int(t) for t in row.get("tokens") or []]
            if len(tokens) < 2:
                continue
            samples += 1
            singles.update(tokens)
            pairs.update(zip(tokens, tokens[1:]))
        env_path = store.dir / "env.json"
        env = json.loads(env_path.read_text()) if env_path.exists() else {}
        weights.add(str(env.get("weights")))
    total_pairs, total_tokens = sum(pairs.values()), sum(singles.values())
    kept: list[list[float]] = []
    for (a, b), count in pairs.most_common():
        if count < min_count or len(kept) >= max_pairs:
            break
        pmi = math.log(count * total_tokens**2 / (total_pairs * singles[a] * singles[b]))
        if pmi >= min_pmi:
            kept.append([a, b, count, round(pmi, 4)])
    return {
        "model": model,
        "weights": sorted(weights)[0] if len(weights) == 1 else sorted(weights),
        "runs": runs,
        "samples": samples,
        "pairs_seen": len(pairs),
        "criterion": {"min_count": min_count, "min_pmi": min_pmi, "max_pairs": max_pairs, "order": "decoding"},
        "mined": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "pairs": kept,
    }


def write_table(table: dict[str, Any], path: Path) -> None:
    """Atomically: a reader never sees half a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(table, handle, indent=1)
    os.replace(tmp, path)
