"""The contract between the decoding loop and a model: the loop never knows which model it drives.

Both `sjdbench.decoding` (which drives adapters) and `sjdbench.models` (which implements them)
import this module; neither imports the other.

Coordinates: the *generated segment* has positions 0..N-1 (everything after the prompt). The
adapter describes it with a `SegmentLayout`: each position is either CONTENT (an image token at
grid cell (row, col), sampled and verified) or FORCED (a structural token such as end-of-line,
written in, never sampled). Batch size is 1 image; the conditional and unconditional CFG branches
run as one batch of 2 and count as one function evaluation (NFE).

The window forward takes explicit positions and a mask over the window's own slots, and the cache
keeps any subset of a window's slots. A chain of drafts is the simplest case (positions
n-1, n, ..., causal mask, keep a prefix); a draft tree (several slots share a position, each sees
only its ancestors) and several image rows in flight (each row sees only its own drafts) use the
same two calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch


@dataclass(frozen=True)
class Sampling:
    """Processing of every distribution that is sampled or compared (draft and target alike)."""

    cfg_scale: float = 1.0
    temperature: float = 1.0  # 0 = argmax (greedy): the processed distribution is one-hot
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off


@dataclass
class SegmentLayout:
    """Per generated position j: forced[j] = token id (or -1 for content), row[j], col[j] (-1 for forced)."""

    forced: torch.Tensor  # (N,) long
    row: torch.Tensor  # (N,) long
    col: torch.Tensor  # (N,) long
    grid_hw: tuple[int, int]

    @property
    def n_positions(self) -> int:
        return int(self.forced.numel())

    @property
    def is_forced(self) -> torch.Tensor:
        return self.forced >= 0

    def position_of(self) -> torch.Tensor:
        """(rows, cols) table: segment position of each grid cell."""
        h, w = self.grid_hw
        table = torch.full((h, w), -1, dtype=torch.long)
        content = ~self.is_forced
        table[self.row[content], self.col[content]] = torch.nonzero(content).squeeze(1)
        return table

    @staticmethod
    def grid(h: int, w: int, eol_token: int | None = None, eoi_token: int | None = None) -> SegmentLayout:
        """Row-major grid, optionally with a forced end-of-line token after each row and an end token."""
        forced, rows, cols = [], [], []
        for r in range(h):
            for c in range(w):
                forced.append(-1), rows.append(r), cols.append(c)
            if eol_token is not None:
                forced.append(eol_token), rows.append(-1), cols.append(-1)
        if eoi_token is not None:
            forced.append(eoi_token), rows.append(-1), cols.append(-1)
        as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
        return SegmentLayout(as_long(forced), as_long(rows), as_long(cols), (h, w))


@dataclass
class PromptBatch:
    """Encoded prompt for both CFG branches: tokens (2, P), pad_mask (2, P) True = real token."""

    tokens: torch.Tensor
    pad_mask: torch.Tensor
    text: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return int(self.tokens.shape[1])


@runtime_checkable
class ImageARAdapter(Protocol):
    """What every model provides to the loop (docs/MODELS.md describes each model's layout)."""

    name: str
    vocab_size: int
    layout: SegmentLayout
    image_token_ids: torch.Tensor  # (K,) legal ids at content positions, in VQ-code order
    default_sampling: Sampling
    device: torch.device

    def encode_prompt(self, text: str) -> PromptBatch: ...

    def new_cache(self, prompt: PromptBatch, extra: int) -> Any:
        """A cache for the prompt, the whole segment, and a window of up to `extra` slots."""
        ...

    def prefill(self, prompt: PromptBatch, cache: Any) -> torch.Tensor:
        """Logits (2, V) predicting segment position 0 (row 0 = conditional, row 1 = unconditional)."""
        ...

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: Any, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """One window forward: tokens (L,) at segment positions (L,) -> logits (2, L, V).

        Slot i sees every *committed* token at a segment position < positions[i] (the prompt
        included) and the window slots j with mask[i, j] (L, L) bool; mask None is the causal chain
        (slot i sees slots 0..i). Slot i's logits predict the token after it. The window's keys and
        values are held until `commit`; nothing of the window is committed by the forward itself.
        """
        ...

    def commit(self, cache: Any, slots: torch.Tensor) -> None:
        """Keep the given slots (k,) of the last window as committed tokens, at their positions;
        every other slot of that window is forgotten."""
        ...

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        """Segment tokens (N,) -> uint8 image (H, W, 3)."""
        ...

    def codebook(self) -> torch.Tensor:
        """VQ vectors (K, D) in code order (row k belongs to image_token_ids[k]); for LANTERN."""
        ...

    def token_embeddings(self) -> torch.Tensor:
        """Input embeddings (V, D) of the language model; for GSD's grouping distance.

        An adapter may also set `gsd_d_thr` (float): GSD's squared-distance threshold in the units
        of these embeddings, used when the GSD verifier's `d_thr` is null (default 0.5, the paper's).
        """
        ...
