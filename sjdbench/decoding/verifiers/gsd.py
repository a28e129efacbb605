"""`gsd` — grouped speculative decoding (So et al., ICCV 2025). Lossy.

Accept draft x if u < sum_C p / sum_C q over a dynamic group C(x): the G tokens around x's rank in
the current p (G/2 each side, the window shifted to stay in range), minus those with
|p(y) - p(x)| >= p_thr or squared L2 distance >= d_thr between the model's input embeddings of y and
x. x is always in C, so with C = {x} this is exactly SJD's rule. Rejection draws the token-level
residual norm([p - q]_+).

`d_thr` is an absolute squared distance in the units of each model's embedding table: null takes
the model's own value (`adapter.gsd_d_thr`; the paper's 0.5 for Lumina-mGPT-like models), because a
universal value would silently form no groups on a model whose codes lie farther apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sjdbench.decoding.parts import PartConfig
from sjdbench.decoding.processing import residual
from sjdbench.errors import UserError

PAPER_D_THR = 0.5  # So et al.'s value on Lumina-mGPT's token embeddings


@dataclass
class GSDConfig(PartConfig):
    group_size: int = 50  # G
    p_thr: float = 0.15
    d_thr: Optional[float] = None  # null: the model's value (adapter.gsd_d_thr)

    symbols = {"group_size": "G"}

    def check(self) -> None:
        if self.group_size < 0:
            raise UserError(f"group_size must be >= 0, got {self.group_size}")
        if self.p_thr < 0:
            raise UserError(f"p_thr must be >= 0, got {self.p_thr}")
        if self.d_thr is not None and self.d_thr <= 0:
            raise UserError(f"d_thr must be > 0 (or null for the model's value), got {self.d_thr}")


def model_d_thr(config: GSDConfig, adapter) -> float:
    """The threshold in use: the config's, else the model's, else the paper's 0.5."""
    if config.d_thr is not None:
        return float(config.d_thr)
    return float(getattr(adapter, "gsd_d_thr", PAPER_D_THR))


class GSDVerifier:
    Config = GSDConfig
    greedy = False

    def __init__(self, embeddings: torch.Tensor, group_size: int, p_thr: float, d_thr: float) -> None:
        self.embeddings = embeddings.float()  # (V, D)
        self.group_size, self.p_thr, self.d_thr = group_size, p_thr, d_thr

    @classmethod
    def build(cls, config: GSDConfig, adapter) -> "GSDVerifier":
        embeddings = adapter.token_embeddings().to(adapter.device)
        return cls(embeddings, config.group_size, config.p_thr, model_d_thr(config, adapter))

    def resolved(self) -> dict:
        """Settings decided at build time, recorded in env.json."""
        return {"gsd_d_thr": self.d_thr}

    def group(self, p: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """(L, G+1) token ids of each draft's group, -1 where excluded."""
        L, V = p.shape
        order = p.argsort(dim=-1, descending=True)  # (L, V) ranks -> tokens
        rank = torch.empty_like(order).scatter_(-1, order, torch.arange(V, device=p.device).expand(L, V))
        span = min(self.group_size, V - 1)
        start = (rank.gather(-1, drafts[:, None]) - span // 2).clamp(0, V - 1 - span)  # (L, 1)
        cand = order.gather(-1, start + torch.arange(span + 1, device=p.device))  # (L, G+1)
        p_gap = (p.gather(-1, cand) - p.gather(-1, drafts[:, None])).abs()
        e_gap = (self.embeddings[cand] - self.embeddings[drafts][:, None]).pow(2).sum(-1)
        keep = ((p_gap < self.p_thr) & (e_gap < self.d_thr)) | (cand == drafts[:, None])
        return torch.where(keep, cand, -1)

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        group = self.group(p, drafts)
        member = group >= 0
        idx = group.clamp_min(0)
        p_sum = (p.gather(-1, idx) * member).sum(-1)
        q_sum = (q.gather(-1, idx) * member).sum(-1)
        return u * q_sum < p_sum

    def replacement(self, p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        return residual(p, q)
