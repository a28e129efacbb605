"""Draft proposals: turn this iteration's distributions into next iteration's drafts and references.

After verification, positions past the commit point keep a draft for the next iteration. A proposal
first decides the *proposal distribution* r at each such position (p itself, or VP's fused p'), then
draws the new draft from it:
- `resample` (SJD): a fresh draw d' ~ r, reference q := r (the Jacobi update).
- `coupled` (SJD++ token reuse = maximal coupling, MC-SJD): d' = MRS(r, q_old, d_old): the old draft
  is kept with probability min(1, r(d)/q_old(d)), else replaced from norm([r - q_old]_+). d' is still
  distributed exactly as r, but stays equal to d_old as often as possible, so its context settles
  and later verification passes. Reference q := r.
- `coupled` with `tau` set: the non-exact alternative reading: keep d_old iff p(d)/q_old(d) >= tau.
`vp` wraps either one and replaces r = p by the verification-prediction fusion p' (vp.py).
"""
from __future__ import annotations

import torch

from sjdbench.decoding.processing import residual, sample


class ResampleProposal:
    name = "resample"

    def draw(
        self,
        r: torch.Tensor,
        old_drafts: torch.Tensor,
        old_q: torch.Tensor,
        has_old: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """r, old_q: (L, V); old_drafts, has_old: (L,) -> new drafts (L,)."""
        return sample(r, generator)


class CoupledProposal:
    name = "coupled"

    def __init__(self, tau: float | None = None) -> None:
        self.tau = tau

    def draw(self, r, old_drafts, old_q, has_old, generator) -> torch.Tensor:
        r_d = r.gather(-1, old_drafts[:, None]).squeeze(-1)
        q_d = old_q.gather(-1, old_drafts[:, None]).squeeze(-1)
        u = torch.rand(r.shape[0], generator=generator, device=r.device)
        if self.tau is None:
            keep = (u * q_d < r_d) & has_old
            fallback = torch.where(has_old[:, None], residual(r, old_q), r)
        else:
            keep = (r_d >= self.tau * q_d) & has_old
            fallback = r
        return torch.where(keep, old_drafts, sample(fallback, generator))
