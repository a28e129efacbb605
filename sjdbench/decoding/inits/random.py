"""`random` — uniform over the legal image tokens (the official SJD default)."""

from __future__ import annotations

import torch

from sjdbench.decoding.inits.neighbours import InitContext, finish, uniform_drafts
from sjdbench.decoding.parts import KnoblessPart


class RandomInit(KnoblessPart):
    @classmethod
    def lossless(cls, config) -> bool:
        """A fresh draft carries the distribution it was drawn from as its reference (one-hot, or uniform): the
        exact test stays exact whatever the draft."""
        return True

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        return finish(positions, uniform_drafts(len(positions), ctx, generator), ctx)
