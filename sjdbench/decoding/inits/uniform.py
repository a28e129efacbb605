"""`uniform` — uniform over the legal image tokens, like `random`, but the draft's reference q is that
uniform distribution rather than one-hot (SJD-PAC's released code). Both are exact, since the draft
is drawn from the distribution it claims; with q uniform a fresh draft d is accepted with
probability min(1, K p(d)) (K image tokens) instead of p(d), and a rejection draws from
norm([p - 1/K]_+).
"""

from __future__ import annotations

import torch

from sjdbench.decoding.inits.neighbours import InitContext, finish, uniform_drafts
from sjdbench.decoding.parts import KnoblessPart
from sjdbench.decoding.processing import one_hot


class UniformInit(KnoblessPart):
    @classmethod
    def lossless(cls, config) -> bool:
        """A fresh draft carries the distribution it was drawn from as its reference (one-hot, or uniform): the
        exact test stays exact whatever the draft."""
        return True

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        return finish(positions, uniform_drafts(len(positions), ctx, generator), ctx)

    def references(self, drafts: torch.Tensor, positions: list[int], ctx: InitContext, vocab_size: int) -> torch.Tensor:
        """(F, V): uniform over the image tokens at image positions, one-hot at forced ones."""
        uniform = torch.zeros(vocab_size, device=drafts.device)
        uniform[ctx.legal] = 1.0 / ctx.legal.numel()
        forced = ctx.forced[torch.as_tensor(positions, device=drafts.device)] >= 0
        return torch.where(forced[:, None], one_hot(drafts, vocab_size), uniform.expand(len(positions), -1))
