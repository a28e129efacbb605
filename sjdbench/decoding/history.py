"""Per-absolute-position history of processed distributions across Jacobi iterations.

Window slots shift after every commit, so history is keyed by the absolute segment position, in a
ring of `n_rows` rows (position % n_rows; n_rows >= window so live positions never collide) and
`depth` iterations per position (circular by observation count). Reads gather the last k
distributions of a whole window in one indexing op.
"""
from __future__ import annotations

import torch


class ProbabilityHistory:
    def __init__(self, n_rows: int, depth: int, vocab_size: int, device: torch.device) -> None:
        self.n_rows, self.depth = n_rows, depth
        self.probs = torch.zeros(n_rows, depth, vocab_size, device=device)  # (R, H, V)
        self.owner = torch.full((n_rows,), -1, dtype=torch.long, device=device)  # position owning row
        self.count = torch.zeros(n_rows, dtype=torch.long, device=device)  # observations so far
        self._back = torch.arange(depth, device=device)

    def push(self, positions: torch.Tensor, probs: torch.Tensor) -> None:
        """Record this iteration's distributions probs (L, V) at positions (L,)."""
        rows = positions % self.n_rows
        count = torch.where(self.owner[rows] != positions, 0, self.count[rows])
        self.owner[rows] = positions
        self.probs[rows, count % self.depth] = probs
        self.count[rows] = count + 1

    def observations(self, positions: torch.Tensor) -> torch.Tensor:
        rows = positions % self.n_rows
        return torch.where(self.owner[rows] == positions, self.count[rows], 0)

    def last(self, positions: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The last k distributions, newest first: (L, k, V), and validity (L, k)."""
        k = min(k, self.depth)
        rows = positions % self.n_rows
        count = self.observations(positions)  # (L,)
        back = self._back[:k]  # (k,)
        slots = (count[:, None] - 1 - back) % self.depth  # (L, k)
        return self.probs[rows[:, None], slots], count[:, None] > back

    def growth_mask(self, positions: torch.Tensor, steps: int, strict_increases: bool = True) -> torch.Tensor:
        """M (L, V): token probability rose strictly over the last `steps` iterations.

        strict_increases=True: N strict increases, needs N+1 observations (our default reading).
        strict_increases=False: N observations (N-1 increases), the other reading of the paper.
        Positions with too few observations get M = 0.
        """
        n_obs = steps + 1 if strict_increases else steps
        if n_obs < 2 or n_obs > self.depth:
            return torch.zeros(positions.shape[0], self.probs.shape[-1], dtype=torch.bool, device=positions.device)
        recent, valid = self.last(positions, n_obs)  # (L, n_obs, V) newest first
        rising = (recent[:, :-1] > recent[:, 1:]).all(dim=1)  # (L, V)
        return rising & valid[:, -1:]

    def trajectory(self, position: int, token: int) -> list[float]:
        """Probabilities of `token` at `position`, oldest first, over the kept iterations."""
        row = position % self.n_rows
        if int(self.owner[row]) != position:
            return []
        count = int(self.count[row])
        kept = min(count, self.depth)
        slots = [(count - kept + i) % self.depth for i in range(kept)]
        return self.probs[row, slots, token].round(decimals=5).tolist()
