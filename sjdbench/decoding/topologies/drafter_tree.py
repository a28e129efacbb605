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

`adapt: neighbours` is ADT-Tree's adaptation, our reading (adaptive.py: r, the mean run of the
iterations that decided the first undecided position's left and upper neighbours; the released
code has no rule to conform to). Each sample's tree gets its own budget from r at plan time:

- `dynamic`: top_k' = round(top_k / r) (at least 1) children per expanded node and nodes expanded
  per level, and depth' = round(depth * r) rounds (at least `depth`, at most W - 2 so that a chain of
  depth' + 1 nodes fits the W - 1 draft slots, and at most the positions left). Easy region: a deep,
  narrow tree; hard region (r = 1) or no decided neighbour: EAGLE-2's tree. The best W - 1
  candidates form the tree as before.
- `static`: the paths whose sibling indices are all below round(K / r) (K: the most children a node
  has), the first-child path extended to depth round(D * r) (D: the tree's depth; capped as above,
  at W - 1), then the first W - 1 paths as always.

r reads decided positions only, so each tree is fixed before its drafts are verified: exact as the
fixed trees. A batch grows all its samples' trees together: the widest top_k' and most rounds, each
sample's extra candidates at -inf (dynamic), or the union of the samples' paths with each sample's
own paths alive (static), so a sample's tree is the one it grows alone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from sjdbench.decoding.parts import Layout, PartConfig, SampleView, Window
from sjdbench.decoding.processing import one_hot, sample
from sjdbench.decoding.randomness import Draws
from sjdbench.decoding.state import Drafts
from sjdbench.decoding.topologies.adaptive import check_adapt, deepened, narrowed, neighbour_run
from sjdbench.decoding.topologies.forest import ForestTopology, ancestor_mask
from sjdbench.errors import UserError, check_at_least, check_choice

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
    adapt: str = "none"  # none: every tree the configured one | neighbours: ADT-Tree's width and depth from r

    symbols: ClassVar[dict[str, str]] = {"top_k": "k", "depth": "D"}

    def unused(self) -> set[str]:
        """A fixed tree says nothing of adaptation, so trees from before the knob keep their run ids."""
        return {"adapt"} if self.adapt == "none" else set()

    def check(self) -> None:
        check_adapt(self.adapt)
        check_choice("shape", self.shape, SHAPES)
        check_at_least("top_k", self.top_k, 1)
        check_at_least("depth", self.depth, 1)
        if self.shape == "static":
            static_tree(self.choices)


@dataclass(frozen=True)
class StaticTree:
    """A static tree's slots (0: the root, then the paths by length, then lexicographically)."""

    parent: np.ndarray  # (S,) parent slot, -1 for the root
    rank: np.ndarray  # (S,) index among its parent's children
    depth: np.ndarray  # (S,)
    paths: tuple[tuple[int, ...], ...]  # (S,) each slot's sibling indices from the root (the root: ())

    def first(self, slots: int) -> StaticTree:
        """Its first `slots` slots (prefix-closed: a parent comes before its children)."""
        return StaticTree(self.parent[:slots], self.rank[:slots], self.depth[:slots], self.paths[:slots])

    @property
    def widest(self) -> int:
        """The most children a node has (K)."""
        return int(np.bincount(self.parent[1:]).max(initial=1)) if self.parent.size > 1 else 1


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
    return tree_of_paths(frozenset(tuple(p) for p in paths))


@functools.lru_cache(maxsize=256)
def tree_of_paths(paths: frozenset[tuple[int, ...]]) -> StaticTree:
    """The tree of a set of paths, in the released order (by length, then lexicographically)."""
    ordered = sorted(paths, key=lambda p: (len(p), p))
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
    return StaticTree(as_array(parent), as_array(rank), as_array(depth), ((), *ordered))


def narrowed_tree(tree: StaticTree, width: int, depth: int) -> StaticTree:
    """A static tree's paths whose sibling indices are all below `width`, with its first-child path
    run to `depth` (the tree itself when neither cuts nor extends it)."""
    deepest = int(tree.depth.max(initial=0))
    if width >= tree.widest and depth <= deepest:
        return tree
    kept = {p for p in tree.paths[1:] if max(p) < width}
    kept |= {(0,) * d for d in range(1, depth + 1)} if depth > deepest else set()
    return tree_of_paths(frozenset(kept))


@dataclass(frozen=True)
class TreeBudget:
    """One sample's tree shape for this iteration: dynamic, top_k and expansion rounds; static, the
    sibling indices kept (below `width`) and the first-child path's depth."""

    width: int
    depth: int


@dataclass
class RootLayout(Layout):
    """The root alone, and the budget of the tree the drafter grows below it."""

    budget: TreeBudget = field(kw_only=True)


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
        self.shape, self.top_k, self.rounds, self.adapt = c.shape, c.top_k, c.depth, c.adapt
        self.tree = static_tree(c.choices) if c.shape == "static" else None

    def siblings(self) -> int:
        return self.tree.widest if self.tree is not None else self.top_k

    def most_nodes(self, window: int = 1) -> int:
        """The most draft nodes one iteration feeds to the drafter (its cache's draft entries); an
        adaptive tree's deepest budget depends on the window."""
        if self.tree is not None:
            extra = max(window - 1 - int(self.tree.depth.max(initial=0)), 0) if self.adapt == "neighbours" else 0
            return int(self.tree.parent.size) + extra
        return self.top_k * (max(self.rounds, window - 2) if self.adapt == "neighbours" else self.rounds)

    def useful_window(self, layout: SegmentLayout) -> int:
        """A static tree uses all its paths and no more; a dynamic one at most every candidate."""
        if self.tree is not None:
            return int(self.tree.parent.size)
        return 1 + self.top_k + self.rounds * self.top_k**2

    def longest_stay(self, window: int) -> int:
        """Every iteration decides the first undecided position; the tree holds at most `window` positions."""
        return window

    def plan(self, sample: SampleView, window: int) -> RootLayout:
        """The root alone, with its tree's budget; the drafter proposal grows the tree below it (`grow`)."""
        n = sample.frontier()
        root = np.ones(1, dtype=bool)
        zero = np.zeros(1, dtype=np.int64)
        return RootLayout(
            positions=np.array([n - 1]),
            parent=np.array([-1]),
            sibling=zero,
            depth=zero,
            roots=sample.tokens[n - 1 : n],
            commit_root=root,
            emits=root.copy(),
            mask=None,
            wanted=np.zeros(0, dtype=np.int64),
            budget=self.budget(sample, n, window),
        )

    def configured(self) -> TreeBudget:
        """The tree as configured: no adaptation, or no decided neighbour to adapt to."""
        if self.tree is not None:
            return TreeBudget(self.tree.widest, int(self.tree.depth.max(initial=0)))
        return TreeBudget(self.top_k, self.rounds)

    def budget(self, sample: SampleView, n: int, window: int) -> TreeBudget:
        """This iteration's tree for the sample (module docstring): narrower and deeper as r grows."""
        if self.adapt == "none":
            return self.configured()
        return self.shaped(neighbour_run(sample, n), sample.n_positions - 1 - n, window)

    def shaped(self, r: float | None, left: int, window: int) -> TreeBudget:
        """The budget at r, with `left` positions a draft may still hold (depths 1..left)."""
        base = self.configured()
        if self.tree is not None:  # a first-child path of depth d: d of the W - 1 draft slots
            return TreeBudget(narrowed(base.width, r), deepened(base.depth, r, min(window - 1, left)))
        return TreeBudget(narrowed(base.width, r), deepened(base.depth, r, min(window - 2, left - 1)))

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
        budgets: list[TreeBudget] | None = None,
    ) -> list[GrownTree]:
        """Each sample's tree. root_q (B, V): the drafter's q for position frontiers[b]; `last`: the
        deepest position a draft may hold (N - 2); `window`: the most slots; budgets: each sample's
        tree from its plan (None: the configured tree for all)."""
        deepest = last - frontiers + 1  # (B,) a node at depth d holds position frontiers + d - 1
        budgets = budgets or [self.configured()] * len(frontiers)
        if self.tree is not None:
            return self._static(root_q, level, deepest, window, generators, budgets)
        return self._dynamic(root_q, level, deepest, window, budgets)

    def _union(self, budgets: list[TreeBudget], window: int) -> tuple[StaticTree, np.ndarray]:
        """One tree holding every sample's budgeted tree, and (B, S) which of its slots each sample's own is."""
        assert self.tree is not None
        own = {b: narrowed_tree(self.tree, b.width, b.depth).first(max(window, 1)) for b in set(budgets)}
        if len(own) == 1:
            (tree,) = own.values()
            return tree, np.ones((len(budgets), tree.parent.size), dtype=bool)
        tree = tree_of_paths(frozenset(p for t in own.values() for p in t.paths[1:]))
        mine = {b: set(t.paths) for b, t in own.items()}
        return tree, np.array([[p in mine[b] for p in tree.paths] for b in budgets], dtype=bool)

    def _static(
        self,
        root_q: torch.Tensor,
        level: Level,
        deepest: np.ndarray,
        window: int,
        generators: list[torch.Generator],
        budgets: list[TreeBudget],
    ) -> list[GrownTree]:
        tree, own = self._union(budgets, window)  # own: (B, S)
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
        own_children = np.zeros((B, S), dtype=bool)  # (B, S) a slot with children in the sample's own tree
        for child in range(1, S):
            own_children[:, tree.parent[child]] |= own[:, child]
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
                live = own[:, slots] & alive[:, parents] & (mass > 1e-12).cpu().numpy() & (d <= deepest)[:, None]
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
            needed = alive[:, fed] & own_children[:, fed]  # (B, F) living nodes with children of their own
            if fed.size and not needed.any():  # no sample has these nodes: their children have no mass
                below.update({int(s): root_q.new_zeros(B, V) for s in fed})
            elif fed.size:
                q, entries = level(
                    tokens[:, fed],
                    torch.as_tensor(entry[:, tree.parent[fed]], device=device),
                    d,
                    np.asarray(needed.any(1)),
                )  # (B, F, V), (B, F)
                entry[:, fed] = entries.cpu().numpy()
                for i, s in enumerate(fed.tolist()):
                    below[s] = q[:, i]
        return [self._keep(tree.parent, tree.rank, tree.depth, alive[b], tokens[b], refs[b]) for b in range(B)]

    def _dynamic(
        self, root_q: torch.Tensor, level: Level, deepest: np.ndarray, window: int, budgets: list[TreeBudget]
    ) -> list[GrownTree]:
        B, V = root_q.shape
        widths = np.array([min(b.width, V) for b in budgets])  # (B,) each sample's top_k
        rounds = np.array([b.depth for b in budgets])  # (B,)
        K, R, device = int(widths.max()), int(rounds.max()), root_q.device
        narrow = torch.as_tensor(np.arange(K)[None, :] >= widths[:, None], device=device)  # (B, K) ranks left out
        top = root_q.topk(K, dim=-1)  # log is monotone: the top-k of q, then the log of k values, not of V
        values = top.values.log().masked_fill(narrow, -torch.inf)
        pool_tokens, pool_scores = [top.indices], [values]  # per level (B, n)
        pool_parent = [torch.full((B, K), -1, dtype=torch.long, device=device)]  # pool index of the parent
        pool_depth = [np.ones(K, dtype=np.int64)]
        frontier = torch.arange(K, device=device).expand(B, K)  # pool indices of the nodes fed next
        scores, size = values, K
        entry_of = torch.full((B, 1 + K + R * K * K), -1, dtype=torch.long, device=device)
        rows = torch.arange(B, device=device)[:, None]
        for r in range(R):
            needed = (1 + r <= deepest) & (r < rounds)  # (B,) its newest nodes exist and it has rounds left
            if not needed.any():
                break
            # only the frontier ranks a sample that still grows uses: a sample's ranks past its own
            # top_k' score -inf (so do their children), and a sample with no rounds left keeps none
            F = int(widths[needed].max())
            fed = frontier[:, :F]
            flat_tokens = torch.cat(pool_tokens, 1)
            flat_parent = torch.cat(pool_parent, 1)
            parent_entry = torch.where(
                flat_parent[rows, fed] >= 0, entry_of[rows, flat_parent[rows, fed].clamp_min(0)], -1
            )
            q, entries = level(flat_tokens[rows, fed], parent_entry, r + 1, needed)  # (B, F, V), (B, F)
            entry_of[rows, fed] = entries
            child = q.topk(K, dim=-1)  # (B, F, K)
            below = child.values.log().masked_fill(narrow[:, None, :], -torch.inf)
            cumulative = scores[:, :F, None] + below  # (B, F, K)
            pool_tokens.append(child.indices.reshape(B, F * K))
            pool_scores.append(cumulative.reshape(B, F * K))
            pool_parent.append(fed[:, :, None].expand(B, F, K).reshape(B, F * K))
            pool_depth.append(np.full(F * K, r + 2, dtype=np.int64))
            best = cumulative.reshape(B, F * K).topk(K, dim=-1)
            frontier, scores = size + best.indices, best.values.masked_fill(narrow, -torch.inf)
            size += F * K
        tokens, parent = torch.cat(pool_tokens, 1), torch.cat(pool_parent, 1)
        score, depth = torch.cat(pool_scores, 1), np.concatenate(pool_depth)
        within = depth[None, :] <= np.minimum(deepest, rounds + 1)[:, None]  # a tree of R rounds is R + 1 deep
        usable = torch.isfinite(score) & torch.as_tensor(within, device=device)
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
