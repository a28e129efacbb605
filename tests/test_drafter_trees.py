"""The drafter tree topology's node choice, apart from any drafter: a fake drafter whose q below a node
is a fixed function of the node's path.

* dynamic: the tree equals a restatement of the released EAGLE-2 rule (jadohu/LANTERN
  `models/drafters/cnets_llamagen.py`, `topK_genrate`, read: root top-k; `depth` rounds of feeding
  the k best newest candidates by cumulative log q and taking each one's top-k children; the best
  total_tokens - 1 candidates kept in candidate order, each pointing at its parent);
* static: the released path order, siblings drawn without replacement carrying q without their
  elder siblings, subtrees dropped where q has no mass left, the window keeping the first paths;
* bad `choices` are refused in one line;
* `adapt: neighbours` (ADT-Tree, our reading): the budget each r gives, the dynamic tree of a budget
  equal to the released rule at that top_k and depth, the static tree's kept paths, a batch of mixed
  budgets growing each sample's tree as it grows alone, and a bad `adapt` refused in one line.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sjdbench.decoding.topologies.adaptive import neighbour_run
from sjdbench.decoding.topologies.drafter_tree import (
    CHOICES,
    DrafterTreeTopology,
    TreeBudget,
    narrowed_tree,
    static_tree,
)
from sjdbench.errors import UserError

V = 12


def q_of(path: tuple[int, ...], sample: int) -> torch.Tensor:
    """The fake drafter's q below a node: a fixed random distribution per (sample, path)."""
    seed = hash((sample, path)) % (2**31)
    return torch.softmax(3 * torch.randn(V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), -1)


class FakeDrafter:
    """A `Level` for the topology: remembers each entry's path; `samples`: whose q each batch row
    reads (default: row b is sample b); `served`: the levels each row needed."""

    def __init__(self, batch: int, samples: list[int] | None = None) -> None:
        self.paths: list[list[tuple[int, ...]]] = [[] for _ in range(batch)]
        self.samples = samples or list(range(batch))
        self.served = np.zeros(batch, dtype=np.int64)
        self.calls = 0

    def __call__(self, tokens, parents, depth, active):
        self.calls += 1
        self.served += active
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
                q[b, i] = q_of(path, self.samples[b])
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
    kept = sorted(torch.tensor([c[1] for c in pool]).topk(min(total - 1, len(pool))).indices.tolist())
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


# -- adapt: neighbours ---------------------------------------------------------------------------


def view(run_left: int, run_above: int, n_positions: int = 100):
    """A sample whose first undecided position 50 has its left (49) and upper (40) neighbours decided
    by iterations that decided these many tokens (0: undecided)."""
    run = np.zeros(n_positions, dtype=np.int64)
    run[49], run[40] = run_left, run_above
    left_of, above_of = np.full(n_positions, -1), np.full(n_positions, -1)
    left_of[50], above_of[50] = 49, 40
    return SimpleNamespace(run=run, neighbours=(left_of, above_of), n_positions=n_positions)


def test_r_is_the_mean_run_of_the_decided_neighbours():
    assert neighbour_run(view(1, 3), 50) == 2.0
    assert neighbour_run(view(4, 0), 50) == 4.0  # the upper neighbour undecided: the left one alone
    assert neighbour_run(view(0, 0), 50) is None  # nothing decided near: the configured tree
    assert neighbour_run(view(2, 2), 100) is None  # past the segment


ADAPTIVE_DYNAMIC = DrafterTreeTopology.Config(shape="dynamic", adapt="neighbours")  # top_k 8, depth 5


@pytest.mark.parametrize(
    ("runs", "window", "n_positions", "budget"),
    [
        ((0, 0), 63, 100, (8, 5)),  # no decided neighbour: EAGLE-2's tree
        ((1, 1), 63, 100, (8, 5)),  # a hard region: one token per iteration
        ((1, 2), 63, 100, (5, 8)),  # r = 1.5: round(5.33), round(7.5) (to even)
        ((2, 2), 63, 100, (4, 10)),
        ((4, 4), 63, 100, (2, 20)),
        ((8, 8), 63, 100, (1, 40)),
        ((16, 16), 63, 200, (1, 61)),  # depth 80 capped: a chain of 62 drafts fills the W - 1 slots
        ((8, 8), 16, 100, (1, 14)),  # a smaller window caps it sooner
        ((8, 8), 63, 60, (1, 8)),  # 9 positions left (50..58): at most 8 rounds
        ((8, 8), 63, 54, (1, 5)),  # 3 positions left: never shallower than configured
    ],
)
def test_the_dynamic_budget_narrows_and_deepens_with_r(runs, window, n_positions, budget):
    topology = DrafterTreeTopology(ADAPTIVE_DYNAMIC)
    assert topology.budget(view(*runs, n_positions), 50, window) == TreeBudget(*budget)


@pytest.mark.parametrize(
    ("runs", "window", "budget"), [((1, 1), 26, (4, 5)), ((2, 2), 26, (2, 10)), ((8, 8), 26, (1, 25))]
)
def test_the_static_budget_narrows_and_deepens_with_r(runs, window, budget):
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="static", adapt="neighbours"))
    assert topology.budget(view(*runs), 50, window) == TreeBudget(*budget)  # mc_sim_7b_63: K = 4, D = 5


def test_a_fixed_tree_ignores_the_neighbours():
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="dynamic"))
    assert topology.budget(view(8, 8), 50, 63) == TreeBudget(8, 5)
    assert DrafterTreeTopology.Config().unused() == {"adapt"}  # run ids from before the knob stay
    assert DrafterTreeTopology.Config(adapt="neighbours").unused() == set()


def test_a_static_budget_keeps_the_narrow_paths_and_runs_the_first_child_path_deeper():
    tree = static_tree("[[0],[1],[2],[0,0],[0,1],[1,0],[0,0,0]]")
    assert narrowed_tree(tree, 3, 3) is tree
    narrow = narrowed_tree(tree, 2, 5)
    assert narrow.paths == ((), (0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0, 0))
    assert narrow.parent.tolist() == [-1, 0, 0, 1, 1, 2, 3, 6, 7]
    assert narrowed_tree(tree, 1, 2).paths == ((), (0,), (0, 0), (0, 0, 0))  # never cuts the depth


def test_a_dynamic_budget_is_the_released_rule_at_its_top_k_and_depth():
    """Three samples of one batch, three budgets: each tree is the released rule's at its own top_k and
    rounds, and each sample needed only its own rounds of drafter forwards."""
    topology = DrafterTreeTopology(ADAPTIVE_DYNAMIC)
    budgets = [TreeBudget(3, 4), TreeBudget(8, 2), TreeBudget(1, 6)]
    root_q = torch.stack([q_of((), b) for b in range(3)])
    drafter = FakeDrafter(3)
    trees = topology.grow_trees(root_q, drafter, np.array([5, 5, 5]), 1000, 20, [], budgets)
    assert drafter.calls == 6 and drafter.served.tolist() == [4, 2, 6]
    for b, (tree, budget) in enumerate(zip(trees, budgets)):
        paths, parents = released_dynamic(b, budget.width, budget.depth, 20)
        assert paths_of(tree) == paths, b
        assert [int(p) - 1 for p in tree.parent[1:]] == parents, b
    assert trees[2].depth.tolist() == list(range(8))  # top_k 1: a chain of 7 drafts


def test_a_batch_of_static_budgets_grows_each_tree_as_alone():
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="static", adapt="neighbours"))
    budgets = [TreeBudget(4, 5), TreeBudget(2, 8), TreeBudget(1, 12)]

    def grow(samples):
        root_q = torch.stack([q_of((), b) for b in samples])
        drafter = FakeDrafter(len(samples), samples)
        generators = [torch.Generator().manual_seed(b) for b in samples]
        trees = topology.grow_trees(
            root_q, drafter, np.full(len(samples), 3), 1000, 26, generators, [budgets[b] for b in samples]
        )
        return trees, drafter.served

    together, served = grow([0, 1, 2])
    for b, tree in enumerate(together):
        (alone,), alone_served = grow([b])
        assert tree.parent.tolist() == alone.parent.tolist() and tree.sibling.tolist() == alone.sibling.tolist()
        assert torch.equal(tree.tokens, alone.tokens) and torch.equal(tree.refs, alone.refs)
        assert served[b] == alone_served[0], b  # drafter levels: only those its own tree needed
    assert together[0].parent.size == 26  # the released tree
    assert together[2].depth.tolist() == list(range(13))  # K / r = 1: a chain of 12
    assert int(together[1].depth.max()) == 8 and together[1].sibling.max() == 1


def test_a_bad_adapt_is_one_line():
    with pytest.raises(UserError) as error:
        DrafterTreeTopology.Config(shape="dynamic", adapt="wide").check()
    assert str(error.value) == "adapt 'wide' is unknown; choose one of: none, neighbours"
