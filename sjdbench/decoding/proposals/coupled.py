"""`coupled` — token reuse by maximal coupling (SJD++'s reuse as MC-SJD publishes it; SJD-PAC's
adaptive continuation).

Past the first rejection every waiting draft is tested again against its slot's new distribution p:
it is kept with probability min(1, p(d)/q_old(d)), else replaced by a draw from norm([p - q_old]_+).
The new draft is still distributed exactly as p, but equals the old one as often as any coupling
allows, so the context of later slots stops changing and their verification passes. Slots without a
waiting draft (the window's last) draw from p.

The loop hands this proposal every slot past the commit point, so every draft after the first
rejection is coupled: the released MC-SJD code's loop that does not stop at the first rejection
(junhyukso/SCD, `lumina1/scheduler/jacobi_iteration_lumina_mgpt_SCDMC.py`,
`SpeculativeSampler.__call__`, its `break` commented out) does the same draws.

`reference` — the distribution a draft is verified against next iteration:
- `new_p` (default, exact): q := p for every slot, kept or replaced, because a coupled draft is
  distributed as p.
- `old_q` (the released MC-SJD code): a kept draft keeps its old reference q_old (the code stores the
  draft's old distribution as the slot's score when the draft passes, and that score is the next
  reference); a replaced one gets p. The next test min(1, p'(d)/q_old(d)) then uses a reference the
  draft was not drawn from: lossy (measured in docs/READINGS.md).

`coupling` — how a waiting draft and its redraft are tied:
- `maximal` (default): the test and residual above (MC-SJD).
- `gumbel` (SCD-GS, the released SCD code's second coupling: junhyukso/SCD,
  `lumina1/scheduler/jacobi_iteration_lumina_mgpt_GS.py`): every draft of a position is the
  Gumbel-max draw argmax(log p + g) with one Gumbel vector g per sample and position, fixed from the
  moment the position enters the window until it is committed (the released code keeps a random
  table per sample and window slot and shifts it by the committed length, so each entry follows its
  position). When p barely changes the argmax does not either, so drafts stay put without any test.
  g is drawn from a generator seeded by the sample's key (one number the loop draws from the
  sample's generator when it starts) and the position, so batched equals unbatched and no step
  keeps state. Exact: g at a position is never read by a decision that reached
  the commit before the draft is verified, so each draft is distributed as the p it was drawn from.

`tau` (not exact): the other reading of SJD++'s "reuse high-confidence drafts": keep d iff
p(d)/q_old(d) >= tau, else draw from p.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from sjdbench.decoding.parts import PartConfig, Proposal, ProposalContext, WaitingDrafts
from sjdbench.decoding.processing import residual, sample
from sjdbench.errors import UserError, check_at_least, check_choice

REFERENCES = ("new_p", "old_q")
COUPLINGS = ("maximal", "gumbel")
GUMBEL_STREAM = 0x5C0_6A55  # mixes a sample's seed with a position into the seed of that position's g


def gumbel(u: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise from uniforms in [0, 1): -log(-log u); u = 0 gives -inf (never the argmax)."""
    return -torch.log(-torch.log(u))


def position_gumbel(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """(S,) sample keys and segment positions -> (S, V) float64 Gumbel vectors, one per pair, the
    same vector whenever the same pair asks again."""
    rows = []
    for seed, position in zip(seeds.tolist(), positions.tolist()):
        generator = torch.Generator().manual_seed((seed * GUMBEL_STREAM + position) % (2**63))
        rows.append(torch.rand(vocab, generator=generator, dtype=torch.float64))
    return gumbel(torch.stack(rows)) if rows else torch.zeros(0, vocab, dtype=torch.float64)


@dataclass
class CoupledConfig(PartConfig):
    tau: Optional[float] = None  # None: maximal coupling (exact); a number: keep-if-ratio>=tau (lossy)
    reference: str = "new_p"  # new_p: q := p (exact) | old_q: a kept draft keeps q_old (released MC-SJD code)
    coupling: str = "maximal"  # maximal (MC-SJD) | gumbel (SCD-GS: one Gumbel vector per sample and position)

    symbols: ClassVar[dict[str, str]] = {"tau": "τ"}

    def check(self) -> None:
        check_at_least("tau", self.tau, 0, "or null for the exact coupling")
        check_choice("reference", self.reference, REFERENCES)
        check_choice("coupling", self.coupling, COUPLINGS)
        if self.coupling == "gumbel" and (self.tau is not None or self.reference != "new_p"):
            raise UserError("coupling=gumbel keeps no old draft to test: drop tau and reference (use the defaults)")


class CoupledProposal(Proposal[CoupledConfig]):
    Config = CoupledConfig

    @property
    def reads_sample_key(self) -> bool:
        return self.config.coupling == "gumbel"

    @classmethod
    def lossless(cls, config: CoupledConfig, **children: bool) -> bool:
        """Maximal coupling with q := new p is exact; a ratio threshold (tau) or the old reference is not."""
        return config.tau is None and config.reference == "new_p"

    def propose(
        self, p: torch.Tensor, waiting: WaitingDrafts, ctx: ProposalContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """p: (S, V); the waiting drafts (S,) with references (S, V) -> drafts (S,), references (S, V)."""
        if self.config.coupling == "gumbel":
            return self._gumbel(p, ctx), p
        old, old_q, has_old = waiting.drafts, waiting.refs, waiting.has_old
        p_d = p.gather(-1, old[:, None]).squeeze(-1)  # (S,)
        q_d = old_q.gather(-1, old[:, None]).squeeze(-1)
        u = ctx.draws.uniform().to(p.dtype)
        tau = self.config.tau
        if tau is None:
            keep = (u * q_d < p_d) & has_old  # min(1, p/q) > u without a division
            fallback = torch.where(has_old[:, None], residual(p, old_q), p)
        else:
            keep = (p_d >= tau * q_d) & has_old
            fallback = p
        drafts = torch.where(keep, old, sample(fallback, ctx.draws))
        if self.config.reference == "old_q":
            return drafts, torch.where(keep[:, None], old_q, p)
        return drafts, p

    @staticmethod
    def _gumbel(p: torch.Tensor, ctx: ProposalContext) -> torch.Tensor:
        """p: (S, V) -> (S,) Gumbel-max drafts; rows belong to the samples of `ctx.draws` in order."""
        if ctx.keys is None:
            raise ValueError("coupling=gumbel reads the samples' keys; the loop passes them in ProposalContext.keys")
        g = position_gumbel(ctx.keys, ctx.positions.cpu(), p.shape[-1]).to(p.device)
        return (p.double().log() + g).argmax(-1)
