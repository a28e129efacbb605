"""The debug model: a tiny random-weight LLaMA with a 2-D token grid, forced row ends and CFG.

It builds in milliseconds from a seed, so tests and the exactness suite can enumerate its full
sequence distribution. `init_std` controls how peaked and context-dependent its distributions are.
"""

from __future__ import annotations

import numpy as np
import torch

from sjdbench.adapter import Sampling, SegmentLayout
from sjdbench.models.llama import Llama, LlamaConfig
from sjdbench.models.llama_adapter import EOI, EOL, LlamaImageAdapter, vocab_size_for


def palette(n_codes: int, seed: int) -> np.ndarray:
    """A fixed random colour per code (n_codes, 3) uint8."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n_codes, 3), dtype=np.uint8)


def image_token_count(n_codes: int = 64, **_) -> int:
    """Image codes in the vocabulary (known from the options, before building)."""
    return n_codes


def build_debug_adapter(
    grid_h: int = 8,
    grid_w: int = 8,
    n_codes: int = 64,
    row_end_token: bool = True,
    end_token: bool = False,
    dim: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    init_std: float = 0.3,
    seed: int = 0,
    cfg_scale: float = 3.0,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    pixels_per_code: int = 4,
    device: str = "cpu",
) -> LlamaImageAdapter:
    generator = torch.Generator().manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size_for(n_codes), dim=dim, n_layers=n_layers, n_heads=n_heads, max_seq_len=512)
    model = Llama(cfg)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=generator) * init_std)
    model.to(device)
    layout = SegmentLayout.grid(grid_h, grid_w, EOL if row_end_token else None, EOI if end_token else None)
    colours = palette(n_codes, seed)

    def decode_codes(codes: torch.Tensor) -> np.ndarray:
        image = colours[codes.numpy()]  # (h, w, 3)
        return image.repeat(pixels_per_code, axis=0).repeat(pixels_per_code, axis=1)

    # codebook: random vectors with near-duplicate pairs (the ambiguity LANTERN/GSD exploit)
    base = torch.randn(n_codes, 8, generator=generator)
    base[1::2] = base[0::2][: n_codes // 2] + 0.05 * torch.randn(n_codes // 2, 8, generator=generator)
    sampling = Sampling(cfg_scale=cfg_scale, temperature=temperature, top_k=top_k, top_p=top_p)
    return LlamaImageAdapter("debug", model, n_codes, layout, sampling, decode_codes, base)
