"""Verification of a forest of drafts, shared by every topology.

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
makes every later sibling of that slot fail (docs/READINGS.md, SJD-PAC).

After verification the slots whose p turns into next drafts (the *continuation*) are the chain of
first children below where the walk ended, then, past its end, the root's first-child path (a tree's
main path): their positions come right after the decided ones. The draft waiting at each target is
carried to the proposal (the coupling may keep it); a draft that was rejected and not replaced by an
emitted token is dropped and redrawn from p. No draft the verifier looked at is carried, so the
carried drafts are still distributed as their references: the coupling stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.decoding.inits.neighbours import InitContext
from sjdbench.decoding.parts import Init, Verifier
from sjdbench.decoding.processing import sample
from sjdbench.decoding.window import DecodeState, Window, WindowState

SELECT = ("first", "longest")


@dataclass
class Verdict:
    """What one window's verification decided (slots index the window)."""

    accepted: list[int]  # accepted draft slots, root by root, top down
    emit_slots: list[int]  # per emitting root: the slot where its walk ended
    emitted: torch.Tensor  # (E,) tokens emitted at positions[emit_slots] + 1
    tested: list[int]  # draft slots the verifier decided on, in walk order
    continuation: list[int]  # slots whose p proposes the next drafts (one per target position)
    carried: list[int]  # per continuation slot: the draft slot at its target position carried over, or -1
    realized: list[int]  # per root: the root, its accepted path, its continuation


def first_children(slot: int, kids: list[list[int]]) -> list[int]:
    """The chain below `slot` following first children (the main path of a tree)."""
    out = []
    while kids[slot]:
        slot = kids[slot][0]
        out.append(slot)
    return out


def drafts_for(
    state: DecodeState, positions: list[int], init: Init, ctx: InitContext, generator: torch.Generator
) -> WindowState:
    """The pending drafts for `positions` (ascending), drafting missing ones with the init first."""
    if not positions:
        return state.pending.head(0)
    index = state.pending.index_of(positions)
    missing = [p for p, i in zip(positions, index) if i < 0]
    if missing:
        drafts = init.fill(missing, ctx, generator)
        references = getattr(init, "references", None)  # an init that samples may state its q
        refs = references(drafts, missing, ctx, state.pending.refs.shape[-1]) if references else None
        state.pending = state.pending.append_fresh(drafts, missing, refs)
        index = state.pending.index_of(positions)
    if (index == np.arange(len(positions))).all():
        return state.pending.head(len(positions))
    return state.pending.gather(index)


class ForestTopology:
    """Base of every topology: verification of the window it planned."""

    select: str = "first"

    def siblings(self) -> int:
        return 1

    def history_rows(self, window: int) -> int:
        return max(window, 1)

    def verify(self, window: Window, p: torch.Tensor, verifier: Verifier, generator: torch.Generator) -> Verdict:
        """p (L, V): slot i's distribution over position positions[i] + 1."""
        nodes, node_of = window.node_slots, window.node_of
        kids = window.children()
        u = torch.rand(nodes.size, generator=generator, device=p.device)
        flags, chains = self._test(window, p, verifier, u, kids, node_of)
        if self.select == "longest":
            flags = self._exhausted_siblings_fail(window, flags, chains, kids, node_of)
        passed = flags.cpu().numpy()  # the one host sync per iteration
        best = self._longest_below(window, passed, kids, node_of) if self.select == "longest" else None

        accepted, tested, emit_slots, dists, continuation, carried, realized = [], [], [], [], [], [], []
        for root in window.roots:
            end, path = int(root), []
            while kids[end]:
                chosen = self._choose(kids[end], passed, node_of, best, tested)
                if chosen is None:
                    break
                path.append(chosen)
                end = chosen
            if window.emits[root]:
                emit_slots.append(end)
                dists.append(self.emission(window, p, end, kids[end], chains, verifier, node_of))
            cont, carry = self.continuation(window, int(root), end, kids)
            accepted += path
            continuation += cont
            carried += carry
            realized += [int(root)] + path + (cont if window.emits[root] else cont[1:])  # cont[0] is `end`
        emitted = sample(torch.stack(dists), generator) if dists else torch.zeros(0, dtype=torch.long, device=p.device)
        return Verdict(accepted, emit_slots, emitted, tested, continuation, carried, realized)

    @staticmethod
    def continuation(window: Window, root: int, end: int, kids: list[list[int]]) -> tuple[list[int], list[int]]:
        """The slots whose p proposes the next drafts, one per position from the first undecided one
        on, and the draft slot each carries (-1: none).

        The source of position t's proposal is the slot at t - 1 on the chain of first children below
        `end` (its context is the accepted path), else the slot at t - 1 on the root's first-child path
        (a tree's main path, whose context holds a rejected sibling, as a chain's does after a
        rejection). The carried draft is the one waiting at t on the same two chains, except the draft
        just rejected at an unemitted position, which is redrawn."""
        position = window.positions
        emits = bool(window.emits[root])
        near = {int(position[s]): s for s in [end] + first_children(end, kids)}
        main = {int(position[s]): s for s in [root] + first_children(root, kids)}
        start = int(position[end]) + (2 if emits else 1)  # first undecided position after the walk
        cont, carry = [], []
        for t in range(start, start + len(window)):
            source = near.get(t - 1, main.get(t - 1))
            if source is None:
                break
            waiting = near.get(t, main.get(t))
            cont.append(source)
            carry.append(-1 if waiting is None or (not emits and t == start) else waiting)
        return cont, carry

    def emission(
        self,
        window: Window,
        p: torch.Tensor,
        end: int,
        children: list[int],
        chains: dict,
        verifier: Verifier,
        node_of: np.ndarray,
    ) -> torch.Tensor:
        """(V,) distribution of the token emitted after slot `end`: the residual left after all its
        children failed, or its own p (the bonus) when it has none."""
        if not children:
            return p[end]
        last = int(node_of[children[-1]])
        before = chains[end][-1] if end in chains else p[end]
        return verifier.replacement(before, window.nodes.refs[last], window.nodes.drafts[last])

    @staticmethod
    def _test(
        window: Window, p: torch.Tensor, verifier: Verifier, u: torch.Tensor, kids: list[list[int]], node_of: np.ndarray
    ) -> tuple[torch.Tensor, dict]:
        """Flags (Q,): whether each draft passes against its parent's p_k (k = its sibling index),
        and the RRS chains [p_0, p_1, ...] of every slot with several children."""
        nodes = window.node_slots
        drafts, refs = window.nodes.drafts, window.nodes.refs
        parent = window.parent[nodes]
        first = np.flatnonzero(window.sibling[nodes] == 0)
        if first.size == nodes.size:  # every draft is a first child: one call (a chain: p[:L-1])
            contiguous = parent.size == 0 or bool((parent == np.arange(parent.size)).all())
            p_parent = p[: parent.size] if contiguous else p[torch.as_tensor(parent, device=p.device)]
            return verifier.accept(p_parent, refs, drafts, u), {}
        flags = torch.zeros(nodes.size, dtype=torch.bool, device=p.device)
        idx = torch.as_tensor(first, device=p.device)
        flags[idx] = verifier.accept(p[torch.as_tensor(parent[first], device=p.device)], refs[idx], drafts[idx], u[idx])
        chains, later_p, later = {}, [], []
        for slot, children in enumerate(kids):
            if len(children) < 2:
                continue
            chain = [p[slot]]
            for k in range(1, len(children)):
                prev = int(node_of[children[k - 1]])
                chain.append(verifier.replacement(chain[-1], refs[prev], drafts[prev]))
                later_p.append(chain[-1])
                later.append(int(node_of[children[k]]))
            chains[slot] = chain
        if later:
            idx = torch.as_tensor(later, device=p.device)
            flags[idx] = verifier.accept(torch.stack(later_p), refs[idx], drafts[idx], u[idx])
        return flags, chains

    @staticmethod
    def _exhausted_siblings_fail(
        window: Window, flags: torch.Tensor, chains: dict, kids: list[list[int]], node_of: np.ndarray
    ) -> torch.Tensor:
        """`select = "longest"` as SJD-PAC's released code decides it: once a sibling's residual
        [p_k - q_k]_+ has no mass (p_k = q_k), the released p_{k+1} is 0/0 = NaN, so every later sibling
        of that slot fails. (Recursive rejection sampling never gets there: sibling k then passes surely
        and is taken first.) Flags (Q,) of those siblings are cleared; sync-free."""
        refs = window.nodes.refs
        for slot, chain in chains.items():
            children = [int(node_of[c]) for c in kids[slot]]
            mass = (torch.stack(chain[:-1]) - refs[children[:-1]]).clamp_min(0).sum(-1)  # (K-1,) residual k
            exhausted = (mass <= 0).cummax(0).values  # (K-1,) some residual before sibling k + 1 was empty
            later = torch.as_tensor(children[1:], device=flags.device)
            flags[later] = flags[later] & ~exhausted
        return flags

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
