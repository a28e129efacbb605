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
from sjdbench.models.llama import Llama

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


class LlamaImageAdapter:
    """Drives a `Llama` whose generated segment is a (h, w) grid of codes, optional <eol>/<eoi>."""

    gsd_d_thr: float = 0.5  # GSD's embedding-distance threshold in this model's units (see the GSD verifier)

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
    ) -> None:
        self.name = name
        self.model = model.eval()
        self.n_codes = n_codes
        self.vocab_size = vocab_size_for(n_codes)
        self.layout = layout
        self.default_sampling = sampling
        self._decode_codes = decode_codes
        self._codebook = codebook
        self._encode_text = encode_text  # caption -> text ids (characters by default; words for the toy)
        self.device = next(model.parameters()).device
        self.image_token_ids = torch.arange(CODE_OFFSET, CODE_OFFSET + n_codes, device=self.device)
        self._prompt_len = 0
        self._window_positions = torch.empty(0, dtype=torch.long, device=self.device)  # of the last window

    # -- prompt and cache -------------------------------------------------------------------
    def encode_prompt(self, text: str) -> PromptBatch:
        cond, uncond = prompt_tokens(text, self._encode_text), prompt_tokens(None)
        length = len(cond)
        tokens = torch.full((2, length), PAD, dtype=torch.long)
        tokens[0] = torch.tensor(cond)
        tokens[1, length - len(uncond) :] = torch.tensor(uncond)  # left-pad the unconditional branch
        pad_mask = tokens != PAD
        return PromptBatch(tokens.to(self.device), pad_mask.to(self.device), text=text)

    def new_cache(self, prompt: PromptBatch, extra: int) -> None:
        """The model's own static cache: prompt + segment positions, plus a window of `extra` slots."""
        max_len = prompt.length + self.layout.n_positions
        if max_len > self.model.cfg.max_seq_len:
            raise ValueError(
                f"prompt of {prompt.length} tokens + {self.layout.n_positions} image positions exceeds "
                f"the model's {self.model.cfg.max_seq_len} positions; shorten the prompt"
            )
        self.model.setup_cache(2, max_len, window=max(extra, 1))
        self._prompt_len = prompt.length
        return None

    @torch.inference_mode()
    def prefill(self, prompt: PromptBatch, cache: None) -> torch.Tensor:
        pos = torch.arange(prompt.length, device=self.device)
        no_segment = torch.full_like(pos, -1)
        logits = self.model(prompt.tokens, pos, pad_mask=prompt.pad_mask, segment_index=no_segment)  # (2, P, V)
        return logits[:, -1].float()

    @torch.inference_mode()
    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        # segment position j sits at absolute position P + j; the last prompt token predicts j = 0
        L = tokens.shape[0]
        self._window_positions = positions
        logits = self.model.forward_window(
            tokens[None].expand(2, L), positions + self._prompt_len, mask, segment_index=positions
        )  # (2, L, V)
        return logits.float()

    @torch.inference_mode()
    def commit(self, cache: None, slots: torch.Tensor) -> None:
        """Static position-indexed cache: copy the kept slots to their positions."""
        self.model.commit_window(slots, self._window_positions[slots] + self._prompt_len)

    # -- tokens <-> images ------------------------------------------------------------------
    def tokens_to_codes(self, tokens: torch.Tensor) -> torch.Tensor:
        """Segment tokens (N,) -> codes (h, w)."""
        content = ~self.layout.is_forced.to(tokens.device)
        h, w = self.layout.grid_hw
        return (tokens[content] - CODE_OFFSET).view(h, w)

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        return self._decode_codes(self.tokens_to_codes(tokens).cpu())

    def codebook(self) -> torch.Tensor:
        return self._codebook

    def token_embeddings(self) -> torch.Tensor:
        return self.model.embed.weight.detach()
