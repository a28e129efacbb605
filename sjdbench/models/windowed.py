"""The adapter contract (sjdbench/adapter.py) implemented once, for every model: prefill, window
forward, commit and compaction over the static cache of `cache.WindowCache`, the CFG pair of every
sample inside one batch, the optional compiled window forward, and the model data some decoding
parts read (codebook, token embeddings, GSD's threshold), from what each model hands over.

A model adapter subclasses `WindowedAdapter`, calls `super().__init__` with its tables, and supplies:
    _kv_shape() -> KVShape                    what its cache holds per row and entry
    _embed(tokens (R, L), positions (R, L))   input vectors (R, L, D) of segment tokens at segment positions
    _run(x, rotary, mask, cache) -> hidden    the transformer over x (R, L, D); every attention layer
                                              stores and reads its keys through cache.update(layer, k, v)
    _head(hidden (R, L, D)) -> (R, L, V)
plus `_prompt_inputs(prompt) -> (2, P, D)` when its prompt is not token ids (LlamaGen), and
`_bind(cache)` when its layers need their own view of the cache (a transformers Cache).

Only the logits the loop reads are computed: the prefill returns the last prompt slot's, never the
whole prompt's. With `compile=True` the window forward is a `torch.compile`d function of a few
static shapes: a window is padded to the next power of two of slots and its prompt and committed
keys are rounded up to a power of two (`WindowCache.compiled_slots`, `begin_window`), so each shape
is compiled once and a forward pays for about the tokens it computes, not for the whole static
cache; the prefill stays eager.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, PromptStates, Sampling, SegmentLayout, WindowInputs
from sjdbench.errors import UserError
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.gsd_threshold import nearest_neighbour_threshold

Table = Callable[[], torch.Tensor]
# compiled shapes of the window function in one process: per batch size and window, up to 8 key
# buckets times a few slot counts (log2(W) + 1 at most), over every preset and batch size of a sweep
RECOMPILE_LIMIT = 256


class WindowedAdapter:
    own_positions: bool = False  # rotary positions count the sample's whole prompt (see cache.py)
    returns_hidden_states: bool = True  # the capability of adapter.HiddenStatesAdapter (drafters)

    def __init__(
        self,
        name: str,
        layout: SegmentLayout,
        vocab_size: int,
        image_token_ids: torch.Tensor,
        sampling: Sampling,
        device: torch.device,
        codebook: Table,
        token_embeddings: Table,
        gsd_d_thr: float | None = None,
        compile: bool = False,
        max_positions: int | None = None,
    ) -> None:
        """codebook / token_embeddings: how to read the model's VQ vectors (K, D) in code order and its
        input embeddings (V, D) (callables: some cost a forward, and are read once per decoder build).
        gsd_d_thr: GSD's threshold in the embeddings' units; None: derived from the image tokens'
        nearest-neighbour spacing (`gsd_threshold`). max_positions: the longest prompt + segment the
        model's position table holds (None: no limit)."""
        self.name, self.layout, self.vocab_size = name, layout, vocab_size
        self.device = torch.device(device)
        self.image_token_ids = image_token_ids.to(self.device)
        self.default_sampling = sampling
        self.compile = compile
        self.dtype = torch.float64 if self._kv_shape().dtype == torch.float64 else torch.float32
        self._codebook, self._token_embeddings = codebook, token_embeddings
        self._gsd_d_thr = gsd_d_thr
        self._max_positions = max_positions

    # -- hooks ------------------------------------------------------------------------------
    def _kv_shape(self) -> KVShape:
        raise NotImplementedError

    def _bind(self, cache: WindowCache) -> Any:
        """The model's own view of a new cache (kept as cache.bound); none by default."""
        return None

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _prompt_inputs(self, prompt: PromptBatch) -> torch.Tensor:
        positions = torch.full_like(prompt.tokens, -1)
        return self._embed(prompt.tokens, positions)

    def _run(self, x: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        raise NotImplementedError

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- the contract -----------------------------------------------------------------------
    def new_cache(self, batch: int, prompt_len: int, window: int) -> WindowCache:
        N = self.layout.n_positions
        if self._max_positions is not None and prompt_len + N > self._max_positions:
            raise UserError(
                f"a prompt of {prompt_len} tokens does not fit: {self.name} has {self._max_positions} positions, "
                f"{N} of them for the image, so a prompt may have at most {self._max_positions - N} tokens; "
                "shorten the prompt"
            )
        cache = WindowCache(batch, prompt_len, N, window, self._kv_shape(), self.device, self.own_positions)
        cache.bound = self._bind(cache)
        return cache

    @torch.inference_mode()
    def prefill(self, cache: WindowCache, samples: list[int], prompts: list[PromptBatch]) -> torch.Tensor:
        return self._prefill(cache, samples, prompts)[0]

    @torch.inference_mode()
    def prefill_states(
        self, cache: WindowCache, samples: list[int], prompts: list[PromptBatch]
    ) -> tuple[torch.Tensor, PromptStates]:
        """`prefill` plus the prompts' hidden states, for a drafter (the capability's prefill)."""
        logits, hidden, rotary, pad_mask = self._prefill(cache, samples, prompts)
        n, P = len(samples), cache.prompt_len
        tokens = torch.stack([self._prompt_token_ids(p, P) for p in prompts])  # (n, 2, P)
        rows = torch.tensor([r for s in samples for r in (2 * s, 2 * s + 1)], dtype=torch.long, device=self.device)
        states = PromptStates(
            hidden=hidden.view(n, 2, P, -1),
            tokens=tokens,
            valid=pad_mask.view(n, 2, P),
            rotary=rotary.view(n, 2, P),
            base=cache.base[rows].view(n, 2),
        )
        return logits, states

    def _prefill(
        self, cache: WindowCache, samples: list[int], prompts: list[PromptBatch]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits (n, 2, V), hidden (2n, P, D), rotary positions (2n, P), pad mask (2n, P))."""
        P = cache.prompt_len
        too_long = [p.length for p in prompts if p.length > P]
        if too_long:
            raise ValueError(f"a prompt of {too_long[0]} tokens in a cache made for prompts of up to {P}")
        inputs, pad_masks = [], []
        for prompt in prompts:  # left-pad each prompt into the prompt region
            x = self._prompt_inputs(prompt)  # (2, P_i, D)
            extra = P - prompt.length
            inputs.append(torch.nn.functional.pad(x, (0, 0, extra, 0)))
            pad_masks.append(torch.nn.functional.pad(prompt.pad_mask.to(self.device), (extra, 0)))
        pad_mask = torch.cat(pad_masks)  # (2n, P)
        rotary, mask = cache.begin_prefill(samples, pad_mask, [p.length for p in prompts])
        try:
            hidden = self._run(torch.cat(inputs), rotary, mask, cache)  # (2n, P, D)
        finally:
            cache.end_prefill()
        logits = self._head(hidden[:, -1:])[:, 0].to(self.dtype)  # (2n, V)
        return logits.view(len(samples), 2, -1), hidden, rotary, pad_mask

    def _prompt_token_ids(self, prompt: PromptBatch, P: int) -> torch.Tensor:
        """(2, P) the ids a drafter embeds for the prompt slots, left-padded like the prompt region. A
        model whose prompt is not token ids (`_prompt_inputs` overridden: LlamaGen's caption slots)
        gives id 0, as jadohu/LANTERN's LlamaGen drafter does."""
        if type(self)._prompt_inputs is not WindowedAdapter._prompt_inputs:
            return torch.zeros(2, P, dtype=torch.long, device=self.device)
        return torch.nn.functional.pad(prompt.tokens.to(self.device), (P - prompt.length, 0))

    @torch.inference_mode()
    def forward(self, cache: WindowCache, window: WindowInputs) -> torch.Tensor:
        # window.lengths: padding slots are computed like any other, nothing to skip
        return self._window(cache, window)[0]

    @torch.inference_mode()
    def forward_states(self, cache: WindowCache, window: WindowInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` plus each slot's hidden state (B, 2, L, D), for a drafter (the capability's window)."""
        logits, hidden = self._window(cache, window)
        B, L = window.tokens.shape
        return logits, hidden.view(B, 2, L, -1)

    def _window(self, cache: WindowCache, window: WindowInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (B, 2, L, V), hidden (2B, L, D)): the head's input comes for free with its output."""
        tokens, positions, mask, horizon = window.tokens, window.positions, window.mask, window.horizon
        B, L = tokens.shape
        slots = cache.compiled_slots(L, horizon) if self.compile else L
        rotary, attend = cache.begin_window(positions, mask, horizon, slots, bucket_keys=self.compile)
        row_tokens = tokens.repeat_interleave(2, dim=0)  # (2B, L): the CFG pair of each sample
        row_positions = positions.repeat_interleave(2, dim=0)
        if slots > L:  # padding slots repeat the last one
            extra = slots - L
            row_tokens = torch.cat([row_tokens, row_tokens[:, -1:].expand(-1, extra)], dim=1)
            row_positions = torch.cat([row_positions, row_positions[:, -1:].expand(-1, extra)], dim=1)
        x = self._embed(row_tokens, row_positions)
        run = self._compiled_run if self.compile else self._run
        hidden = run(x, rotary, attend, cache)[:, :L]
        return self._head(hidden).to(self.dtype).view(B, 2, L, -1), hidden

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's head over hidden states (..., D) -> logits (..., V) in `dtype` (a drafter's
        features go through it)."""
        return self._head(hidden).to(self.dtype)

    @property
    def weights_dtype(self) -> torch.dtype:
        """The precision the model's weights (and its cache) are in."""
        return self._kv_shape().dtype

    @property
    def hidden_size(self) -> int:
        """Width of the hidden states the head reads."""
        return int(self.token_embeddings().shape[-1])

    @torch.inference_mode()
    def commit(self, cache: WindowCache, slots: torch.Tensor) -> None:
        span = _chain_span(cache, slots)
        if span is not None:
            cache.commit_span(*span)
        else:
            cache.commit(slots)

    @torch.inference_mode()
    def retain(self, cache: WindowCache, samples: list[int]) -> None:
        cache.retain(samples)  # a bound view reads the cache's tensors through it, so it follows

    @property
    def _compiled_run(self) -> Any:
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            # one compilation per bucketed shape: more than dynamo's default of 8, past which it would
            # silently run the forward eager in a run recorded as compiled; past ours it raises
            dynamo = torch._dynamo.config
            dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)
            dynamo.fail_on_recompile_limit_hit = True
            compiled = self.__dict__["_compiled"] = torch.compile(self._run, dynamic=False)
        return compiled

    # -- model data some decoding parts read ------------------------------------------------
    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        raise NotImplementedError

    def codebook(self) -> torch.Tensor:
        return self._codebook()

    def token_embeddings(self) -> torch.Tensor:
        return self._token_embeddings()

    @property
    def gsd_d_thr(self) -> float:
        if self._gsd_d_thr is None:
            self._gsd_d_thr = nearest_neighbour_threshold(self.token_embeddings()[self.image_token_ids])
        return self._gsd_d_thr


def _chain_span(cache: WindowCache, slots: torch.Tensor) -> tuple[int, int, int] | None:
    """(first slot, first position, count) when a one-sample CPU commit keeps consecutive slots at
    consecutive positions (a chain's accepted prefix): slices then replace index tensors. None on
    other devices (reading the values would be a host sync) and for anything else."""
    if slots.device.type != "cpu" or slots.shape[0] != 1 or slots.numel() == 0:
        return None
    kept = slots[0].tolist()
    if min(kept) < 0:
        return None
    at = cache.window_positions[0, slots[0]].tolist()
    first, start, count = kept[0], at[0], len(kept)
    if kept != list(range(first, first + count)) or at != list(range(start, start + count)):
        return None
    return first, start, count
