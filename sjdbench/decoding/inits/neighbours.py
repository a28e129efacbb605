"""What the inits share: uniform draws over the image tokens, forced tokens at forced positions, and
the machinery of the spatial inits, which copy a grid neighbour's guess.

A neighbour's guess is what the loop holds at its position: the decided token, else the draft waiting
there (`SampleView.guess`). `argmax_left` also reads the argmax of the neighbour's latest
distribution, which it keeps itself (`Latest`, told through `Init.observe_p`). The fill is
vectorised: neighbour indices are resolved on the host from fixed layout tables (a neighbour that is
itself fresh in the same call is followed to its source), and the device only does gathers, so no
host sync happens. Where the neighbour does not exist (first column / first row) or was never
predicted they fall back to a uniform random draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.adapter import SegmentLayout
from sjdbench.decoding.parts import Init, InitContext, NoKnobs, SampleView


def neighbour_tables(layout: SegmentLayout) -> tuple[np.ndarray, np.ndarray]:
    """(left_of, above_of): segment position of each position's grid neighbour, -1 if none."""
    grid = layout.position_of().numpy()
    rows, cols = layout.row.numpy(), layout.col.numpy()
    content = rows >= 0
    left_of = np.full(layout.n_positions, -1, dtype=np.int64)
    above_of = np.full(layout.n_positions, -1, dtype=np.int64)
    has_left = content & (cols > 0)
    has_above = content & (rows > 0)
    left_of[has_left] = grid[rows[has_left], cols[has_left] - 1]
    above_of[has_above] = grid[rows[has_above] - 1, cols[has_above]]
    return left_of, above_of


def uniform_drafts(count: int, legal: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(F,) uniform draws over the legal image ids."""
    return legal[torch.randint(legal.numel(), (count,), generator=generator, device=legal.device)]


def with_forced(positions: np.ndarray, drafts: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
    """Forced positions take their forced token."""
    forced_here = forced[torch.as_tensor(positions, device=drafts.device)]
    return torch.where(forced_here >= 0, forced_here, drafts)


@dataclass
class Latest:
    """Per sample and position (B, N): the argmax of the latest distribution there (-1 unknown)."""

    ctx: InitContext
    argmax: torch.Tensor


class SpatialInit(Init[NoKnobs]):
    """Base of the inits that copy a grid neighbour's guess."""

    table = "left"  # which neighbour: left | above
    use_argmax = False  # copy the neighbour's latest argmax when known (else its guess)

    @property
    def reads_p(self) -> bool:  # type: ignore[override]
        return self.use_argmax

    @classmethod
    def lossless(cls, config, **children: bool) -> bool:
        """A fresh draft carries the distribution it was drawn from as its reference (one-hot): the exact
        test stays exact whatever the draft."""
        return True

    def begin(self, ctx: InitContext) -> Latest:
        width = ctx.layout.n_positions if self.use_argmax else 0  # only argmax_left reads the distributions
        return Latest(ctx, torch.full((ctx.batch, width), -1, dtype=torch.long, device=ctx.forced.device))

    def fill(self, state: Latest, sample: SampleView, positions: np.ndarray) -> tuple[torch.Tensor, None]:
        """Drafts copied from each position's neighbour (its latest argmax if `use_argmax` and known,
        else its guess); uniform where there is none."""
        ctx = state.ctx
        device = ctx.legal.device
        count = len(positions)
        drafts = uniform_drafts(count, ctx.legal, sample.generator)  # (F,)
        source = (ctx.left_of if self.table == "left" else ctx.above_of)[positions]  # (F,) host
        slot_of = {int(pos): i for i, pos in enumerate(positions)}
        root_slot = np.arange(count)  # a neighbour that is fresh too: follow it to its root slot
        existing = np.full(count, -1, dtype=np.int64)  # root's neighbour that already has a guess
        for i, src in enumerate(source.tolist()):
            if src in slot_of:
                root_slot[i] = root_slot[slot_of[src]]
                existing[i] = existing[slot_of[src]]
            elif src >= 0:
                existing[i] = src
        drafts = drafts[torch.as_tensor(root_slot, device=device)]  # chains share one random draw
        src_t = torch.as_tensor(existing, device=device)
        copied = sample.guess(np.maximum(existing, 0))
        if self.use_argmax:
            latest = state.argmax[sample.index, src_t.clamp_min(0)]
            copied = torch.where(latest >= 0, latest, copied)
        return with_forced(positions, torch.where((src_t >= 0) & (copied >= 0), copied, drafts), ctx.forced), None

    def observe_p(self, state: Latest, samples: torch.Tensor, positions: torch.Tensor, p: torch.Tensor) -> None:
        if self.use_argmax:
            state.argmax[samples, positions] = p.argmax(-1)

    def reset(self, state: Latest, sample: int) -> None:
        state.argmax[sample] = -1

    def retain(self, state: Latest, samples: list[int]) -> Latest:
        return Latest(state.ctx, state.argmax[torch.as_tensor(samples, device=state.argmax.device)])
