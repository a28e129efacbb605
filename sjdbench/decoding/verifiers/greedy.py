"""`greedy` — the Jacobi fixed-point check: a draft passes iff it is the argmax, and the first
rejected slot emits the argmax. The loop processes every distribution at temperature 0 for this
rule, so greedy Jacobi equals greedy AR token for token.
"""

from __future__ import annotations

import torch

from sjdbench.decoding.parts import NoKnobs, Verifier
from sjdbench.decoding.processing import one_hot


class GreedyVerifier(Verifier[NoKnobs]):
    greedy = True

    @classmethod
    def lossless(cls, config: NoKnobs, **children: bool) -> bool:
        """Accepts exactly the argmax tokens: greedy AR, token for token."""
        return True

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return drafts == p.argmax(-1)

    def replacement(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        return one_hot(p.argmax(-1), p.shape[-1], p.dtype)
