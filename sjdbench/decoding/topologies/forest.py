"""Verification of a forest of drafts, shared by the tree and rows topologies (the chain has a closed form).

From each root, walk down. At a slot whose children are the siblings s_0, s_1, ... (tested in that
order), recursive rejection sampling (RRS) decides which one is accepted: sibling k passes the
verifier's rule against p_k, where p_0 = p (the slot's distribution) and p_{k+1} is the verifier's
replacement for p_k once s_k is rejected (exact verifier: norm([p_k - q_k]_+), q_k the distribution
s_k was actually drawn from). The first passing sibling is accepted and the walk continues below it.
Where every sibling fails, an emitting root emits a draw from the residual left after all of them;
where the walk reaches a slot without children (every draft on the path passed), it emits a draw from
that slot's own p (the bonus token). With one child per slot this is SJD's verification. With
siblings drawn without replacement from q, each carrying the q it was drawn from, the emitted and
accepted tokens are distributed exactly as p (recursive speculative decoding, Jeon et al. 2024).

`select = "longest"` is the other reading of a tree verifier (SJD-PAC's released code): every sibling
is tested as if the ones before it had failed, and the root-to-leaf path with the longest passing
prefix wins, lowest index on ties. It may pick sibling k > 0 although sibling 0 passed, so it is
not exact; the exactness suite shows it. As in the released code, a sibling residual without mass
makes every later sibling of that slot fail (docs/READINGS.md, SJD-PAC): the released p_{k+1} is
0/0 = NaN there. (Recursive rejection sampling never gets there: sibling k then passes surely and is
taken first.)

After verification the slots whose p turns into next drafts (the *sources*) are the chain of first
children below where the walk ended, then, past its end, the root's first-child path (a tree's main
path): their positions come right after the decided ones. The draft waiting at each target is
handed to the proposal (the coupling may keep it); a draft that was rejected and not replaced by an
emitted token is dropped and redrawn from p. No draft the verifier looked at is handed on, so the
waiting drafts are still distributed as their references: the coupling stays exact.
"""

from __future__ import annotations

import numpy as np
import torch

from sjdbench.decoding.parts import ConfigT, TestDistributions, Topology, Verdict, Verifier, Window

SELECT = ("first", "longest")


def children_of(window: Window) -> list[list[int]]:
    """Child slots of each slot, in sibling order (a window lists siblings in that order)."""
    kids: list[list[int]] = [[] for _ in range(len(window))]
    for slot in window.node_slots.tolist():
        kids[int(window.parent[slot])].append(slot)
    return kids


def first_children(slot: int, kids: list[list[int]]) -> list[int]:
    """The chain below `slot` following first children (the main path of a tree)."""
    out = []
    while kids[slot]:
        slot = kids[slot][0]
        out.append(slot)
    return out


def ancestor_mask(parent: np.ndarray, hidden_roots: np.ndarray | None = None) -> np.ndarray:
    """(L, L) bool: slot i sees itself and its ancestors (parents come before children in slot order).

    hidden_roots (L,) bool: roots whose keys are already in the cache; their descendants see that
    committed copy, so the re-fed window copy is hidden from them (a key seen twice would count twice
    in the attention softmax)."""
    L = parent.shape[0]
    mask = np.eye(L, dtype=bool)
    for slot in range(L):
        if parent[slot] >= 0:
            mask[slot] |= mask[parent[slot]]
    if hidden_roots is not None and hidden_roots.any():
        hidden = np.flatnonzero(hidden_roots)
        mask[:, hidden] = False
        mask[hidden, hidden] = True
    return mask


class ForestTopology(Topology[ConfigT]):
    """Verification of any forest of drafts (trees of siblings, several rows' chains)."""

    def test_distributions(self, window: Window, p: torch.Tensor, verifier: Verifier) -> TestDistributions:
        """First children are tested against their parent's p; a later sibling k against the residual
        p_k left after siblings 0..k-1 (RRS), computed for every parent at once per k. Device work
        only: no host sync."""
        nodes, slots = window.nodes, window.node_slots
        parent = window.parent[slots]
        tested_against = p[torch.as_tensor(parent, device=p.device)]  # (Q, V)
        sibling = window.sibling[slots]
        last = p  # (L, V): per slot, the distribution its next child is tested against
        longest = self.select == "longest"
        fails = torch.zeros(len(slots), dtype=torch.bool, device=p.device) if longest else None
        exhausted = torch.zeros(len(window), dtype=torch.bool, device=p.device)  # per slot: a residual was empty
        for k in range(1, int(sibling.max(initial=0)) + 1):  # siblings are listed after their elder ones
            later = np.flatnonzero(sibling == k)
            owners = torch.as_tensor(parent[later], device=p.device)
            elder = torch.as_tensor(later - 1, device=p.device)
            before, refs = last[owners], nodes.refs[elder]
            depth = (
                {"depth": torch.as_tensor(window.depth[slots[later - 1]], device=p.device)}
                if verifier.reads_depth
                else {}
            )
            residual = verifier.replacement(before, refs, nodes.tokens[elder], **depth)  # (n, V)
            later_t = torch.as_tensor(later, device=p.device)
            if longest:  # the released reading: no mass left, so every later sibling fails
                assert fails is not None  # made above when longest
                empty = exhausted[owners] | ((before - refs).clamp_min(0).sum(-1) <= 0)
                exhausted = exhausted.index_copy(0, owners, empty)
                fails = fails.index_copy(0, later_t, empty)
            last = last.index_copy(0, owners, residual)
            tested_against = tested_against.index_copy(0, later_t, residual)
        return TestDistributions(tested_against, last, fails)

    def verify(
        self, window: Window, p: torch.Tensor, tests: TestDistributions, passed: np.ndarray, verifier: Verifier
    ) -> Verdict:
        kids = children_of(window)
        node_of = window.node_of
        best = self._longest_below(window, passed, kids, node_of) if self.select == "longest" else None
        tested: list[int]  # the children _choose tested, in walk order
        accepted, tested, emit_slots, realized, sources, waiting = [], [], [], [], [], []
        bases, rejected = [], []
        for root in np.flatnonzero(window.parent < 0).tolist():
            end, path = root, []
            while kids[end]:
                chosen = self._choose(kids[end], passed, node_of, best, tested)
                if chosen is None:
                    break
                path.append(chosen)
                end = chosen
            emits = bool(window.emits[root])
            if emits:
                emit_slots.append(end)
                if kids[end]:  # every child failed: the residual after the last one
                    bases.append(end)
                    rejected.append(int(node_of[kids[end][-1]]))
                else:  # every draft on the path passed: the bonus draw from the last slot's p
                    bases.append(end)
                    rejected.append(-1)
            cont, waits = self.continuation(window, root, end, kids)
            accepted += path
            sources += cont
            waiting += waits
            realized += [root] + path + (cont if emits else cont[1:])  # cont[0] is `end`
        as_array = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
        rejected_ = as_array(rejected)
        # the base of a residual is the last sibling's test distribution; of a bonus, the slot's own p
        base = torch.where(
            torch.as_tensor(rejected_ >= 0, device=p.device)[:, None],
            tests.last[torch.as_tensor(as_array(bases), device=p.device)],
            p[torch.as_tensor(as_array(bases), device=p.device)],
        )
        return Verdict(
            as_array(accepted),
            as_array(tested),
            as_array(emit_slots),
            base,
            rejected_,
            as_array(realized),
            as_array(sources),
            as_array(waiting),
        )

    @staticmethod
    def continuation(window: Window, root: int, end: int, kids: list[list[int]]) -> tuple[list[int], list[int]]:
        """The slots whose p proposes the next drafts, one per position from the first undecided one
        on, and for each the draft slot holding the draft that waits at its target (-1: none).

        The source of position t's proposal is the slot at t - 1 on the chain of first children below
        `end` (its context is the accepted path), else the slot at t - 1 on the root's first-child path
        (a tree's main path, whose context holds a rejected sibling, as a chain's does after a
        rejection). The waiting draft is the one at t on the same two chains, except the draft just
        rejected at an unemitted position, which is redrawn."""
        position = window.positions
        emits = bool(window.emits[root])
        near = {int(position[s]): s for s in [end, *first_children(end, kids)]}
        main = {int(position[s]): s for s in [root, *first_children(root, kids)]}
        start = int(position[end]) + (2 if emits else 1)  # first undecided position after the walk
        cont, waits = [], []
        for t in range(start, start + len(window)):
            source = near.get(t - 1, main.get(t - 1))
            if source is None:
                break
            waiting = near.get(t, main.get(t))
            cont.append(source)
            waits.append(-1 if waiting is None or (not emits and t == start) else waiting)
        return cont, waits

    def _choose(
        self, children: list[int], passed: np.ndarray, node_of: np.ndarray, best: np.ndarray | None, tested: list[int]
    ) -> int | None:
        """The accepted child (None: all failed); records the children tested on the way."""
        if best is None:  # recursive rejection sampling: the first child that passes
            for child in children:
                tested.append(child)
                if passed[node_of[child]]:
                    return child
            return None
        top = max(best[c] for c in children)
        if top == 0:
            tested.extend(children)
            return None
        chosen = next(c for c in children if best[c] == top)
        tested.extend(children[: children.index(chosen) + 1])
        return chosen

    @staticmethod
    def _longest_below(window: Window, passed: np.ndarray, kids: list[list[int]], node_of: np.ndarray) -> np.ndarray:
        """(L,) length of the longest run of passing drafts starting at each draft slot."""
        best = np.zeros(len(window), dtype=np.int64)
        for slot in range(len(window) - 1, -1, -1):
            if window.parent[slot] >= 0 and passed[node_of[slot]]:
                best[slot] = 1 + max((best[c] for c in kids[slot]), default=0)
        return best
