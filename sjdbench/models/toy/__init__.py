"""The embedded toy model as an adapter: k-means patch tokenizer, word-level caption encoder and the
trained transformer, loaded from the shipped weights (`weights/`).

Entry point: `sjdbench.models.toy.model.build_toy_adapter`. The world it was trained on, its trainer
and the toy CLIP live in `sjdbench.toyworld`. The model registry finds the toy's `SPEC` here; it is
imported from `model.py` only when asked for, so the tokenizer loads without the transformer.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "SPEC":
        from sjdbench.models.toy.model import SPEC

        return SPEC
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
