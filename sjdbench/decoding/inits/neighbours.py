"""What every init reads (`InitContext`) and the shared machinery of the spatial inits.

The spatial inits copy a grid neighbour's guess. The fill is vectorised: neighbour indices are
resolved on the host from fixed layout tables (a neighbour that is itself fresh in the same call is
followed to its source), and the device only does gathers, so no host sync happens. Where the
neighbour does not exist (first column / first row) they fall back to a uniform random draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.adapter import SegmentLayout


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


@dataclass
class InitContext:
    layout: SegmentLayout
    forced: torch.Tensor  # (N,) forced id or -1, on device
    left_of: np.ndarray  # (N,) host tables from `neighbour_tables`
    above_of: np.ndarray
    legal: torch.Tensor  # (K,) legal image ids
    guess: torch.Tensor  # (N,) committed tokens and current drafts (-1 unknown)
    latest_argmax: torch.Tensor  # (N,) argmax of the latest distribution at each position (-1 unknown)


def uniform_drafts(count: int, ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
    """(F,) uniform draws over the legal image ids."""
    legal = ctx.legal
    return legal[torch.randint(legal.numel(), (count,), generator=generator, device=legal.device)]


def finish(positions: list[int], drafts: torch.Tensor, ctx: InitContext) -> torch.Tensor:
    """Forced positions take their forced token; the drafts become the positions' guesses."""
    pos_t = torch.as_tensor(positions, device=drafts.device)
    forced = ctx.forced[pos_t]
    drafts = torch.where(forced >= 0, forced, drafts)
    ctx.guess[pos_t] = drafts
    return drafts


def copy_neighbour(
    positions: list[int], ctx: InitContext, generator: torch.Generator, table: np.ndarray, use_argmax: bool = False
) -> torch.Tensor:
    """Drafts (F,) copied from each position's neighbour in `table` (its latest argmax if
    `use_argmax` and known, else its guess); uniform where there is none."""
    device = ctx.legal.device
    count = len(positions)
    drafts = uniform_drafts(count, ctx, generator)  # (F,)
    source = table[positions]  # (F,) neighbour positions on the host
    slot_of = {pos: i for i, pos in enumerate(positions)}
    root_slot = np.arange(count)  # a neighbour that is fresh too: follow it to its root slot
    existing = np.full(count, -1, dtype=np.int64)  # root's neighbour that already has a guess
    for i, src in enumerate(source):
        if src in slot_of:
            root_slot[i] = root_slot[slot_of[src]]
            existing[i] = existing[slot_of[src]]
        elif src >= 0:
            existing[i] = src
    drafts = drafts[torch.as_tensor(root_slot, device=device)]  # chains share one random draw
    src_t = torch.as_tensor(existing, device=device)
    copied = ctx.guess[src_t.clamp_min(0)]
    if use_argmax:
        latest = ctx.latest_argmax[src_t.clamp_min(0)]
        copied = torch.where(latest >= 0, latest, copied)
    drafts = torch.where((src_t >= 0) & (copied >= 0), copied, drafts)
    return finish(positions, drafts, ctx)
