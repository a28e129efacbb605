"""Reference image sets and their feature sets.

The reference images of a protocol (COCO's val2017 folder, say) are one choice shared by every set
metric that compares against real images (FID, KID, precision / recall). Their features (renders of
toy captions, COCO images through Inception or VGG-16) are computed once per (reference set,
resolution, preprocessing, extractor) and cached on disk, bit for bit."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Callable

import numpy as np

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.base import Refused, RunView
from sjdbench.eval.evaluators.hashing import image_files
from sjdbench.paths import cache_dir


def reference_images(run: RunView, folder_setting: str | None, evaluator: str) -> tuple[list[Path], str, Path]:
    """(files, how they were selected, folder) of the reference images a run is compared against.

    The folder is eval.inception.reference, or the run's data.images. When every prompt carries a COCO
    file name and the folder holds them all, the reference is the image of each scored prompt (so a
    `data.limit` run compares N with N); otherwise every image of the folder."""
    folder_setting = folder_setting or run.config.data.images
    if not folder_setting:
        hint = (
            "; PartiPrompts has no reference images: score it with clip_score or hpsv2"
            if run.config.data.name == "parti"
            else ""
        )
        raise Refused(
            f"{evaluator} needs reference images: run with data.images=<folder> (e.g. COCO's val2017) "
            f"or pass eval.inception.reference=<folder>{hint}"
        )
    folder = Path(folder_setting).expanduser()
    if not folder.is_dir():
        raise UserError(f"reference image folder {folder} does not exist (data.images / eval.inception.reference)")
    names = [s.meta.get("file_name") for s in run.samples]
    paired = [folder / n for n in dict.fromkeys(names) if n] if all(names) else []
    if paired and all(p.is_file() for p in paired):
        return paired, "the reference image of each scored prompt (by COCO file name)", folder
    files = image_files(folder)
    if not files:
        raise UserError(f"no images in {folder}")
    return files, "every image of the folder", folder


def reference_key(kind: str, protocol: dict) -> str:
    text = json.dumps(protocol, sort_keys=True, separators=(",", ":"), default=str)
    return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def reference_path(kind: str, protocol: dict) -> Path:
    return cache_dir() / "references" / f"{reference_key(kind, protocol)}.npy"


def cached_reference(kind: str, protocol: dict, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """compute() once per protocol; later calls read the identical array back from the cache."""
    from sjdbench.results.store import atomic_write_bytes

    path = reference_path(kind, protocol)
    if path.exists():
        return np.load(path)
    array = np.asarray(compute())
    buffer = io.BytesIO()
    np.save(buffer, array)
    atomic_write_bytes(path, buffer.getvalue())
    return array
