"""Shared helpers for the evaluation tests: synthetic runs and a custom feature module."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from sjdbench.config import compose_run
from sjdbench.eval.evaluators.base import RunView
from sjdbench.results.store import save_png

FEATURE_DIM = 8


class GaussianFeatures(torch.nn.Module):
    """Image i (constant, red channel = i) -> row i of a fixed table of Gaussian 8-d features.

    Constant images stay constant under every resize, so the features are known exactly whatever
    the preprocessing; a test can compute FID and KID by hand from the table.
    """

    num_features = FEATURE_DIM

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1234)
        self.register_buffer("table", torch.randn(256, FEATURE_DIM, generator=generator, dtype=torch.float64))

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # (B, 3, H, W) uint8 -> (B, 8)
        return self.table[images[:, 0, 0, 0].long()].float()


def gaussian_features() -> GaussianFeatures:
    return GaussianFeatures()


def table() -> np.ndarray:
    """The features GaussianFeatures gives image i, as float32 then float64 (as the evaluator sees them)."""
    return GaussianFeatures().table.float().double().numpy()


def constant_image(index: int, size: tuple[int, int] = (32, 48)) -> np.ndarray:
    image = np.zeros((*size, 3), dtype=np.uint8)
    image[..., 0] = index
    image[..., 1] = 90
    return image


def synthetic_run(
    root: Path,
    run_id: str,
    indices: list[int],
    overrides: list[str] = (),
    texts: list[str] | None = None,
    size: tuple[int, int] = (32, 48),
) -> RunView:
    """A complete run on disk (config.yaml, env.json, samples.jsonl, summary.json) of constant
    images: image k has red channel indices[k]."""
    from sjdbench.config import to_yaml
    from sjdbench.data.prompts import load_prompts
    from sjdbench.eval.evaluators.base import open_run
    from sjdbench.results.store import append_jsonl

    run_dir = Path(root) / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    texts = texts or [f"prompt number {k}" for k in range(len(indices))]
    prompt_file = run_dir / "prompts.txt"
    prompt_file.write_text("\n".join(texts) + "\n")
    config = compose_run(["model=debug", "decoder=sjd", "data=file", f"data.path={prompt_file}", *overrides])
    _, sha = load_prompts(config.data)
    (run_dir / "config.yaml").write_text(to_yaml(config))
    (run_dir / "env.json").write_text(json.dumps({"prompts_sha": sha, "device": "cpu", "weights": None, "schema": 2}))
    for k, index in enumerate(indices):
        save_png(run_dir / "images" / f"{k:06d}_0.png", constant_image(index, size))
        append_jsonl(
            run_dir / "samples.jsonl",
            {"prompt_id": k, "sample": 0, "prompt": texts[k], "image": f"images/{k:06d}_0.png"},
        )
    summary = {"complete": True, "decoder": "sjd", "decoder_family": "sjd", "n_samples": len(indices), "seed": 0}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return open_run(run_dir)


def reference_folder(folder: Path, indices: list[int], size: tuple[int, int] = (40, 40)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for k, index in enumerate(indices):
        save_png(folder / f"ref_{k:04d}.png", constant_image(index, size))
    return folder
