"""Verification rules: given targets p, references q, drafts d and uniforms u for a window, say which
drafts pass, and from which distribution the first rejected slot's replacement is drawn.

All rules are vectorised over the window; the loop takes the accepted prefix with a cumulative
product of the flags (no Python loop per slot).
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from sjdbench.decoding.processing import one_hot, residual

log = logging.getLogger(__name__)


class ExactVerifier:
    """Modified rejection sampling: accept d with prob min(1, p(d)/q(d)), else draw from norm([p-q]_+).

    The emitted token is distributed exactly as p whenever d ~ q: lossless.
    """

    greedy = False
    lossless = True

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """p, q: (L, V); drafts, u: (L,) -> (L,) bool. u*q(d) < p(d) is min(1, p/q) > u without a division."""
        p_d = p.gather(-1, drafts[:, None]).squeeze(-1)
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        return u * q_d < p_d

    def replacement(self, p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        """(V,) distribution of the token emitted at the first rejected slot."""
        return residual(p, q)


class GreedyVerifier:
    """Jacobi fixed-point check: a draft passes iff it is the argmax; the replacement is the argmax.

    The loop switches the processed distributions to one-hot argmax (temperature 0) for this rule.
    """

    greedy = True
    lossless = True

    def accept(self, p, q, drafts, u) -> torch.Tensor:
        return drafts == p.argmax(-1)

    def replacement(self, p, q, draft) -> torch.Tensor:
        return one_hot(p.argmax(-1), p.shape[-1])


def neighbour_table(codebook: torch.Tensor, k: int, cache_dir: Path | None = None, key: str = "") -> torch.Tensor:
    """(K, k) ids of each code's k nearest other codes by L2 distance, nearest first.

    Computed in row blocks so a 32768-code book never materialises a K x K matrix; only top-k ids are
    kept (a full table would be 2 GiB for Emu3). Cached on disk under `cache_dir` when given.
    """
    codebook = codebook.float().cpu()
    K = codebook.shape[0]
    k = min(k, K - 1)
    path = None
    if cache_dir is not None:
        digest = hashlib.sha256(codebook.numpy().tobytes()).hexdigest()[:10]  # new weights, new table
        path = Path(cache_dir) / f"lantern-{key}-K{K}-k{k}-{digest}.pt"
        if path.exists():
            return torch.load(path)
    table = torch.empty(K, k, dtype=torch.int32 if K > 32767 else torch.int16)
    for start in range(0, K, 1024):
        block = torch.cdist(codebook[start:start + 1024], codebook)  # (b, K)
        rows = torch.arange(block.shape[0])
        block[rows, rows + start] = float("inf")  # a code is not its own neighbour
        table[start:start + 1024] = block.topk(k, dim=-1, largest=False).indices.to(table.dtype)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(table, tmp)
        tmp.replace(path)
        log.info("cached LANTERN neighbourhoods at %s", path)
    return table


class LanternVerifier:
    """LANTERN relaxed acceptance: move up to delta of p's mass from x's latent neighbours onto x.

    Walk x's neighbours nearest first and take the longest prefix A with p(A) <= delta (or
    <= (delta-1) p(x) when delta > 1, LANTERN++'s multiplicative bound); accept with
    min(1, (p(x)+p(A))/q(x)). On rejection draw from norm([p - q']_+) where q' is q zeroed on x's
    k neighbours (`zero_on="all"`, LANTERN's rule) or only on A (`zero_on="moved"`). For a
    deterministic draft the moved mass bounds the total-variation shift by delta per token; for a
    stochastic draft (Jacobi resample) each draft can gain min(q(d), moved(d)), which may exceed delta.
    Lossy by design.
    """

    greedy = False
    lossless = False

    def __init__(self, neighbours: torch.Tensor, image_token_ids: torch.Tensor, vocab_size: int, delta: float,
                 zero_on: str = "all") -> None:
        if zero_on not in ("all", "moved"):
            raise ValueError(f"unknown lantern zero_on '{zero_on}'; choose all or moved")
        device = image_token_ids.device
        self.delta, self.zero_on = delta, zero_on
        self.neighbour_tokens = image_token_ids[neighbours.long().to(device)]  # (K, k) token ids
        self.code_of = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
        self.code_of[image_token_ids] = torch.arange(image_token_ids.numel(), device=device)

    def moved_mass(self, p: torch.Tensor, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(L,) mass moved onto each draft, and (L, k) the neighbours in A (ids, -1 where excluded)."""
        codes = self.code_of[drafts]  # (L,); -1 for forced tokens
        nbrs = self.neighbour_tokens[codes.clamp_min(0)]  # (L, k)
        p_nbr = p.gather(-1, nbrs)  # (L, k)
        p_d = p.gather(-1, drafts[:, None])  # (L, 1)
        bound = torch.full_like(p_d, self.delta) if self.delta <= 1 else (self.delta - 1) * p_d
        included = (p_nbr.cumsum(-1) <= bound) & (codes[:, None] >= 0)  # a prefix: cumsum is monotone
        moved = (p_nbr * included).sum(-1)
        return moved, torch.where(included, nbrs, -1)

    def accept(self, p, q, drafts, u) -> torch.Tensor:
        moved, _ = self.moved_mass(p, drafts)
        p_d = p.gather(-1, drafts[:, None]).squeeze(-1)
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        return u * q_d < p_d + moved

    def replacement(self, p, q, draft) -> torch.Tensor:
        _, included = self.moved_mass(p[None], draft[None])
        ids = included[0]
        code = self.code_of[draft]
        if self.zero_on == "all":
            ids = torch.where(code >= 0, self.neighbour_tokens[code.clamp_min(0)], -1)
        q_zeroed = q.clone()
        q_zeroed[ids.clamp_min(0)] = torch.where(ids >= 0, 0.0, q_zeroed[ids.clamp_min(0)])
        return residual(p, q_zeroed)


class GSDVerifier:
    """Grouped speculative decoding: accept x if u < sum_C p / sum_C q over a dynamic group C(x).

    C(x): the G tokens around x's rank in the current p (G/2 each side, window shifted to stay in
    range), minus those with |p(y) - p(x)| >= p_thr or squared L2 distance >= d_thr between the
    model's input embeddings of y and x. x is always in C. Rejection draws the token-level residual.
    Lossy; with C = {x} it is exactly SJD's rule.
    """

    greedy = False
    lossless = False

    def __init__(self, embeddings: torch.Tensor, group_size: int, p_thr: float, d_thr: float) -> None:
        self.embeddings = embeddings.float()  # (V, D)
        self.group_size, self.p_thr, self.d_thr = group_size, p_thr, d_thr

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

    def accept(self, p, q, drafts, u) -> torch.Tensor:
        group = self.group(p, drafts)
        member = group >= 0
        idx = group.clamp_min(0)
        p_sum = (p.gather(-1, idx) * member).sum(-1)
        q_sum = (q.gather(-1, idx) * member).sum(-1)
        return u * q_sum < p_sum

    def replacement(self, p, q, draft) -> torch.Tensor:
        return residual(p, q)
