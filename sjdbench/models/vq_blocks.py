"""Convolutional blocks of the taming-transformers VQGAN family, shared by Meta's Chameleon VQGAN
(`vqgan.py`, used by Lumina-mGPT) and LlamaGen's VQ-16 (`vq16.py`).

Both release checkpoints name these blocks' parameters the same way (norm1/conv1/norm2/conv2/
nin_shortcut, norm/q/k/v/proj_out, conv); they differ only in how the blocks are nested, which each
model file spells out. Inference only: no dropout, no losses.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=32, num_channels=channels, eps=1e-6, affine=True)


def swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


class ResnetBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.norm1 = group_norm(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2 = group_norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(swish(self.norm1(x)))
        h = self.conv2(swish(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over the H*W positions of a feature map."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = group_norm(channels)
        self.q = nn.Conv2d(channels, channels, 1)
        self.k = nn.Conv2d(channels, channels, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        h = self.norm(x)
        q, k, v = (
            proj(h).reshape(B, 1, C, H * W).transpose(-1, -2)  # (B, 1, HW, C)
            for proj in (self.q, self.k, self.v)
        )
        out = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(C)) v
        return x + self.proj_out(out.transpose(-1, -2).reshape(B, C, H, W))


class Upsample(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Downsample(nn.Module):
    """Stride-2 convolution with the asymmetric (right/bottom) zero padding of the originals."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


def fill_level(
    blocks: nn.ModuleList, attn: nn.ModuleList, channels: int, out_channels: int, count: int, attention: bool
) -> int:
    """Build one resolution level: `count` resnet blocks (the first from `channels`, all to
    `out_channels`), each followed by an attention block where the level has attention. Returns the
    level's output channels."""
    for _ in range(count):
        blocks.append(ResnetBlock(channels, out_channels))
        channels = out_channels
        if attention:
            attn.append(AttnBlock(channels))
    return channels


def through_level(h: torch.Tensor, blocks: nn.ModuleList, attn: nn.ModuleList) -> torch.Tensor:
    """One resolution level: its resnet blocks, each followed by its attention block where the level
    has them (its resampler is the caller's: the two releases name it differently)."""
    for j, block in enumerate(blocks):
        h = block(h)
        if len(attn):
            h = attn[j](h)
    return h


class VQModel(nn.Module):
    """The wrapping both releases share: an encoder, a quantizer, a decoder, and the 1x1 convolutions
    between the latents (z_channels) and the code vectors (code_dim). A model says how it looks a
    code's vector up (`code_vectors`)."""

    def __init__(
        self, encoder: nn.Module, decoder: nn.Module, quantize: nn.Module, z_channels: int, code_dim: int
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.quantize = quantize
        self.quant_conv = nn.Conv2d(z_channels, code_dim, 1)
        self.post_quant_conv = nn.Conv2d(code_dim, z_channels, 1)

    def code_vectors(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, h, w) long -> their vectors (B, h, w, code_dim)."""
        raise NotImplementedError

    @torch.inference_mode()
    def decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, h, w) -> images (B, 3, 16h, 16w) in about [-1, 1]."""
        z = self.code_vectors(codes).permute(0, 3, 1, 2)  # (B, D, h, w)
        return self.decoder(self.post_quant_conv(z))


def load_exact(
    module: nn.Module, state: dict[str, torch.Tensor], source: str, ignore: tuple[str, ...] = ()
) -> list[str]:
    """Load `state` (keys under `ignore` prefixes dropped) requiring every weight of `module` with its
    exact shape: one readable line (file, count, first keys) when one is missing or misshapen, never
    a silently half-random model. Keys the module does not have are returned (and logged), not fatal:
    the originals load their release files with strict=False, so a benign extra must not block a run."""
    kept = {k: v for k, v in state.items() if not k.startswith(ignore)}
    expected = module.state_dict()
    missing = sorted(set(expected) - set(kept))
    wrong = sorted(k for k in set(expected) & set(kept) if tuple(expected[k].shape) != tuple(kept[k].shape))
    for label, keys in (("missing", missing), ("wrongly shaped", wrong)):
        if keys:
            raise ValueError(
                f"{source}: {len(keys)} {label} weights for {type(module).__name__}, e.g. "
                f"{', '.join(keys[:3])}; is this the right checkpoint?"
            )
    unexpected = sorted(set(kept) - set(expected))
    if unexpected:
        log.warning(
            "%s: %d weights not used by %s, e.g. %s",
            source,
            len(unexpected),
            type(module).__name__,
            ", ".join(unexpected[:3]),
        )
    module.load_state_dict({k: kept[k] for k in expected}, strict=True)
    return unexpected


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A torch checkpoint's tensors (at the top level, or under a key such as "state_dict"). Release
    files are loaded as plain tensors first; only a file that pickles other objects (a training
    checkpoint's bookkeeping) is read with full unpickling."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        log.info("%s holds non-tensor objects; loading it with full unpickling", path)
        return torch.load(path, map_location="cpu", weights_only=False)
