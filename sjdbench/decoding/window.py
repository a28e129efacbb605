"""The drafts waiting in the window, one entry per slot, as one object.

Slot s of a `WindowState` holds the draft for one segment position together with everything the
loop knows about it: its reference q (the distribution it was drawn from), whether the init drafted
it (one-hot q), and the consecutive-growth flags it carried when it was proposed. Slots are
appended, kept from a point on, or gathered by index, so a draft chain, a draft tree or several
rows in flight can all keep their per-slot state aligned with one call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.decoding.processing import one_hot


@dataclass
class WindowState:
    drafts: torch.Tensor  # (S,) long
    refs: torch.Tensor  # (S, V) reference q of each draft
    fresh: np.ndarray  # (S,) bool on the host: drafted by the init (one-hot q)
    grew: torch.Tensor  # (S,) bool: growth mask M on the draft when it was proposed
    eligible: torch.Tensor  # (S,) bool: its position had enough observations for M

    @staticmethod
    def empty(vocab_size: int, device: torch.device) -> "WindowState":
        no = torch.zeros(0, dtype=torch.bool, device=device)
        return WindowState(torch.zeros(0, dtype=torch.long, device=device), torch.zeros(0, vocab_size, device=device),
                           np.zeros(0, dtype=bool), no, no)

    @staticmethod
    def proposed(drafts: torch.Tensor, refs: torch.Tensor, grew: torch.Tensor | None = None,
                 eligible: torch.Tensor | None = None) -> "WindowState":
        """Slots drafted by a proposal (not fresh); growth flags default to False."""
        no = torch.zeros_like(drafts, dtype=torch.bool)
        return WindowState(drafts, refs, np.zeros(drafts.numel(), dtype=bool),
                           no if grew is None else grew, no if eligible is None else eligible)

    def __len__(self) -> int:
        return int(self.drafts.numel())

    def append_fresh(self, drafts: torch.Tensor) -> "WindowState":
        """Add init drafts (F,) after the existing slots; their reference is one-hot."""
        no = torch.zeros_like(drafts, dtype=torch.bool)
        return WindowState(
            torch.cat([self.drafts, drafts]),
            torch.cat([self.refs, one_hot(drafts, self.refs.shape[-1])]),
            np.concatenate([self.fresh, np.ones(drafts.numel(), dtype=bool)]),
            torch.cat([self.grew, no]),
            torch.cat([self.eligible, no]),
        )

    def head(self, n: int) -> "WindowState":
        """The first n slots."""
        return WindowState(self.drafts[:n], self.refs[:n], self.fresh[:n], self.grew[:n], self.eligible[:n])

    def keep_from(self, m: int) -> "WindowState":
        """The slots from m on (those not committed this iteration)."""
        return WindowState(self.drafts[m:], self.refs[m:], self.fresh[m:], self.grew[m:], self.eligible[m:])

    def gather(self, index: torch.Tensor) -> "WindowState":
        """The slots at `index` (k,), in that order (one path of a tree, the rows still in flight)."""
        host = index.cpu().numpy()
        return WindowState(self.drafts[index], self.refs[index], self.fresh[host], self.grew[index], self.eligible[index])
