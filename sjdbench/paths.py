"""Where sjdbench finds its shipped files and keeps derived ones (no other module guesses paths)."""

from __future__ import annotations

import os
from pathlib import Path

from sjdbench.errors import UserError

PACKAGE = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """The config tree: `sjdbench/conf` in a wheel, `<repo>/conf` in a source checkout."""
    for candidate in (PACKAGE / "conf", PACKAGE.parent / "conf"):
        if (candidate / "config.yaml").exists():
            return candidate
    raise UserError("sjdbench's config directory is missing; reinstall the package (pip install -e .)")


def config_dirs() -> list[Path]:
    """The shipped config tree, then each directory in SJDBENCH_CONFIG_PATH (os.pathsep-separated),
    where users keep YAMLs of their own parts, presets, models or data sets."""
    extra = [Path(p).expanduser() for p in os.environ.get("SJDBENCH_CONFIG_PATH", "").split(os.pathsep) if p]
    missing = [str(p) for p in extra if not p.is_dir()]
    if missing:
        raise UserError(f"SJDBENCH_CONFIG_PATH names {missing[0]}, which is not a directory; fix or unset it")
    return [conf_dir(), *extra]


def prompts_dir() -> Path:
    for candidate in (PACKAGE / "prompts", PACKAGE.parent / "prompts"):
        if candidate.is_dir():
            return candidate
    raise UserError("sjdbench's prompts directory is missing; reinstall the package")


def cache_dir() -> Path:
    """Derived per-model artefacts (LANTERN neighbourhoods, reference statistics)."""
    return Path(os.environ.get("SJDBENCH_CACHE", Path.home() / ".cache" / "sjdbench"))
