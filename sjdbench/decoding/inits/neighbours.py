"""What the inits share: uniform draws over the image tokens, forced tokens at forced positions, and
the state and machinery of the spatial inits, which copy a grid neighbour's guess.

The spatial inits keep their own `Guesses` (per sample and position: the current guess, decided
token or waiting draft, and the argmax of the latest distribution), told by the loop through
`Init.observe` / `Init.observe_p`. The fill is vectorised: neighbour indices are resolved on the host
from fixed layout tables (a neighbour that is itself fresh in the same call is followed to its
source), and the device only does gathers, so no host sync happens. Where the neighbour does not
exist (first column / first row) they fall back to a uniform random draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.adapter import SegmentLayout
from sjdbench.decoding.parts import Init, InitContext, NoKnobs


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
class Guesses:
    """Per sample and position (B, N): the current guess (-1 unknown) and the argmax of the latest
    distribution there (-1 unknown)."""

    ctx: InitContext
    guess: torch.Tensor
    argmax: torch.Tensor


class SpatialInit(Init[NoKnobs]):
    """Base of the inits that copy a grid neighbour: they keep `Guesses`."""

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

    def begin(self, ctx: InitContext) -> Guesses:
        n = ctx.layout.n_positions
        unknown = torch.full((ctx.batch, n), -1, dtype=torch.long, device=ctx.forced.device)
        return Guesses(ctx, unknown, unknown.clone())

    def fill(
        self, state: Guesses, sample: int, positions: np.ndarray, generator: torch.Generator
    ) -> tuple[torch.Tensor, None]:
        """Drafts copied from each position's neighbour (its latest argmax if `use_argmax` and known,
        else its guess); uniform where there is none. The drafts become the positions' guesses."""
        ctx = state.ctx
        device = ctx.legal.device
        count = len(positions)
        drafts = uniform_drafts(count, ctx.legal, generator)  # (F,)
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
        copied = state.guess[sample, src_t.clamp_min(0)]
        if self.use_argmax:
            latest = state.argmax[sample, src_t.clamp_min(0)]
            copied = torch.where(latest >= 0, latest, copied)
        drafts = with_forced(positions, torch.where((src_t >= 0) & (copied >= 0), copied, drafts), ctx.forced)
        state.guess[sample, torch.as_tensor(positions, device=device)] = drafts
        return drafts, None

    def observe(self, state: Guesses, samples: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor) -> None:
        state.guess[samples, positions] = tokens

    def observe_p(self, state: Guesses, samples: torch.Tensor, positions: torch.Tensor, p: torch.Tensor) -> None:
        if self.use_argmax:
            state.argmax[samples, positions] = p.argmax(-1)

    def reset(self, state: Guesses, sample: int) -> None:
        state.guess[sample] = -1
        state.argmax[sample] = -1

    def retain(self, state: Guesses, samples: list[int]) -> Guesses:
        index = torch.as_tensor(samples, device=state.guess.device)
        return Guesses(state.ctx, state.guess[index], state.argmax[index])
