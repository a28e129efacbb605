"""`vp` — SJD-VP's verification prediction (Shan et al., 2026): fuse each position's probability
trend into its next draft. Wraps an inner proposal (`inner`: resample or coupled) and changes only
the distribution it draws from.

For a position with current distribution p_t and history p_{t-1}, p_{t-2}, ...:
    reference  pbar_t(x) = sum_k w_k p_{t-k}(x),  w_k ∝ gamma^(k-1), k = 1..H
    score      S_t(x)    = lambda * (log p_t(x) - log pbar_t(x))
    mask       M_t(x)    = 1 iff p_t(x) rose over the last N iterations (the loop's growth mask)
    fusion     log p'_t(x) = log p_t(x) + M_t(x) S_t(x)  on the top-k candidates of p_t, renormalised
The next draft at the position is drawn from p'_t, and by default p'_t is also its reference q, so
VP is a pure proposal change and the decoder stays exact. `reference: p` stores q := p_t instead
(the literal reading of the paper; biased toward rising tokens, lossy).
N and its reading are the decoder's `growth_steps` / `growth_reading`: the loop computes one growth
mask per iteration for VP and for the statistics alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.parts import PartConfig, Proposal, ProposalContext, WaitingDrafts
from sjdbench.errors import UserError, check_at_least, check_choice

EPS = 1e-12
FUSIONS = ("fused", "prior", "none")
REFERENCES = ("fused", "p")


@dataclass
class VPConfig(PartConfig):
    inner: str = "resample"  # the draw rule applied to p' (a proposal: resample | coupled)
    gamma: float = 0.5  # EWA decay of the reference pbar
    history: int = 4  # H, past iterations in the EWA reference
    lam: float = 1.0  # lambda, scale of the log-gain score
    fusion: str = "fused"  # fused: p * exp(M S) | prior: exp(M S) over p's support | none: p itself
    fusion_top_k: int = 64  # fusion acts on the top-k candidates of p_t (0 = whole support)
    reference: str = "fused"  # fused: q := p' (exact) | p: q := p_t (literal reading, lossy)

    symbols: ClassVar[dict[str, str]] = {
        "gamma": "γ",
        "lam": "λ",
        "history": "H",
        "fusion_top_k": "topk",
        "reference": "q",
    }
    subparts: ClassVar[dict[str, str]] = {"inner": "proposal"}

    def check(self) -> None:
        check_choice("fusion", self.fusion, FUSIONS)
        check_choice("reference", self.reference, REFERENCES)
        if not 0 < self.gamma <= 1:
            raise UserError(f"gamma must be in (0, 1], got {self.gamma}")
        check_at_least("history", self.history, 1)
        check_at_least("lam", self.lam, 0)
        check_at_least("fusion_top_k", self.fusion_top_k, 0, "0 = whole support")

    def unused(self) -> set[str]:
        if self.fusion == "none":  # p' = p: nothing of the fusion is read, and q = p either way
            return {"gamma", "history", "lam", "fusion_top_k", "reference"}
        return set()


def ewa_reference(
    history: ProbabilityHistory, samples: torch.Tensor, positions: torch.Tensor, depth: int, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """pbar (L, V) from the previous `depth` iterations (not the current one), and has-history (L,)."""
    recent, valid = history.last(samples, positions, depth + 1)  # (L, depth+1, V), newest (= current) first
    past, past_valid = recent[:, 1:], valid[:, 1:]  # (L, k, V)
    weights = gamma ** torch.arange(past.shape[1], device=past.device, dtype=past.dtype)  # gamma^(k-1)
    weights = weights[None] * past_valid  # (L, k)
    total = weights.sum(-1)  # (L,)
    pbar = (past * weights[..., None]).sum(1) / total.clamp_min(EPS)[:, None]
    return pbar, total > 0


def top_k_mask(p: torch.Tensor, k: int) -> torch.Tensor:
    """(L, V) True on each row's top-k support (the whole support for k = 0)."""
    support = p > 0
    if k <= 0 or k >= p.shape[-1]:
        return support
    kth = torch.topk(p, k, dim=-1).values[..., -1:]
    return support & (p >= kth)


def fuse(p: torch.Tensor, pbar: torch.Tensor, growth: torch.Tensor, config: VPConfig) -> torch.Tensor:
    """The fused proposal p' (L, V) from current p, reference pbar and growth mask M."""
    if config.fusion == "none":
        return p
    score = config.lam * (torch.log(p.clamp_min(EPS)) - torch.log(pbar.clamp_min(EPS)))  # S (L, V)
    active = growth & top_k_mask(p, config.fusion_top_k) & (p > 0)
    gain = torch.where(active, score, torch.zeros_like(score))
    if config.fusion == "fused":
        log_post = torch.log(p.clamp_min(EPS)) + gain
    else:  # prior: our reading of "prior only", the growth prior exp(M S) alone over p's support
        log_post = gain
    log_post = log_post.masked_fill(p <= 0, float("-inf"))
    return log_post.softmax(-1)


class VPProposal(Proposal[VPConfig]):
    Config = VPConfig

    @classmethod
    def lossless(cls, config: VPConfig, inner: bool = True, **children: bool) -> bool:
        """Exact when the stored reference is the distribution the draft was drawn from (the fused one, or p
        when fusion is off) and the inner proposal is exact."""
        return (config.fusion == "none" or config.reference == "fused") and inner

    def __init__(self, config: VPConfig | None = None, inner: Proposal | None = None) -> None:
        super().__init__(config)
        from sjdbench.decoding.proposals.resample import ResampleProposal

        self.inner = inner if inner is not None else ResampleProposal()
        self.rowwise = self.inner.rowwise
        self.history_depth = self.config.history + 1  # the EWA reads H past iterations plus the current one

    @property
    def reads_sample_key(self) -> bool:
        return self.inner.reads_sample_key

    def propose(
        self, p: torch.Tensor, waiting: WaitingDrafts, ctx: ProposalContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw with the inner rule from p' (S, V); the reference is p' (exact) or p (literal)."""
        if ctx.history is None or ctx.growth is None:
            raise ValueError("VP needs the loop's probability history and growth mask")
        config = self.config
        pbar, has_history = ewa_reference(ctx.history, ctx.samples, ctx.positions, config.history, config.gamma)
        fused = fuse(p, pbar, ctx.growth & has_history[:, None], config)
        drafts, _ = self.inner.propose(fused, waiting, ctx)
        return drafts, (fused if config.reference == "fused" else p)
