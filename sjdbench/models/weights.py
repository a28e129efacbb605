"""Checks of weight files before a model loads: a truncated, corrupt or mismatched file is named
with what is wrong, in one line, instead of surfacing as a loader traceback (or, for flipped bytes
inside a tensor, as silently wrong samples).

A safetensors file is an 8-byte little-endian header length, a JSON header (per tensor: dtype,
shape, [begin, end) byte offsets into the data) and the data. `check_safetensors` reads only the
header and the file size, so it is cheap for any model: a truncated file has less data than its
header promises, a corrupt header does not parse. Flipped bytes inside the data are caught only by
a checksum, which models record at export (`checksums.json` next to the weights).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Mapping, Sequence

from sjdbench.errors import UserError

CHECKSUMS = "checksums.json"  # {file name: sha256 hex} written when weights are exported
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
}


class WeightsError(UserError):
    """A weight file is missing, truncated, corrupt or does not fit the model's config."""


def safetensors_header(path: Path) -> dict:
    """{tensor name: {"dtype", "shape", "data_offsets"}}; WeightsError when the file cannot hold it."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise WeightsError(
                f"{path} is truncated ({size} bytes, not even a safetensors header); restore or re-export it"
            )
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            raise WeightsError(
                f"{path} is truncated or corrupt: its header claims {length} bytes but the file has {size}; "
                "restore or re-export it"
            )
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError):
            raise WeightsError(
                f"{path} is corrupt: its safetensors header is not valid JSON; restore or re-export it"
            ) from None
    header.pop("__metadata__", None)
    data_bytes = size - 8 - length
    needed = 0
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        width = DTYPE_BYTES.get(entry["dtype"])
        if width is not None and end - begin != width * math.prod(entry["shape"]):
            raise WeightsError(f"{path} is corrupt: tensor {name} has shape {entry['shape']} but {end - begin} bytes")
        needed = max(needed, end)
    if needed > data_bytes:
        raise WeightsError(
            f"{path} is truncated: its tensors need {needed} bytes of data, the file holds {data_bytes}; "
            "restore or re-export it"
        )
    return header


def sha256_file(path: Path) -> str:
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """Cached by size and modification time: sweeps check the same files for every grid point."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recorded_checksums(folder: Path) -> dict[str, str]:
    path = folder / CHECKSUMS
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except (ValueError, TypeError):
        raise WeightsError(f"{path} is not valid JSON; restore it or delete it to skip the checksum check") from None


def write_checksums(folder: Path, names: Sequence[str]) -> None:
    """Record sha256 of exported files (kept with those of other files already recorded), so a later
    load can tell a corrupt copy from the original."""
    path = folder / CHECKSUMS
    sums = recorded_checksums(folder) if path.exists() else {}
    sums.update({name: sha256_file(folder / name) for name in names if (folder / name).exists()})
    path.write_text(json.dumps(sums, indent=2, sort_keys=True) + "\n")
    path.chmod(0o644)


def check_weight_file(
    path: Path, expected_shapes: Mapping[str, Sequence[int]] | None = None, checksums: Mapping[str, str] | None = None
) -> None:
    """A safetensors file holds what its header says, matches its recorded checksum (if any) and
    has the tensor shapes the model's config needs (if given)."""
    if not path.exists():
        raise WeightsError(f"weight file {path} not found; restore it or point the model at another weights_dir")
    header = safetensors_header(path)
    expected_sum = (checksums or {}).get(path.name)
    if expected_sum:
        actual = sha256_file(path)
        if actual != expected_sum:
            raise WeightsError(
                f"{path} is corrupt: sha256 {actual[:16]}… differs from the recorded {expected_sum[:16]}… "
                f"({CHECKSUMS}); restore the file (git checkout, reinstall) or retrain"
            )
    if expected_shapes is not None:
        missing = sorted(set(expected_shapes) - set(header))
        if missing:
            raise WeightsError(
                f"{path} lacks tensor {missing[0]} (and {len(missing) - 1} more) that the model's config "
                "needs; the file belongs to another model or version"
            )
        for name, shape in expected_shapes.items():
            if list(header[name]["shape"]) != list(shape):
                raise WeightsError(
                    f"{path}: tensor {name} has shape {header[name]['shape']}, the model's config needs "
                    f"{list(shape)}; the weights and their config do not belong together"
                )
