"""Accepted vs rejected draft trajectories, recorded by replaying stored samples.

The decoding loop records, per sample, the probability trajectories of the *committed* tokens at a
few positions. SJD-VP's key figure needs every *verified draft*: the probability of its token at
its position over the iterations before verification, and whether it was accepted. This module
records that without touching the loop: it replays a stored sample (the run's model, decoder,
sampling and per-sample seed, hence the same random stream) through `DraftRecorder`, a thin adapter
wrapper that sees each window forward (positions, drafts, logits) and each commit (how many slots
were kept), and checks that the replay reproduced the stored tokens. The result is written beside
the run as `draft_traces.jsonl`:

    {"prompt_id": 0, "sample": 0, "matches_stored": true,
     "drafts": [{"pos": 17, "token": 203, "accepted": true, "probs": [0.12, 0.31, 0.44]}, ...]}

`probs` is oldest first and ends at the verifying iteration. Chain windows only (positions n-1 ..
n+L-2, a prefix committed), which is what the loop runs today.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

import torch

from sjdbench.adapter import Sampling
from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.loop import jacobi_decode, loop_constants
from sjdbench.decoding.processing import process_logits
from sjdbench.errors import UserError
from sjdbench.report.load import DRAFT_TRACES
from sjdbench.store import RunStore, atomic_write_text

log = logging.getLogger(__name__)

HISTORY_DEPTH = 16  # iterations of a draft's trajectory kept


class DraftRecorder:
    """Wraps an adapter: delegates everything, and records every verified draft's trajectory."""

    def __init__(self, adapter: Any, sampling: Sampling, window: int, depth: int = HISTORY_DEPTH) -> None:
        self._adapter = adapter
        self._sampling = sampling
        self._masks = loop_constants(adapter).masks
        self._content = (~adapter.layout.is_forced).tolist()
        self._history = ProbabilityHistory(max(window, 1), depth, adapter.vocab_size, adapter.device)
        self._pending: tuple[list[int], list[int]] | None = None  # (positions, tokens) of the window's drafts
        self.drafts: list[dict] = []

    def __getattr__(self, name: str) -> Any:  # only called for what the wrapper does not define
        if name == "_adapter":
            raise AttributeError(name)
        return getattr(self._adapter, name)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache: Any, mask: torch.Tensor | None = None) -> torch.Tensor:
        logits = self._adapter.forward(tokens, positions, cache, mask)  # (2, L, V)
        targets = positions + 1  # slot j predicts position n + j
        start, stop = int(targets[0]), int(targets[-1]) + 1
        self._history.push(targets, process_logits(logits, self._masks.window(start, stop), self._sampling))
        self._pending = (positions[1:].tolist(), tokens[1:].tolist())  # drafts sit at positions n .. n+L-2
        return logits

    def commit(self, cache: Any, slots: torch.Tensor) -> Any:
        """m kept slots = x_{n-1} plus k = m - 1 accepted drafts; the draft after them (if any) was
        the one rejected; later drafts were never verified."""
        if self._pending is not None:
            positions, tokens = self._pending
            accepted = int(slots.numel()) - 1
            for j, (pos, token) in enumerate(zip(positions, tokens)):
                if j > accepted:
                    break
                if self._content[pos]:
                    self.drafts.append({"pos": pos, "token": token, "accepted": j < accepted,
                                        "probs": [round(v, 5) for v in self._history.trajectory(pos, token)]})
            self._pending = None
        return self._adapter.commit(cache, slots)


def _run_config(run_dir: Path):
    from omegaconf import OmegaConf

    from sjdbench.config import to_run_config

    return to_run_config(OmegaConf.load(run_dir / "config.yaml"))


def record_run(run_dir: Path, prompts: int, progress: Callable[[str], None] | None = None) -> Path:
    """Replay sample 0 of the run's first `prompts` prompts and write draft_traces.jsonl beside it.

    Refuses (UserError, one line) when today's code would not rebuild the run's decoder, weights or
    sampling, or when the run's device is not available here."""
    from sjdbench.config import decoder_spec
    from sjdbench.models.registry import build_adapter, weights_fingerprint
    from sjdbench.runner import resolve_sampling

    run_dir = Path(run_dir)
    env = json.loads((run_dir / "env.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    config = _run_config(run_dir)
    spec = decoder_spec(config)
    if spec.identity() != summary.get("decoder_spec"):
        raise UserError(f"{run_dir.name}: this sjdbench builds a different decoder from its config.yaml than the "
                        "one that wrote the run; cannot replay it for draft traces")
    options = dict(config.model.options)
    if weights_fingerprint(config.model.name, options) != env.get("weights"):
        raise UserError(f"{run_dir.name}: the model's weight files changed since the run; cannot replay it")
    device = env.get("device", "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{run_dir.name} ran on {device}, which is not available here; trace it on that machine")
    rows = [r for r in RunStore(run_dir.parent.parent, run_dir.name).rows() if r.get("sample", 0) == 0][:prompts]
    adapter = build_adapter(config.model.name, options, device)
    decoder = spec.build(adapter)
    sampling = resolve_sampling(adapter.default_sampling, config.sampling)
    if env.get("sampling") and asdict(sampling) != env["sampling"]:
        raise UserError(f"{run_dir.name}: the model's default sampling changed since the run; cannot replay it")
    seen = replace(sampling, temperature=0.0) if decoder.verifier.greedy else sampling  # what the loop processes with
    lines = []
    for row in rows:
        recorder = DraftRecorder(adapter, seen, decoder.window)
        generator = torch.Generator(device).manual_seed(int(row["seed"]))
        result = jacobi_decode(recorder, row["prompt"], decoder, sampling, generator)
        matches = result.tokens.tolist() == row["tokens"]
        if not matches:
            log.warning("%s prompt %s: the replay did not reproduce the stored tokens", run_dir.name, row["prompt_id"])
        lines.append(json.dumps({"prompt_id": row["prompt_id"], "sample": row.get("sample", 0),
                                 "matches_stored": matches, "drafts": recorder.drafts}, separators=(",", ":")))
        if progress:
            progress(f"{run_dir.name}: traced prompt {row['prompt_id']} ({len(recorder.drafts)} verified drafts)")
    path = run_dir / DRAFT_TRACES
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
