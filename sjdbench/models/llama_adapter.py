"""Adapter shared by our own LLaMA-style image models (debug and toy).

Vocabulary: 5 special ids, 96 text ids, then the K image codes:
    0 <pad>  1 <bos>  2 <boi>  3 <eol>  4 <eoi>  5..100 text  101..101+K-1 image codes
Text ids are printable-ASCII characters by default; a model may bring its own text encoder that maps
into the same range (the toy model uses words).
Prompt (conditional):   <bos> caption <boi>
Prompt (unconditional): <bos> <boi>, left-padded to the same length (padding is masked out), which
is also what the toy model sees for the ~10% caption dropout in training, so CFG works.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, Sampling, SegmentLayout
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.llama import Llama
from sjdbench.models.windowed import WindowedAdapter

PAD, BOS, BOI, EOL, EOI = 0, 1, 2, 3, 4
TEXT_OFFSET = 5
N_TEXT = 96  # printable ASCII 32..127
CODE_OFFSET = TEXT_OFFSET + N_TEXT
MAX_CAPTION_CHARS = 160


def vocab_size_for(n_codes: int) -> int:
    return CODE_OFFSET + n_codes


def encode_text(text: str, max_chars: int = MAX_CAPTION_CHARS) -> list[int]:
    """Characters -> text ids; anything outside printable ASCII becomes '?'."""
    ids = []
    for ch in text.strip()[:max_chars]:
        code = ord(ch)
        ids.append(TEXT_OFFSET + (code - 32 if 32 <= code < 128 else ord("?") - 32))
    return ids


def prompt_tokens(caption: str | None, encode: Callable[[str], list[int]] = encode_text) -> list[int]:
    """The conditional prompt for a caption, or the unconditional one for None."""
    return [BOS] + ([] if caption is None else encode(caption)) + [BOI]


class LlamaImageAdapter(WindowedAdapter):
    """Drives a `Llama` whose generated segment is a (h, w) grid of codes, optional <eol>/<eoi>, over
    the shared static cache. Rotary positions count the sample's whole prompt, padding included (as
    the toy was trained: left-padded prompts at positions 0..P-1, segment position j at P + j), and
    each segment token adds the embedding of its segment index (models with cfg.segment_len > 0)."""

    own_positions = True

    def __init__(
        self,
        name: str,
        model: Llama,
        n_codes: int,
        layout: SegmentLayout,
        sampling: Sampling,
        decode_codes: Callable[[torch.Tensor], np.ndarray],
        codebook: torch.Tensor,
        encode_text: Callable[[str], list[int]] = encode_text,
        gsd_d_thr: float = 0.5,
        compile: bool = False,
    ) -> None:
        """gsd_d_thr: GSD's embedding-distance threshold in this model's units (see the GSD verifier)."""
        self.model = model.eval()
        self.n_codes = n_codes
        self._decode_codes = decode_codes
        self._encode_text = encode_text  # caption -> text ids (characters by default; words for the toy)
        device = model.head.weight.device
        super().__init__(
            name,
            layout,
            vocab_size_for(n_codes),
            torch.arange(CODE_OFFSET, CODE_OFFSET + n_codes),
            sampling,
            device,
            codebook=lambda: codebook,
            token_embeddings=lambda: self.model.embed.weight.detach(),
            gsd_d_thr=gsd_d_thr,
            compile=compile,
            max_positions=model.cfg.max_seq_len,
        )

    def encode_prompt(self, text: str) -> PromptBatch:
        cond, uncond = prompt_tokens(text, self._encode_text), prompt_tokens(None)
        length = len(cond)
        tokens = torch.full((2, length), PAD, dtype=torch.long)
        tokens[0] = torch.tensor(cond)
        tokens[1, length - len(uncond) :] = torch.tensor(uncond)  # left-pad the unconditional branch
        pad_mask = tokens != PAD
        return PromptBatch(tokens.to(self.device), pad_mask.to(self.device), text=text)

    # -- WindowedAdapter hooks --------------------------------------------------------------
    def _kv_shape(self) -> KVShape:
        cfg = self.model.cfg
        return KVShape(cfg.n_layers, cfg.n_heads, cfg.head_dim, self.model.head.weight.dtype)

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(tokens, positions)  # segment position j is segment index j

    def _run(self, x: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        return self.model.hidden(x, rotary, mask, cache)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.head(hidden)

    # -- tokens <-> images ------------------------------------------------------------------
    def tokens_to_codes(self, tokens: torch.Tensor) -> torch.Tensor:
        """Segment tokens (N,) -> codes (h, w)."""
        content = ~self.layout.is_forced.to(tokens.device)
        h, w = self.layout.grid_hw
        return (tokens[content] - CODE_OFFSET).view(h, w)

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        return self._decode_codes(self.tokens_to_codes(tokens).cpu())
