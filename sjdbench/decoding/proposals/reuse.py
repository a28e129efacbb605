"""`reuse` — PJD's draft reuse after a rejection (arXiv 2606.05703, as its paper describes it). Lossy.

PJD's released code was not available to compare against; docs/READINGS.md (PJD) says what was
checked instead.

Past the commit point a waiting draft is kept, together with its old reference q, when
min(1, p(d)/q(d)) > threshold; otherwise the slot draws a new draft from p and its reference becomes
p. Keeping the old q breaks "draft ~ q" for the next test, so this is not exact (the exact rule is
`coupled`, the maximal coupling). Slots without a waiting draft draw from p.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from sjdbench.decoding.parts import PartConfig, Proposal, ProposalContext, WaitingDrafts
from sjdbench.decoding.processing import sample
from sjdbench.errors import UserError


@dataclass
class ReuseConfig(PartConfig):
    threshold: float = 0.5  # keep a draft (and its old q) when min(1, p/q) exceeds this

    symbols: ClassVar[dict[str, str]] = {"threshold": "θ"}

    def check(self) -> None:
        if not 0 <= self.threshold <= 1:
            raise UserError(f"threshold must be in [0, 1], got {self.threshold}")


class ReuseProposal(Proposal[ReuseConfig]):
    """Lossy (every part's default): a reused draft keeps a reference it was not drawn from under the
    new context."""

    Config = ReuseConfig

    rowwise = True

    def propose(
        self, p: torch.Tensor, waiting: WaitingDrafts, ctx: ProposalContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """p: (S, V); the waiting drafts (S,) with references (S, V) -> drafts (S,) and references (S, V)."""
        old, old_q = waiting.drafts, waiting.refs
        p_d = p.gather(-1, old[:, None]).squeeze(-1)  # (S,)
        q_d = old_q.gather(-1, old[:, None]).squeeze(-1)
        keep = (p_d > self.config.threshold * q_d) & waiting.has_old  # min(1, p/q) > threshold without a division
        drafts = torch.where(keep, old, sample(p, ctx.draws))
        return drafts, torch.where(keep[:, None], old_q, p)
