"""`sjdbench list`: config groups and their choices (decoder parts with their knobs and defaults)."""

from __future__ import annotations

from typing import Optional

import typer

from sjdbench.cli.console import fail, say
from sjdbench.errors import UserError


def list_choices(
    group: Optional[str] = typer.Argument(None, help="A config group, e.g. decoder. Omit for all."),
) -> None:
    """List config groups and their choices (decoder parts with their knobs and defaults)."""
    from sjdbench.config.schema import available_groups, group_choices

    try:
        groups = [group.replace(".", "/")] if group else available_groups()
        for name in groups:
            choices = group_choices(name)
            if name.startswith("decoder/"):
                from sjdbench.decoding.registry import default_part  # the parts' knobs: this imports torch

                kind = name.split("/")[1]
                described = []
                for choice in choices:
                    knobs = default_part(kind, choice).knobs()
                    described.append(
                        choice + (f" ({', '.join(f'{k}={v}' for k, v in knobs.items())})" if knobs else "")
                    )
                choices = described
            say(f"{name}: {', '.join(choices)}")
    except UserError as error:
        fail(str(error))
