"""`resample` — SJD's Jacobi update (Teng et al., 2024).

Every slot after the commit point gets a fresh draw d' ~ p from this iteration's distribution, which
was conditioned on the (possibly rejected) tokens before it, and its reference becomes q := p.
"""

from __future__ import annotations

import torch

from sjdbench.decoding.parts import NoKnobs, Proposal, ProposalContext, WaitingDrafts
from sjdbench.decoding.processing import sample


class ResampleProposal(Proposal[NoKnobs]):
    rowwise = True

    @classmethod
    def lossless(cls, config: NoKnobs, **children: bool) -> bool:
        """Each draft is drawn from p and stored with q = p: the exact test stays exact."""
        return True

    def propose(
        self, p: torch.Tensor, waiting: WaitingDrafts, ctx: ProposalContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """p: (S, V) -> drafts (S,) ~ p, references p."""
        return sample(p, ctx.draws), p
