"""`random` — uniform over the legal image tokens (the official SJD default)."""

from __future__ import annotations

import numpy as np
import torch

from sjdbench.decoding.inits.neighbours import uniform_drafts, with_forced
from sjdbench.decoding.parts import Init, InitContext, NoKnobs, SampleView


class RandomInit(Init[NoKnobs]):
    @classmethod
    def lossless(cls, config, **children: bool) -> bool:
        """A fresh draft carries the distribution it was drawn from as its reference (one-hot): the exact
        test stays exact whatever the draft."""
        return True

    def begin(self, ctx: InitContext) -> InitContext:
        return ctx

    def fill(
        self, state: InitContext, sample: SampleView, positions: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return with_forced(positions, uniform_drafts(len(positions), state.legal, sample.generator), state.forced), None
