"""`sjdbench list`: config groups and their choices (decoder parts with their knobs and defaults), and
the published tables a report can be held against (`sjdbench list reference`)."""

from __future__ import annotations

from typing import Optional

import typer

from sjdbench.cli.console import fail, say
from sjdbench.errors import UserError

REFERENCE = "reference"  # not a config group: the published tables of sjdbench/reference


def list_choices(
    group: Optional[str] = typer.Argument(
        None, help="A config group, e.g. decoder, or `reference` (the published tables). Omit for all."
    ),
    model: str = typer.Option("toy", "--model", help="The model whose drafter availability `decoder` reports."),
) -> None:
    """List config groups and their choices (decoder parts with their knobs and defaults), and the
    published tables `sjdbench report --reference` compares with. The decoder list marks the presets
    that need a trained drafter and says whether one is here for --model."""
    from sjdbench.config.schema import available_groups, group_choices
    from sjdbench.reference.load import describe, load_reference, reference_names

    try:
        if group == REFERENCE:
            for name in reference_names():
                say(describe(load_reference(name)))
            return
        if group and group.replace(".", "/") not in available_groups():
            raise UserError(f"unknown group '{group}'; choose one of: {', '.join([*available_groups(), REFERENCE])}")
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
            if name == "decoder":
                if model not in group_choices("model"):
                    raise UserError(f"unknown model '{model}'; choose one of: {', '.join(group_choices('model'))}")
                say(drafter_line(choices, model))
        if not group:
            say(f"{REFERENCE}: {', '.join(reference_names())} (published tables: `sjdbench list reference`)")
    except UserError as error:
        fail(str(error))


def drafter_line(presets: list[str], model: str) -> str:
    """Which presets need a trained drafter, and whether `model` has one here (read without loading)."""
    from sjdbench.config.identity import preset_decoder
    from sjdbench.decoder_identity import needs_drafter
    from sjdbench.models.drafter.sources import available

    drafted = [p for p in presets if needs_drafter(preset_decoder(p).identity())]
    here, where = available(model, {})
    state = f"available ({where})" if here else f"not available: {where}"
    return f"  need a trained drafter: {', '.join(drafted)}; for model={model}: {state}"
