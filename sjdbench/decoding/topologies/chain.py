"""`chain` — one chain of drafts (SJD's window): [x_{n-1}, d_n, ..., d_{n+L-2}] at positions n-1, n, ...
with the causal mask. x_{n-1}, the last decided token, is re-fed so its logits give p at position n;
every draft follows the one before it. Verification is the accepted prefix, then the residual at the
first rejection or the bonus draw after the last slot.

The verdict has a closed form: with a drafts accepted out of Q = L - 1, slots 1..a are accepted, the
first rejected draft (or the bonus after slot L - 1) is emitted from slot a's p, every slot is this
iteration's observation, and slots a + 1 .. L - 1 propose the next drafts, each handing the proposal
the draft that waits right after it. No Python loop over the window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from sjdbench.decoding.parts import Layout, NoKnobs, SampleView, TestDistributions, Topology, Verdict, Verifier, Window
from sjdbench.decoding.state import Drafts

if TYPE_CHECKING:
    from sjdbench.adapter import SegmentLayout


class ChainTopology(Topology[NoKnobs]):
    Config = NoKnobs

    @classmethod
    def lossless(cls, config: NoKnobs, **children: bool) -> bool:
        """One chain of drafts verified left to right: SJD's window."""
        return True

    def useful_window(self, layout: SegmentLayout) -> int:
        """Never more slots than positions left."""
        return layout.n_positions

    def longest_stay(self, window: int) -> int:
        """A position enters the window at most W - 1 positions past the first undecided one, and every
        iteration decides at least that one."""
        return window

    def plan(self, sample: SampleView, window: int) -> Layout:
        n = sample.frontier()
        L = min(window, sample.n_positions - n)  # slots: x_{n-1}, then drafts for positions n .. n+L-2
        roots = np.zeros(L, dtype=bool)
        roots[0] = True
        return Layout(
            positions=np.arange(n - 1, n - 1 + L),
            parent=np.arange(-1, L - 1),
            sibling=np.zeros(L, dtype=np.int64),
            depth=np.arange(L),
            roots=sample.tokens[n - 1 : n],
            commit_root=roots,
            emits=roots.copy(),
            mask=None,
            wanted=np.arange(n, n + L - 1),
        )

    def place(self, layout: Layout, drafts: Drafts, sample: SampleView) -> Window:
        """The drafts follow the root in position order."""
        return layout.placed(torch.cat([layout.roots, drafts.tokens]), drafts)

    def test_distributions(self, window: Window, p: torch.Tensor, verifier: Verifier) -> TestDistributions:
        return TestDistributions(p[: len(window) - 1], p)  # draft i (slot i + 1) is tested against slot i's p

    def verify(
        self, window: Window, p: torch.Tensor, tests: TestDistributions, passed: np.ndarray, verifier: Verifier
    ) -> Verdict:
        L = len(window)
        Q = L - 1
        a = int(np.argmin(passed)) if Q and not passed.all() else Q  # drafts accepted: the passing prefix
        slots = np.arange(L)
        sources = slots[a + 1 :]
        waiting = np.where(sources + 1 < L, sources + 1, -1)
        return Verdict(
            accepted=slots[1 : a + 1],
            tested=slots[1 : min(a + 1, Q) + 1],
            emit_slots=np.array([a]),
            emit_base=p[a : a + 1],
            emit_rejected=np.array([a if a < Q else -1]),
            realized=slots,
            sources=sources,
            waiting=waiting,
        )
