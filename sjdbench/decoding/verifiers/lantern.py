"""`lantern` — LANTERN's relaxed acceptance in latent space (Jang et al., ICLR 2025). Lossy.

Walk the draft x's k nearest VQ-codebook neighbours, nearest first, and take the longest prefix A
with p(A) <= delta (or <= (delta - 1) p(x) when delta > 1, LANTERN++'s multiplicative bound); accept
with min(1, (p(x) + p(A)) / q(x)). On rejection draw from norm([p - q']_+), where q' is q zeroed on
x's k neighbours (`zero_on: all`, LANTERN's rule) or only on A (`zero_on: moved`).
For a deterministic draft (one-hot q) the moved mass bounds the total-variation shift by delta per
token; for a stochastic draft (a Jacobi resample) each draft can gain min(q(d), moved(d)), which may
exceed delta.

Neighbourhoods are computed once per codebook in row blocks (a 32768-code book never materialises
a K x K matrix), only the top-k ids are kept, and the table is cached on disk keyed by the
codebook's hash.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from sjdbench.decoding.parts import PartConfig
from sjdbench.decoding.processing import residual
from sjdbench.errors import UserError

log = logging.getLogger(__name__)
ZERO_ON = ("all", "moved")


@dataclass
class LanternConfig(PartConfig):
    k: int = 1000  # neighbourhood search size
    delta: float = 0.1  # TV budget per token (> 1: LANTERN++ multiplicative bound)
    zero_on: str = "all"  # residual: q zeroed on all k neighbours | moved: only on those in A

    symbols = {"delta": "δ"}

    def check(self) -> None:
        if self.k < 1:
            raise UserError(f"k must be >= 1, got {self.k}")
        if self.delta < 0:
            raise UserError(f"delta must be >= 0, got {self.delta}")
        if self.zero_on not in ZERO_ON:
            raise UserError(f"zero_on '{self.zero_on}' is unknown; choose one of: {', '.join(ZERO_ON)}")


def neighbour_table(codebook: torch.Tensor, k: int, cache_dir: Path | None = None, key: str = "") -> torch.Tensor:
    """(K, k) ids of each code's k nearest other codes by L2 distance, nearest first."""
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
    Config = LanternConfig
    greedy = False

    def __init__(self, neighbours: torch.Tensor, image_token_ids: torch.Tensor, vocab_size: int, delta: float,
                 zero_on: str = "all") -> None:
        device = image_token_ids.device
        self.delta, self.zero_on = delta, zero_on
        self.neighbour_tokens = image_token_ids[neighbours.long().to(device)]  # (K, k) token ids
        self.code_of = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
        self.code_of[image_token_ids] = torch.arange(image_token_ids.numel(), device=device)

    @classmethod
    def build(cls, config: LanternConfig, adapter) -> "LanternVerifier":
        from sjdbench.paths import cache_dir

        table = neighbour_table(adapter.codebook(), config.k, cache_dir(), adapter.name)
        return cls(table, adapter.image_token_ids, adapter.vocab_size, config.delta, config.zero_on)

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

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        moved, _ = self.moved_mass(p, drafts)
        p_d = p.gather(-1, drafts[:, None]).squeeze(-1)
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        return u * q_d < p_d + moved

    def replacement(self, p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        _, included = self.moved_mass(p[None], draft[None])
        ids = included[0]
        code = self.code_of[draft]
        if self.zero_on == "all":
            ids = torch.where(code >= 0, self.neighbour_tokens[code.clamp_min(0)], -1)
        q_zeroed = q.clone()
        q_zeroed[ids.clamp_min(0)] = torch.where(ids >= 0, 0.0, q_zeroed[ids.clamp_min(0)])
        return residual(p, q_zeroed)
