"""Run one configuration: load the model once, decode every (prompt, sample) not yet stored, and
write rows, images and the summary. Re-running the same command resumes; a complete run is
reported, not redone.
"""
from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Optional

import torch

from sjdbench.adapter import Sampling
from sjdbench.config import RunConfig, decoder_spec, results_root, to_yaml
from sjdbench.datasets import Prompt, load_prompts
from sjdbench.decoding.build import resolved_settings
from sjdbench.decoding.loop import jacobi_decode
from sjdbench.identity import SCHEMA, family, label, run_id_for
from sjdbench.models.registry import build_adapter, resolve_device, weights_fingerprint
from sjdbench.store import RunStore, environment, save_png
from sjdbench.summary import summarize

log = logging.getLogger(__name__)

Progress = Callable[[int, int, Optional[dict]], None]  # (done, total, last row)


@dataclass
class RunOutcome:
    run_id: str
    run_dir: str
    status: str  # "complete" (already done) | "finished" | "partial"
    summary: dict
    new_samples: int


def sample_seed(run_seed: int, prompt_id: int, sample: int) -> int:
    """One generator per (run seed, prompt, sample): runs are reproducible and pairable."""
    digest = hashlib.sha256(f"{run_seed}:{prompt_id}:{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def resolve_sampling(default: Sampling, overrides) -> Sampling:
    changes = {k: v for k, v in asdict(overrides).items() if v is not None}
    return replace(default, **changes)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plan(config: RunConfig) -> tuple[str, list[Prompt], str, str]:
    """(run_id, selected prompts, prompt-set sha, device) without loading any model."""
    prompts, sha = load_prompts(config.data)
    device = resolve_device(config.device)
    weights = weights_fingerprint(config.model.name, dict(config.model.options))
    return run_id_for(config, sha, device.split(":")[0], weights), prompts, sha, device


def execute(config: RunConfig, progress: Progress | None = None, adapter: Any = None, limit_new: int | None = None) -> RunOutcome:
    """Run (or resume) one configuration. `adapter` lets sweeps reuse loaded weights;
    `limit_new` stops after that many new samples (for tests of interruption)."""
    run_id, prompts, sha, device = plan(config)
    store = RunStore(results_root(config), run_id, config.data.shard)
    wanted = [(p, s) for p in prompts for s in range(config.samples_per_prompt)]
    done = store.done_keys()
    todo = [(p, s) for p, s in wanted if (p.prompt_id, s) not in done]
    if not todo:  # nothing to decode: report (and refresh) the summary without loading the model
        summary = finish(config, store, wanted, run_id, device)
        return RunOutcome(run_id, str(store.dir), "complete", summary, 0)

    if adapter is None:
        adapter = build_adapter(config.model.name, dict(config.model.options), device)
    spec = decoder_spec(config)
    decoder = spec.build(adapter)
    sampling = resolve_sampling(adapter.default_sampling, config.sampling)
    resolved = {"sampling": asdict(sampling), "weights": weights_fingerprint(config.model.name, dict(config.model.options)),
                "decoder_spec": spec.identity(), "schema": SCHEMA, **resolved_settings(decoder)}
    store.prepare(to_yaml(config), {**environment(device), "prompts_sha": sha, **resolved})

    if todo and config.warmup:
        for i in range(config.warmup):  # untimed: first-call allocations and lazy init
            jacobi_decode(adapter, todo[0][0].text, decoder, sampling, torch.Generator(device).manual_seed(i))

    new = 0
    if progress:
        progress(len(wanted) - len(todo), len(wanted), None)
    for prompt, sample in todo:
        if limit_new is not None and new >= limit_new:
            break
        generator = torch.Generator(device).manual_seed(sample_seed(config.seed, prompt.prompt_id, sample))
        synchronize(device)
        start = time.perf_counter()
        result = jacobi_decode(adapter, prompt.text, decoder, sampling, generator)
        synchronize(device)
        latency = time.perf_counter() - start
        image_name = f"{prompt.prompt_id:06d}_{sample}.png"
        if config.save_images:
            save_png(store.images / image_name, adapter.decode(result.tokens))
        row = {
            "prompt_id": prompt.prompt_id,
            "sample": sample,
            "prompt": prompt.text,
            "seed": sample_seed(config.seed, prompt.prompt_id, sample),
            "latency_s": latency,
            **result.stats.to_row(),
            "tokens": result.tokens.tolist(),
            "image": f"images/{image_name}" if config.save_images else None,
        }
        store.append(row)
        new += 1
        if progress:
            progress(len(wanted) - len(todo) + new, len(wanted), row)

    summary = finish(config, store, wanted, run_id, device)
    return RunOutcome(run_id, str(store.dir), "finished" if summary["complete"] else "partial", summary, new)


def finish(config: RunConfig, store: RunStore, wanted: list, run_id: str, device: str) -> dict:
    """Summarise the wanted rows; summary.json (written last, atomically) marks a complete run."""
    keys = {(p.prompt_id, s) for p, s in wanted}
    rows = [r for r in store.rows() if (r["prompt_id"], r.get("sample", 0)) in keys]
    complete = len(rows) == len(wanted)
    summary = {
        **summarize(rows),
        "run_id": run_id,
        "model": config.model.name,
        "decoder": label(config),  # the preset plus every knob that differs from it
        "decoder_preset": config.decoder.name,
        "decoder_family": family(decoder_spec(config)),
        "decoder_spec": decoder_spec(config).identity(),
        "window": config.decoder.window,
        "growth_steps": config.decoder.growth_steps,
        "schema": SCHEMA,
        "data": config.data.name,
        "seed": config.seed,
        "device": device,
        "n_wanted": len(wanted),
        "complete": complete,
    }
    if config.data.shard is None and rows:
        store.write_summary(summary)
    return summary
