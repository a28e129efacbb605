"""`above` — copy the token one row up (the SJD paper's best variant; SJD++'s spatial prior)."""

from __future__ import annotations

import torch

from sjdbench.decoding.inits.neighbours import InitContext, copy_neighbour
from sjdbench.decoding.parts import KnoblessPart


class AboveInit(KnoblessPart):
    @classmethod
    def lossless(cls, config) -> bool:
        """A fresh draft carries the distribution it was drawn from as its reference (one-hot, or uniform): the
        exact test stays exact whatever the draft."""
        return True

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        return copy_neighbour(positions, ctx, generator, ctx.above_of)
