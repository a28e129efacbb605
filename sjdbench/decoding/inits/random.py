"""`random` — uniform over the legal image tokens (the official SJD default)."""
from __future__ import annotations

import torch

from sjdbench.decoding.inits.neighbours import InitContext, finish, uniform_drafts
from sjdbench.decoding.parts import KnoblessPart


class RandomInit(KnoblessPart):
    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        return finish(positions, uniform_drafts(len(positions), ctx, generator), ctx)
