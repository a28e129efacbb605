"""`exact` — modified rejection sampling (SJD's verifier): accept a draft d with probability
min(1, p(d)/q(d)), else emit a draw from norm([p - q]_+). The emitted token is distributed exactly as
p whenever d ~ q: lossless.
"""

from __future__ import annotations

import torch

from sjdbench.decoding.parts import NoKnobs, Verifier
from sjdbench.decoding.processing import residual


class ExactVerifier(Verifier[NoKnobs]):
    @classmethod
    def lossless(cls, config: NoKnobs, **children: bool) -> bool:
        """Modified rejection sampling: accepted or residual, the token is distributed as p."""
        return True

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """p, q: (T, V); drafts, u: (T,) -> (T,) bool. u*q(d) < p(d) is min(1, p/q) > u without a division."""
        p_d = p.gather(-1, drafts[:, None]).squeeze(-1)
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        return u.to(p.dtype) * q_d < p_d

    def replacement(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        return residual(p, q)
