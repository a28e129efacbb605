"""What the loop keeps per draft, and the drafts waiting between iterations.

`Drafts` is the per-draft state as one structure: every field has the draft axis first, and the
fields are listed once (the dataclass), so selecting, concatenating or storing drafts is one generic
operation whatever the topology (a chain's window, a tree's siblings, several rows' drafts).

`PendingDrafts` holds, for every sample of a batch, the drafts waiting at undecided positions. It is
a ring indexed by position modulo its size: a topology keeps its undecided drafts within a span of
positions (`Topology.span`), so a position's entry is never taken by another live position, lookups
and stores are one indexing op on the device, and the host keeps only which position each entry
holds (no dict per iteration, no Python loop over the window).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.decoding.processing import one_hot


@dataclass
class Drafts:
    """S drafts: where each stands, its token, the distribution it was drawn from, and what the
    statistics need to know about how it was made."""

    positions: np.ndarray  # (S,) int64 host: the segment position each draft is for
    tokens: torch.Tensor  # (S,) long
    refs: torch.Tensor  # (S, V) reference q: the distribution the draft was drawn from
    fresh: np.ndarray  # (S,) bool host: drafted without model information (an init, a uniform sibling)
    grew: torch.Tensor  # (S,) bool: the consecutive-growth mask M on the token when it was proposed
    eligible: torch.Tensor  # (S,) bool: its position had enough observations for M

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def select(self, index: np.ndarray) -> Drafts:
        """The drafts at `index` (k,), in that order."""
        index = np.asarray(index, dtype=np.int64)
        if index.size == len(self) and (index == np.arange(index.size)).all():
            return self
        device_index = torch.as_tensor(index, device=self.tokens.device)
        return Drafts(**{f: _take(getattr(self, f), index, device_index) for f in FIELDS})

    def span(self, start: int, stop: int) -> Drafts:
        """The drafts start .. stop - 1, as views (one sample's drafts out of a batch's, in `BatchDecode.plan`)."""
        return Drafts(**{f: getattr(self, f)[start:stop] for f in FIELDS})

    @staticmethod
    def cat(parts: list[Drafts]) -> Drafts:
        parts = [p for p in parts if len(p)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        return Drafts(**{f: _join([getattr(p, f) for p in parts]) for f in FIELDS})

    @staticmethod
    def new(
        positions: np.ndarray,
        tokens: torch.Tensor,
        refs: torch.Tensor | None,
        vocab_size: int,
        fresh: bool | np.ndarray,
        grew: torch.Tensor | None = None,
        eligible: torch.Tensor | None = None,
    ) -> Drafts:
        """New drafts; a missing reference is one-hot (a deterministic draft), missing growth flags False."""
        no = torch.zeros_like(tokens, dtype=torch.bool)
        positions = np.asarray(positions, dtype=np.int64)
        return Drafts(
            positions,
            tokens,
            one_hot(tokens, vocab_size) if refs is None else refs,
            np.broadcast_to(np.asarray(fresh, dtype=bool), positions.shape).copy(),
            no if grew is None else grew,
            no if eligible is None else eligible,
        )


FIELDS = tuple(f.name for f in dataclasses.fields(Drafts))


def _take(value, host_index: np.ndarray, device_index: torch.Tensor):
    return value[host_index] if isinstance(value, np.ndarray) else value[device_index]


def _join(values: list):
    return np.concatenate(values) if isinstance(values[0], np.ndarray) else torch.cat(values)


class PendingDrafts:
    """The waiting drafts of B samples: a ring of `size` entries per sample, entry = position % size.

    Device fields mirror `Drafts`, stored flat by entry (sample * size + position % size); the host
    keeps the position each entry holds (-1: empty) and the fresh flag, which the statistics read on
    the host."""

    def __init__(self, batch: int, size: int, vocab_size: int, device: torch.device, dtype: torch.dtype) -> None:
        self.size, self.batch = size, batch
        self.position = np.full((batch, size), -1, dtype=np.int64)
        self.fresh = np.zeros((batch, size), dtype=bool)
        self.tokens = torch.zeros(batch * size, dtype=torch.long, device=device)
        self.refs = torch.zeros(batch * size, vocab_size, dtype=dtype, device=device)
        self.flags = torch.zeros(batch * size, 2, dtype=torch.bool, device=device)  # grew, eligible

    def missing(self, sample: int | np.ndarray, positions: np.ndarray) -> np.ndarray:
        """(k,) bool: no draft waits at these positions (of one sample, or of samples (k,), one each)."""
        return self.position[sample, positions % self.size] != positions

    def tokens_at(self, sample: int, positions: np.ndarray) -> torch.Tensor:
        """(k,) the tokens of the drafts waiting at these positions (every one must be present)."""
        index = torch.as_tensor(sample * self.size + positions % self.size, device=self.tokens.device)
        return self.tokens.index_select(0, index)

    def get(self, sample: int | np.ndarray, positions: np.ndarray) -> Drafts:
        """The drafts waiting at these positions (of one sample, or of samples (k,), one each; every one
        must be present)."""
        entry = positions % self.size
        index = torch.as_tensor(sample * self.size + entry, device=self.tokens.device)
        flags = self.flags.index_select(0, index)
        return Drafts(
            positions,
            self.tokens.index_select(0, index),
            self.refs.index_select(0, index),
            self.fresh[sample, entry],
            flags[:, 0],
            flags[:, 1],
        )

    def put(self, samples: np.ndarray, drafts: Drafts) -> None:
        """Store drafts (S,) for samples (S,) (one sample per draft), replacing what waited there."""
        if not len(drafts):
            return
        entry = drafts.positions % self.size
        self.position[samples, entry] = drafts.positions
        self.fresh[samples, entry] = drafts.fresh
        index = torch.as_tensor(samples * self.size + entry, device=self.tokens.device)
        self.tokens.index_copy_(0, index, drafts.tokens)
        self.refs.index_copy_(0, index, drafts.refs.to(self.refs.dtype))
        self.flags.index_copy_(0, index, torch.stack([drafts.grew, drafts.eligible], dim=-1))

    def clear(self, sample: int) -> None:
        self.position[sample] = -1

    def retain(self, samples: list[int]) -> None:
        """Keep these samples' entries, in this order (the batch shrank)."""
        self.position, self.fresh = self.position[samples], self.fresh[samples]
        entries = (np.asarray(samples)[:, None] * self.size + np.arange(self.size)).reshape(-1)
        index = torch.as_tensor(entries, device=self.tokens.device)
        self.tokens, self.refs, self.flags = self.tokens[index], self.refs[index], self.flags[index]
        self.batch = len(samples)
