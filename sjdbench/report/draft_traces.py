"""Accepted vs rejected draft trajectories, recorded by replaying stored samples.

The decoding loop records, per sample, the probability trajectories of the *committed* tokens at a
few positions. SJD-VP's key figure needs every *verified draft*: the probability of its token at
its position over the iterations before verification, and whether it was accepted. Runs do not
store those (they would dwarf the samples), so this module replays a stored sample (the run's
model, decoder, sampling and per-sample seed, hence the same random stream) with the loop's own
draft tracing on (`Decoder.trace_drafts`, any topology), checks that the replay reproduced the
stored tokens, and writes the result beside the run as `draft_traces.jsonl`:

    {"prompt_id": 0, "sample": 0, "matches_stored": true,
     "drafts": [{"pos": 17, "token": 203, "accepted": true, "probs": [0.12, 0.31, 0.44]}, ...]}

`probs` is oldest first and ends at the verifying iteration.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from sjdbench.decoding.loop import jacobi_decode
from sjdbench.errors import UserError
from sjdbench.results.runs import DRAFT_TRACES
from sjdbench.results.store import RunStore, atomic_write_text

log = logging.getLogger(__name__)


def _run_config(run_dir: Path):
    from omegaconf import OmegaConf

    from sjdbench.config.schema import to_run_config

    return to_run_config(OmegaConf.load(run_dir / "config.yaml"))


def record_run(run_dir: Path, prompts: int, progress: Callable[[str], None] | None = None) -> Path:
    """Replay sample 0 of the run's first `prompts` prompts and write draft_traces.jsonl beside it.

    Refuses (UserError, one line) when today's code would not rebuild the run's decoder, weights or
    sampling, or when the run's device is not available here."""
    from sjdbench.config.schema import check_config
    from sjdbench.models.registry import resolve_model
    from sjdbench.run.runner import resolve_sampling

    run_dir = Path(run_dir)
    env = json.loads((run_dir / "env.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    config = _run_config(run_dir)
    spec = check_config(config)
    if spec.identity() != summary.get("decoder_spec"):
        raise UserError(
            f"{run_dir.name}: this sjdbench builds a different decoder from its config.yaml than the "
            "one that wrote the run; cannot replay it for draft traces"
        )
    model = resolve_model(config.model.name, dict(config.model.options), config.model._target_)
    if model.fingerprint() != env.get("weights"):
        raise UserError(f"{run_dir.name}: the model's weight files changed since the run; cannot replay it")
    device = env.get("device", "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{run_dir.name} ran on {device}, which is not available here; trace it on that machine")
    rows = [r for r in RunStore(run_dir.parent.parent, run_dir.name).rows() if r.get("sample", 0) == 0][:prompts]
    adapter = model.build(device)
    decoder = spec.build(adapter, trace_drafts=True)
    sampling = resolve_sampling(adapter.default_sampling, config.sampling)
    if env.get("sampling") and asdict(sampling) != env["sampling"]:
        raise UserError(f"{run_dir.name}: the model's default sampling changed since the run; cannot replay it")
    lines = []
    for row in rows:
        generator = torch.Generator(device).manual_seed(int(row["seed"]))
        result = jacobi_decode(adapter, row["prompt"], decoder, sampling, generator)
        drafts = [{**d, "probs": [round(v, 5) for v in d["probs"]]} for d in result.stats.draft_traces]
        matches = result.tokens.tolist() == row["tokens"]
        if not matches:
            log.warning("%s prompt %s: the replay did not reproduce the stored tokens", run_dir.name, row["prompt_id"])
        lines.append(
            json.dumps(
                {
                    "prompt_id": row["prompt_id"],
                    "sample": row.get("sample", 0),
                    "matches_stored": matches,
                    "drafts": drafts,
                },
                separators=(",", ":"),
            )
        )
        if progress:
            progress(f"{run_dir.name}: traced prompt {row['prompt_id']} ({len(drafts)} verified drafts)")
    path = run_dir / DRAFT_TRACES
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
