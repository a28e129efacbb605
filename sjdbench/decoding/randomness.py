"""Per-sample random streams for batched decoding.

Every sample of a batch owns one `torch.Generator` (seeded from the run seed, the prompt and the
sample index). A batched tensor groups its rows by sample; a draw over it takes each sample's numbers
from that sample's own generator, in row order, with exactly the calls the sample would make decoded
alone. So a sample's tokens do not depend on which other samples share its batch, wherever the batched
forward returns the same logits as the unbatched one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class Draws:
    """Uniform draws for R rows that belong to samples: sample i owns `counts[i]` consecutive rows."""

    def __init__(self, generators: Sequence[torch.Generator], counts: Sequence[int], device: torch.device) -> None:
        self.generators, self.counts, self.device = list(generators), [int(c) for c in counts], device

    @staticmethod
    def single(generator: torch.Generator, rows: int, device: torch.device) -> Draws:
        return Draws([generator], [rows], device)

    @property
    def rows(self) -> int:
        return sum(self.counts)

    def uniform(self, *tail: int) -> torch.Tensor:
        """(R, *tail) uniforms in [0, 1): one `torch.rand` per sample that owns rows."""
        parts = [
            torch.rand(count, *tail, generator=generator, device=self.device)
            for generator, count in zip(self.generators, self.counts)
            if count
        ]
        if len(parts) == 1:
            return parts[0]
        return torch.cat(parts) if parts else torch.zeros(0, *tail, device=self.device)

    def split(self, counts: Sequence[Sequence[int]]) -> list[Draws]:
        """Several consecutive draws over different row groups: one Draws per group."""
        return [Draws(self.generators, group, self.device) for group in counts]
