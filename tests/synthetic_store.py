"""A small results store with known numbers, written the way the runner writes one, for report tests.

Decoders are resolved from the real config tree (their stored `decoder_spec`, label and family are
what `sjdbench run` would write); latencies, NFEs and scores are chosen so that every table value
can be computed by hand in the test.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

from sjdbench.config import compose_run, decoder_spec
from sjdbench.config.identity import family, label
from sjdbench.results.summary import summarize
from sjdbench.statistics_table import counters

GROWTH_COUNTS = [c.name for c in counters() if c.name.startswith(("growth_", "verify_"))]  # the six growth counters

AR_LATENCY = [1.0, 2.0, 1.5, 3.0, 2.5]  # per prompt (5 prompts, 1 sample each)
ENV = {
    "cpu_count": 2,
    "device": "cpu",
    "dtype": "float32",
    "git_commit": "a" * 40,
    "platform": "Linux-test",
    "prompts_sha": "0123456789abcdef",
    "python": "3.11",
    "sampling": {"cfg_scale": 3.0, "temperature": 1.0, "top_k": 100, "top_p": 1.0},
    "schema": 2,
    "sjdbench": "0.1.0",
    "torch": "2.x",
    "torch_threads": 2,
    "weights": "feedfacefeedface",
}
CATEGORIES = ["Animals", "Animals", "People", "People", "Vehicles"]
CHALLENGES = ["Basic", "Imagination", "Basic", "Basic", "Imagination"]


@dataclass
class SynthRun:
    overrides: list[str]  # e.g. ["decoder=sjd", "decoder.window=32"]
    ratios: list[float]  # per-prompt AR/decoder latency ratio
    nfe: list[int]  # per prompt
    summary: dict = field(default_factory=dict)  # summary fields to set (step_compression, ...)
    env: dict = field(default_factory=dict)  # env.json overrides
    complete: bool = True
    meta: bool = False  # rows carry Parti Category/Challenge
    images: bool = False
    run_id: str = ""


def write_run(root: Path, run: SynthRun, tokens: int = 20) -> str:
    config = compose_run(run.overrides)
    spec = decoder_spec(config)
    ident = spec.identity()
    digest = hashlib.sha256(" ".join(run.overrides).encode()).hexdigest()[:12]
    run_id = run.run_id or f"synth-{family(spec)}-{digest}"
    run_dir = root / "runs" / run_id
    (run_dir / "images").mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "model": {"name": "toy", "options": {}},
                "decoder": {"name": config.decoder.name},
                "data": {"name": "toy"},
                "seed": 0,
                "samples_per_prompt": 1,
            }
        )
    )
    (run_dir / "env.json").write_text(json.dumps({**ENV, "decoder_spec": ident, **run.env}))
    rows = []
    n = len(AR_LATENCY) if run.complete else 2
    for prompt_id in range(n):
        nfe = run.nfe[prompt_id]
        hist = [0, 3, 2, 1] if spec.window > 1 else [0, nfe - 1]
        row = {
            "prompt_id": prompt_id,
            "sample": 0,
            "prompt": f"prompt {prompt_id}",
            "seed": prompt_id,
            "latency_s": AR_LATENCY[prompt_id] / run.ratios[prompt_id],
            "nfe": nfe,
            "n_tokens": tokens,
            "iterations": nfe,
            "accepted": 4 if spec.window > 1 else 0,
            "verified": 6 if spec.window > 1 else 0,
            "accepted_no_fresh": 3 if spec.window > 1 else 0,
            "verified_no_fresh": 5 if spec.window > 1 else 0,
            "accept_len_hist": hist,
            "slot_accepted": [3, 1],
            "slot_verified": [4, 2],
            **dict.fromkeys(GROWTH_COUNTS, 1 if spec.window > 1 else 0),
            "trajectories": [{"pos": 3, "token": 7, "probs": [0.1 * (k + 1) for k in range(4)]}] * 3,
            "tokens": [1] * tokens,
            "image": None,
        }
        if run.meta:
            row["meta"] = {"Category": CATEGORIES[prompt_id], "Challenge": CHALLENGES[prompt_id]}
        if run.images:
            colour = np.full((8, 8, 3), (37 * prompt_id + 11 * len(run_id)) % 255, dtype=np.uint8)
            Image.fromarray(colour).save(run_dir / "images" / f"{prompt_id:06d}_0.png")
            row["image"] = f"images/{prompt_id:06d}_0.png"
        rows.append(row)
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {  # what the runner writes: the statistics of the rows (results.summary), then what the run is
        **summarize(rows),
        "n_wanted": len(AR_LATENCY),
        "complete": run.complete,
        "finished": run.complete,
        "selection_n": len(AR_LATENCY),
        "run_id": run_id,
        "model": "toy",
        "decoder": label(config),
        "decoder_preset": config.decoder.name,
        "decoder_family": family(spec),
        "decoder_spec": ident,
        "decoder_lossless": spec.lossless(),
        "window": spec.window,
        "growth_steps": spec.growth_steps,
        "schema": 2,
        "data": "toy",
        "seed": 0,
        "device": "cpu",
        **run.summary,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))  # the runner writes one for partial runs too
    return run_id


def write_score(
    root: Path,
    run_id: str,
    evaluator: str,
    value: float,
    ci: tuple[float, float] | None,
    lower_is_better: bool = False,
    metric: str | None = None,
    per_sample: list[float] | None = None,
    delta: tuple[float, float, float] | None = None,
    ar_run_id: str | None = None,
) -> Path:
    doc = {
        "schema": 1,
        "run_id": run_id,
        "evaluator": evaluator,
        "metric": metric or evaluator,
        "lower_is_better": lower_is_better,
        "value": value,
        "ci95": list(ci) if ci else None,
        "n": 5,
        "protocol": {"backbone": "toy"},
        "protocol_hash": "abc123def456",
        "per_sample": [{"prompt_id": i, "sample": 0, "value": v} for i, v in enumerate(per_sample)]
        if per_sample
        else None,
        "paired_vs_ar": {"ar_run_id": ar_run_id, "delta": delta[0], "ci95": [delta[1], delta[2]], "n_pairs": 5}
        if delta
        else None,
        "noise_floor": {"value": 0.01, "how": "AR vs AR, seeds 0 and 1", "runs": []} if lower_is_better else None,
        "extra": {},
    }
    path = root / "runs" / run_id / "scores" / f"{evaluator}-abc123def456.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


SJD_RATIOS = [1.2, 1.5, 1.1, 2.0, 1.3]
SJD_NFE = [8, 10, 9, 7, 8]
LANTERN_RATIOS = [1.6, 1.8, 1.5, 2.5, 1.7]
LANTERN_NFE = [6, 7, 6, 5, 6]


def make_store(root, **env_of):
    """AR, sjd (W 16, 32), sjd_vp (N 3, 2), lantern, and an incomplete mc_sjd run."""
    ids = {
        "ar": write_run(root, SynthRun(["decoder=ar"], [1.0] * 5, [20] * 5, meta=True, images=True)),
        "sjd": write_run(
            root, SynthRun(["decoder=sjd"], SJD_RATIOS, SJD_NFE, meta=True, images=True, env=env_of.get("sjd", {}))
        ),
        "sjd32": write_run(
            root, SynthRun(["decoder=sjd", "decoder.window=32"], [1.4, 1.6, 1.2, 2.2, 1.5], [7, 9, 8, 6, 7])
        ),
        "vp": write_run(root, SynthRun(["decoder=sjd_vp"], [1.1] * 5, [9] * 5, meta=True, images=True)),
        "vp_n2": write_run(
            root, SynthRun(["decoder=sjd_vp", "decoder.growth_steps=2"], [1.0, 1.2, 0.9, 1.1, 1.05], [10] * 5)
        ),
        "lantern": write_run(root, SynthRun(["decoder=lantern"], LANTERN_RATIOS, LANTERN_NFE, meta=True, images=True)),
        "partial": write_run(root, SynthRun(["decoder=mc_sjd"], [2.0] * 5, [5] * 5, complete=False)),
    }
    return ids


AR_CLIP = [70.0, 80.0, 75.0, 90.0, 60.0]


def scored_store(root):
    """The synthetic store with toy CLIP-Scores: sjd within a few hundredths of AR on every prompt,
    sjd_vp 2 points above it, lantern (lossy) equal to AR, jacobi (greedy) beside a sampled AR."""
    ids = make_store(root)
    ids["jacobi"] = write_run(root, SynthRun(["decoder=jacobi"], [1.2] * 5, [8] * 5))
    per_run = {
        "ar": AR_CLIP,
        "sjd": [v + d for v, d in zip(AR_CLIP, [0.02, -0.03, 0.01, 0.0, -0.01])],
        "vp": [v + 2.0 + d for v, d in zip(AR_CLIP, [0.02, -0.03, 0.01, 0.0, -0.01])],
        "lantern": AR_CLIP,
        "jacobi": AR_CLIP,
    }
    for name, values in per_run.items():
        delta = None if name == "ar" else (float(np.mean(values) - np.mean(AR_CLIP)), -9.0, 9.0)
        write_score(
            root,
            ids[name],
            "toy_clip",
            float(np.mean(values)),
            (0.0, 100.0),
            metric="toy CLIP-Score (100 * max(cos, 0))",
            per_sample=values,
            delta=delta,
            ar_run_id=None if name == "ar" else ids["ar"],
        )
    return ids
