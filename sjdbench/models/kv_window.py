"""Bookkeeping of the static KV caches every real-model adapter uses: which cache entries hold which
tokens, which of them a query may see, and at which rotary position each row's token sits.

The physical cache of each layer has `max_len + window` entries per batch row (`StaticKV` below, or
`hf_common.WindowedHFCache` for transformers models):

    entries 0 .. P-1            the prompt (left-padded per CFG branch; padding is never visible)
    entries P .. P+N-1          committed segment tokens, entry P + j holds segment position j
    entries max_len .. +window  the current window's slots, by slot

A window forward writes only the window region, so drafts never overwrite committed tokens and a
rejected draft costs nothing to forget; `commit` copies the kept slots to their entries. Masks are
boolean (B, 1, queries, max_len + window) tensors built on the device, so a decoding step never
waits for the host.

Rotary positions are per row: row b's prompt has `n_real[b]` real tokens, so its segment position j
sits at rotary position n_real[b] + j. This reproduces models whose CFG branches have prompts of
different lengths (Emu3's negative prompt) or none at all (Lumina-mGPT's unconditional branch starts
at the image), exactly as separate unbatched forwards would see them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BUCKET = 128  # entries; see CacheBook.new


@dataclass
class CacheBook:
    prompt_len: int  # P (entries 0..P-1)
    max_len: int  # P + N, rounded up to the bucket
    window: int  # entries of the window region
    n_real: torch.Tensor  # (B,) real prompt tokens per row
    prompt_pos: torch.Tensor  # (B, P) rotary positions of the prompt entries (0 for padding)
    key_valid: torch.Tensor  # (B, max_len) committed entries a query may see
    window_index: torch.Tensor  # (L,) entries (P + segment position) of the last window's slots

    @classmethod
    def new(
        cls, pad_mask: torch.Tensor, segment_len: int, window: int, entry_positions: bool = False, bucket: int = BUCKET
    ) -> CacheBook:
        """pad_mask: (B, P) True = real prompt token (padding must be on the left).

        entry_positions: rotary positions are the cache entries themselves in every row (a model whose
        position table is indexed by absolute slot, like LlamaGen's conditioning + 2-D grid table).
        bucket: the committed region is rounded up to a multiple of it (the extra entries are never
        visible), so prompts of different lengths share cache shapes: buffers are reused from image to
        image and a compiled forward is not recompiled for every prompt length."""
        batch, prompt_len = pad_mask.shape
        device = pad_mask.device
        if entry_positions:
            n_real = torch.full((batch,), prompt_len, dtype=torch.long, device=device)
            prompt_pos = torch.arange(prompt_len, device=device).expand(batch, prompt_len)
        else:
            n_real = pad_mask.long().sum(-1)
            prompt_pos = (pad_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, P)
        max_len = -(-(prompt_len + segment_len) // bucket) * bucket
        key_valid = torch.zeros(batch, max_len, dtype=torch.bool, device=device)
        return cls(
            prompt_len,
            max_len,
            max(window, 1),
            n_real,
            prompt_pos,
            key_valid,
            torch.empty(0, dtype=torch.long, device=device),
        )

    @property
    def size(self) -> int:
        """Entries per layer and row: committed region plus window region."""
        return self.max_len + self.window

    @property
    def batch(self) -> int:
        return int(self.key_valid.shape[0])

    def prefill(self, pad_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(write entries (P,), rotary positions (B, P), mask (B, 1, P, size)) of the prompt forward.

        A padding query sees only itself, so no row of the attention is empty (no NaN)."""
        P, device = self.prompt_len, pad_mask.device
        self.key_valid[:, :P] = pad_mask
        index = torch.arange(P, device=device)
        keys = torch.arange(self.size, device=device)
        causal = keys[None, :] <= index[:, None]  # (P, size)
        visible = torch.zeros(self.batch, self.size, dtype=torch.bool, device=device)
        visible[:, : self.max_len] = self.key_valid
        itself = keys[None, :] == index[:, None]
        mask = (causal[None] & visible[:, None, :]) | itself[None]  # (B, P, size)
        return index, self.prompt_pos, mask[:, None]

    def window_forward(
        self, positions: torch.Tensor, window_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(write entries (L,), rotary positions (B, L), mask (B, 1, L, size)) for window slots at
        segment positions (L,): slot i sees committed entries before its own position and the slots
        j with window_mask[i, j] (None: causal chain)."""
        L, device = positions.shape[0], positions.device
        if L > self.window:
            raise ValueError(f"a window of {L} slots needs a cache made with extra >= {L}")
        self.window_index = positions + self.prompt_len
        keys = torch.arange(self.max_len, device=device)
        earlier = keys[None, :] < self.window_index[:, None]  # (L, max_len)
        committed = earlier[None] & self.key_valid[:, None, :]  # (B, L, max_len)
        if window_mask is None:
            window_mask = torch.ones(L, L, dtype=torch.bool, device=device).tril()
        slots = torch.zeros(L, self.window, dtype=torch.bool, device=device)
        slots[:, :L] = window_mask
        mask = torch.cat([committed, slots[None].expand(self.batch, L, self.window)], dim=-1)  # (B, L, size)
        rotary = self.n_real[:, None] + positions[None, :]  # (B, L)
        write = self.max_len + torch.arange(L, device=device)
        return write, rotary, mask[:, None]

    def commit(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep slots (k,) of the last window: (source entries, destination entries), both (k,)."""
        destination = self.window_index[slots]
        self.key_valid[:, destination] = True
        return self.max_len + slots, destination


def pad_window(
    tokens: torch.Tensor, rotary: torch.Tensor, write: torch.Tensor, mask: torch.Tensor, window: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad a window of L slots to `window` slots so a compiled forward sees one static shape.

    tokens (B, L, ...) and rotary (B, L) repeat their last slot; the padding slots write to the unused
    tail of the window region and see only themselves, so real slots are unaffected."""
    L = tokens.shape[1]
    extra = window - L
    if extra <= 0:
        return tokens, rotary, write, mask
    tokens = torch.cat([tokens, tokens[:, -1:].expand(-1, extra, *tokens.shape[2:])], dim=1)
    rotary = torch.cat([rotary, rotary[:, -1:].expand(-1, extra)], dim=1)
    write = torch.cat([write, write[-1] + torch.arange(1, extra + 1, device=write.device)])
    B, _, _, size = mask.shape
    pad_rows = torch.zeros(B, 1, extra, size, dtype=torch.bool, device=mask.device)
    pad_rows[:, :, torch.arange(extra), write[L:]] = True
    return tokens, rotary, write, torch.cat([mask, pad_rows], dim=2)


class StaticKV:
    """One layer's keys and values: (B, heads, entries, head_dim) buffers written by entry index.
    Stale entries need no clearing: an entry becomes visible only after it has been written."""

    def __init__(
        self, batch: int, heads: int, entries: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.k = torch.zeros(batch, heads, entries, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)

    def fits(self, batch: int, entries: int, dtype: torch.dtype) -> bool:
        return self.k.shape[0] == batch and self.k.shape[2] == entries and self.k.dtype == dtype

    def write(self, index: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, heads, L, head_dim) at entries (L,); returns the whole buffers."""
        self.k[:, :, index] = k.to(self.k.dtype)
        self.v[:, :, index] = v.to(self.v.dtype)
        return self.k, self.v

    def copy(self, source: torch.Tensor, destination: torch.Tensor) -> None:
        """Commit: entries `source` (k,) are copied to `destination` (k,)."""
        self.k[:, :, destination] = self.k[:, :, source]
        self.v[:, :, destination] = self.v[:, :, source]
