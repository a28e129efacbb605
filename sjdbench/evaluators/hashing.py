"""sha256 of weight files and reference image sets, remembered across calls.

A score records the hash of every file it depends on. Hashing a 600 MB CLIP checkpoint or 5,000
COCO images takes seconds, so digests are cached by (path, size, mtime) in the sjdbench cache.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

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
    from sjdbench.store import atomic_write_json

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
    """Hub-using libraries must fail at once on a missing file, not retry for 30 s: set before import."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
