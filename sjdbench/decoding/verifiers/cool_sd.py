"""`cool_sd` — annealed relaxed acceptance in the spirit of COOL-SD (Li et al., AAAI 2026, arXiv
2601.09212). Lossy, with a stated bound. Our reading of the paper's two ideas; no code is released.

1. Relaxation with a TV budget. A draft x at depth d below its root (the d-th draft of a chain) is
   accepted with probability a_d(x) = min(1, p(x)/q(x) + w_d): exact speculative sampling's test
   plus w_d. Rejected, the slot emits from r = norm([p - q a_d]_+), the resampling distribution
   that makes the emitted token's distribution o = q a_d + (1 - sum q a_d) r closest to p: with it,
   TV(o, p) = sum_y [q(y) a_d(y) - p(y)]_+ = sum_{q > p} min(q - p, w_d q) <= w_d, whatever q (a
   Jacobi resample or a one-hot draft). For this family of a_d the optimal r equals the exact
   verifier's residual norm([p - q]_+) (where p > q, a_d = 1); it is written as the general rule so
   that the test checks the identity rather than assuming it.
2. Annealing along the draft. w_d = omega * decay^(d - 1): loosest at the first draft, stricter
   deeper (the paper's perturbation argument: an early relaxation costs less than one after several
   accepted drafts). The loop hands the verifier each draft's depth (`reads_depth`).

With omega = 0 this is the exact verifier. A chain of D drafts moves the sequence's distribution by
at most sum_d w_d <= omega / (1 - decay) (a hybrid argument over positions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from sjdbench.decoding.parts import PartConfig, Verifier
from sjdbench.decoding.processing import residual
from sjdbench.errors import UserError


@dataclass
class CoolSDConfig(PartConfig):
    omega: float = 0.2  # w_1: the TV budget of the first draft below a root
    decay: float = 0.8  # w_d = omega * decay^(d - 1): each deeper draft is held closer to p

    symbols: ClassVar[dict[str, str]] = {"omega": "ω", "decay": "γ"}

    def check(self) -> None:
        if not 0 <= self.omega <= 1:
            raise UserError(f"omega must be in [0, 1], got {self.omega}")
        if not 0 < self.decay <= 1:
            raise UserError(f"decay must be in (0, 1], got {self.decay}")


class CoolSDVerifier(Verifier[CoolSDConfig]):
    Config = CoolSDConfig
    reads_depth: ClassVar[bool] = True

    @classmethod
    def lossless(cls, config: CoolSDConfig, **children: bool) -> bool:
        """Exact speculative sampling when nothing is relaxed; otherwise within its TV budget."""
        return config.omega == 0

    def budget(self, depth: torch.Tensor | None, rows: int) -> torch.Tensor:
        """(T,) w_d of drafts at these depths (>= 1; None: every draft at depth 1)."""
        c = self.config
        if depth is None:
            return torch.full((rows,), c.omega, dtype=torch.float64)
        return c.omega * c.decay ** (depth.clamp_min(1) - 1).to(torch.float64)

    def accept(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor, depth: torch.Tensor | None = None
    ) -> torch.Tensor:
        """u < p(x)/q(x) + w_d, written without a division: u q(x) < p(x) + w_d q(x)."""
        p_d = p.gather(-1, drafts[:, None]).squeeze(-1)
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        w = self.budget(depth, len(drafts)).to(device=p.device, dtype=p.dtype)
        return u.to(p.dtype) * q_d < p_d + w * q_d

    def replacement(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, depth: torch.Tensor | None = None
    ) -> torch.Tensor:
        """norm([p - q a_d]_+), q a_d = min(q, p + w_d q) for every token (module docstring)."""
        w = self.budget(depth, len(drafts)).to(device=p.device, dtype=p.dtype)[:, None]
        return residual(p, torch.minimum(q, p + w * q))
