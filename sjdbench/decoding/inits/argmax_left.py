"""`argmax_left` — the argmax of the left neighbour's latest distribution (its guess if it was
never predicted)."""

from __future__ import annotations

import torch

from sjdbench.decoding.inits.neighbours import InitContext, copy_neighbour
from sjdbench.decoding.parts import KnoblessPart


class ArgmaxLeftInit(KnoblessPart):
    @classmethod
    def lossless(cls, config) -> bool:
        """A fresh draft carries the distribution it was drawn from as its reference (one-hot, or uniform): the
        exact test stays exact whatever the draft."""
        return True

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        return copy_neighbour(positions, ctx, generator, ctx.left_of, use_argmax=True)
