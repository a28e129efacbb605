"""`sjdbench data fetch`: download a public prompt file into the cache, checked against its pinned sha256."""

from __future__ import annotations

import typer

from sjdbench.cli.console import fail, say
from sjdbench.errors import UserError


def fetch_command(name: str = typer.Argument(..., help="parti | coco2014_30k")) -> None:
    """Download a public prompt file into the cache, verifying its pinned sha256."""
    from sjdbench.data.coco import COCO2014_30K
    from sjdbench.data.fetch import fetch
    from sjdbench.data.parti import PARTI

    remotes = {"parti": PARTI, "coco2014_30k": COCO2014_30K}
    try:
        if name not in remotes:
            extra = "; coco2017 reads your captions_val2017.json (data.path=)" if name == "coco2017" else ""
            raise UserError(f"unknown prompt file '{name}'; choose one of: {', '.join(remotes)}{extra}")
        path = fetch(remotes[name])
    except UserError as error:
        fail(str(error))
    say(f"{remotes[name].filename} ({remotes[name].source}) -> {path} (sha256 verified)")
