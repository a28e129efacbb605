"""The one pipeline every sampled or compared distribution goes through.

CFG mix -> structure mask (legal image ids; forced positions one-hot) -> temperature -> top-k ->
top-p -> softmax. Drafts and targets must be processed identically or the ratio test is meaningless,
so there is exactly one function for it.
"""

from __future__ import annotations

import torch

from sjdbench.adapter import Sampling
from sjdbench.decoding.randomness import Draws

NEG_INF = float("-inf")


def cfg_mix(logits: torch.Tensor, scale: float, guidance: str = "always") -> torch.Tensor:
    """logits (..., 2, L, V) = [cond; uncond] -> (..., L, V) = u + s (c - u); guidance="above_one"
    (LlamaGen's released rule) takes the conditional row alone at a scale <= 1 instead of mixing."""
    cond, uncond = logits[..., 0, :, :], logits[..., 1, :, :]
    if scale == 1.0 or (guidance == "above_one" and scale < 1.0):
        return cond
    return uncond + scale * (cond - uncond)


class StructureMasks:
    """Allowed-id masks for a whole segment, stored as a few unique rows plus a per-position index
    (a full (N, V) table would be 69 MB for Lumina-mGPT's 65536-id vocabulary)."""

    def __init__(self, forced: torch.Tensor, legal: torch.Tensor) -> None:
        forced_ids = sorted(set(forced[forced >= 0].tolist()))
        rows = [legal] + [
            torch.zeros_like(legal).index_fill_(0, torch.tensor([f], device=legal.device), True) for f in forced_ids
        ]
        self.rows = torch.stack(rows)  # (1 + F, V)
        lookup = {f: i + 1 for i, f in enumerate(forced_ids)}
        self.index = torch.tensor([lookup.get(int(f), 0) for f in forced.tolist()], device=legal.device)  # (N,)

    def window(self, start: int, stop: int) -> torch.Tensor:
        """(L, V) allowed ids for segment positions start..stop-1."""
        return self.rows[self.index[start:stop]]


def structure_mask(forced: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Boolean (L, V) mask of allowed ids for positions with forced ids `forced` (L,)."""
    return StructureMasks(forced, legal).window(0, forced.shape[0])


def process_logits(logits: torch.Tensor, allowed: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """(..., 2, L, V) raw logits -> (..., L, V) processed probabilities (float32, or float64 for a
    model that runs in it)."""
    logits = logits if logits.dtype == torch.float64 else logits.float()
    mixed = torch.where(allowed, cfg_mix(logits, sampling.cfg_scale, sampling.guidance), NEG_INF)  # (..., L, V)
    if sampling.temperature <= 0:  # greedy: one-hot at the argmax
        return torch.zeros_like(mixed).scatter_(-1, mixed.argmax(-1, keepdim=True), 1.0)
    if sampling.temperature != 1.0:  # x / 1 == x: skip an op per call at the default temperature
        mixed = mixed / sampling.temperature
    if sampling.top_k and sampling.top_k < mixed.shape[-1]:
        # the k-th largest value (kthvalue: the same value topk gives, a few times faster on a CPU)
        kth = torch.kthvalue(mixed, mixed.shape[-1] - sampling.top_k + 1, dim=-1, keepdim=True).values  # (..., 1)
        mixed = mixed.masked_fill(mixed < kth, NEG_INF)
    if sampling.top_p < 1.0:
        sorted_logits, order = mixed.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) > sampling.top_p  # keep the token crossing p
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        mixed = mixed.masked_fill(drop, NEG_INF)
    return mixed.softmax(-1)


def sample(probs: torch.Tensor, draws: Draws) -> torch.Tensor:
    """One draw per row of probs (R, V) -> (R,) long, by inverse CDF, the uniforms from `draws` (each
    row's from its own sample's generator).

    P(draw = i) = cdf_i - cdf_{i-1} = p_i exactly (zero-probability ids are never drawn); a few times
    cheaper than torch.multinomial for the small batches of a decoding window, and sync-free.
    """
    return draw(probs, draws.uniform(1))


def draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """`sample` with its uniforms given: probs (R, V), u (R,) or (R, 1) -> (R,) long."""
    cdf = probs.cumsum(-1)  # (R, V)
    x = u.reshape(-1, 1).to(cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, x, right=True).clamp_max(probs.shape[-1] - 1).view(-1)


def non_finite(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """() device flag: a raw logit is NaN or +inf (greedy would take its argmax), or a processed
    probability is not finite. -inf logits are fine (models mask ids that way). Two reductions:
    NaN and inf propagate through max and sum."""
    return ~torch.isfinite(logits.amax() + p.sum())


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm([p - q]_+) row-wise; falls back to p where p == q (a draft with p = q passes surely, so a
    chain never needs it; a tree with select=longest fails the later siblings instead, forest.py)."""
    res = (p - q).clamp_min(0)
    total = res.sum(-1, keepdim=True)
    return torch.where(total > 0, res / total.clamp_min(1e-30), p)


def one_hot(tokens: torch.Tensor, vocab_size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(*tokens.shape, vocab_size, dtype=dtype, device=tokens.device).scatter_(
        -1, tokens[..., None], 1.0
    )
