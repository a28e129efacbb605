"""The chain's iteration as fixed-shape tensor functions: what a compiled decode runs.

Why: the general loop walks every window on the host (`Topology.verify`, one `Verdict` each), and
its machinery is a few hundred small operator calls per iteration, each paying a dispatch (on a GPU
a kernel launch) whatever its size. For the chain topology the verdict has a closed form (the
accepted drafts are the passing prefix), so the arithmetic of an iteration is two functions over
static shapes, B samples x W slots x V:

- `ChainStep.verify`: the logits' processing, every draft's test, the accepted count and the
  emitted token (the verifier's replacement after the first rejection, or the bonus draw);
- `ChainStep.propose`: the next drafts from every slot's p, each with the draft that waits after it.

Data-dependent choices are masks and index arithmetic, so with `compile=True` each function is
compiled whole (`fullgraph=True`, one compiled shape per batch size; inductor's default mode, no CUDA
graphs), and the loop reads back once per iteration what its host bookkeeping needs (which drafts
passed). Which decodes run it is `loop.CHAIN_STEP`'s choice: by default compiled decodes on CUDA, as
on a CPU it measured no faster than the general loop.

Random numbers stay the general loop's: the caller draws each sample's uniforms from its own
generator with the calls that loop makes (the tests, then the emission, then the proposals), so both
paths decode the same tokens, compiled or eager (tests/test_chain_step.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from sjdbench.adapter import Sampling
from sjdbench.decoding.parts import Proposal, ProposalContext, Verifier, WaitingDrafts
from sjdbench.decoding.processing import draw, non_finite, process_logits

if TYPE_CHECKING:
    from sjdbench.decoding.history import ProbabilityHistory


class GivenDraws:
    """Uniforms drawn before a fixed-shape call, one per row (the `Draws` a proposal reads)."""

    def __init__(self, u: torch.Tensor) -> None:
        self.u = u  # (R,)

    @property
    def rows(self) -> int:
        return int(self.u.shape[0])

    def uniform(self, *tail: int) -> torch.Tensor:
        if tail not in ((), (1,)):
            raise ValueError("a fixed-shape proposal draws one uniform per row")
        return self.u.view(-1, *tail)


def takes_fixed_step(topology: Any, verifier: Verifier, proposal: Proposal, drafter: bool) -> bool:
    """Whether a decoder's iteration can run as `ChainStep`: a chain window, a verifier that judges each
    draft alone, and a proposal that is a row-wise function of p (`Proposal.rowwise`)."""
    from sjdbench.decoding.topologies.chain import ChainTopology

    return type(topology) is ChainTopology and not drafter and not verifier.reads_parent and proposal.rowwise


class ChainStep:
    """One chain iteration's arithmetic over (B, W, V); `compile` compiles each function whole."""

    def __init__(
        self, verifier: Verifier, proposal: Proposal, sampling: Sampling, observations: int, compile: bool
    ) -> None:
        self.verifier, self.proposal, self.sampling, self.observations = verifier, proposal, sampling, observations
        self.compiled = compile
        # the two calls of an iteration: the methods below, or each compiled whole
        self.verify = (
            torch.compile(self.verify_window, fullgraph=True, dynamic=False) if compile else self.verify_window
        )
        self.propose = (
            torch.compile(self.propose_slots, fullgraph=True, dynamic=False) if compile else self.propose_slots
        )

    def verify_window(
        self,
        logits: torch.Tensor,
        allowed: torch.Tensor,
        tokens: torch.Tensor,
        refs: torch.Tensor,
        u: torch.Tensor,
        u_emit: torch.Tensor,
        counts: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """logits (B, 2, W, V), allowed (B, W, V), slot tokens (B, W), the drafts' references (B, W-1, V),
        their uniforms u (B, W-1), the emission's u_emit (B,), counts (B,) drafts per sample (slot 0
        holds the root) -> p (B, W, V), bad () (non-finite logits or p), passed (B, W-1) bool (False past
        a sample's drafts), emitted (B,) long."""
        p = process_logits(logits, allowed, self.sampling)  # (B, W, V)
        bad = non_finite(logits, p)
        B, W, V = p.shape
        Q = W - 1
        if Q == 0:  # AR: no drafts, the bonus draw from the root's p
            return p, bad, torch.zeros(B, 0, dtype=torch.bool, device=p.device), draw(p[:, 0], u_emit)
        slot_drafts = tokens[:, 1:]  # (B, Q): draft i sits in slot i + 1 and is tested against slot i's p
        depth = torch.arange(1, W, device=p.device)  # (Q,)
        reads = {"depth": depth.repeat(B)} if self.verifier.reads_depth else {}
        passed = self.verifier.accept(
            p[:, :Q].reshape(B * Q, V), refs.reshape(B * Q, V), slot_drafts.reshape(-1), u.reshape(-1), **reads
        ).view(B, Q)
        passed = passed & (depth[None] <= counts[:, None])  # a shorter window's padding never passes
        a = passed.long().cumprod(1).sum(1)  # (B,) accepted: the passing prefix
        at = a.clamp_max(Q - 1)  # the first rejected draft (meaningful where a < counts)
        base = p.gather(1, a[:, None, None].expand(B, 1, V)).squeeze(1)  # (B, V) slot a's p
        q_at = refs.gather(1, at[:, None, None].expand(B, 1, V)).squeeze(1)
        d_at = slot_drafts.gather(1, at[:, None]).squeeze(1)
        reads = {"depth": at + 1} if self.verifier.reads_depth else {}
        replaced = self.verifier.replacement(base, q_at, d_at, **reads)
        base = torch.where((a < counts)[:, None], replaced, base)
        return p, bad, passed, draw(base, u_emit)

    def propose_slots(
        self,
        p: torch.Tensor,
        waiting: WaitingDrafts,
        u: torch.Tensor,
        samples: torch.Tensor,
        positions: torch.Tensor,
        history: ProbabilityHistory | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every slot's next draft: p (B, W, V), the drafts waiting at the slots' targets (B*W rows),
        one uniform per slot u (B, W), each slot's sample (B*W,) and target position (B*W,) ->
        drafts (B, W), references (B, W, V). The caller keeps the slots that propose."""
        B, W, V = p.shape
        growth = None
        if history is not None and self.proposal.history_depth:
            growth = history.growth_mask(samples, positions, self.observations)
        ctx = ProposalContext(samples, positions, history, growth, GivenDraws(u.reshape(-1)))  # type: ignore[arg-type]
        drafts, refs = self.proposal.propose(p.reshape(B * W, V), waiting, ctx)
        return drafts.view(B, W), refs.view(B, W, V)
