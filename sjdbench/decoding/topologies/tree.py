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

The tree's shape depends only on the branching widths and the main path's length, so it is built
once per shape (parents, siblings, depths, the ancestor mask) and reused. The plan lays out the shape
and wants the main path's drafts; `place` draws the siblings from them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np
import torch

from sjdbench.decoding.parts import Layout, PartConfig, SampleView, Window
from sjdbench.decoding.processing import sample
from sjdbench.decoding.randomness import Draws
from sjdbench.decoding.state import Drafts
from sjdbench.decoding.topologies.adaptive import check_adapt, narrowed, neighbour_run
from sjdbench.decoding.topologies.forest import SELECT, ForestTopology, ancestor_mask
from sjdbench.errors import check_at_least, check_choice

if TYPE_CHECKING:
    from sjdbench.adapter import SegmentLayout


@dataclass
class TreeConfig(PartConfig):
    width: int = 3  # K: siblings per branching level (with adapt=neighbours: the widest tree)
    depth: int = 3  # D: levels of the full K-ary tree, the root included (depths 1..D-1 branch)
    select: str = "first"  # first: recursive rejection sampling (exact) | longest: longest accepted path (not exact)
    adapt: str = "none"  # none: every tree K wide | neighbours: ADT-Tree's width from the decided neighbours

    symbols: ClassVar[dict[str, str]] = {"width": "K", "depth": "D"}

    def unused(self) -> set[str]:
        """A fixed-width tree says nothing of adaptation, so trees from before the knob keep their run ids."""
        return {"adapt"} if self.adapt == "none" else set()

    def check(self) -> None:
        check_adapt(self.adapt)
        check_at_least("width", self.width, 1)
        check_at_least("depth", self.depth, 1)
        check_choice("select", self.select, SELECT)


def tree_size(widths: list[int] | tuple[int, ...]) -> int:
    """Slots of a full tree whose level d has widths[d-1] children per parent (the root included)."""
    total, level = 1, 1
    for k in widths:
        level *= k
        total += level
    return total


@dataclass(frozen=True)
class Shape:
    """One tree shape: per slot its parent, sibling index and depth, and where its draft comes from
    (entry: index into main path drafts + extra siblings, see `_siblings`)."""

    parent: np.ndarray
    sibling: np.ndarray
    depth: np.ndarray
    entry: np.ndarray  # (L - 1,) per draft slot
    mask: np.ndarray | None  # (L, L) ancestor mask; None when the tree is a chain


@functools.lru_cache(maxsize=256)
def tree_shape(widths: tuple[int, ...], main_len: int) -> Shape:
    levels = [d for d, k_d in enumerate(widths, start=1) if k_d > 1]
    extra_at, count = {}, 0  # (depth, k) -> index among the extra siblings, in the order they are drawn
    for k in range(1, max(widths, default=1)):
        for d in levels:
            if widths[d - 1] > k:
                extra_at[(d, k)] = count
                count += 1
    parent, sibling, depth, entry = [-1], [0], [0], []
    level = [0]
    for d, k_d in enumerate(widths, start=1):
        next_level = []
        for par in level:
            for k in range(k_d):
                parent.append(par)
                sibling.append(k)
                depth.append(d)
                entry.append(d - 1 if k == 0 else main_len - 1 + extra_at[(d, k)])
                next_level.append(len(parent) - 1)
        level = next_level
    last = level[0]  # the first-child path's slot at the tree's deepest level
    for d in range(len(widths) + 1, main_len):
        parent.append(last)
        sibling.append(0)
        depth.append(d)
        entry.append(d - 1)
        last = len(parent) - 1
    parent_ = np.array(parent, dtype=np.int64)
    chain = all(k == 1 for k in widths)
    as_array = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    return Shape(
        parent_, as_array(sibling), as_array(depth), as_array(entry), None if chain else ancestor_mask(parent_)
    )


@dataclass
class TreeLayout(Layout):
    """A tree's layout: its branching widths and where each draft slot's draft comes from."""

    widths: list[int] = field(kw_only=True)  # children per parent at depths 1.. (1 at forced positions)
    entry: np.ndarray = field(kw_only=True)  # (L - 1,) per draft slot: index into main drafts + siblings


class TreeTopology(ForestTopology[TreeConfig]):
    Config = TreeConfig

    @classmethod
    def lossless(cls, config: TreeConfig, **children: bool) -> bool:
        """Recursive rejection sampling over siblings, taking the first accepted one, is exact; choosing the
        longest accepted path is not (the exactness suite rejects it)."""
        return config.select == "first"

    def __init__(self, config: TreeConfig | None = None) -> None:
        super().__init__(config)
        self.width, self.depth, self.select = self.config.width, self.config.depth, self.config.select
        self.adapt = self.config.adapt
        self._masks: dict[tuple, torch.Tensor] = {}  # the shapes' masks on the device

    def siblings(self) -> int:
        return self.width

    def useful_window(self, layout: SegmentLayout) -> int:
        """The full K-ary tree's branches, then the first-child path to the end of the image."""
        return tree_size([self.width] * max(self.depth - 1, 0)) + layout.n_positions

    def longest_stay(self, window: int) -> int:
        """The first-child path is at most the window long, and every iteration decides its first position."""
        return window

    def plan(self, sample: SampleView, window: int) -> TreeLayout:
        n, N = sample.frontier(), sample.n_positions
        deepest = N - n - 1  # a slot at depth d predicts position n + d
        n_legal = int(sample.legal.numel())
        forced = sample.layout.forced[n : n - 1 + min(self.depth - 1, deepest) + 1].tolist()
        width = self.adapted_width(sample, n) if self.adapt == "neighbours" else self.width
        widths = [1 if f >= 0 else min(width, n_legal) for f in forced]
        while widths and tree_size(widths) > window:  # the full tree must fit in the window
            widths.pop()
        main_len = min(len(widths) + 1 + window - tree_size(widths), deepest + 1)  # slots on the first-child path
        shape = tree_shape(tuple(widths), main_len)
        L = shape.parent.size
        roots = np.zeros(L, dtype=bool)
        roots[0] = True
        return TreeLayout(
            positions=n - 1 + shape.depth,
            parent=shape.parent,
            sibling=shape.sibling,
            depth=shape.depth,
            roots=sample.tokens[n - 1 : n],
            commit_root=roots,
            emits=roots.copy(),
            mask=self._device_mask((tuple(widths), main_len), shape, sample.tokens.device),
            wanted=np.arange(n, n + main_len - 1),  # the first-child path's drafts, depths 1 .. main_len-1
            widths=widths,
            entry=shape.entry,
        )

    def adapted_width(self, sample: SampleView, n: int) -> int:
        """ADT-Tree's width (adaptive.py, our reading): K / r wide, halving as r doubles, between 1 (an
        easy region: a chain, its first-child path as deep as the window) and K (a hard one, or no
        decided neighbour: the widest tree)."""
        return narrowed(self.width, neighbour_run(sample, n))

    def place(self, layout: Layout, drafts: Drafts, sample: SampleView) -> Window:
        """The main path holds the drafts; each branching level's siblings are drawn from them."""
        tree = cast(TreeLayout, layout)  # this topology's plan made it
        extra = self._siblings(drafts, tree.widths, sample.legal, sample.generator)
        nodes = Drafts.cat([drafts, extra]).select(tree.entry)
        return layout.placed(torch.cat([layout.roots, nodes.tokens]), nodes)

    def _device_mask(self, key: tuple, shape: Shape, device: torch.device) -> torch.Tensor | None:
        if shape.mask is None:
            return None
        key = (*key, str(device))
        if key not in self._masks:
            self._masks[key] = torch.from_numpy(shape.mask).to(device)
        return self._masks[key]

    @staticmethod
    def _siblings(main: Drafts, widths: list[int], legal: torch.Tensor, generator: torch.Generator) -> Drafts:
        """Siblings 1..K_d-1 of each branching level, drawn without replacement from the reference q
        of sibling 0 (uniform over the untaken image tokens once q has no mass left), in the order
        `tree_shape` expects: by k, then by depth."""
        levels = [d for d, k_d in enumerate(widths, start=1) if k_d > 1]
        if not levels:
            return main.select(np.zeros(0, dtype=np.int64))
        device = main.tokens.device
        level_drafts = torch.as_tensor([d - 1 for d in levels], device=device)
        q = main.refs[level_drafts]  # (levels, V)
        uniform = torch.zeros_like(q[0])
        uniform[legal] = 1.0
        taken = torch.zeros_like(q, dtype=torch.bool).scatter_(
            -1, main.tokens[level_drafts][:, None], True
        )  # (levels, V)
        tokens, refs, positions, fresh = [], [], [], []
        for k in range(1, max(widths)):
            active = [i for i, d in enumerate(levels) if widths[d - 1] > k]
            idx = torch.as_tensor(active, device=device)
            left = q[idx].masked_fill(taken[idx], 0.0)
            mass = left.sum(-1, keepdim=True)
            spare = uniform.expand_as(left).masked_fill(taken[idx], 0.0)
            dist = torch.where(mass > 1e-12, left / mass.clamp_min(1e-30), spare / spare.sum(-1, keepdim=True))
            drawn = sample(dist, Draws.single(generator, len(active), device))  # (b,)
            taken[idx, drawn] = True
            at = np.array([levels[i] - 1 for i in active])
            positions.append(main.positions[at])
            fresh.append(main.fresh[at])  # q one-hot: the sibling is a uniform draw
            tokens.append(drawn)
            refs.append(dist)
        no = torch.zeros(sum(len(t) for t in tokens), dtype=torch.bool, device=device)
        return Drafts(np.concatenate(positions), torch.cat(tokens), torch.cat(refs), np.concatenate(fresh), no, no)
