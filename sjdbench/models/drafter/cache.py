"""The drafter's own KV cache: B samples, both CFG rows each, like the target's (`models/cache.py`).

Rows: sample b is rows 2b (conditional) and 2b + 1 (unconditional). An *entry* pairs a token with
the feature of the slot before it, and sits at that token's position. Each row of each layer holds

    entries 0 .. T-1                  this iteration's drafts, from the end: draft d at entry T-1-d
    entry T                           a sink that padding writes to (never visible)
    entries T+1 .. T+P                the prompt region: prompt entry i pairs prompt token i with the
                                      target's hidden state of prompt slot i - 1 (entry 0 is unused)
    entries T+P+1 .. T+P+N            committed segment entries: the one of segment position j pairs
                                      token j with the target's hidden state of the slot before it

Committed entries are written by `begin_extend` (tokens the target accepted, with the target's own
hidden states), drafts by `begin_draft` (tokens the drafter proposes, with the drafter's features).
An entry sees the visible prompt entries, the committed entries at positions up to its own
(a draft: before its own) and, among the drafts, those its mask names (its ancestors in a tree).
Rotary positions are the target's rotary position of the feature's slot (segment position j - 1
for the entry at j), which is what the released drafters were trained with.

The layout makes the keys of every forward one contiguous range, no wider than what it may see:
the committed region comes last, so the keys stop at the furthest position any sample has committed
(`reach`), as the target's window stops at its horizon; the drafts are stored backwards before the
sink, so the ones drafted so far end where the sink begins. A drafter forward's attention costs in
proportion to its keys, and a tree runs one forward per level: it would otherwise read the empty
rest of the segment, and every unused draft entry, at every level.
"""

from __future__ import annotations

from typing import Any

import torch

from sjdbench.models.cache import KVShape


class DrafterCache:
    """What a drafter holds for B samples (see the module docstring for the layout)."""

    def __init__(
        self, samples: int, prompt_len: int, segment_len: int, drafts: int, shape: KVShape, device: torch.device
    ) -> None:
        """prompt_len: the target cache's prompt region; drafts: the most draft entries one
        iteration may hold (a tree's node count)."""
        if samples < 1:
            raise ValueError(f"a drafter cache holds at least one sample, not {samples}")
        self.prompt_len, self.segment_len, self.drafts = prompt_len, segment_len, max(drafts, 1)
        self.device = torch.device(device)
        rows = 2 * samples
        entry = (rows, shape.heads, self.size, shape.head_dim)
        self.keys = [torch.zeros(entry, dtype=shape.dtype, device=self.device) for _ in range(shape.layers)]
        self.values = [torch.zeros(entry, dtype=shape.dtype, device=self.device) for _ in range(shape.layers)]
        # prompt and segment entries, and a last column that padding marks (never read)
        self.valid = torch.zeros(rows, prompt_len + segment_len + 1, dtype=torch.bool, device=self.device)
        self.base = torch.zeros(rows, dtype=torch.long, device=self.device)  # target rotary of segment position 0
        self.draft_positions = torch.zeros(samples, self.drafts, dtype=torch.long, device=self.device)
        self.used = 0  # draft entries in use (the same count for every sample; padding fills the rest)
        self.reach = 0  # no sample holds a committed entry at a segment position >= reach (host bound)
        self._write: torch.Tensor | None = None  # (rows, L) entries the running forward writes
        self._write_rows: torch.Tensor | None = None  # the rows it runs (None: every row)
        self._keys = slice(0, self.size)  # the entries the running forward attends to

    @property
    def sink(self) -> int:
        """The entry padding writes to."""
        return self.drafts

    @property
    def prompt_start(self) -> int:
        return self.drafts + 1

    @property
    def committed_start(self) -> int:
        return self.prompt_start + self.prompt_len

    @property
    def size(self) -> int:
        return self.committed_start + self.segment_len

    @property
    def samples(self) -> int:
        return int(self.valid.shape[0]) // 2

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store a layer's new keys and values (rows, heads, L, head_dim) at the entries the running
        forward writes, and return the keys and values it attends to."""
        assert self._write is not None, "a drafter forward runs between begin_* and end"
        keys, values = self.keys[layer], self.values[layer]
        rows = self._write_rows
        if rows is None:  # every row runs
            every = torch.arange(keys.shape[0], device=self.device)[:, None]
            keys[every, :, self._write] = k.transpose(1, 2).to(keys.dtype)  # (rows, L, heads, hd)
            values[every, :, self._write] = v.transpose(1, 2).to(values.dtype)
            return keys[:, :, self._keys], values[:, :, self._keys]
        keys[rows[:, None], :, self._write] = k.transpose(1, 2).to(keys.dtype)
        values[rows[:, None], :, self._write] = v.transpose(1, 2).to(values.dtype)
        return keys[rows, :, self._keys], values[rows, :, self._keys]

    def end(self) -> None:
        self._write, self._write_rows = None, None

    # -- the three kinds of forward -----------------------------------------------------------
    def begin_start(
        self, samples: list[int], valid: torch.Tensor, rotary: torch.Tensor, base: torch.Tensor, see_padding: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Start `samples` afresh on their prompts: prompt entries 1..P-1 of rows (2n,) get written.
        valid (2n, P) real prompt slots; rotary (2n, P) the target's rotary positions; base (2n,)
        rotary of segment position 0. Returns (rotary positions (2n, P-1), mask (2n, 1, P-1, keys))
        of the entries, each pairing token i with the feature of slot i - 1."""
        P, start = self.prompt_len, self.prompt_start
        rows = self._rows(samples)
        seen = torch.ones_like(valid[:, :-1]) if see_padding else valid[:, :-1]  # (2n, P-1) feature slot real
        self.valid[rows] = False  # whatever the sample held before is forgotten
        self.valid[rows, 1:P] = seen
        self.base[rows] = base
        self.draft_positions[torch.as_tensor(samples, device=self.device)] = 0
        self._write = torch.arange(start + 1, start + P, device=self.device).expand(len(rows), -1)
        self._keys = slice(start, start + P)  # the prompt region
        index = torch.arange(1, P, device=self.device)
        causal = torch.arange(P, device=self.device)[None, :] <= index[:, None]  # (P-1, P)
        mask = causal[None] & self.valid[rows, None, :P]
        mask = mask | (torch.arange(P, device=self.device)[None, None, :] == index[None, :, None])  # itself
        self._write_rows = rows
        return rotary[:, :-1], mask[:, None]

    def begin_extend(self, positions: torch.Tensor, reach: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Committed entries at segment positions (B, K) (< 0: padding) for every sample -> (rotary
        positions (2B, K), mask (2B, 1, K, keys)). reach: a bound the caller knows on the host,
        positions < reach (None: the whole segment). The entries become visible to later forwards;
        the drafts of the iteration before are forgotten."""
        self._check(positions)
        P, start = self.prompt_len, self.committed_start
        self.reach = max(self.reach, self.segment_len if reach is None else min(reach, self.segment_len))
        row_pos = positions.repeat_interleave(2, dim=0)  # (2B, K)
        real = row_pos >= 0
        self._write, self._write_rows = torch.where(real, start + row_pos, self.sink), None
        rows = torch.arange(row_pos.shape[0], device=self.device)[:, None].expand_as(row_pos)
        self.valid[rows, torch.where(real, P + row_pos, -1)] = True
        self.valid[:, -1] = False
        self.used = 0
        self._keys = slice(self.sink, start + self.reach)  # the sink, the prompt, the committed entries
        committed = self._committed_mask(row_pos, inclusive=True)  # (2B, K, reach)
        prompt = self.valid[:, None, :P].expand(-1, row_pos.shape[1], -1)
        own_sink = (~real)[:, :, None]  # a padding query sees only the sink (its own write)
        mask = torch.cat([own_sink, prompt & ~own_sink, committed & ~own_sink], dim=-1)
        return self.base[:, None] + row_pos - 1, mask[:, None]

    def begin_draft(self, positions: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """L draft entries per sample at segment positions (B, L), appended after the `used` ones.
        mask (B, L, used + L) bool: the draft entries each one sees (its ancestors; itself is always
        seen); None: every earlier draft and the level's own entries causally (a chain). Returns
        (rotary positions (2B, L), attention mask (2B, 1, L, keys))."""
        self._check(positions)
        B, L = positions.shape
        used = self.used
        if used + L > self.drafts:
            raise ValueError(f"{used + L} draft entries in a drafter cache made for {self.drafts}")
        P = self.prompt_len
        if mask is None:
            mask = torch.ones(L, used + L, dtype=torch.bool, device=self.device).tril(used).expand(B, L, -1)
        elif mask.shape != (B, L, used + L):
            raise ValueError(f"a draft mask of shape {tuple(mask.shape)}; expected {(B, L, used + L)}")
        row_pos = positions.repeat_interleave(2, dim=0)  # (2B, L)
        self.draft_positions[:, used : used + L] = positions
        self._write = self._draft_entry(torch.arange(used, used + L, device=self.device)).expand(row_pos.shape[0], -1)
        self._write_rows = None
        self._keys = slice(self._draft_entry(used + L - 1), self.committed_start + self.reach)
        own = torch.zeros(L, used + L, dtype=torch.bool, device=self.device)
        own[torch.arange(L), used + torch.arange(L)] = True
        drafts = (mask | own).repeat_interleave(2, dim=0).flip(-1)  # (2B, L, used + L) in entry order
        drafts = torch.nn.functional.pad(drafts, (0, 1))  # and the sink, never seen
        prompt = self.valid[:, None, :P].expand(-1, L, -1)
        committed = self._committed_mask(row_pos, inclusive=False)
        attend = torch.cat([drafts, prompt, committed], dim=-1)  # (2B, L, keys)
        self.used += L
        return self.base[:, None] + row_pos - 1, attend[:, None]

    def _committed_mask(self, row_pos: torch.Tensor, inclusive: bool) -> torch.Tensor:
        """(2B, L, reach): committed entry j is visible to a query at position p when valid and j <= p
        (inclusive) or j < p."""
        P = self.prompt_len
        index = torch.arange(self.reach, device=self.device)[None, None, :]
        before = index <= row_pos[:, :, None] if inclusive else index < row_pos[:, :, None]
        return before & self.valid[:, None, P : P + self.reach]

    def _draft_entry(self, draft: Any) -> Any:
        """The entry of draft d (an int or a tensor of them): the drafts are stored backwards."""
        return self.drafts - 1 - draft

    def _check(self, positions: torch.Tensor) -> None:
        if positions.shape[0] != self.samples:
            raise ValueError(f"positions for {positions.shape[0]} samples in a drafter cache holding {self.samples}")

    def _rows(self, samples: list[int]) -> torch.Tensor:
        return torch.tensor([r for s in samples for r in (2 * s, 2 * s + 1)], dtype=torch.long, device=self.device)

    # -- what the loop keeps ------------------------------------------------------------------
    def commit_drafts(self, entries: torch.Tensor) -> None:
        """Keep draft entries (B, K) (indices among this iteration's drafts; < 0 pads) as committed
        entries at their positions. (EAGLE instead re-extends accepted tokens with the target's own
        hidden states; this keeps the drafter's, for decoders that want that.)"""
        P, start = self.prompt_len, self.committed_start
        real = entries >= 0
        entry = entries.clamp(min=0)
        position = self.draft_positions.gather(1, entry)  # (B, K)
        if bool(real.any()):  # a host read: this is not on the decoding loop's path
            self.reach = max(self.reach, min(int(position[real].max()) + 1, self.segment_len))
        source = self._draft_entry(entry).repeat_interleave(2, dim=0)  # (2B, K)
        destination = torch.where(real, start + position, self.sink).repeat_interleave(2, dim=0)
        rows = torch.arange(source.shape[0], device=self.device)[:, None].expand_as(source)
        for tensor in (*self.keys, *self.values):
            tensor[rows, :, destination] = tensor[rows, :, source]
        self.valid[rows, torch.where(real, P + position, -1).repeat_interleave(2, dim=0)] = True
        self.valid[:, -1] = False

    def rollback(self, lengths: torch.Tensor) -> None:
        """Forget committed entries of sample b at segment positions >= lengths[b] (B,)."""
        P, N = self.prompt_len, self.segment_len
        keep = torch.arange(N, device=self.device)[None, :] < lengths.repeat_interleave(2)[:, None]
        self.valid[:, P : P + N] &= keep

    def discard_drafts(self) -> None:
        self.used = 0

    def retain(self, samples: list[int]) -> None:
        """Only these samples stay, in this order (sample i is the old samples[i])."""
        index = torch.tensor(samples, dtype=torch.long, device=self.device)
        rows = self._rows(samples)
        self.keys = [tensor.index_select(0, rows) for tensor in self.keys]
        self.values = [tensor.index_select(0, rows) for tensor in self.values]
        self.valid = self.valid[rows]
        self.base = self.base[rows]
        self.draft_positions = self.draft_positions[index]
