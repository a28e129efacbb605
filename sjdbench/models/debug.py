"""The debug model: a tiny random-weight LLaMA with a 2-D token grid, forced row ends and CFG.

It builds in milliseconds from a seed, so tests and the exactness suite can enumerate its full
sequence distribution. `init_std` controls how peaked and context-dependent its distributions are.
In fp64 (`model.dtype=fp64`) the same seeded weights run in double precision: batched and
unbatched forwards then agree far below any sampling decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from sjdbench.adapter import SegmentLayout
from sjdbench.models.llama import Llama, LlamaConfig
from sjdbench.models.llama_adapter import EOI, EOL, LlamaImageAdapter, vocab_size_for
from sjdbench.models.options import ModelOptions
from sjdbench.models.registry import ModelEntry


@dataclass
class DebugOptions(ModelOptions):
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp64")

    cfg_scale: float = 3.0
    grid_h: int = 8
    grid_w: int = 8
    n_codes: int = 64
    row_end_token: bool = True
    end_token: bool = False
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    init_std: float = 0.3
    seed: int = 0
    pixels_per_code: int = 4


def palette(n_codes: int, seed: int) -> np.ndarray:
    """A fixed random colour per code (n_codes, 3) uint8."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n_codes, 3), dtype=np.uint8)


def build(options: DebugOptions, device: str, name: str = "debug") -> LlamaImageAdapter:
    """The seeded random LLaMA of `options` (variants of it pass their own name)."""
    o = options
    generator = torch.Generator().manual_seed(o.seed)
    cfg = LlamaConfig(vocab_size=vocab_size_for(o.n_codes), dim=o.dim, n_layers=o.n_layers, n_heads=o.n_heads)
    model = Llama(cfg)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=generator) * o.init_std)
    model.to(device).to_precision(o.torch_dtype(device))
    layout = SegmentLayout.grid(o.grid_h, o.grid_w, EOL if o.row_end_token else None, EOI if o.end_token else None)
    colours = palette(o.n_codes, o.seed)

    def decode_codes(codes: torch.Tensor) -> np.ndarray:
        image = colours[codes.numpy()]  # (h, w, 3)
        return image.repeat(o.pixels_per_code, axis=0).repeat(o.pixels_per_code, axis=1)

    # codebook: random vectors with near-duplicate pairs (the ambiguity LANTERN/GSD exploit)
    base = torch.randn(o.n_codes, 8, generator=generator)
    base[1::2] = base[0::2][: o.n_codes // 2] + 0.05 * torch.randn(o.n_codes // 2, 8, generator=generator)
    return LlamaImageAdapter(
        name, model, o.n_codes, layout, o.sampling(), decode_codes, base, compile=o.compile, gsd_d_thr=0.5
    )


def build_debug_adapter(device: str = "cpu", **options) -> LlamaImageAdapter:
    """The debug model from keyword options (`build_debug_adapter(grid_h=2, n_codes=4)`)."""
    return build(DebugOptions.from_dict(options), device)


MODEL = ModelEntry(DebugOptions, build, image_tokens=lambda options: options.n_codes)
