"""SJD-PAC's tree verification side by side with the released decision procedure.

The released procedure (KangJialiang/SJD-PAC, `scheduler/sjd_pac_iteration_lumina_mgpt.py`,
`SJDPACSpeculativeSampler.__call__`, its buffers from `setup_speculative_tree_buffers` and the tree
from `generate_tree_mask_and_retrieve`) is restated below from reading that file:

- The window is a full K-ary tree of depth D (the root at depth 0, drafts at depths 1..D-1) whose
  first-child path continues as a chain to depth M - 1. Every parent at depth d - 1 has the same K
  children; sibling k was drawn without replacement from q_d and is tested against q_d with the
  earlier siblings removed and renormalised.
- It works on root-to-leaf paths, numbered by their sibling digits in base K (path 0 is the main
  path, the only one that goes on into the chain), one uniform per node.
- At a parent, sibling k is tested against p_k: p_0 = the parent's p, p_k = [p_{k-1} - q_{k-1}]_+
  divided by its sum, whatever sibling k - 1 did. A residual without mass divides 0 by 0: p_k and
  every later p at that parent are NaN, and those siblings fail.
- A draft passes when p_k(x) > u q_k(x). Each path's score is the length of its passing prefix; the
  highest wins, the lowest path number on ties.
- The emitted token is drawn from the residual after the *last* sibling at the slot where the
  winning path stopped ([p_{K-1} - q_{K-1}]_+), from [p - q]_+ on the chain, from the leaf's own p
  when a side path passed whole, and from a uniform pad over the image tokens when the main path
  passed whole. Token 0 gets 1e-20 (so multinomial never sees a zero row); a NaN row raises.

Identical inputs and uniforms go to both: the same trees, p and q, the node uniforms our `verify`
draws, and the inverse-CDF draw of the emission with the uniform that follows. With
`select=longest` ours must choose the released path and emit the released token, apart from the
uniform pad (we draw the bonus from p) and the released code's crash; with `select=first` it departs
only where an earlier sibling passed (recursive rejection sampling takes it).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from sjdbench.decoding.loop import verify_windows
from sjdbench.decoding.parts import Window
from sjdbench.decoding.processing import sample
from sjdbench.decoding.randomness import Draws
from sjdbench.decoding.state import Drafts
from sjdbench.decoding.topologies.forest import ancestor_mask
from sjdbench.decoding.topologies.tree import TreeConfig, TreeTopology
from sjdbench.decoding.verifiers.exact import ExactVerifier

N_FAST = {16: 300, 8192: 100}  # trees per vocabulary in the default suite (a few seconds)
N_SLOW = 6000  # trees in all, both vocabularies (the run docs/READINGS.md reports; marked slow)


@dataclass
class Case:
    K: int
    D: int
    M: int  # main path slots: root + D - 1 tree levels + the chain
    V: int
    parent: np.ndarray  # (L,) our slot order: root, the tree level by level, the chain
    sibling: np.ndarray  # (L,)
    depth: np.ndarray  # (L,)
    digits: list[tuple[int, ...]]  # (L,) sibling digits from the root (the chain adds zeros)
    tokens: torch.Tensor  # (L,) slot tokens (the root's is arbitrary)
    refs: torch.Tensor  # (L, V) each draft's q (the root's row unused)
    p: torch.Tensor  # (L, V) each slot's distribution over the next depth

    def slot_of(self, digits: tuple[int, ...]) -> int:
        return self.digits.index(digits)


def random_dist(V: int, support: int, g: torch.Generator, include: torch.Tensor | None = None) -> torch.Tensor:
    """A distribution on `support` random tokens (the tokens in `include` among them, when given)."""
    order = torch.randperm(V, generator=g)
    if include is not None:
        order = torch.cat([include, order[~torch.isin(order, include)]])
    logits = torch.full((V,), float("-inf"))
    chosen = order[:support]
    logits[chosen] = torch.randn(support, generator=g) * 2
    return logits.softmax(-1)


def without(q: torch.Tensor, taken: torch.Tensor) -> torch.Tensor:
    """q with `taken` removed, renormalised: the distribution a later sibling was drawn from."""
    left = q.clone()
    left[taken] = 0
    return left / left.sum()


def make_case(seed: int, V: int) -> Case:
    g = torch.Generator().manual_seed(seed)
    K = int(torch.randint(2, 5, (1,), generator=g))
    D = int(torch.randint(2, 6, (1,), generator=g))
    if K ** (D - 1) > 64 and V == 16:  # keep the tree's width within a small vocabulary's reach
        D -= 1
    M = D + int(torch.randint(1, 4, (1,), generator=g))  # the released code needs a chain below the tree
    parent, sibling, depth, digits = [-1], [0], [0], [()]
    level = [0]
    for d in range(1, D):
        nxt = []
        for par in level:
            for k in range(K):
                parent.append(par), sibling.append(k), depth.append(d), digits.append(digits[par] + (k,))
                nxt.append(len(parent) - 1)
        level = nxt
    last = level[0]
    for d in range(D, M):
        parent.append(last), sibling.append(0), depth.append(d), digits.append(digits[last] + (0,))
        last = len(parent) - 1
    L = len(parent)

    # q_d per depth; the K siblings of depth d drawn from q_d without replacement
    q_of, tok_of = {}, {}
    for d in range(1, M):
        width = K if d < D else 1
        support = min(V, [K, K + 1, 2 * K, V][int(torch.randint(0, 4, (1,), generator=g))])
        q_of[d] = random_dist(V, max(support, width), g)
        tok_of[d] = torch.multinomial(q_of[d], width, replacement=False, generator=g)
    tokens = torch.zeros(L, dtype=torch.long)
    refs = torch.zeros(L, V)
    for s in range(1, L):
        d, k = depth[s], sibling[s]
        tokens[s] = tok_of[d][k]
        refs[s] = q_of[d] if k == 0 else without(q_of[d], tok_of[d][:k])

    # p per slot: sometimes exactly the next depth's q (a converged draft: residual without mass)
    p = torch.zeros(L, V)
    for s in range(L):
        nxt = depth[s] + 1
        roll = float(torch.rand(1, generator=g))
        if nxt < M and roll < 0.25:
            p[s] = q_of[nxt]
        else:
            support = [1, 2, 3, max(1, V // 4), V][int(torch.randint(0, 5, (1,), generator=g))]
            include = tok_of[nxt][: int(torch.randint(0, K + 1, (1,), generator=g))] if nxt < M else None
            p[s] = random_dist(V, max(support, 0 if include is None else len(include)), g, include)
    return Case(K, D, M, V, np.array(parent), np.array(sibling), np.array(depth), digits, tokens, refs, p)


# -- the released decision procedure, restated --------------------------------------------------


@dataclass
class Released:
    acc_len: int
    digits: tuple[int, ...]  # the winning path's sibling digits over its accepted prefix
    emission: torch.Tensor | None  # (V,) normalised; None where the released code raises (a NaN row)
    uniform_pad: bool  # the main path passed whole
    massless: bool  # some sibling residual had no mass


def released_decision(case: Case, u_node: torch.Tensor) -> Released:
    K, D, M, V = case.K, case.D, case.M, case.V
    u_of = {case.digits[s]: float(u_node[s - 1]) for s in range(1, len(case.digits))}  # nodes follow the root
    chains, massless = {}, False  # parent digits -> [p_0, ..., p_{K-1}]

    def chain(par: tuple[int, ...]) -> list[torch.Tensor]:
        nonlocal massless
        if par not in chains:
            ps = [case.p[case.slot_of(par)].clone()]
            for k in range(1, K):
                ref = case.refs[case.slot_of(par + (k - 1,))]
                res = (ps[-1] - ref).clamp_min(0)
                massless |= bool(res.sum() == 0)
                ps.append(res / res.sum())  # 0 / 0 = NaN, as in the released code
            chains[par] = ps
        return chains[par]

    def passes(digits: tuple[int, ...]) -> bool:
        par, k = digits[:-1], digits[-1]
        slot = case.slot_of(digits)
        x = int(case.tokens[slot])
        p_k = chain(par)[k] if len(digits) < D else case.p[case.slot_of(par)]
        return bool(p_k[x] > u_of[digits] * case.refs[slot, x])  # NaN > anything is False

    best_len, best_path = -1, None
    for path in itertools.product(range(K), repeat=D - 1):  # path numbers in base K: path 0 first
        full = path + (0,) * (M - D) if not any(path) else path
        length = 0
        while length < len(full) and passes(full[: length + 1]):
            length += 1
        if length > best_len:
            best_len, best_path = length, full
    digits = best_path[:best_len]
    if best_len == M - 1:  # the main path passed whole: the uniform pad
        return Released(best_len, digits, torch.full((V,), 1.0 / V), True, massless)
    if best_len < D - 1:  # inside the tree: the residual after the last sibling
        par = digits
        res = (chain(par)[K - 1] - case.refs[case.slot_of(par + (K - 1,))]).clamp_min(0)
    elif best_path[0] == 0 and not any(best_path):  # on the main path's chain: [p - q]_+
        res = (case.p[case.slot_of(digits)] - case.refs[case.slot_of(best_path[: best_len + 1])]).clamp_min(0)
    else:  # a side path passed whole: its leaf's p (q is zeroed there)
        res = case.p[case.slot_of(digits)].clone()
    res[0] += 1e-20
    emission = None if bool(torch.isnan(res).any()) else res / res.sum()
    return Released(best_len, digits, emission, False, massless)


# -- ours -----------------------------------------------------------------------------------------


def our_verify(topology: TreeTopology, window: Window, p: torch.Tensor, seed: int):
    """Our verification of one window as the loop runs it: (verdict, emitted token, the emission
    distribution it was drawn from)."""
    (verdict,), emitted, _ = verify_windows(
        topology, ExactVerifier(), [window], p[None], window.nodes, [torch.Generator().manual_seed(seed)]
    )
    base, rejected = verdict.emit_base, verdict.emit_rejected
    if rejected[0] >= 0:
        node = int(rejected[0])
        base = ExactVerifier().replacement(
            base, window.nodes.refs[node : node + 1], window.nodes.tokens[node : node + 1]
        )
    return verdict, emitted, base[0]


def make_window(tokens, positions, parent, sibling, refs) -> Window:
    L = len(parent)
    nodes = Drafts.new(np.asarray(positions[1:], dtype=np.int64), tokens[1:], refs[1:], refs.shape[-1], fresh=False)
    roots = np.zeros(L, dtype=bool)
    roots[0] = True
    return Window(
        np.asarray(positions, dtype=np.int64),
        parent,
        sibling,
        np.asarray(positions, dtype=np.int64),
        tokens[:1],
        roots,
        roots.copy(),
        torch.from_numpy(ancestor_mask(parent)),
        np.unique(np.asarray(positions[1:], dtype=np.int64)),
        tokens=tokens,
        nodes=nodes,
    )


def window_of(case: Case) -> Window:
    return make_window(case.tokens, case.depth, case.parent, case.sibling, case.refs)


def compare(n: int, V: int, select: str) -> Counter:
    """Decision for decision over n random trees; a Counter of what happened (a failure raises)."""
    seen: Counter = Counter()
    for seed in range(n):
        case = make_case(seed * 2 + (V > 16), V)
        window = window_of(case)
        topology = TreeTopology(TreeConfig(case.K, case.D, select))
        verdict, emitted, emitted_from = our_verify(topology, window, case.p, seed)
        replay = torch.Generator().manual_seed(seed)
        u = torch.rand(len(case.parent) - 1, generator=replay)  # the node uniforms verify drew
        ref = released_decision(case, u)
        ours = tuple(int(case.sibling[s]) for s in verdict.accepted)
        seen["trees"] += 1
        seen["massless residual"] += ref.massless
        where = f"seed {seed}, V {V}, K {case.K}, D {case.D}, M {case.M}"
        if ours != ref.digits:
            assert select == "first", f"{where}: path {ours} != released {ref.digits}"
            first_difference = next(i for i, (a, b) in enumerate(zip(ours + (-1,), ref.digits)) if a != b)
            assert first_difference < len(ours) and ours[first_difference] < ref.digits[first_difference], (
                f"{where}: {ours} vs released {ref.digits} is not an earlier sibling passing"
            )
            seen["earlier sibling taken"] += 1
            continue
        seen["same path"] += 1
        assert len(emitted) == 1, where
        if ref.uniform_pad:  # (A) the released bonus after a whole main path is uniform; ours is p
            assert torch.equal(emitted_from, case.p[verdict.emit_slots[0]]), where
            seen["main path passed whole (uniform pad)"] += 1
            continue
        if ref.emission is None:  # the released code raises here; ours emits a token all the same
            assert 0 <= int(emitted[0]) < V, where
            seen["released raises"] += 1
            continue
        torch.testing.assert_close(emitted_from, ref.emission, atol=1e-6, rtol=1e-5, msg=where)
        draw = sample(ref.emission[None], Draws.single(replay, 1, torch.device("cpu")))
        assert int(emitted[0]) == int(draw[0]), f"{where}: another token"
        seen["same token"] += 1
    return seen


@pytest.mark.parametrize("V", [16, pytest.param(8192, marks=pytest.mark.slow)])
def test_longest_makes_the_released_decisions(V):
    n = N_FAST[V]
    seen = compare(n, V, "longest")
    assert seen["same path"] == seen["trees"] == n
    assert seen["massless residual"] > n // 20, seen  # the cases the released reading decides
    assert seen["main path passed whole (uniform pad)"] > 0 and seen["same token"] > n // 2, seen


@pytest.mark.parametrize("V", [16, 8192])
def test_first_departs_only_where_an_earlier_sibling_passed(V):
    n = N_FAST[V] // 2
    seen = compare(n, V, "first")
    assert seen["earlier sibling taken"] > 0, seen  # the departure exists, and is the explained one
    assert seen["same path"] + seen["earlier sibling taken"] == n


def test_before_the_released_reading_a_later_sibling_could_pass():
    """A sibling residual without mass: the released p_1 is NaN, so sibling 1 fails and its longer
    path is not taken. Root p = q_1 exactly (sibling 0 passes surely, leaving no residual); sibling 0's
    child fails, sibling 1's child would pass against the fallback."""
    V = 8
    q = torch.tensor([0.0, 0.5, 0.5, 0, 0, 0, 0, 0])
    parent = np.array([-1, 0, 0, 1, 2])
    sibling = np.array([0, 0, 1, 0, 0])
    tokens = torch.tensor([0, 1, 2, 5, 6])
    refs = torch.stack([q, q, without(q, torch.tensor([1])), torch.eye(V)[5], torch.eye(V)[6]])
    window = make_window(tokens, [0, 1, 1, 2, 2], parent, sibling, refs)
    p = torch.zeros(5, V)
    p[0] = q
    p[1, 7] = 1.0  # under sibling 0, child 5 fails
    p[2, 6] = 1.0  # under sibling 1, child 6 would pass
    p[3:, 0] = 1.0
    for seed in range(20):
        verdict, _, _ = our_verify(TreeTopology(TreeConfig(2, 2, "longest")), window, p, seed)
        assert verdict.accepted.tolist() == [1], verdict.accepted  # sibling 0, never sibling 1's longer path


@pytest.mark.slow
@pytest.mark.parametrize("V", [16, 8192])
def test_longest_makes_the_released_decisions_on_many_trees(V):
    seen = compare(N_SLOW // 2, V, "longest")
    assert seen["same path"] == seen["trees"]
    print(f"\nV={V} longest: {dict(seen)}")
    first = compare(N_SLOW // 2, V, "first")
    print(f"V={V} first: {dict(first)}")
