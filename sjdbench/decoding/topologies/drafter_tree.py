"""`drafter_tree` — the draft tree a trained drafter grows each iteration: EAGLE's static tree or
EAGLE-2's dynamic one.

The root is x_{n-1}, the last decided token; a node at depth d is a draft for position n - 1 + d.
The drafter proposal runs the drafter one level at a time (`Level`: the q below each node, and the
features its children read) and this topology decides which tokens become nodes:

- `static` (EAGLE-1, LANTERN++'s `--static_tree`): a fixed list of paths ("choices", the released
  format: `[1, 0]` is the first child of the root's second child). The released code with sampling
  draws each node's children *without replacement* from its q, so child k carries q with children
  0..k-1 removed and renormalised: the distribution it was drawn from. Recursive rejection over
  siblings with those references is exact (forest.py). A node whose q has no mass left (a forced
  position, a top-k cut) gets no more children; their subtrees are dropped.
- `dynamic` (EAGLE-2's `topK_genrate`): the root's top-k children by q; then `depth` times, the
  top-k nodes of the newest level by cumulative log q are fed to the drafter and each gets its top-k
  children; finally the best W - 1 of all candidates by cumulative log q form the tree (ties: the
  earlier candidate, so a parent always precedes its children). The nodes are *chosen*, not drawn,
  so each carries the point mass on its token as its reference: recursive rejection then accepts
  sibling k with probability p_k(x_k) and removes x_k from the residual, which is exact whatever
  the drafter (EAGLE's `evaluate_posterior` with q = 1).

Drafts never go past position N - 2 (the last position is the bonus draw of the slot before it, as in
a chain). The window is at most `decoder.window` slots: a static tree keeps its first W - 1 paths in
the released order (by length, then lexicographically: a prefix-closed list stays prefix-closed).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from sjdbench.decoding.parts import Layout, PartConfig, SampleView, Window
from sjdbench.decoding.processing import one_hot, sample
from sjdbench.decoding.randomness import Draws
from sjdbench.decoding.state import Drafts
from sjdbench.decoding.topologies.forest import ForestTopology, ancestor_mask
from sjdbench.errors import UserError

if TYPE_CHECKING:
    from sjdbench.adapter import SegmentLayout

SHAPES = ("static", "dynamic")
# The released static trees (EAGLE's and LANTERN's `choices.py`), as data: sibling indices from the
# root. Both end on the same deep first-child path.
_DEEP_PATH = [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
CHOICES: dict[str, list[list[int]]] = {
    "mc_sim_7b_63": [
        [0],
        [1],
        [2],
        [3],
        [0, 0],
        [0, 1],
        [0, 2],
        [1, 0],
        [1, 1],
        [2, 0],
        [2, 1],
        [3, 0],
        [0, 0, 0],
        [0, 0, 1],
        [0, 0, 2],
        [0, 1, 0],
        [0, 1, 1],
        [0, 2, 0],
        [0, 2, 1],
        [1, 0, 0],
        *_DEEP_PATH,
    ],  # fmt: skip
    "mc_sim_7b_63_balanced": [
        [0],
        [1],
        [2],
        [0, 0],
        [0, 1],
        [0, 2],
        [1, 0],
        [1, 1],
        [1, 2],
        [2, 0],
        [2, 1],
        [0, 0, 0],
        [0, 0, 1],
        [0, 0, 2],
        [0, 1, 0],
        [0, 1, 1],
        [1, 0, 0],
        [1, 0, 1],
        [1, 1, 0],
        [1, 1, 1],
        *_DEEP_PATH,
    ],  # fmt: skip
}


@dataclass
class DrafterTreeConfig(PartConfig):
    shape: str = "static"  # static: a fixed list of paths (EAGLE-1) | dynamic: expand and rerank (EAGLE-2)
    choices: str = "mc_sim_7b_63"  # static: a released tree's name, or paths written out: "[[0],[1],[0,0]]"
    top_k: int = 8  # dynamic: children per expanded node, and nodes expanded per level (released default)
    depth: int = 5  # dynamic: expansion rounds; the tree is at most depth + 1 deep (released default)

    symbols: ClassVar[dict[str, str]] = {"top_k": "k", "depth": "D"}

    def check(self) -> None:
        if self.shape not in SHAPES:
            raise UserError(f"shape '{self.shape}' is unknown; choose one of: {', '.join(SHAPES)}")
        if self.top_k < 1:
            raise UserError(f"top_k must be >= 1, got {self.top_k}")
        if self.depth < 1:
            raise UserError(f"depth must be >= 1, got {self.depth}")
        if self.shape == "static":
            static_tree(self.choices)


@dataclass(frozen=True)
class StaticTree:
    """A static tree's slots (0: the root, then the paths by length, then lexicographically)."""

    parent: np.ndarray  # (S,) parent slot, -1 for the root
    rank: np.ndarray  # (S,) index among its parent's children
    depth: np.ndarray  # (S,)

    def first(self, slots: int) -> StaticTree:
        """Its first `slots` slots (prefix-closed: a parent comes before its children)."""
        return StaticTree(self.parent[:slots], self.rank[:slots], self.depth[:slots])


@functools.lru_cache(maxsize=32)
def static_tree(choices: str) -> StaticTree:
    """The tree of a released name or of paths written out; refused in one line when it is not a tree."""
    if choices in CHOICES:
        paths = CHOICES[choices]
    else:
        try:
            paths = json.loads(choices)
            ok = isinstance(paths, list) and all(
                isinstance(p, list) and p and all(isinstance(i, int) and i >= 0 for i in p) for p in paths
            )
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise UserError(
                f"choices '{choices}' is neither a released tree ({', '.join(CHOICES)}) nor a list of paths "
                'such as "[[0],[1],[0,0]]"'
            )
    ordered = sorted({tuple(p) for p in paths}, key=lambda p: (len(p), p))
    slot: dict[tuple[int, ...], int] = {(): 0}
    parent, rank, depth = [-1], [0], [0]
    for path in ordered:
        if path[:-1] not in slot:
            raise UserError(f"choices: the path {list(path)} has no parent path {list(path[:-1])}; list every prefix")
        if path[-1] > 0 and (*path[:-1], path[-1] - 1) not in slot:
            raise UserError(
                f"choices: the path {list(path)} skips a sibling: children are drawn in order, list "
                f"{[*path[:-1], path[-1] - 1]} too"
            )
        slot[path] = len(parent)
        parent.append(slot[path[:-1]])
        rank.append(path[-1])
        depth.append(len(path))
    as_array = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    return StaticTree(as_array(parent), as_array(rank), as_array(depth))


# One level of drafter forwards, as the drafter proposal runs it: tokens (B, L) of nodes at depth d,
# each with its parent's drafter entry (B, L) (-1: the root), and which samples need the level (B,)
# (the others ride along) -> (the q below each node (B, L, V), each node's own entry (B, L)). Entries
# are the proposal's bookkeeping (features, ancestors, KV).
Level = Callable[[torch.Tensor, torch.Tensor, int, np.ndarray], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class GrownTree:
    """One sample's drafted tree: its draft slots (1..S-1 of a window whose slot 0 is the root)."""

    parent: np.ndarray  # (S,) parent slot, -1 for the root
    sibling: np.ndarray  # (S,)
    depth: np.ndarray  # (S,)
    tokens: torch.Tensor  # (S - 1,) the drafts
    refs: torch.Tensor | None  # (S - 1, V) what each was drawn from; None: chosen (point masses)


class DrafterTreeTopology(ForestTopology[DrafterTreeConfig]):
    Config = DrafterTreeConfig
    grows: ClassVar[bool] = True  # the window is the drafter's tree (the drafter proposal grows it)

    @classmethod
    def lossless(cls, config: DrafterTreeConfig, **children: bool) -> bool:
        """Sampled siblings carry the distribution they were drawn from, chosen ones their point mass:
        recursive rejection over siblings is exact either way (module docstring)."""
        return True

    def __init__(self, config: DrafterTreeConfig | None = None) -> None:
        super().__init__(config)
        c = self.config
        self.shape, self.top_k, self.rounds = c.shape, c.top_k, c.depth
        self.tree = static_tree(c.choices) if c.shape == "static" else None

    def siblings(self) -> int:
        return int(np.bincount(self.tree.parent[1:]).max(initial=1)) if self.tree is not None else self.top_k

    def most_nodes(self) -> int:
        """The most draft nodes one iteration feeds to the drafter (its cache's draft entries)."""
        if self.tree is not None:
            return int(self.tree.parent.size)
        return self.top_k * self.rounds

    def useful_window(self, layout: SegmentLayout) -> int:
        """A static tree uses all its paths and no more; a dynamic one at most every candidate."""
        if self.tree is not None:
            return int(self.tree.parent.size)
        return 1 + self.top_k + self.rounds * self.top_k**2

    def longest_stay(self, window: int) -> int:
        """Every iteration decides the first undecided position; the tree holds at most `window` positions."""
        return window

    def plan(self, sample: SampleView, window: int) -> Layout:
        """The root alone; the drafter proposal grows the tree below it (`grow`)."""
        n = sample.frontier()
        root = np.ones(1, dtype=bool)
        zero = np.zeros(1, dtype=np.int64)
        return Layout(
            positions=np.array([n - 1]),
            parent=np.array([-1]),
            sibling=zero,
            depth=zero,
            roots=sample.tokens[n - 1 : n],
            commit_root=root,
            emits=root.copy(),
            mask=None,
            wanted=np.zeros(0, dtype=np.int64),
        )

    def place(self, layout: Layout, drafts: Drafts, sample: SampleView) -> Window:
        raise NotImplementedError("a drafter tree is grown by the drafter proposal (grow), not placed")

    def grow(self, layout: Layout, tree: GrownTree, vocab_size: int, dtype: torch.dtype) -> Window:
        """The window of a root layout with the drafted tree below it."""
        n = int(layout.positions[0]) + 1
        positions = n - 1 + tree.depth
        refs = one_hot(tree.tokens, vocab_size, dtype) if tree.refs is None else tree.refs
        nodes = Drafts.new(positions[1:], tree.tokens, refs, vocab_size, fresh=False)
        device = layout.roots.device
        grown = Layout(
            positions=positions,
            parent=tree.parent,
            sibling=tree.sibling,
            depth=tree.depth,
            roots=layout.roots,
            commit_root=np.arange(len(positions)) == 0,
            emits=np.arange(len(positions)) == 0,
            mask=torch.from_numpy(ancestor_mask(tree.parent)).to(device) if len(positions) > 1 else None,
            wanted=np.unique(positions[1:]),
        )
        return grown.placed(torch.cat([layout.roots, tree.tokens]), nodes)

    # -- growing: the drafter proposal supplies the levels ----------------------------------------

    def grow_trees(
        self,
        root_q: torch.Tensor,
        level: Level,
        frontiers: np.ndarray,
        last: int,
        window: int,
        generators: list[torch.Generator],
    ) -> list[GrownTree]:
        """Each sample's tree. root_q (B, V): the drafter's q for position frontiers[b]; `last`: the
        deepest position a draft may hold (N - 2); `window`: the most slots."""
        deepest = last - frontiers + 1  # (B,) a node at depth d holds position frontiers + d - 1
        if self.tree is not None:
            return self._static(root_q, level, deepest, window, generators)
        return self._dynamic(root_q, level, deepest, window)

    def _static(
        self, root_q: torch.Tensor, level: Level, deepest: np.ndarray, window: int, generators: list[torch.Generator]
    ) -> list[GrownTree]:
        assert self.tree is not None
        tree = self.tree.first(max(window, 1))
        B, V = root_q.shape
        S, device = tree.parent.size, root_q.device
        tokens = torch.zeros(B, S, dtype=torch.long, device=device)
        refs = root_q.new_zeros(B, S, V)
        alive = np.zeros((B, S), dtype=bool)
        alive[:, 0] = True
        below = {0: root_q}  # slot -> (B, V) q of its children
        entry = np.full((B, S), -1, dtype=np.int64)  # each slot's drafter entry, once fed
        has_children = np.zeros(S, dtype=bool)
        has_children[tree.parent[1:]] = True
        for d in range(1, int(tree.depth.max(initial=0)) + 1):
            here = np.flatnonzero(tree.depth == d)
            for k in range(int(tree.rank[here].max()) + 1):  # the k-th child of every parent, drawn together
                slots = here[tree.rank[here] == k]
                parents = tree.parent[slots]
                q = torch.stack([below[int(s)] for s in parents], 1)  # (B, P, V)
                taken = torch.zeros(B, len(slots), V, dtype=torch.bool, device=device)
                for elder in range(k):  # the parent's children 0..k-1, already drawn
                    elder_slots = [int(np.flatnonzero((tree.parent == s) & (tree.rank == elder))[0]) for s in parents]
                    taken.scatter_(-1, tokens[:, elder_slots][..., None], True)
                left = q.masked_fill(taken, 0.0)
                mass = left.sum(-1)  # (B, P)
                live = alive[:, parents] & (mass > 1e-12).cpu().numpy() & (d <= deepest)[:, None]
                if k > 0:  # a younger sibling only where its elder one lives (a prefix of each parent's children)
                    elder_live = np.stack(
                        [alive[:, int(np.flatnonzero((tree.parent == s) & (tree.rank == k - 1))[0])] for s in parents],
                        1,
                    )
                    live &= elder_live
                rows = np.flatnonzero(live.reshape(-1))  # sample-major
                if rows.size:
                    b, j = np.divmod(rows, len(slots))
                    dist = left[torch.as_tensor(b, device=device), torch.as_tensor(j, device=device)]
                    dist = dist / dist.sum(-1, keepdim=True)
                    drawn = sample(dist, Draws(generators, live.sum(1).tolist(), device))
                    at = torch.as_tensor(slots[j], device=device)
                    tokens[torch.as_tensor(b, device=device), at] = drawn
                    refs[torch.as_tensor(b, device=device), at] = dist
                alive[:, slots] = live
            fed = here[has_children[here]]
            if fed.size and not alive[:, fed].any():  # no sample has these nodes: their children have no mass
                below.update({int(s): root_q.new_zeros(B, V) for s in fed})
            elif fed.size:
                q, entries = level(
                    tokens[:, fed],
                    torch.as_tensor(entry[:, tree.parent[fed]], device=device),
                    d,
                    np.asarray(alive[:, fed].any(1)),
                )  # (B, F, V), (B, F)
                entry[:, fed] = entries.cpu().numpy()
                for i, s in enumerate(fed.tolist()):
                    below[s] = q[:, i]
        return [self._keep(tree.parent, tree.rank, tree.depth, alive[b], tokens[b], refs[b]) for b in range(B)]

    def _dynamic(self, root_q: torch.Tensor, level: Level, deepest: np.ndarray, window: int) -> list[GrownTree]:
        B, V = root_q.shape
        K, device = min(self.top_k, V), root_q.device
        top = root_q.log().topk(K, dim=-1)
        pool_tokens, pool_scores = [top.indices], [top.values]  # per level (B, n)
        pool_parent = [torch.full((B, K), -1, dtype=torch.long, device=device)]  # pool index of the parent
        pool_depth = [np.ones(K, dtype=np.int64)]
        frontier = torch.arange(K, device=device).expand(B, K)  # pool indices of the nodes fed next
        scores, size = top.values, K
        entry_of = torch.full((B, 1 + K + self.rounds * K * K), -1, dtype=torch.long, device=device)
        rows = torch.arange(B, device=device)[:, None]
        for r in range(self.rounds):
            if (1 + r > deepest).all():
                break
            flat_tokens = torch.cat(pool_tokens, 1)
            flat_parent = torch.cat(pool_parent, 1)
            parent_entry = torch.where(
                flat_parent[rows, frontier] >= 0, entry_of[rows, flat_parent[rows, frontier].clamp_min(0)], -1
            )
            q, entries = level(
                flat_tokens[rows, frontier], parent_entry, r + 1, np.asarray(1 + r <= deepest)
            )  # (B, K, V), (B, K)
            entry_of[rows, frontier] = entries
            child = q.log().topk(K, dim=-1)  # (B, K, K)
            cumulative = scores[:, :, None] + child.values  # (B, K, K)
            pool_tokens.append(child.indices.reshape(B, K * K))
            pool_scores.append(cumulative.reshape(B, K * K))
            pool_parent.append(frontier[:, :, None].expand(B, K, K).reshape(B, K * K))
            pool_depth.append(np.full(K * K, r + 2, dtype=np.int64))
            best = cumulative.reshape(B, K * K).topk(K, dim=-1)
            frontier, scores = size + best.indices, best.values
            size += K * K
        tokens, parent = torch.cat(pool_tokens, 1), torch.cat(pool_parent, 1)
        score, depth = torch.cat(pool_scores, 1), np.concatenate(pool_depth)
        usable = torch.isfinite(score) & torch.as_tensor(depth[None, :] <= deepest[:, None], device=device)
        order = torch.sort(score.masked_fill(~usable, -torch.inf), dim=-1, descending=True, stable=True).indices
        keep = max(window - 1, 0)
        chosen, usable_h = order[:, :keep].cpu().numpy(), usable.cpu().numpy()
        parent_h, tokens_h = parent.cpu().numpy(), tokens
        grown = []
        for b in range(B):
            picked = np.sort(chosen[b][usable_h[b, chosen[b]]])  # pool order: parents before children
            slot_of = {-1: 0, **{int(i): s + 1 for s, i in enumerate(picked)}}
            parents = np.array([-1] + [slot_of[int(parent_h[b, i])] for i in picked], dtype=np.int64)
            sibling = np.zeros(parents.size, dtype=np.int64)
            counts: dict[int, int] = {}
            for s in range(1, parents.size):  # siblings in pool order: by the parent's top-k rank
                sibling[s] = counts.get(int(parents[s]), 0)
                counts[int(parents[s])] = sibling[s] + 1
            grown.append(
                GrownTree(
                    parents,
                    sibling,
                    np.concatenate([[0], depth[picked]]).astype(np.int64),
                    tokens_h[b, torch.as_tensor(picked, device=device, dtype=torch.long)],
                    None,
                )
            )
        return grown

    @staticmethod
    def _keep(
        parent: np.ndarray,
        rank: np.ndarray,
        depth: np.ndarray,
        alive: np.ndarray,
        tokens: torch.Tensor,
        refs: torch.Tensor,
    ) -> GrownTree:
        """The living slots of a static tree, renumbered (parents still before children)."""
        slots = np.flatnonzero(alive)
        new = np.full(parent.size, -1, dtype=np.int64)
        new[slots] = np.arange(slots.size)
        index = torch.as_tensor(slots[1:], device=tokens.device)
        return GrownTree(
            np.where(parent[slots] >= 0, new[parent[slots].clip(0)], -1),
            rank[slots],
            depth[slots],
            tokens[index],
            refs[index],
        )
