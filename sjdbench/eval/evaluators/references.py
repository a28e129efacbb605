"""Reference feature sets (renders of toy captions, COCO images through Inception) computed once
per (reference set, resolution, preprocessing, extractor) and cached on disk, bit for bit."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Callable

import numpy as np

from sjdbench.paths import cache_dir


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
