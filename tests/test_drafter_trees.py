"""The drafter tree topology's node choice, apart from any drafter: a fake drafter whose q below a node
is a fixed function of the node's path.

* dynamic: the tree equals a restatement of the released EAGLE-2 rule (jadohu/LANTERN
  `models/drafters/cnets_llamagen.py`, `topK_genrate`, read: root top-k; `depth` rounds of feeding
  the k best newest candidates by cumulative log q and taking each one's top-k children; the best
  total_tokens - 1 candidates kept in candidate order, each pointing at its parent);
* static: the released path order, siblings drawn without replacement carrying q without their
  elder siblings, subtrees dropped where q has no mass left, the window keeping the first paths;
* bad `choices` are refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sjdbench.decoding.topologies.drafter_tree import CHOICES, DrafterTreeTopology, static_tree
from sjdbench.errors import UserError

V = 12


def q_of(path: tuple[int, ...], sample: int) -> torch.Tensor:
    """The fake drafter's q below a node: a fixed random distribution per (sample, path)."""
    seed = hash((sample, path)) % (2**31)
    return torch.softmax(3 * torch.randn(V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), -1)


class FakeDrafter:
    """A `Level` for the topology: remembers each entry's path."""

    def __init__(self, batch: int) -> None:
        self.paths: list[list[tuple[int, ...]]] = [[] for _ in range(batch)]
        self.calls = 0

    def __call__(self, tokens, parents, depth, active):
        self.calls += 1
        B, F = tokens.shape
        q = torch.zeros(B, F, V, dtype=torch.float64)
        entries = torch.zeros(B, F, dtype=torch.long)
        for b in range(B):
            for i in range(F):
                parent = int(parents[b, i])
                path = (self.paths[b][parent] if parent >= 0 else ()) + (int(tokens[b, i]),)
                assert len(path) == depth
                entries[b, i] = len(self.paths[b])
                self.paths[b].append(path)
                q[b, i] = q_of(path, b)
        return q, entries


def released_dynamic(sample: int, top_k: int, depth: int, total: int) -> tuple[list[tuple[int, ...]], list[int]]:
    """The released selection restated for one sample: (paths of the kept candidates in candidate
    order, each one's parent as an index into that list, -1 for the root)."""
    root = q_of((), sample).log()
    scores, tokens = root.topk(top_k)
    pool = [((int(t),), float(s), -1) for s, t in zip(scores, tokens)]  # (path, cumulative score, parent)
    frontier = list(range(top_k))
    for _ in range(depth):
        children = []
        for node in frontier:
            path, score, _ = pool[node]
            values, ids = q_of(path, sample).log().topk(top_k)
            children += [(path + (int(t),), score + float(v), node) for v, t in zip(values, ids)]
        start = len(pool)
        pool += children
        best = torch.tensor([c[1] for c in children]).topk(top_k).indices.tolist()
        frontier = [start + i for i in best]
    kept = sorted(torch.tensor([c[1] for c in pool]).topk(total - 1).indices.tolist())
    where = {node: i for i, node in enumerate(kept)}
    return [pool[i][0] for i in kept], [where.get(pool[i][2], -1) for i in kept]


def paths_of(tree) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for slot in range(1, len(tree.parent)):
        out.append(out[int(tree.parent[slot])] + (int(tree.tokens[slot - 1]),))
    return out[1:]


@pytest.mark.parametrize(("top_k", "depth", "window"), [(4, 3, 20), (3, 5, 12), (8, 2, 63)])
def test_the_dynamic_tree_equals_the_released_rule(top_k, depth, window):
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="dynamic", top_k=top_k, depth=depth))
    B = 3
    root_q = torch.stack([q_of((), b) for b in range(B)])
    drafter = FakeDrafter(B)
    frontiers = np.array([5, 5, 5])
    trees = topology.grow_trees(root_q, drafter, frontiers, last=1000, window=window, generators=[])
    assert drafter.calls == depth
    for b, tree in enumerate(trees):
        paths, parents = released_dynamic(b, top_k, depth, window)
        assert paths_of(tree) == paths
        assert [int(p) - 1 for p in tree.parent[1:]] == parents
        assert tree.refs is None  # chosen nodes: point masses
        assert (tree.depth[1:] == [len(p) for p in paths]).all()


def test_the_dynamic_tree_stops_at_the_segment_end():
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="dynamic", top_k=4, depth=5))
    root_q = torch.stack([q_of((), b) for b in range(2)])
    trees = topology.grow_trees(root_q, FakeDrafter(2), np.array([10, 8]), last=10, window=30, generators=[])
    assert trees[0].depth.max() == 1 and trees[1].depth.max() == 3  # positions up to `last` only


def test_the_static_tree_is_the_released_order_with_elderless_references():
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="static"))
    B = 2
    root_q = torch.stack([q_of((), b) for b in range(B)])
    generators = [torch.Generator().manual_seed(b) for b in range(B)]
    trees = topology.grow_trees(root_q, FakeDrafter(B), np.array([3, 3]), last=1000, window=26, generators=generators)
    expected = static_tree("mc_sim_7b_63")
    for b, tree in enumerate(trees):
        assert (tree.parent == expected.parent).all() and (tree.sibling == expected.rank).all()
        paths = paths_of(tree)
        for slot in range(1, len(tree.parent)):
            parent_path = paths[int(tree.parent[slot]) - 1] if tree.parent[slot] > 0 else ()
            q = q_of(parent_path, b)
            elders = [
                int(tree.tokens[s - 1])
                for s in range(1, slot)
                if tree.parent[s] == tree.parent[slot] and tree.sibling[s] < tree.sibling[slot]
            ]
            q[elders] = 0
            assert torch.allclose(tree.refs[slot - 1], q / q.sum())  # the distribution it was drawn from
            assert int(tree.tokens[slot - 1]) not in elders


def test_a_parent_without_mass_left_gets_no_more_children():
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="static", choices="[[0],[1],[2],[0,0]]"))
    root_q = torch.zeros(1, V, dtype=torch.float64)
    root_q[0, [3, 7]] = torch.tensor([0.25, 0.75], dtype=torch.float64)  # two tokens: the third sibling has none
    (tree,) = topology.grow_trees(
        root_q, FakeDrafter(1), np.array([0]), last=100, window=10, generators=[torch.Generator().manual_seed(0)]
    )
    assert sorted(tree.tokens[tree.depth[1:] == 1].tolist()) == [3, 7]
    assert tree.parent.tolist() == [-1, 0, 0, 1]


def test_the_window_keeps_the_first_paths():
    tree = static_tree("mc_sim_7b_63").first(6)
    assert tree.depth.tolist() == [0, 1, 1, 1, 1, 2] and tree.parent.tolist() == [-1, 0, 0, 0, 0, 1]
    assert len(CHOICES["mc_sim_7b_63"]) == 25


@pytest.mark.parametrize(
    ("choices", "needle"),
    [
        ("[[0],[0,1]]", "skips a sibling"),
        ("[[1]]", "skips a sibling"),
        ("[[0,0]]", "has no parent path [0]"),
        ("no_such_tree", "neither a released tree (mc_sim_7b_63, mc_sim_7b_63_balanced) nor a list of paths"),
        ("[[-1]]", "nor a list of paths"),
    ],
)
def test_bad_choices_are_one_line(choices, needle):
    with pytest.raises(UserError) as error:
        DrafterTreeTopology.Config(shape="static", choices=choices).check()
    assert needle in str(error.value) and "\n" not in str(error.value)
