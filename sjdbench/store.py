"""Results store: `results/runs/<run_id>/{config.yaml, env.json, samples*.jsonl, images/, summary.json}`.

Nothing is ever lost: each sample row is appended with one O_APPEND write and fsync (a torn last line
from a crash is ignored on read), images and JSON files are written to a temp file and renamed, and
`summary.json` is written last. Shards append to their own `samples.<i>of<n>.jsonl`; readers merge
all sample files by (prompt_id, sample).
"""
from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def append_jsonl(path: Path, row: dict) -> None:
    """One write call per row: concurrent appenders never interleave within a line."""
    line = (json.dumps(row, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    if not path.exists():
        return rows
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("%s:%d is a torn line (interrupted write); ignored", path, number)
    return rows


def save_png(path: Path, image: np.ndarray) -> None:
    """PNG only: JPEG artefacts shift FID."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())


class RunStore:
    def __init__(self, root: Path, run_id: str, shard: str | None = None) -> None:
        self.run_id = run_id
        self.dir = Path(root) / "runs" / run_id
        self.images = self.dir / "images"
        suffix = "" if not shard else "." + shard.replace("/", "of")
        self.samples_path = self.dir / f"samples{suffix}.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.dir / "summary.json"

    def prepare(self, config_yaml: str, env: dict) -> None:
        self.images.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.dir / "config.yaml", config_yaml)
        atomic_write_json(self.dir / "env.json", env)

    def rows(self) -> list[dict]:
        """All sample rows of the run (every shard), one per (prompt_id, sample), first write wins."""
        seen, merged = set(), []
        for path in sorted(self.dir.glob("samples*.jsonl")):
            for row in read_jsonl(path):
                key = (row["prompt_id"], row.get("sample", 0))
                if key not in seen:
                    seen.add(key)
                    merged.append(row)
        return sorted(merged, key=lambda r: (r["prompt_id"], r.get("sample", 0)))

    def done_keys(self) -> set[tuple[int, int]]:
        return {(r["prompt_id"], r.get("sample", 0)) for r in self.rows()}

    def append(self, row: dict) -> None:
        append_jsonl(self.samples_path, row)

    def summary(self) -> dict | None:
        if not self.summary_path.exists():
            return None
        return json.loads(self.summary_path.read_text())

    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.summary_path, summary)


def git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: str, dtype: str = "float32") -> dict:
    import torch

    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "device": device,
        "dtype": dtype,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "git_commit": git_commit(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    try:
        from importlib.metadata import version

        info["sjdbench"] = version("sjdbench")
    except Exception:  # noqa: BLE001 - metadata is optional (source checkout)
        info["sjdbench"] = None
    return info


def load_runs(root: Path) -> "pd.DataFrame":  # noqa: F821
    """One row per run with its summary (complete or not); for reports and sweeps."""
    import pandas as pd

    records = []
    for summary_path in sorted((Path(root) / "runs").glob("*/summary.json")):
        records.append(json.loads(summary_path.read_text()))
    return pd.DataFrame.from_records(records)
