"""SJD-VP verification prediction (Shan et al., 2026): fuse the probability trend into the draft.

For a position with current distribution p_t and history p_{t-1}, p_{t-2}, ...:
    reference  pbar_t(x) = sum_k w_k p_{t-k}(x),  w_k ∝ gamma^(k-1), k = 1..H
    score      S_t(x)    = lambda * (log p_t(x) - log pbar_t(x))
    mask       M_t(x)    = 1 iff p_{t-N}(x) < ... < p_{t-1}(x) < p_t(x)
    fusion     log p'_t(x) = log p_t(x) + M_t(x) S_t(x)  on the top-k candidates of p_t, renormalised
The next draft at the position is drawn from p'_t, and by default p'_t is also its reference q, so
VP is a pure proposal change and the decoder stays exact. `reference: p` uses q := p_t instead
(the literal reading; biased toward rising tokens).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sjdbench.decoding.history import ProbabilityHistory

EPS = 1e-12


@dataclass(frozen=True)
class VPSettings:
    growth_steps: int = 3
    strict_increases: bool = True  # N strict increases (N+1 observations); False: N observations
    gamma: float = 0.5
    history: int = 4  # H, past iterations in the EWA reference
    lam: float = 1.0
    fusion_top_k: int = 64  # fusion acts on the top-k candidates of p_t (0 = whole support)
    fusion: str = "fused"  # fused | prior | none
    reference: str = "fused"  # fused (q := p', exact) | p (q := p_t, lossy)


def ewa_reference(history: ProbabilityHistory, positions: torch.Tensor, depth: int, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """pbar (L, V) from the previous `depth` iterations (not the current one), and has-history (L,)."""
    recent, valid = history.last(positions, depth + 1)  # (L, depth+1, V), newest (= current) first
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


def fuse(p: torch.Tensor, pbar: torch.Tensor, growth: torch.Tensor, settings: VPSettings) -> torch.Tensor:
    """The fused proposal p' (L, V) from current p, reference pbar and growth mask M."""
    if settings.fusion == "none":
        return p
    score = settings.lam * (torch.log(p.clamp_min(EPS)) - torch.log(pbar.clamp_min(EPS)))  # S (L, V)
    active = growth & top_k_mask(p, settings.fusion_top_k) & (p > 0)
    gain = torch.where(active, score, torch.zeros_like(score))
    if settings.fusion == "fused":
        log_post = torch.log(p.clamp_min(EPS)) + gain
    elif settings.fusion == "prior":
        # our reading of "prior only": the growth prior exp(M S) alone, spread over p's support
        log_post = gain
    else:
        raise ValueError(f"unknown vp.fusion '{settings.fusion}'; choose fused, prior or none")
    log_post = log_post.masked_fill(p <= 0, float("-inf"))
    return log_post.softmax(-1)


class VPProposal:
    """Wraps an inner proposal (resample or coupled); only the proposal distribution changes."""

    def __init__(self, inner, settings: VPSettings) -> None:
        self.inner = inner
        self.settings = settings
        self.name = f"vp({inner.name})"

    def proposal_distribution(
        self, p: torch.Tensor, positions: torch.Tensor, history: ProbabilityHistory, growth: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(r, q): the distribution drafts are drawn from and the reference stored with them.

        `growth` is the loop's mask M for these positions (computed once per iteration); it must use
        the same N and reading as these settings."""
        s = self.settings
        pbar, has_history = ewa_reference(history, positions, s.history, s.gamma)
        if growth is None:
            growth = history.growth_mask(positions, s.growth_steps, s.strict_increases)
        fused = fuse(p, pbar, growth & has_history[:, None], s)
        return fused, (fused if s.reference == "fused" else p)

    def draw(self, r, old_drafts, old_q, has_old, generator) -> torch.Tensor:
        return self.inner.draw(r, old_drafts, old_q, has_old, generator)
