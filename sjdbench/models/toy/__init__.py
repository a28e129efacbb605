"""The embedded toy model: procedural world, k-means patch tokenizer, trained transformer, toy CLIP.

Entry points: `sjdbench.models.toy.model.build_toy_adapter`, `sjdbench.models.toy.clip.load_toy_clip`,
`sjdbench.models.toy.train.train_toy`, `sjdbench.models.toy.world.dataset`. See docs/TOY.md.
The model registry finds the toy's `SPEC` here; it is imported from `model.py` only when asked for,
so the world, tokenizer and CLIP modules load without the transformer.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "SPEC":
        from sjdbench.models.toy.model import SPEC

        return SPEC
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
