"""Fresh-draft initialisation for window slots that have never been predicted.

Every init is deterministic given the generator, so its reference q is one-hot at the draft and
MRS acceptance is simply p(d). Forced positions always get their forced token.
- random: uniform over legal image tokens (the official SJD default)
- left: copy the left neighbour on the 2-D grid (LlamaGen's `repeat_horizon`)
- above: copy the token one row up (the SJD paper's best variant)
- argmax_left: argmax of the left neighbour's latest distribution
Spatial inits fall back to random where the neighbour does not exist (first column / first row).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sjdbench.models.base import SegmentLayout

INITS = ("random", "left", "above", "argmax_left")


@dataclass
class InitContext:
    layout: SegmentLayout
    grid_position: torch.Tensor  # (h, w) segment position of each cell
    legal: torch.Tensor  # (K,) legal image ids
    guess: torch.Tensor  # (N,) committed tokens and current drafts (-1 unknown)
    latest_argmax: torch.Tensor  # (N,) argmax of the latest distribution at each position (-1 unknown)


class Init:
    def __init__(self, kind: str) -> None:
        if kind not in INITS:
            raise ValueError(f"unknown init '{kind}'; choose one of: {', '.join(INITS)}")
        self.kind = kind

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        """Drafts (F,) for fresh positions (ascending); also written into ctx.guess."""
        legal = ctx.legal
        pick = torch.randint(legal.numel(), (len(positions),), generator=generator, device=legal.device)
        drafts = legal[pick]  # random fallback for every slot
        forced = ctx.layout.forced
        for slot, pos in enumerate(positions):
            if forced[pos] >= 0:
                drafts[slot] = forced[pos]
            elif self.kind != "random":
                source = self._source(pos, ctx)
                if source is not None:
                    drafts[slot] = source
            ctx.guess[pos] = drafts[slot]
        return drafts

    def _source(self, pos: int, ctx: InitContext) -> torch.Tensor | None:
        row, col = int(ctx.layout.row[pos]), int(ctx.layout.col[pos])
        if self.kind == "above":
            return ctx.guess[ctx.grid_position[row - 1, col]] if row > 0 else None
        if col == 0:
            return None
        left = int(ctx.grid_position[row, col - 1])
        if self.kind == "argmax_left":  # device-side choice: no host sync
            latest = ctx.latest_argmax[left]
            return torch.where(latest >= 0, latest, ctx.guess[left])
        return ctx.guess[left]
