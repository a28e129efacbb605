"""Downloads of public prompt files into the cache, verified against a pinned sha256.

A prompt file changes what every run measures, so a download whose checksum differs from the pinned
one is refused, and nothing half-written is ever left at the cached path (temp file, then rename).
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sjdbench.errors import UserError
from sjdbench.paths import cache_dir


@dataclass(frozen=True)
class RemoteFile:
    """A public file pinned by commit and checksum."""

    data_name: str  # the prompt set it feeds (data=<name>)
    url: str
    sha256: str
    source: str  # where it comes from, for people

    @property
    def filename(self) -> str:
        """The name the url gives the file: the cached copy and the messages use it."""
        return self.url.rsplit("/", 1)[-1]

    def cached(self) -> Path:
        return cache_dir() / "data" / self.filename


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def missing_message(remote: RemoteFile) -> str:
    return (
        f"{remote.filename} is not at {remote.cached()}: run `sjdbench data fetch {remote.data_name}` "
        f"(downloads {remote.url}), or place the file there, or pass data.path=<your copy of {remote.filename}>"
    )


def fetch(remote: RemoteFile, timeout_s: float = 20.0) -> Path:
    """Download into the cache (once) and verify the pinned checksum; one-line UserError offline."""
    target = remote.cached()
    if target.exists() and sha256_of(target) == remote.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with urllib.request.urlopen(remote.url, timeout=timeout_s) as response:  # noqa: S310 - pinned https URL
            tmp.write_bytes(response.read())
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        tmp.unlink(missing_ok=True)
        reason = getattr(error, "reason", error)
        raise UserError(
            f"cannot download {remote.filename} from {remote.url} ({reason}); download it on a machine "
            f"with network access and place it at {target}, or pass data.path=<your copy>"
        ) from None
    got = sha256_of(tmp)
    if got != remote.sha256:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{remote.url} has sha256 {got}, not the pinned {remote.sha256}; nothing was saved")
    os.replace(tmp, target)
    return target


def resolve(remote: RemoteFile, data_path: str | None) -> tuple[Path, bool]:
    """(file to read, whether it is the pinned file): data.path wins, then the cache."""
    if data_path and data_path != "???":
        path = Path(data_path).expanduser()
        if not path.exists():
            raise UserError(f"data.path={path} does not exist; pass your copy of {remote.filename}")
        return path, sha256_of(path) == remote.sha256
    if not remote.cached().exists():
        raise UserError(missing_message(remote))
    return remote.cached(), sha256_of(remote.cached()) == remote.sha256
