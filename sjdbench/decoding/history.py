"""Per-position history of processed distributions across Jacobi iterations, for every sample.

Window slots shift after every commit (and a tree or several rows in flight observe positions far
apart), so history is keyed by the absolute segment position. Each sample has a ring of `size` rows
indexed by position modulo `size` with `depth` iterations per row (circular by observation count): a
topology observes its undecided positions within a span of `Topology.span` positions, so a live
position's row is never taken by another one, and a row whose owner changed starts counting afresh.
Every operation is a few indexing ops on the device for all samples at once: no host bookkeeping.
"""

from __future__ import annotations

import torch


class ProbabilityHistory:
    def __init__(
        self, batch: int, size: int, depth: int, vocab_size: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.size, self.depth = size, depth
        self.probs = torch.zeros(batch, size, depth, vocab_size, dtype=dtype, device=device)  # (B, R, H, V)
        self.count = torch.zeros(batch, size, dtype=torch.long, device=device)  # observations so far
        self.owner = torch.full((batch, size), -1, dtype=torch.long, device=device)  # position of each row
        self._back = torch.arange(depth, device=device)

    def push(self, samples: torch.Tensor, positions: torch.Tensor, probs: torch.Tensor) -> None:
        """Record this iteration's distributions probs (T, V) of samples (T,) at positions (T,), one
        row per (sample, position)."""
        rows = positions % self.size
        new = self.owner[samples, rows] != positions
        count = torch.where(new, 0, self.count[samples, rows])
        self.owner[samples, rows] = positions
        self.probs[samples, rows, count % self.depth] = probs.to(self.probs.dtype)
        self.count[samples, rows] = count + 1

    def observations(self, samples: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(T,) observations so far of each (sample, position)."""
        rows = positions % self.size
        return torch.where(self.owner[samples, rows] == positions, self.count[samples, rows], 0)

    def last(self, samples: torch.Tensor, positions: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The last k distributions, newest first: (T, k, V), and validity (T, k)."""
        k = min(k, self.depth)
        rows = positions % self.size
        count = self.observations(samples, positions)  # (T,)
        back = self._back[:k]  # (k,)
        slots = (count[:, None] - 1 - back) % self.depth  # (T, k)
        return self.probs[samples[:, None], rows[:, None], slots], count[:, None] > back

    def growth_mask(
        self, samples: torch.Tensor, positions: torch.Tensor, steps: int, strict_increases: bool = True
    ) -> torch.Tensor:
        """M (T, V): the token's probability rose strictly over the last `steps` iterations.

        strict_increases=True: N strict increases, needs N+1 observations (our default reading).
        strict_increases=False: N observations (N-1 increases), the other reading of the paper.
        Positions with too few observations get M = 0.
        """
        n_obs = steps + 1 if strict_increases else steps
        if n_obs < 2 or n_obs > self.depth:
            return torch.zeros(positions.shape[0], self.probs.shape[-1], dtype=torch.bool, device=positions.device)
        recent, valid = self.last(samples, positions, n_obs)  # (T, n_obs, V) newest first
        rising = (recent[:, :-1] > recent[:, 1:]).all(dim=1)  # (T, V)
        return rising & valid[:, -1:]

    def trajectory(self, sample: int, position: int, token: int) -> list[float]:
        """Probabilities of `token` at `position` of one sample, oldest first, over the kept iterations."""
        row = position % self.size
        if int(self.owner[sample, row]) != position:
            return []
        count = int(self.count[sample, row])
        kept = min(count, self.depth)
        slots = [(count - kept + i) % self.depth for i in range(kept)]
        return self.probs[sample, row, slots, token].float().round(decimals=5).tolist()

    def reset(self, sample: int) -> None:
        self.owner[sample] = -1

    def retain(self, samples: torch.Tensor) -> None:
        self.probs, self.count, self.owner = self.probs[samples], self.count[samples], self.owner[samples]
