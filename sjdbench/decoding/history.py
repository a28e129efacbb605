"""Per-position history of processed distributions across Jacobi iterations, for every sample.

Window slots shift after every commit (and a tree or several rows in flight observe positions far
apart), so history is keyed by the absolute segment position. Each sample has a ring of `size`
entries indexed by position modulo `size`, with `depth` iterations per entry (circular by observation
count): a topology observes its undecided positions within a span of `Topology.span` positions, so a
live position's entry is never taken by another one, and an entry whose owner changed starts counting
afresh. The entries of all samples are stored flat (sample * size + position % size), so every
operation is a few 1-D index ops on the device for all samples at once: no host bookkeeping.

Growth is measured over a number of observations the caller gives (`DecodeSettings.growth_observations`:
the reading of N is decided there). Growth of one token at a position (what the statistics need for
every tested draft) reads that token's last probabilities only; the whole (T, V) mask is formed only
for a proposal that reads it (VP).
"""

from __future__ import annotations

import torch


class ProbabilityHistory:
    def __init__(
        self, batch: int, size: int, depth: int, vocab_size: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.size, self.depth, self.vocab_size = size, depth, vocab_size
        entries = batch * size
        self.probs = torch.zeros(entries * depth, vocab_size, dtype=dtype, device=device)  # (B*size*depth, V)
        self.count = torch.zeros(entries, dtype=torch.long, device=device)  # observations so far
        self.owner = torch.full((entries,), -1, dtype=torch.long, device=device)  # position of each entry
        self._back = torch.arange(depth, device=device)

    def _entries(self, samples: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return samples * self.size + positions % self.size

    def locate(self, samples: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(entries (T,), observations so far (T,)) of each (sample, position): what `grew` reads."""
        entries = self._entries(samples, positions)
        return entries, self.count.index_select(0, entries) * (self.owner.index_select(0, entries) == positions)

    def push(self, samples: torch.Tensor, positions: torch.Tensor, probs: torch.Tensor) -> None:
        """Record this iteration's distributions probs (T, V) of samples (T,) at positions (T,), one
        per (sample, position)."""
        entries = self._entries(samples, positions)
        count = self.count.index_select(0, entries) * (self.owner.index_select(0, entries) == positions)
        self.probs.index_copy_(0, entries * self.depth + count % self.depth, probs.to(self.probs.dtype))
        self.owner.index_copy_(0, entries, positions)
        self.count.index_copy_(0, entries, count + 1)

    def observations(self, samples: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(T,) observations so far of each (sample, position)."""
        return self.locate(samples, positions)[1]

    def last(self, samples: torch.Tensor, positions: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The last k distributions, newest first: (T, k, V), and validity (T, k)."""
        k = min(k, self.depth)
        entries = self._entries(samples, positions)
        count = self.observations(samples, positions)  # (T,)
        back = self._back[:k]  # (k,)
        slots = entries[:, None] * self.depth + (count[:, None] - 1 - back) % self.depth  # (T, k)
        return self.probs[slots], count[:, None] > back

    def growth_mask(self, samples: torch.Tensor, positions: torch.Tensor, observations: int) -> torch.Tensor:
        """M (T, V): the token's probability rose strictly from each of the last `observations`
        observations to the next. Positions with fewer observations get M = 0."""
        if observations < 2 or observations > self.depth:
            return torch.zeros(positions.shape[0], self.vocab_size, dtype=torch.bool, device=positions.device)
        recent, valid = self.last(samples, positions, observations)  # (T, observations, V) newest first
        rising = (recent[:, :-1] > recent[:, 1:]).all(dim=1)  # (T, V)
        return rising & valid[:, -1:]

    def grew(self, where: tuple[torch.Tensor, torch.Tensor], tokens: torch.Tensor, observations: int) -> torch.Tensor:
        """(T,) M for one token (T,) at each located (sample, position) (`locate`): `growth_mask(...)[i,
        tokens[i]]`, reading that token's last `observations` probabilities only."""
        entries, count = where
        if observations < 2 or observations > self.depth:
            return torch.zeros(entries.shape[0], dtype=torch.bool, device=entries.device)
        back = self._back[:observations]
        slots = entries[:, None] * self.depth + (count[:, None] - 1 - back) % self.depth  # (T, observations)
        recent = self.probs.view(-1).take(slots * self.vocab_size + tokens[:, None])  # (T, observations) newest first
        return (recent[:, :-1] > recent[:, 1:]).all(dim=1) & (count >= observations)

    def trajectory(self, sample: int, position: int, token: int) -> list[float]:
        """Probabilities of `token` at `position` of one sample, oldest first, over the kept iterations."""
        entry = sample * self.size + position % self.size
        if int(self.owner[entry]) != position:
            return []
        count = int(self.count[entry])
        kept = min(count, self.depth)
        slots = [entry * self.depth + (count - kept + i) % self.depth for i in range(kept)]
        return self.probs[slots, token].round(decimals=5).tolist()

    def reset(self, sample: int) -> None:
        self.owner[sample * self.size : (sample + 1) * self.size] = -1

    def retain(self, samples: torch.Tensor) -> None:
        """Keep these samples' entries, in this order."""
        entries = (samples[:, None] * self.size + torch.arange(self.size, device=samples.device)).reshape(-1)
        deep = (entries[:, None] * self.depth + self._back).reshape(-1)
        self.probs, self.count, self.owner = self.probs[deep], self.count[entries], self.owner[entries]
