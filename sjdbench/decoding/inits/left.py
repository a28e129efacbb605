"""`left` — copy the left neighbour on the 2-D grid (LlamaGen's `repeat_horizon` in the SJD code)."""

from __future__ import annotations

import torch

from sjdbench.decoding.inits.neighbours import InitContext, copy_neighbour
from sjdbench.decoding.parts import KnoblessPart


class LeftInit(KnoblessPart):
    @classmethod
    def lossless(cls, config) -> bool:
        """A fresh draft carries the distribution it was drawn from as its reference (one-hot, or uniform): the
        exact test stays exact whatever the draft."""
        return True

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        return copy_neighbour(positions, ctx, generator, ctx.left_of)
