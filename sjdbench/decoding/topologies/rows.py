"""`rows` — several image rows in flight (PJD, arXiv 2606.05703; ZipAR, ICML 2025), each its own chain.

The segment splits into bands, one per grid row (a row's trailing forced tokens belong to it, except
the row end token right before the next row, which is that row's *anchor*). Row r+1 starts once row
r has `row_start` decided image tokens. Every forward holds, for each row in flight from the top
down, a chain [last decided token of the row, drafts ...] of at most `row_window` slots at the
row's true raster positions, within `window` slots in all (and at most `max_rows` rows; 0 = no cap).
A row below the top unfinished one only predicts cells whose cell above is decided (it stays behind
the row above). A slot sees every decided token at an earlier position (in the cache, or re-fed in
this forward as another row's first slot) and the earlier drafts of its own row, never another
row's drafts: the row-causal mask.

A row's first chain starts from its anchor: the forced row end token of the row above (decided and
cached with this forward), or, in layouts without one, the latest decided token of the row above
re-fed at the position just before the row (ZipAR's reading for LlamaGen), never cached. A row that
finished with an emitted token, or that cannot advance this time, still feeds its last decided token
(one slot that predicts nothing) so that every decided token enters the cache.

Verification is per row. `emit: leading` (PJD): only the top unfinished row emits a token (the
residual at its first rejection, or the bonus); the rows below keep their accepted prefix and the
rejected draft is redrawn from p. `emit: all`: every row emits. `row_window: 1` with `emit: all` is
ZipAR: one token per row per forward, sampled from p with no drafts and no verification.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from sjdbench.decoding.parts import Layout, PartConfig, SampleView
from sjdbench.decoding.topologies.forest import ForestTopology, ancestor_mask
from sjdbench.errors import check_at_least, check_choice

if TYPE_CHECKING:
    from sjdbench.adapter import SegmentLayout

EMIT = ("leading", "all")


@dataclass
class RowsConfig(PartConfig):
    row_window: int = 8  # slots per row and forward, its re-fed last token included (PJD: 8; ZipAR: 1)
    row_start: int = 8  # a row starts once the row above has this many decided image tokens
    emit: str = "leading"  # leading: only the top unfinished row emits (PJD) | all: every row does (ZipAR)
    max_rows: int = 0  # rows in flight at most (0: no cap beyond the decoder's window)

    symbols: ClassVar[dict[str, str]] = {"row_window": "w", "row_start": "s"}

    def check(self) -> None:
        check_at_least("row_window", self.row_window, 1)
        check_at_least("row_start", self.row_start, 1)
        check_choice("emit", self.emit, EMIT)
        check_at_least("max_rows", self.max_rows, 0, "0 = no cap")

    def model_notes(self, layout, where: str) -> list[str]:
        width = layout.grid_hw[1]
        if self.row_start < width:
            return []
        return [
            f"{where}.row_start={self.row_start} is not below the {width} tokens of an image row: a row starts "
            f"only once the row above is complete, so no two rows are decoded together; use "
            f"{where}.row_start=1..{width - 1} for rows in parallel"
        ]


@dataclass
class Bands:
    """The segment's rows as bands of positions [start, end); anchor[r]: the position before row r."""

    start: np.ndarray  # (H,)
    end: np.ndarray  # (H,)
    anchor: np.ndarray  # (H,) -1 for row 0
    anchor_forced: np.ndarray  # (H,) bool: the anchor is a forced token (a row end)
    cells: np.ndarray  # (H, W) position of each grid cell

    @staticmethod
    def of(layout) -> Bands:
        cells = layout.position_of().numpy()
        forced = layout.forced.numpy()
        _H, N = cells.shape[0], layout.n_positions
        first = cells[:, 0]
        anchor = np.concatenate([[-1], first[1:] - 1])
        anchor_forced = np.concatenate([[False], forced[first[1:] - 1] >= 0])
        start = np.concatenate([[0], first[1:]])
        end = np.concatenate([np.where(anchor_forced[1:], anchor[1:], first[1:]), [N]])
        return Bands(start, end, anchor, anchor_forced, cells)


class RowsTopology(ForestTopology[RowsConfig]):
    Config = RowsConfig

    @classmethod
    def lossless(cls, config: RowsConfig, **children: bool) -> bool:
        """Rows below the leading one are verified against a p that lacks the cells to their upper
        right, and with `emit: all` they emit from it: no setting is exact, so rows count as lossy."""
        return False

    def __init__(self, config: RowsConfig | None = None) -> None:
        super().__init__(config)
        c = self.config
        self.row_window, self.row_start, self.emit, self.max_rows = c.row_window, c.row_start, c.emit, c.max_rows
        self._bands: dict[int, Bands] = {}

    def span(self, layout: SegmentLayout, window: int) -> int:
        """Rows in flight keep drafts and history from the leading row's frontier to the last row's
        drafts: at most one band per row in flight (each needs a slot), plus the row window."""
        bands = self.bands(layout)
        H = bands.cells.shape[0]
        rows = min(H, max(window, 1) if not self.max_rows else min(self.max_rows, max(window, 1)))
        band = int((bands.end - bands.start).max()) + 1
        return min(layout.n_positions, (rows + 1) * band + self.row_window)

    def bands(self, layout) -> Bands:
        key = id(layout)
        if key not in self._bands:
            self._bands[key] = Bands.of(layout)
        return self._bands[key]

    def useful_window(self, layout: SegmentLayout) -> int:
        """Never more slots than positions left (every row's chain holds distinct positions)."""
        return layout.n_positions

    def plan(self, sample: SampleView, window: int) -> Layout:
        bands = self.bands(sample.layout)
        decided, cached = sample.decided.copy(), sample.cached  # the plan decides anchors on its copy
        H, width = bands.cells.shape
        done_cells = decided[bands.cells].sum(1)  # (H,) decided image tokens per row (a prefix of the row)
        frontier = [
            int(s + np.argmin(decided[s:e])) if not decided[s:e].all() else int(e)
            for s, e in zip(bands.start, bands.end)
        ]
        complete = [f == e for f, e in zip(frontier, bands.end)]
        leading = next(r for r in range(H) if not complete[r])

        chains: list[tuple[int, torch.Tensor, bool, list[int], bool]]
        chains, budget = [], window  # (root position, root token, commit root, drafts' positions, emits)
        decided_now: list[int] = []
        in_flight = 0  # rows with a chain that predicts (not counting roots that only enter the cache)
        tokens = sample.tokens
        for r in range(H):  # a decided token not yet cached whose row gets no chain now: cache it (one slot)
            last = frontier[r] - 1
            uncached = last >= bands.start[r] and decided[last] and not cached[last]
            if uncached and (complete[r] or r < leading) and budget > 0:
                chains.append((last, tokens[last : last + 1], True, [], False))
                budget -= 1
        for r in range(leading, H):
            if budget < 1 or (self.max_rows and len(chains) >= self.max_rows):
                break
            if complete[r]:
                continue
            if r > leading and not (complete[r - 1] or done_cells[r - 1] >= self.row_start):
                break  # rows below have not started either
            f = frontier[r]
            above_open = r > leading and not complete[r - 1]
            above = int(done_cells[r - 1]) if r > 0 else width
            limit = int(bands.cells[r, above]) if above_open and above < width else int(bands.end[r])
            slots = min(self.row_window, limit - f, budget)
            if slots < 1:
                if decided[f - 1] and not cached[f - 1] and f - 1 >= bands.start[r] and budget > 0:
                    chains.append((f - 1, tokens[f - 1 : f], True, [], False))  # cache it, predict nothing
                    budget -= 1
                continue
            budget -= slots
            root = f - 1
            if decided[root]:
                token, commit = tokens[root : root + 1], not cached[root]
            elif bands.anchor_forced[r]:  # the row end before this row: known, decided and cached now
                decided[root] = True
                decided_now.append(root)
                token, commit = sample.forced[root : root + 1], True
            else:  # no row end token: re-feed the latest decided token of the row above, never cached
                latest = frontier[r - 1] - 1
                token, commit = tokens[latest : latest + 1], False
            chains.append((root, token, commit, list(range(f, f + slots - 1)), r == leading or self.emit == "all"))
            in_flight += 1

        parent: list[int]
        parent, positions, root_tokens = [], [], []
        commit_root, emits, hidden, shared, depth = [], [], [], [], []
        for root, token, commit, chain, emitting in chains:
            base = len(parent)
            parent += [-1, *range(base, base + len(chain))]
            positions += [root, *chain]
            depth += list(range(len(chain) + 1))
            root_tokens.append(token)
            commit_root += [commit] + [False] * len(chain)
            emits += [emitting] + [False] * len(chain)
            hidden += [bool(cached[root])] + [False] * len(chain)
            shared += [bool(decided[root] and not cached[root])] + [False] * len(chain)
        roots = torch.cat(root_tokens)
        parent_arr = np.array(parent, dtype=np.int64)
        pos = np.array(positions, dtype=np.int64)
        mask = ancestor_mask(parent_arr, np.array(hidden, dtype=bool))
        if any(shared):  # decided tokens entering the cache now are context for every later slot
            cols = np.flatnonzero(shared)
            mask[:, cols] |= pos[:, None] > pos[cols][None, :]
        return Layout(
            positions=pos,
            parent=parent_arr,
            sibling=np.zeros(len(parent), dtype=np.int64),
            depth=np.array(depth, dtype=np.int64),
            roots=roots,
            commit_root=np.array(commit_root, dtype=bool),
            emits=np.array(emits, dtype=bool),
            mask=torch.from_numpy(mask).to(roots.device),
            wanted=np.sort(pos[parent_arr >= 0]),  # every row's drafts: one init call for the new ones
            decided=np.array(decided_now, dtype=np.int64),
            in_flight=max(in_flight, 1),
        )
