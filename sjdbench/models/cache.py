"""The static KV cache every model decodes with: B samples in one cache, which entries hold which
tokens, what a query may see, and at which rotary position each row's tokens sit.

Rows: sample b is model-batch rows 2b (conditional) and 2b + 1 (unconditional). Each row of each
layer's keys and values has `size = window + committed` entries:

    entries 0 .. W-1                the current window's slots, by slot
    entries W .. W+P-1              the prompt region (each sample's prompt left-padded into it;
                                    padding is never visible)
    entries W+P .. W+P+N-1          committed segment tokens: entry W + P + j holds segment position j
    (up to W + committed)           unused: the committed region is rounded up to a bucket

A window forward writes only the window region, so a rejected draft never overwrites a committed
token and costs nothing to forget; `commit` copies the kept slots to their entries. The window comes
first so that what a window may see is one prefix of the entries: slots at segment positions below
`horizon` see at most entries 0 .. W + P + horizon - 2, so a forward given a horizon attends to that
slice (a view, no copy) instead of the whole static cache. On a CPU that is most of the attention's
cost in the early part of an image; on a GPU it is free to skip as well, since the horizon is a host
integer the loop already has (no device sync).

A compiled forward is compiled once per shape, so it sees bucketed sizes (`begin_window`'s pad_to
and bucket_keys): the window padded to the next power of two of slots (`compiled_slots`), the prompt
and committed keys rounded up to a power of two (at least KEY_BUCKET, at most the committed region),
so neither the window's length nor the prompt's makes a new shape. The extra keys are masked like
every entry at or past a slot's position, so a bucketed forward gives the logits of the exact one,
and a compiled run pays for a few more keys than it reads instead of the whole cache.

Rotary positions are per row. Most models count only the real tokens of the row's prompt (segment
position j at rotary position n_real + j), which reproduces models whose CFG branches have prompts
of different lengths (Emu3's negative prompt) or none (Lumina-mGPT's unconditional branch starts at
the image) exactly as separate unbatched forwards see them. `own_positions` models instead count
every entry of the sample's own prompt, padding included (the toy and debug models were trained
that way; LlamaGen's 2-D table is indexed by slot), whatever padding the batch adds in front.

Masks are boolean (rows, 1, queries, keys) tensors built on the device: a decoding step never waits
for the host. Each layer's keys and values are their own tensors: a compiled forward writes its
window into each in place (with all layers in one tensor, inductor copied the whole tensor back
for every layer's write: measured 11 ms instead of 2.7 ms for a W = 16 toy forward on a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BUCKET = 128  # entries; see WindowCache.__init__
KEY_BUCKET = 64  # prompt + committed entries a bucketed window forward attends to at least; see begin_window


def slot_bucket(length: int, window: int) -> int:
    """The slots a compiled forward pads a window of `length` slots to: the next power of two, at most
    `window` (log2(window) + 1 shapes instead of one per length, and an AR step computes one slot, not
    a whole window's)."""
    return min(1 << max(length - 1, 0).bit_length(), max(window, length))


@dataclass(frozen=True)
class KVShape:
    """What a model's cache holds per row and entry: `layers` x (keys, values) x `heads` x `head_dim`."""

    layers: int
    heads: int  # key/value heads (fewer than query heads under grouped-query attention)
    head_dim: int
    dtype: torch.dtype


class WindowCache:
    """B samples' keys and values and their bookkeeping (the adapter contract's `cache`)."""

    def __init__(
        self,
        samples: int,
        prompt_len: int,
        segment_len: int,
        window: int,
        shape: KVShape,
        device: torch.device,
        own_positions: bool = False,
        bucket: int = BUCKET,
    ) -> None:
        """bucket: the committed region is rounded up to a multiple of it (the extra entries are never
        visible), so prompts of different lengths share cache shapes and a compiled forward is not
        recompiled for every prompt length."""
        if samples < 1:
            raise ValueError(f"a cache holds at least one sample, not {samples}")
        self.window = max(window, 1)
        self.prompt_len = prompt_len
        self.segment_len = segment_len
        self.committed = -(-(prompt_len + segment_len) // bucket) * bucket
        self.own_positions = own_positions
        self.device = device
        rows = 2 * samples
        entry = (rows, shape.heads, self.size, shape.head_dim)
        self.keys = [torch.zeros(entry, dtype=shape.dtype, device=device) for _ in range(shape.layers)]
        self.values = [torch.zeros(entry, dtype=shape.dtype, device=device) for _ in range(shape.layers)]
        # committed region's entries a query may see, per row, plus one sink column that padding
        # commits write to (never read), so a commit needs no host-side filtering
        self.key_valid = torch.zeros(rows, self.committed + 1, dtype=torch.bool, device=device)
        self.base = torch.zeros(rows, dtype=torch.long, device=device)  # rotary position of segment position 0
        self.window_positions = torch.zeros(samples, 0, dtype=torch.long, device=device)  # of the last window
        self.bound: object = None  # a model's own view of this cache (a transformers Cache), see WindowedAdapter
        self._prefill_rows: torch.Tensor | None = None  # set while a prefill runs
        self._key_end = self.size
        self._first_entries: torch.Tensor | None = None  # built by the first commit (`_row_heads`)

    @property
    def size(self) -> int:
        """Entries per layer and row: window region plus committed region."""
        return self.window + self.committed

    @property
    def samples(self) -> int:
        return int(self.key_valid.shape[0]) // 2

    # -- what a forward attends to ----------------------------------------------------------
    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store a layer's new keys and values k, v (rows, heads, L, head_dim) where the running
        forward puts them, and return the keys and values it attends to: during a prefill the prompt's
        own (a prompt sees only itself), during a window forward the entries up to the horizon."""
        W, keys, values = self.window, self.keys[layer], self.values[layer]
        if self._prefill_rows is not None:
            P = k.shape[2]
            keys[self._prefill_rows, :, W : W + P] = k.to(keys.dtype)
            values[self._prefill_rows, :, W : W + P] = v.to(values.dtype)
            return k, v
        L = k.shape[2]
        keys[:, :, :L] = k.to(keys.dtype)
        values[:, :, :L] = v.to(values.dtype)
        return keys[:, :, : self._key_end], values[:, :, : self._key_end]

    def begin_prefill(
        self, samples: list[int], pad_mask: torch.Tensor, lengths: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Start `samples` afresh: pad_mask (2n, P) True = real prompt token, each sample's prompt of
        lengths[i] tokens left-padded to the prompt region. Returns (rotary positions (2n, P), mask
        (2n, 1, P, P)); the prefill forward's keys go to these samples' prompt entries. A padding
        query sees only itself, so no row of the attention is empty (no NaN)."""
        device, P = self.device, self.prompt_len
        rows = torch.tensor([r for s in samples for r in (2 * s, 2 * s + 1)], dtype=torch.long, device=device)
        if self.own_positions:
            offset = torch.tensor([P - n for n in lengths for _ in range(2)], dtype=torch.long, device=device)
            prompt_pos = (torch.arange(P, device=device)[None, :] - offset[:, None]).clamp(min=0)  # (2n, P)
            base = P - offset
        else:
            prompt_pos = (pad_mask.long().cumsum(-1) - 1).clamp(min=0)
            base = pad_mask.long().sum(-1)
        self.key_valid[rows] = False  # whatever the sample held before is forgotten
        self.key_valid[rows, :P] = pad_mask
        self.base[rows] = base
        self._prefill_rows = rows
        index = torch.arange(P, device=device)
        causal = index[None, :] <= index[:, None]  # (P, P)
        mask = (causal[None] & pad_mask[:, None, :]) | torch.eye(P, dtype=torch.bool, device=device)[None]
        return prompt_pos, mask[:, None]

    def end_prefill(self) -> None:
        self._prefill_rows = None

    def _entries_seen(self, horizon: int | None, bucket: bool) -> int:
        """Committed entries a window below `horizon` attends to (all of them without a horizon);
        bucketed, the prompt and committed entries together are rounded up to a power of two (at least
        KEY_BUCKET, at most the committed region), so prompts of other lengths share the shapes."""
        P = self.prompt_len
        seen = self.committed - P if horizon is None else min(max(horizon - 1, 0), self.committed - P)
        if bucket:
            seen = min(max(KEY_BUCKET, 1 << max(P + seen - 1, 0).bit_length()), self.committed) - P
        return seen

    def compiled_slots(self, length: int, horizon: int | None) -> int:
        """The slots a compiled forward pads a window of `length` slots below `horizon` to: the next
        power of two (`slot_bucket`), or the whole window once its keys are the last bucket (the whole
        committed region). There a window is shorter only because the image ends, at lengths that
        differ from one decode to the next: one shape instead of log2(W) that a warm-up may not all
        meet (the toy's sjd: 4 shapes in all instead of 8, for about 3 padded forwards per image)."""
        if self.prompt_len + self._entries_seen(horizon, bucket=True) == self.committed:
            return self.window
        return slot_bucket(length, self.window)

    def begin_window(
        self,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        horizon: int | None,
        pad_to: int | None = None,
        bucket_keys: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A window of slots at segment positions (B, L) with window masks (B, L, L) (None: causal
        chain) -> (rotary positions (2B, L'), attention mask (2B, 1, L', keys)).

        Slot (b, i) sees sample b's committed entries before its own position, its prompt, and the
        slots j with mask[b, i, j]. horizon: no slot sits at or past it, so the keys stop at the last
        committed entry any slot may see. pad_to: the window is padded to that many slots, L <= pad_to
        <= window (a compiled forward's shape, see `compiled_slots`); padding slots see only themselves.
        bucket_keys: the prompt and committed entries attended to are rounded up to a power of two
        (at least KEY_BUCKET, at most the committed region); the extra ones sit at or past every
        slot's position, so the mask hides them and the logits are the exact window's."""
        B, L = positions.shape
        W, P, device = self.window, self.prompt_len, self.device
        if L > W:
            raise ValueError(f"a window of {L} slots needs a cache made with window >= {L}")
        if pad_to is not None and not L <= pad_to <= W:
            raise ValueError(f"a window of {L} slots padded to {pad_to}: pad to between {L} and the cache's {W}")
        if B != self.samples:
            raise ValueError(f"a window for {B} samples in a cache holding {self.samples}")
        self._prefill_rows = None
        self.window_positions = positions
        seen = self._entries_seen(horizon, bucket_keys)
        self._key_end = W + P + seen
        slots = L if pad_to is None else pad_to
        row_pos = positions.repeat_interleave(2, dim=0)  # (2B, L)
        if slots > L:
            row_pos = torch.cat([row_pos, row_pos[:, -1:].expand(-1, slots - L)], dim=1)
        if mask is None:
            window = torch.ones(L, L, dtype=torch.bool, device=device).tril().expand(2 * B, L, L)
        else:
            window = mask.repeat_interleave(2, dim=0)  # (2B, L, L)
        window = torch.nn.functional.pad(window, (0, W - L, 0, slots - L))  # (2B, slots, W)
        if slots > L:
            pad = torch.arange(L, slots, device=device)
            window[:, pad, pad] = True
        earlier = torch.arange(seen, device=device)[None, None, :] < row_pos[:, :, None]  # (2B, slots, seen)
        committed = earlier & self.key_valid[:, None, P : P + seen]
        prompt = self.key_valid[:, None, :P].expand(-1, slots, -1)
        attend = torch.cat([window, prompt, committed], dim=-1)  # (2B, slots, W + P + seen)
        if slots > L:
            attend[:, L:, W:] = False
        return self.base[:, None] + row_pos, attend[:, None]

    # -- what the loop keeps ----------------------------------------------------------------
    def commit(self, slots: torch.Tensor) -> None:
        """Keep slots (B, K) of the last window as committed tokens of each sample, at their
        positions; entries < 0 pad rows. A padding entry copies window entry 0 onto itself and marks
        the sink column, so no entry a valid slot writes is touched and nothing syncs with the host.

        Each layer's keys and values are copied as rows of a (rows * heads * size, head_dim) view with
        one flat index built once for all of them: index_select then index_copy_, two plain kernels
        per tensor (the advanced indexing over rows and entries with the heads between them took 1.7x
        as long for the toy at B = 8)."""
        W, P = self.window, self.prompt_len
        valid = slots >= 0
        slot = slots.clamp(min=0)
        position = self.window_positions.gather(1, slot)  # (B, K)
        source = slot.repeat_interleave(2, dim=0)  # (2B, K) window entries (a padding entry's is 0)
        destination = torch.where(valid, W + P + position, 0).repeat_interleave(2, dim=0)
        first = self._row_heads(slots.device)  # (2B, H, 1) the first entry of each row and head
        source, destination = (first + source[:, None]).reshape(-1), (first + destination[:, None]).reshape(-1)
        for tensor in (*self.keys, *self.values):
            entries = tensor.view(-1, tensor.shape[-1])  # (2B * H * size, head_dim)
            entries.index_copy_(0, destination, entries.index_select(0, source))
        rows = torch.arange(valid.shape[0] * 2, device=slots.device)[:, None]
        marked = torch.where(valid, P + position, self.committed).repeat_interleave(2, dim=0)
        self.key_valid[rows, marked] = True

    def _row_heads(self, device: torch.device) -> torch.Tensor:
        """(2B, H, 1) the flat index of entry 0 of each row and head of a layer's keys (`commit`)."""
        rows, heads, size, _ = self.keys[0].shape
        first = self._first_entries
        if first is None or first.shape[:2] != (rows, heads):
            first = self._first_entries = (torch.arange(rows * heads, device=device) * size).view(rows, heads, 1)
        return first

    def commit_span(self, slot: int, position: int, count: int) -> None:
        """The one-sample chain commit: `count` consecutive slots from `slot` kept at consecutive
        positions from `position`, copied as slices (what a CPU commit of a chain's accepted prefix
        costs without index tensors)."""
        W, P = self.window, self.prompt_len
        start = W + P + position
        for tensor in (*self.keys, *self.values):
            tensor[:, :, start : start + count] = tensor[:, :, slot : slot + count]
        self.key_valid[:, P + position : P + position + count] = True

    def retain(self, samples: list[int]) -> None:
        """Only these samples stay, in this order (sample i is the old samples[i])."""
        index = torch.tensor(samples, dtype=torch.long, device=self.device)
        rows = torch.stack([2 * index, 2 * index + 1], dim=1).flatten()
        self.keys = [tensor.index_select(0, rows) for tensor in self.keys]
        self.values = [tensor.index_select(0, rows) for tensor in self.values]
        self.key_valid = self.key_valid[rows]
        self.base = self.base[rows]
        self.window_positions = self.window_positions[index]
        self._key_end = self.size
