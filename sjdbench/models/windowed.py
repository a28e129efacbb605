"""The part of the adapter contract every real model shares: prefill, window forward and commit over a
static KV cache (`kv_window.CacheBook`), the CFG pair as one batch of 2, and the optional compiled
window forward.

A model adapter subclasses `WindowedAdapter` and supplies five hooks:
    _allocate(book)                    set up its layers' caches for book.size entries per row
    _embed(tokens (B, L)) -> (B, L, D) input vectors of segment tokens
    _run(x, write, rotary, mask)       the transformer over x (B, L, D) -> final hidden (B, L, D)
    _head(hidden (B, L, D)) -> (B, L, V)
    _commit_kv(source, destination)    copy the kept slots' entries in every layer
plus `_prompt_inputs(prompt) -> (B, P, D)` when its prompt is not token ids (LlamaGen).

Only the logits the loop reads are computed: the prefill returns the last prompt slot's, never the
whole prompt's. With `compile=True` the window forward is a `torch.compile`d function of static
shape (windows are padded to the cache's window size); the prefill stays eager.
"""

from __future__ import annotations

from typing import Any

import torch

from sjdbench.adapter import PromptBatch, SegmentLayout
from sjdbench.models.kv_window import CacheBook, pad_window


class WindowedAdapter:
    name: str
    vocab_size: int
    layout: SegmentLayout
    device: torch.device
    compile: bool = False
    entry_positions: bool = False  # rotary positions = cache entries (see CacheBook.new)

    # -- hooks ------------------------------------------------------------------------------
    def _allocate(self, book: CacheBook) -> None:
        raise NotImplementedError

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _prompt_inputs(self, prompt: PromptBatch) -> torch.Tensor:
        return self._embed(prompt.tokens)

    def _run(self, x: torch.Tensor, write: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _commit_kv(self, source: torch.Tensor, destination: torch.Tensor) -> None:
        raise NotImplementedError

    # -- the contract -----------------------------------------------------------------------
    def new_cache(self, prompt: PromptBatch, extra: int) -> CacheBook:
        book = CacheBook.new(prompt.pad_mask, self.layout.n_positions, extra, self.entry_positions)
        self._allocate(book)
        return book

    @torch.inference_mode()
    def prefill(self, prompt: PromptBatch, cache: CacheBook) -> torch.Tensor:
        write, rotary, mask = cache.prefill(prompt.pad_mask)
        hidden = self._run(self._prompt_inputs(prompt), write, rotary, mask)  # (2, P, D)
        return self._head(hidden[:, -1:])[:, 0].float()  # (2, V)

    @torch.inference_mode()
    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: CacheBook, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        L = tokens.shape[0]
        write, rotary, attn = cache.window_forward(positions, mask)
        x = self._embed(tokens[None].expand(cache.batch, L))  # (2, L, D)
        if self.compile:
            x, rotary, write, attn = pad_window(x, rotary, write, attn, cache.window)
            hidden = self._compiled_run(x, write, rotary, attn)[:, :L]
        else:
            hidden = self._run(x, write, rotary, attn)
        return self._head(hidden).float()  # (2, L, V)

    @torch.inference_mode()
    def commit(self, cache: CacheBook, slots: torch.Tensor) -> None:
        source, destination = cache.commit(slots)
        self._commit_kv(source, destination)

    @property
    def _compiled_run(self) -> Any:
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = self.__dict__["_compiled"] = torch.compile(self._run, dynamic=False)
        return compiled
