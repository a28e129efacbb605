"""`lantern` — LANTERN's relaxed acceptance in latent space (Jang et al., ICLR 2025). Lossy.

Walk the draft x's k nearest VQ-codebook neighbours, nearest first, and take the longest prefix A
with p(A) <= delta (or <= (delta - 1) p(x) when delta > 1, LANTERN++'s multiplicative bound); accept
with min(1, (p(x) + p(A)) / q(x)). What a rejected slot emits, and the test's edge cases, follow one
of four readings (`reading`):

- `official_llamagen` (default): the rule of the released LlamaGen and Anole code (jadohu/LANTERN,
  `models/ea_model_llamagen.py` and `models/ea_model_anole.py`, `evaluate_posterior_v1`, the path
  that verifies against the drafter's distribution q). Accept iff q(x) > 0 and u q(x) <= p(x) + p(A)
  (`<=`, not `<`). A draft with q(x) <= 0 is skipped, so the slot emits a draw from p itself.
  Otherwise emit from norm([p - q']_+), where q' is q zeroed on x's k + 1 nearest neighbours (one
  more than the k searched), and only when A is non-empty; an all-zero residual becomes uniform.
- `official_lumina`: the rule of the released Lumina-mGPT code (`models/ea_model_lumina_mgpt.py`,
  `evaluate_posterior`): the same test and edge cases, but it is *p* that is zeroed on the k + 1
  neighbours (when A is non-empty) before the residual norm([p' - q]_+) is formed, so the neighbours
  cannot be emitted at all after a rejection. (For a deterministic draft, one-hot q, this is also
  what the LlamaGen and Anole code does on its default dynamic-tree path, `evaluate_posterior`.)
- `ours_all`: accept iff u q(x) < p(x) + p(A); emit from norm([p - q']_+) with q' = q zeroed on x's
  k neighbours, always (the paper's description read literally).
- `ours_moved`: as `ours_all`, but q is zeroed only on A, the neighbours whose mass moved.

`k` is a count of codes, and the released 1000 was set for codebooks of 8192 codes (Chameleon's:
Lumina-mGPT, Anole) and 16384 (LlamaGen), a neighbourhood of 6-12 % of the book. `k: null` (every
preset's) takes the model's value: 1000 on books of 8192 codes or more, and on a smaller book the
same 1000-in-8192 share (62 of the toy's 512 codes). A fixed 1000 on the toy would name every other
code a neighbour: the Lumina reading, which zeroes p on the k + 1 neighbours after a rejection,
would then leave nothing but the uniform fallback (measured in docs/EVALUATION.md). An explicit k
must leave codes outside the ones the reading zeroes (k <= K - 2 for the official readings, whose
released code refuses more; k <= K - 1 for ours).

The released code spreads an all-zero residual uniformly over its whole vocabulary (LlamaGen's is
the codebook); we spread it over the model's image tokens, the only tokens a content cell may hold.
The `ours_*` residuals fall back to p there (the case needs p <= q' everywhere, i.e. never arises
after a rejection with normalised p and q).

For a deterministic draft (one-hot q) and the `ours_*` residuals the moved mass bounds the
total-variation shift by delta per token; for a stochastic draft (a Jacobi resample) each draft can
gain min(q(d), moved(d)), which may exceed delta. The official residuals remove more mass from the
neighbours than moved onto x, so delta no longer bounds their shift (measured in docs/READINGS.md).

Neighbourhoods are computed once per codebook in row blocks (a 32768-code book never materialises
a K x K matrix), only the top-(k+1) ids are kept, and the table is cached on disk keyed by the
codebook's hash. `zero_on` is the old spelling of `reading` (all = ours_all, moved = ours_moved).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from sjdbench.decoding.parts import PartConfig, Verifier
from sjdbench.decoding.processing import residual
from sjdbench.errors import UserError, check_at_least, check_choice

log = logging.getLogger(__name__)
RELEASED_K = 1000  # jadohu/LANTERN's k
RELEASED_BOOK = 8192  # the smallest codebook it was set for (Chameleon's VQGAN: Lumina-mGPT, Anole)
READINGS = ("official_llamagen", "official_lumina", "ours_all", "ours_moved")
OFFICIAL = ("official_llamagen", "official_lumina")
LEGACY_ZERO_ON = {"all": "ours_all", "moved": "ours_moved"}  # the old knob zero_on -> reading
_explained: set[str] = set()


@dataclass
class LanternConfig(PartConfig):
    k: Optional[int] = None  # neighbourhood search size; null: the model's (the released 1000, scaled to small books)
    delta: float = 0.1  # TV budget per token (> 1: LANTERN++ multiplicative bound)
    reading: str = "official_llamagen"  # official_llamagen | official_lumina | ours_all | ours_moved
    zero_on: Optional[str] = None  # old spelling of reading: all = ours_all, moved = ours_moved

    symbols = {"delta": "δ"}

    def __post_init__(self) -> None:
        """The old knob is folded into `reading` as the config is made (it changes the run id)."""
        if self.zero_on is not None:
            self._fold_zero_on()

    def check(self) -> None:
        if self.k is not None:
            check_at_least("k", self.k, 1)
        check_at_least("delta", self.delta, 0)
        check_choice("reading", self.reading, READINGS)

    def _fold_zero_on(self) -> None:
        """Accept the old knob: zero_on=all/moved is reading=ours_all/ours_moved (said once)."""
        if self.zero_on not in LEGACY_ZERO_ON:
            raise UserError(
                f"zero_on '{self.zero_on}' is unknown; it is the old spelling of reading: "
                f"use reading=ours_all (zero_on=all) or reading=ours_moved (zero_on=moved)"
            )
        reading = LEGACY_ZERO_ON[self.zero_on]
        if self.reading not in (reading, LanternConfig.reading):
            raise UserError(
                f"zero_on={self.zero_on} (the old spelling of reading={reading}) contradicts "
                f"reading={self.reading}; give reading only"
            )
        message = f"decoder.verifier.zero_on={self.zero_on} is the old spelling of decoder.verifier.reading={reading}"
        if message not in _explained:
            _explained.add(message)
            log.warning("%s; the default reading is now official_llamagen (the released rule)", message)
        self.reading, self.zero_on = reading, None

    def unused(self) -> set[str]:
        return {"zero_on"}  # folded into reading when the config is made


def model_k(k: int | None, codebook_size: int, reading: str = "official_llamagen") -> int:
    """The neighbourhood size in use on a book of `codebook_size` codes: the config's, else the released
    1000 at its share of an 8192-code book (see the module docstring). An explicit k must leave codes
    outside what the reading zeroes (k + 1 neighbours for the official readings, k for ours)."""
    if k is None:
        return max(1, min(RELEASED_K, round(RELEASED_K * codebook_size / RELEASED_BOOK)))
    most = codebook_size - (2 if reading in OFFICIAL else 1)
    if k > most:
        raise UserError(
            f"decoder.verifier.k={k} is more neighbours than the model's codebook of {codebook_size} codes "
            f"leaves the reading {reading}: give k <= {most}, or k=null for the model's value "
            f"({model_k(None, codebook_size)}: the released 1000 of 8192 codes at this book's size)"
        )
    return k


def neighbour_table(codebook: torch.Tensor, k: int, cache_dir: Path | None = None, key: str = "") -> torch.Tensor:
    """(K, k) ids of each code's k nearest other codes by L2 distance, nearest first.

    Built as jadohu/LANTERN's `entrypoints/generate_codebook.py` builds its table on the CPU: float32
    `cdist`, the diagonal set to infinity, and `topk` of all K - 1 other codes, of which we keep the
    first k. Distances tie in float32 (always for duplicated codes), and `topk` orders ties by its
    selection algorithm, which depends on how many it is asked for: ranking K - 1 and cutting, rather
    than asking for k, gives the released order. Rows are computed in blocks (each row's distances
    are the same bits as in the full matrix), so a 16384-code book never holds a K x K matrix."""
    codebook = codebook.float().cpu()
    K = codebook.shape[0]
    k = min(k, K - 1)
    path = None
    if cache_dir is not None:
        digest = hashlib.sha256(codebook.numpy().tobytes()).hexdigest()[:10]  # new weights, new table
        path = Path(cache_dir) / f"lantern-{key}-K{K}-k{k}-of{K - 1}-{digest}.pt"  # first k of the K - 1 ranked
        if path.exists():
            return torch.load(path)
    table = torch.empty(K, k, dtype=torch.int32 if K > 32767 else torch.int16)
    for start in range(0, K, 1024):
        block = torch.cdist(codebook[start : start + 1024], codebook)  # (b, K)
        rows = torch.arange(block.shape[0])
        block[rows, rows + start] = float("inf")  # a code is not its own neighbour
        ranked = block.topk(K - 1, dim=-1, largest=False).indices  # (b, K - 1): the released ranking
        table[start : start + 1024] = ranked[:, :k].to(table.dtype)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # parallel builders never share a temp file
        torch.save(table, tmp)
        tmp.replace(path)
        log.info("cached LANTERN neighbourhoods at %s", path)
    return table


class LanternVerifier(Verifier[LanternConfig]):
    """Relaxed acceptance over latent neighbours: lossy by design, every part's default (its shift is
    bounded, not zero)."""

    Config = LanternConfig

    def __init__(
        self, config: LanternConfig, neighbours: torch.Tensor, image_token_ids: torch.Tensor, vocab_size: int
    ) -> None:
        """neighbours: (K, >= k) code ids nearest first; the official readings zero k + 1 of them."""
        super().__init__(config)
        device = image_token_ids.device
        self.delta, self.reading = config.delta, config.reading
        self.k = min(model_k(config.k, neighbours.shape[0], config.reading), neighbours.shape[1])
        self.neighbour_tokens = image_token_ids[neighbours.long().to(device)]  # (K, >= k) token ids
        self.code_of = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
        self.code_of[image_token_ids] = torch.arange(image_token_ids.numel(), device=device)
        self.image_token_ids = image_token_ids

    @classmethod
    def build(cls, config: LanternConfig, model: Any = None, **children: Any) -> LanternVerifier:
        from sjdbench.paths import cache_dir

        codebook = model.codebook()
        k = model_k(config.k, codebook.shape[0], config.reading)
        table = neighbour_table(codebook, k + 1, cache_dir(), model.name)
        return cls(config, table, model.image_token_ids, model.vocab_size)

    def resolved(self) -> dict[str, Any]:
        """The k in use (the model's when the config leaves it null), recorded in env.json."""
        return {"lantern_k": self.k}

    def moved_mass(self, p: torch.Tensor, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(L,) mass moved onto each draft, and (L, k) the neighbours in A (ids, -1 where excluded)."""
        codes = self.code_of[drafts]  # (L,); -1 for forced tokens
        nbrs = self.neighbour_tokens[codes.clamp_min(0), : self.k]  # (L, k)
        p_nbr = p.gather(-1, nbrs)  # (L, k)
        p_d = p.gather(-1, drafts[:, None])  # (L, 1)
        bound = torch.full_like(p_d, self.delta) if self.delta <= 1 else (self.delta - 1) * p_d
        included = (p_nbr.cumsum(-1) <= bound) & (codes[:, None] >= 0)  # a prefix: cumsum is monotone
        moved = (p_nbr * included).sum(-1)
        return moved, torch.where(included, nbrs, -1)

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """p, q: (L, V); drafts, u: (L,) -> (L,) bool."""
        moved, _ = self.moved_mass(p, drafts)
        relaxed = p.gather(-1, drafts[:, None]).squeeze(-1) + moved
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        u = u.to(p.dtype)
        if self.reading in OFFICIAL:  # r <= p~/q, and a draft with q(x) <= 0 is never accepted
            return (q_d > 0) & (u * q_d <= relaxed)
        return u * q_d < relaxed

    def zeroed(self, p: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """(E, V) bool: the tokens the reading zeroes after rejecting each draft (E,) (p: (E, V)); sync-free."""
        _, included = self.moved_mass(p, drafts)
        included = included >= 0  # (E, k) A
        codes = self.code_of[drafts]  # (E,)
        width = min(self.k + 1, self.neighbour_tokens.shape[1])
        nbrs = self.neighbour_tokens[codes.clamp_min(0), :width]  # (E, k+1) nearest first
        if self.reading == "ours_moved":
            mask = torch.cat([included, included.new_zeros(included.shape[0], width - self.k)], dim=-1)
        elif self.reading == "ours_all":
            mask = (torch.arange(width, device=p.device) < self.k)[None] & (codes >= 0)[:, None]
        else:  # official: all k + 1, and only when the moved set is non-empty
            mask = ((codes >= 0) & included.any(-1))[:, None].expand(-1, width)
        return torch.zeros(p.shape, dtype=torch.bool, device=p.device).scatter(-1, nbrs, mask)

    def replacement(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """(E, V) distribution of the token emitted where each draft (E,) was rejected (p, q: (E, V))."""
        zeroed = self.zeroed(p, drafts)
        if self.reading not in OFFICIAL:
            return residual(p, q.masked_fill(zeroed, 0.0))
        if self.reading == "official_lumina":
            res = (p.masked_fill(zeroed, 0.0) - q).clamp_min(0)
        else:
            res = (p - q.masked_fill(zeroed, 0.0)).clamp_min(0)
        total = res.sum(-1, keepdim=True)
        uniform = torch.zeros_like(p[0]).index_fill_(0, self.image_token_ids, 1.0 / self.image_token_ids.numel())
        emitted = torch.where(total > 0, res / total.clamp_min(1e-30), uniform)  # all-zero residual: uniform
        q_d = q.gather(-1, drafts[:, None])  # (E, 1)
        return torch.where(q_d <= 0, p, emitted)  # the released loop skips a draft with q(x) <= 0
