"""`gsd` — grouped speculative decoding (So et al., ICCV 2025). Lossy.

Accept draft x if u < sum_C p / sum_C q over a dynamic group C(x) of tokens near x in rank, in
probability (|p(y) - p(x)| < p_thr) and in embedding (squared L2 distance < d_thr between the model's
input embeddings of y and x). Rejection draws the token-level residual norm([p - q]_+). Two readings
of "near x in rank" (`reading`):

- `official` (default): the rule of the released code (junhyukso/GSD,
  `scheduler/jacobi_iteration_lumina_mgpt.py`, `SpeculativeSampler.__call__`). Sort the processed
  distribution *ascending* and take the slice [c - 7, c + 7) around the draft's place c in that
  order: its 7 less likely neighbours, the draft, and its 6 more likely ones (14 tokens; the paper's
  G plays no part). The slice follows Python's slicing rules: cut short at the most likely end, and
  empty when the draft is among the 7 least likely tokens (a negative start wraps past the end on
  any vocabulary of 14 tokens or more), in which case the released code catches the error of the
  empty reduction and applies the plain SJD test min(1, p(x)/q(x)). Its embedding-distance table
  covers only the first 10,000 token ids: when any id in the slice exceeds 10,000 the distance
  filter is switched off (only the probability filter applies), and when the largest id is exactly
  10,000 the lookup fails and the plain test applies again. The draft is not forced into its group:
  it belongs to it through the filters (gap 0 < p_thr, distance 0 < d_thr). Ties in the sort
  (tokens of probability 0) are ordered by token id.
- `ours`: the paper's description: the G tokens around x's rank (G/2 each side) in the descending
  order, the window shifted to stay inside the vocabulary, x always in C.

With C = {x} both are exactly SJD's rule.

`d_thr` is an absolute squared distance in the units of each model's embedding table: null takes
the model's own value (`adapter.gsd_d_thr`; the paper's 0.5 for Lumina-mGPT-like models), because a
universal value would silently form no groups on a model whose codes lie farther apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import torch

from sjdbench.decoding.parts import PartConfig, Verifier
from sjdbench.decoding.processing import residual
from sjdbench.errors import UserError, check_at_least, check_choice

PAPER_D_THR = 0.5  # So et al.'s value on Lumina-mGPT's token embeddings (also the released code's)
READINGS = ("official", "ours")
OFFICIAL_BELOW = 7  # the released slice [c - 7, c + 7) of the ascending sort
OFFICIAL_ABOVE = 7
OFFICIAL_ID_LIMIT = 10_000  # the released distance table holds token ids 0 .. 9,999


@dataclass
class GSDConfig(PartConfig):
    reading: str = "official"  # official: the released 14-token slice | ours: G tokens around the rank
    group_size: int = 50  # G (reading=ours only)
    p_thr: float = 0.15  # a group member's probability is within this of the draft's: |p(y) - p(x)| < p_thr
    d_thr: Optional[float] = None  # null: the model's value (adapter.gsd_d_thr)

    symbols: ClassVar[dict[str, str]] = {"group_size": "G"}

    def check(self) -> None:
        check_choice("reading", self.reading, READINGS)
        check_at_least("group_size", self.group_size, 1, "G tokens around the draft's rank")
        if not 0 <= self.p_thr <= 1:  # above 1 no token is grouped: GSD would silently be SJD
            raise UserError(f"p_thr={self.p_thr} is out of range: it is a probability threshold; use 0..1")
        if self.d_thr is not None and self.d_thr <= 0:
            raise UserError(f"d_thr must be > 0 (or null for the model's value), got {self.d_thr}")

    def unused(self) -> set[str]:
        return {"group_size"} if self.reading == "official" else set()


def model_d_thr(config: GSDConfig, adapter: Any) -> float:
    """The threshold in use: the config's, else the model's (in its embeddings' units)."""
    if config.d_thr is not None:
        return float(config.d_thr)
    return float(adapter.gsd_d_thr)


@dataclass
class Groups:
    """Each draft's group: candidate ids, which of them count, and whether the plain test applies."""

    tokens: torch.Tensor  # (L, C) candidate token ids (any valid id where not a member)
    member: torch.Tensor  # (L, C) bool
    plain: torch.Tensor  # (L,) bool: no group; the plain min(1, p/q) test decides


class GSDVerifier(Verifier[GSDConfig]):
    """Grouped acceptance: lossy by design (every part's default)."""

    Config = GSDConfig

    def __init__(
        self, config: GSDConfig, embeddings: torch.Tensor, d_thr: float | None = None, id_limit: int = OFFICIAL_ID_LIMIT
    ) -> None:
        """embeddings (V, D): the model's input embedding of every token id; d_thr: the threshold in
        their units (the config's, else this, else the paper's 0.5)."""
        super().__init__(config)
        self.embeddings = embeddings.float()  # (V, D)
        self.group_size, self.p_thr, self.reading = config.group_size, config.p_thr, config.reading
        self.d_thr = float(config.d_thr if config.d_thr is not None else (d_thr if d_thr is not None else PAPER_D_THR))
        self.id_limit = id_limit

    @classmethod
    def build(cls, config: GSDConfig, model: Any = None, **children: Any) -> GSDVerifier:
        embeddings = model.token_embeddings().to(model.device)
        return cls(config, embeddings, model_d_thr(config, model))

    def resolved(self) -> dict[str, Any]:
        """Settings decided at build time, recorded in env.json."""
        return {"gsd_d_thr": self.d_thr}

    def _distance(self, cand: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """(L, C) squared L2 distance between the input embeddings of each candidate and its draft."""
        return (self.embeddings[cand] - self.embeddings[drafts][:, None]).pow(2).sum(-1)

    def _p_gap(self, p: torch.Tensor, cand: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        return (p.gather(-1, cand) - p.gather(-1, drafts[:, None])).abs()  # (L, C)

    def groups(self, p: torch.Tensor, drafts: torch.Tensor) -> Groups:
        """The group of each draft (p: (L, V), drafts: (L,)) under the configured reading."""
        return self._official(p, drafts) if self.reading == "official" else self._ours(p, drafts)

    def group(self, p: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """(L, C) token ids of each draft's group, -1 where not a member (rows whose plain test
        applies list their would-be group; see `groups().plain`)."""
        groups = self.groups(p, drafts)
        return torch.where(groups.member, groups.tokens, -1)

    def _ours(self, p: torch.Tensor, drafts: torch.Tensor) -> Groups:
        L, V = p.shape
        order = p.argsort(dim=-1, descending=True)  # (L, V) ranks -> tokens
        rank = torch.empty_like(order).scatter_(-1, order, torch.arange(V, device=p.device).expand(L, V))
        span = min(self.group_size, V - 1)
        start = (rank.gather(-1, drafts[:, None]) - span // 2).clamp(0, V - 1 - span)  # (L, 1)
        cand = order.gather(-1, start + torch.arange(span + 1, device=p.device))  # (L, G+1)
        keep = (self._p_gap(p, cand, drafts) < self.p_thr) & (self._distance(cand, drafts) < self.d_thr)
        member = keep | (cand == drafts[:, None])
        return Groups(cand, member, torch.zeros(L, dtype=torch.bool, device=p.device))

    def _official(self, p: torch.Tensor, drafts: torch.Tensor) -> Groups:
        L, V = p.shape
        width = OFFICIAL_BELOW + OFFICIAL_ABOVE
        order = p.argsort(dim=-1, stable=True)  # (L, V) ascending; ties (p = 0) by token id
        place = torch.empty_like(order).scatter_(-1, order, torch.arange(V, device=p.device).expand(L, V))
        c = place.gather(-1, drafts[:, None]).squeeze(-1)  # (L,) the draft's place in the ascending order
        # Python's slice [c - 7 : c + 7]: a negative start counts from the end (and stops at 0)
        start = c - OFFICIAL_BELOW
        start = torch.where(start < 0, start + V, start).clamp_min(0)
        stop = (c + OFFICIAL_ABOVE).clamp_max(V)
        count = (stop - start).clamp(0, width)  # (L,) slice length: 0 = empty
        offsets = torch.arange(width, device=p.device)
        in_slice = offsets[None] < count[:, None]  # (L, 14)
        cand = order.gather(-1, (start[:, None] + offsets).clamp_max(V - 1))  # (L, 14)
        largest = torch.where(in_slice, cand, -1).max(-1).values  # (L,)
        table_rows = min(V, self.id_limit)
        lookup_fails = (largest >= table_rows) & (largest <= self.id_limit)  # an IndexError, caught
        use_distance = largest <= self.id_limit
        close = (self._distance(cand, drafts) < self.d_thr) | ~use_distance[:, None]
        member = in_slice & (self._p_gap(p, cand, drafts) < self.p_thr) & close
        return Groups(cand, member, (count == 0) | lookup_fails)

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """p, q: (L, V); drafts, u: (L,) -> (L,) bool. u * sum_C q < sum_C p is u < min(1, ratio)
        without a division (0/0 rejects, x/0 accepts, as the released code's clamp and NaN do)."""
        groups = self.groups(p, drafts)
        p_sum = (p.gather(-1, groups.tokens) * groups.member).sum(-1)
        q_sum = (q.gather(-1, groups.tokens) * groups.member).sum(-1)
        p_d = p.gather(-1, drafts[:, None]).squeeze(-1)
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        p_sum = torch.where(groups.plain, p_d, p_sum)
        q_sum = torch.where(groups.plain, q_d, q_sum)
        return u.to(p.dtype) * q_sum < p_sum

    def replacement(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        return residual(p, q)
