"""sha256 of weight files and reference image sets, remembered across calls.

A score records the hash of every file it depends on. Hashing a 600 MB CLIP checkpoint or 5,000
COCO images takes seconds, so digests are cached by (path, size, mtime) in the sjdbench cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from sjdbench.paths import cache_dir

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def _memo_path() -> Path:
    return cache_dir() / "sha256.json"


def _load_memo() -> dict:
    try:
        return json.loads(_memo_path().read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def file_sha256(path: Path) -> str:
    from sjdbench.results.store import atomic_write_json

    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    memo = _load_memo()
    if key in memo:
        return memo[key]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    memo[key] = digest.hexdigest()
    try:
        atomic_write_json(_memo_path(), memo)
    except OSError:  # a read-only cache only costs time
        pass
    return memo[key]


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def files_sha256(paths: list[Path]) -> str:
    """One digest over (name, content digest) of each file, in the given order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{Path(path).name}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def env_flag_offline() -> None:
    """Scoring never downloads: a missing weight file must fail at once, not after 30 s of retries.

    huggingface_hub reads HF_HUB_OFFLINE when it is imported, so the variable is set before any
    evaluator imports it, and its constant is set too in case another part of this process (say, a
    sweep that decoded before scoring) imported it first. HF_HUB_OFFLINE=0 in the environment wins.
    """
    import sys

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    constants: Any = sys.modules.get("huggingface_hub.constants")  # a module, its constants unknown to typeshed
    if constants is not None and os.environ["HF_HUB_OFFLINE"] not in ("0", "false", "False"):
        constants.HF_HUB_OFFLINE = True
