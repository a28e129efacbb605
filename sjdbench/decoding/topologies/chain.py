"""`chain` — one row of drafts (SJD's window): [x_{n-1}, d_n, ..., d_{n+L-2}] at positions n-1, n, ...
with the causal mask. x_{n-1}, the last decided token, is re-fed so its logits give p at position n;
every draft follows the one before it. Verification is the accepted prefix, then the residual at the
first rejection or the bonus draw after the last slot.
"""

from __future__ import annotations

import numpy as np
import torch

from sjdbench.decoding.inits.neighbours import InitContext
from sjdbench.decoding.parts import Init, NoKnobs
from sjdbench.decoding.topologies.forest import ForestTopology, drafts_for
from sjdbench.decoding.window import DecodeState, Window


class ChainTopology(ForestTopology):
    Config = NoKnobs
    select = "first"

    @classmethod
    def lossless(cls, config) -> bool:
        """One chain of drafts verified left to right: SJD's window."""
        return True

    @classmethod
    def build(cls, config: NoKnobs, adapter=None) -> ChainTopology:
        return cls()

    def plan(self, state: DecodeState, window: int, init: Init, ctx: InitContext, generator: torch.Generator) -> Window:
        n = state.frontier()
        L = min(window, state.n_positions - n)  # slots: x_{n-1}, then drafts for positions n .. n+L-2
        drafts = drafts_for(state, list(range(n, n + L - 1)), init, ctx, generator)
        roots = np.zeros(L, dtype=bool)
        roots[0] = True
        return Window(
            tokens=torch.cat([state.tokens[n - 1 : n], drafts.drafts]),
            positions=np.arange(n - 1, n - 1 + L),
            parent=np.arange(-1, L - 1),
            sibling=np.zeros(L, dtype=np.int64),
            nodes=drafts,
            commit_root=roots,
            emits=roots.copy(),
            mask=None,
        )
