"""Per-absolute-position history of processed distributions across Jacobi iterations.

Window slots shift after every commit, so history is keyed by the absolute segment position, in a
ring of `n_rows` rows (position % n_rows; n_rows >= window so live positions never collide) and
`depth` iterations per position (circular by observation count).
"""
from __future__ import annotations

import torch


class ProbabilityHistory:
    def __init__(self, n_rows: int, depth: int, vocab_size: int, device: torch.device) -> None:
        self.n_rows, self.depth = n_rows, depth
        self.probs = torch.zeros(n_rows, depth, vocab_size, device=device)  # (R, H, V)
        self.owner = torch.full((n_rows,), -1, dtype=torch.long, device=device)  # position owning row
        self.count = torch.zeros(n_rows, dtype=torch.long, device=device)  # observations so far

    def push(self, positions: torch.Tensor, probs: torch.Tensor) -> None:
        """Record this iteration's distributions probs (L, V) at positions (L,)."""
        rows = positions % self.n_rows
        fresh = self.owner[rows] != positions
        self.count[rows] = torch.where(fresh, 0, self.count[rows])
        self.owner[rows] = positions
        self.probs[rows, self.count[rows] % self.depth] = probs
        self.count[rows] += 1

    def recent(self, positions: torch.Tensor, back: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Distributions `back` iterations ago (0 = the latest push): (L, V) and a validity mask (L,)."""
        rows = positions % self.n_rows
        count = self.count[rows]
        valid = (count > back) & (self.owner[rows] == positions) & (back < self.depth)
        slot = (count - 1 - back) % self.depth
        return self.probs[rows, slot], valid

    def observations(self, positions: torch.Tensor) -> torch.Tensor:
        rows = positions % self.n_rows
        return torch.where(self.owner[rows] == positions, self.count[rows], 0)

    def growth_mask(self, positions: torch.Tensor, steps: int, strict_increases: bool = True) -> torch.Tensor:
        """M (L, V): token probability rose strictly over the last `steps` iterations.

        strict_increases=True: N strict increases, needs N+1 observations (our default reading).
        strict_increases=False: N observations (N-1 increases), the other reading of the paper.
        Positions with too few observations get M = 0.
        """
        n_obs = steps + 1 if strict_increases else steps
        newer, valid = self.recent(positions, 0)
        mask = torch.ones_like(newer, dtype=torch.bool) & valid[:, None]
        for back in range(1, n_obs):
            older, ok = self.recent(positions, back)
            mask &= (older < newer) & ok[:, None]
            newer = older
        if n_obs <= 1:
            mask &= False
        return mask

    def trajectory(self, position: int, token: int) -> list[float]:
        """Probabilities of `token` at `position`, oldest first, over the kept iterations."""
        row = position % self.n_rows
        if int(self.owner[row]) != position:
            return []
        count = int(self.count[row])
        kept = min(count, self.depth)
        slots = [(count - kept + i) % self.depth for i in range(kept)]
        return [round(float(self.probs[row, s, token]), 5) for s in slots]
