"""`tree` — SJD-PAC's proactive drafting (arXiv 2603.18599): a static K-ary prefix tree of drafts.

The root is x_{n-1}, the last decided token. Depths 1..D-1 form a full K-ary tree; every parent at
depth d-1 gets the same K children: the pending draft for position n-1+d (sibling 0) and K-1 more
tokens drawn without replacement from that draft's reference q (the distribution sibling 0 was drawn
from), each sibling carrying the distribution it was actually drawn from (q with the earlier siblings
removed, renormalised). Where q has no mass left (an init draft has a one-hot q) the remaining
siblings are drawn uniformly from the image tokens not yet taken, and count as fresh drafts. Forced
positions have one child. The first-child path then continues as a single chain until the window
holds `window` slots. A slot's position is n-1 + its depth, and it sees only its ancestors. Drawing
siblings costs no forward.

Verification is recursive rejection sampling over siblings (forest.py), exact with `select: first`.
`select: longest` is the released code's reading (the longest accepted path), kept to measure it:
it is not exact. Defaults K = 3, D = 3 are the released code's (its README says K = 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.decoding.inits.neighbours import InitContext
from sjdbench.decoding.parts import Init, PartConfig
from sjdbench.decoding.processing import sample
from sjdbench.decoding.topologies.forest import SELECT, ForestTopology, drafts_for
from sjdbench.decoding.window import DecodeState, Window, WindowState, ancestor_mask
from sjdbench.errors import UserError


@dataclass
class TreeConfig(PartConfig):
    width: int = 3  # K: siblings per branching level
    depth: int = 3  # D: levels of the full K-ary tree, the root included (depths 1..D-1 branch)
    select: str = "first"  # first: recursive rejection sampling (exact) | longest: longest accepted path (not exact)

    symbols = {"width": "K", "depth": "D"}

    def check(self) -> None:
        if self.width < 1:
            raise UserError(f"width must be >= 1, got {self.width}")
        if self.depth < 1:
            raise UserError(f"depth must be >= 1, got {self.depth}")
        if self.select not in SELECT:
            raise UserError(f"select '{self.select}' is unknown; choose one of: {', '.join(SELECT)}")


def tree_size(widths: list[int]) -> int:
    """Slots of a full tree whose level d has widths[d-1] children per parent (the root included)."""
    total, level = 1, 1
    for k in widths:
        level *= k
        total += level
    return total


class TreeTopology(ForestTopology):
    Config = TreeConfig

    @classmethod
    def lossless(cls, config) -> bool:
        """Recursive rejection sampling over siblings, taking the first accepted one, is exact; choosing the
        longest accepted path is not (the exactness suite rejects it)."""
        return config.select == "first"

    def __init__(self, width: int = 3, depth: int = 3, select: str = "first") -> None:
        self.width, self.depth, self.select = width, depth, select

    @classmethod
    def build(cls, config: TreeConfig, adapter=None) -> TreeTopology:
        return cls(config.width, config.depth, config.select)

    def siblings(self) -> int:
        return self.width

    def plan(self, state: DecodeState, window: int, init: Init, ctx: InitContext, generator: torch.Generator) -> Window:
        n, N = state.frontier(), state.n_positions
        deepest = N - n - 1  # a slot at depth d predicts position n + d
        n_legal = int(ctx.legal.numel())
        forced = state.layout.forced
        widths = [
            1 if int(forced[n - 1 + d]) >= 0 else min(self.width, n_legal)
            for d in range(1, min(self.depth - 1, deepest) + 1)
        ]
        while widths and tree_size(widths) > window:  # the full tree must fit in the window
            widths.pop()
        main_len = min(len(widths) + 1 + window - tree_size(widths), deepest + 1)  # slots on the first-child path
        main = drafts_for(state, list(range(n, n + main_len - 1)), init, ctx, generator)  # depths 1 .. main_len-1
        extra, extra_at = self._siblings(main, widths, ctx, generator)
        candidates = main.concat(extra) if len(extra) else main

        parent, sibling, depth, entry = [-1], [0], [0], [-1]
        level = [0]
        for d, k_d in enumerate(widths, start=1):
            next_level = []
            for par in level:
                for k in range(k_d):
                    parent.append(par), sibling.append(k), depth.append(d)
                    entry.append(d - 1 if k == 0 else extra_at[(d, k)])
                    next_level.append(len(parent) - 1)
            level = next_level
        last = level[0]  # the first-child path's slot at the tree's deepest level
        for d in range(len(widths) + 1, main_len):
            parent.append(last), sibling.append(0), depth.append(d), entry.append(d - 1)
            last = len(parent) - 1

        parent = np.array(parent, dtype=np.int64)
        nodes = candidates.gather(np.array(entry[1:], dtype=np.int64))
        chain = all(k == 1 for k in widths)
        L = parent.size
        roots = np.zeros(L, dtype=bool)
        roots[0] = True
        return Window(
            tokens=torch.cat([state.tokens[n - 1 : n], nodes.drafts]),
            positions=n - 1 + np.array(depth, dtype=np.int64),
            parent=parent,
            sibling=np.array(sibling, dtype=np.int64),
            nodes=nodes,
            commit_root=roots,
            emits=roots.copy(),
            mask=None if chain else torch.from_numpy(ancestor_mask(parent)).to(state.tokens.device),
        )

    @staticmethod
    def _siblings(
        main: WindowState, widths: list[int], ctx: InitContext, generator: torch.Generator
    ) -> tuple[WindowState, dict]:
        """Siblings 1..K_d-1 of each branching level, drawn without replacement from the reference q
        of sibling 0 (uniform over the untaken image tokens once q has no mass left); and where each
        (depth, k) landed in the returned state."""
        levels = [d for d, k_d in enumerate(widths, start=1) if k_d > 1]
        if not levels:
            return main.head(0), {}
        rows = torch.as_tensor([d - 1 for d in levels], device=main.drafts.device)
        q = main.refs[rows]  # (B, V)
        uniform = torch.zeros_like(q[0])
        uniform[ctx.legal] = 1.0
        taken = torch.zeros_like(q, dtype=torch.bool).scatter_(-1, main.drafts[rows][:, None], True)  # (B, V)
        tokens, refs, positions, fresh, where = [], [], [], [], {}
        for k in range(1, max(widths)):
            active = [i for i, d in enumerate(levels) if widths[d - 1] > k]
            idx = torch.as_tensor(active, device=q.device)
            left = q[idx].masked_fill(taken[idx], 0.0)
            mass = left.sum(-1, keepdim=True)
            spare = uniform.expand_as(left).masked_fill(taken[idx], 0.0)
            dist = torch.where(mass > 1e-12, left / mass.clamp_min(1e-30), spare / spare.sum(-1, keepdim=True))
            drawn = sample(dist, generator)  # (b,)
            taken[idx, drawn] = True
            for _j, i in enumerate(active):
                where[(levels[i], k)] = len(main) + len(positions)
                positions.append(int(main.positions[levels[i] - 1]))
                fresh.append(bool(main.fresh[levels[i] - 1]))  # q one-hot: the sibling is a uniform draw
            tokens.append(drawn)
            refs.append(dist)
        return WindowState.drawn(torch.cat(tokens), torch.cat(refs), np.array(positions), np.array(fresh)), where
