"""`coupled` — token reuse by maximal coupling (SJD++'s reuse as MC-SJD publishes it; SJD-PAC's
adaptive continuation).

Past the first rejection every carried draft is tested again against its slot's new distribution p:
it is kept with probability min(1, p(d)/q_old(d)), else replaced by a draw from norm([p - q_old]_+).
The new draft is still distributed exactly as p, but equals the old one as often as any coupling
allows, so the context of later slots stops changing and their verification passes. Reference
q := p. Slots without a carried draft draw from p.

`tau` (not exact): the other reading of SJD++'s "reuse high-confidence drafts": keep d iff
p(d)/q_old(d) >= tau, else draw from p.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sjdbench.decoding.parts import Carried, PartConfig, ProposalContext
from sjdbench.decoding.processing import residual, sample
from sjdbench.errors import UserError


@dataclass
class CoupledConfig(PartConfig):
    tau: Optional[float] = None  # None: maximal coupling (exact); a number: keep-if-ratio>=tau (lossy)

    symbols = {"tau": "τ"}

    def check(self) -> None:
        if self.tau is not None and self.tau < 0:
            raise UserError(f"tau must be >= 0 (or null for the exact coupling), got {self.tau}")


class CoupledProposal:
    Config = CoupledConfig
    history_depth = 0  # iterations of probability history it reads

    def __init__(self, tau: float | None = None) -> None:
        self.tau = tau

    @classmethod
    def build(cls, config: CoupledConfig, adapter=None) -> "CoupledProposal":
        return cls(config.tau)

    def propose(self, p: torch.Tensor, carried: Carried, ctx: ProposalContext) -> tuple[torch.Tensor, torch.Tensor]:
        """p: (S, V); carried drafts (S,) with references (S, V) -> drafts (S,), references p."""
        old, old_q, has_old = carried.drafts, carried.refs, carried.has_old
        p_d = p.gather(-1, old[:, None]).squeeze(-1)  # (S,)
        q_d = old_q.gather(-1, old[:, None]).squeeze(-1)
        u = torch.rand(p.shape[0], generator=ctx.generator, device=p.device)
        if self.tau is None:
            keep = (u * q_d < p_d) & has_old  # min(1, p/q) > u without a division
            fallback = torch.where(has_old[:, None], residual(p, old_q), p)
        else:
            keep = (p_d >= self.tau * q_d) & has_old
            fallback = p
        return torch.where(keep, old, sample(fallback, ctx.generator)), p
