"""Fresh-draft initialisation for window slots that have never been predicted.

Every init is deterministic given the generator, so its reference q is one-hot at the draft and
MRS acceptance is simply p(d). Forced positions always get their forced token.
- random: uniform over legal image tokens (the official SJD default)
- left: copy the left neighbour on the 2-D grid (LlamaGen's `repeat_horizon`)
- above: copy the token one row up (the SJD paper's best variant)
- argmax_left: argmax of the left neighbour's latest distribution (its guess if never predicted)
Spatial inits fall back to random where the neighbour does not exist (first column / first row).
The fill is vectorised: neighbour indices are resolved on the host from fixed layout tables (a
neighbour that is itself fresh in the same call is followed to its source), and the device only
does gathers, so no host sync happens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.models.base import SegmentLayout

INITS = ("random", "left", "above", "argmax_left")


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


class Init:
    def __init__(self, kind: str) -> None:
        if kind not in INITS:
            raise ValueError(f"unknown init '{kind}'; choose one of: {', '.join(INITS)}")
        self.kind = kind

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        """Drafts (F,) for fresh positions (ascending); also written into ctx.guess."""
        legal, device = ctx.legal, ctx.legal.device
        count = len(positions)
        drafts = legal[torch.randint(legal.numel(), (count,), generator=generator, device=device)]  # (F,)
        if self.kind != "random":
            table = ctx.above_of if self.kind == "above" else ctx.left_of
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
            if self.kind == "argmax_left":
                latest = ctx.latest_argmax[src_t.clamp_min(0)]
                copied = torch.where(latest >= 0, latest, copied)
            drafts = torch.where((src_t >= 0) & (copied >= 0), copied, drafts)
        pos_t = torch.as_tensor(positions, device=device)
        forced = ctx.forced[pos_t]
        drafts = torch.where(forced >= 0, forced, drafts)
        ctx.guess[pos_t] = drafts
        return drafts
