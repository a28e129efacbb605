"""Public prompt sets with their own file formats: PartiPrompts, MS-COCO 2017 captions, and the
30k-caption COCO 2014 list. Each loader returns the set's prompts verbatim with their metadata
(Parti's category and challenge, COCO's image id and file name), so per-category tables and FID
references can be built from a run alone.

`load_prompt_set(data)` returns None for names that are not one of these sets (shipped `.txt`
sets and user files are read by `sjdbench.data.prompts`).
"""

from __future__ import annotations

from typing import Any, Callable

Entry = tuple[str, dict[str, Any]]  # (prompt text, metadata)


def _loaders() -> dict[str, Callable[[Any], list[Entry]]]:
    from sjdbench.data import coco, parti

    return {"parti": parti.load, "coco2017": coco.load_coco2017, "coco2014_30k": coco.load_coco2014_30k}


SETS = ("parti", "coco2017", "coco2014_30k")


def load_prompt_set(data) -> list[Entry] | None:
    """The entries of a registered prompt set, or None when `data.name` is not one."""
    if data.name not in SETS:
        return None
    return _loaders()[data.name](data)
