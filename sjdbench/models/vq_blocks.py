"""Convolutional blocks of the taming-transformers VQGAN family, shared by Meta's Chameleon VQGAN
(`vqgan.py`, used by Lumina-mGPT) and LlamaGen's VQ-16 (`vq16.py`).

Both release checkpoints name these blocks' parameters the same way (norm1/conv1/norm2/conv2/
nin_shortcut, norm/q/k/v/proj_out, conv) and nest them in the same encoder and decoder; they differ
only in what they call the level lists, a level's resnets and the middle's blocks, and in which order
the decoder's levels are stored: each release's `Layout` below. Inference only: no dropout, no
losses.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

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


@dataclass(frozen=True)
class Layout:
    """How a release names and orders the parts of its encoder and decoder (the parts are the same)."""

    levels: tuple[str, str]  # the encoder's and the decoder's list of resolution levels
    resnets: str  # a level's list of resnet blocks
    middle: tuple[str, str, str]  # the middle's resnet, attention and second resnet block
    decoder_finest_first: bool  # the decoder's levels are stored finest first (and run in reverse)


# LlamaGen's VQ-16: level lists `conv_blocks` (the decoder's coarsest first), the middle a plain list
VQ16_LAYOUT = Layout(("conv_blocks", "conv_blocks"), "res", ("0", "1", "2"), decoder_finest_first=False)
# Meta's VQGAN: level lists `down` and `up` (both finest first), the middle's blocks named
META_LAYOUT = Layout(("down", "up"), "block", ("block_1", "attn_1", "block_2"), decoder_finest_first=True)


@dataclass(frozen=True)
class Levels:
    """The resolution levels of an encoder or a decoder, finest first: level i maps to ch * ch_mult[i]
    channels through `count` resnet blocks (a decoder's level has one more), with attention where
    attention[i]."""

    ch: int
    ch_mult: Sequence[int]
    count: int
    attention: Sequence[bool]


def _module_list(module: nn.Module, name: str) -> nn.ModuleList:
    """The list of blocks `module` holds under a release's name for it."""
    return cast(nn.ModuleList, module.get_submodule(name))


class Level(nn.Module):
    """One resolution level: `count` resnet blocks (the first from `channels`, all to `out_channels`),
    each followed by an attention block where the level has attention, then its resampler where it has
    one (`resample`: "downsample" or "upsample", the releases' name for it). `resnets` names the resnet
    list as the release does."""

    def __init__(
        self, resnets: str, channels: int, out_channels: int, count: int, attention: bool, resample: str | None
    ) -> None:
        super().__init__()
        self._names = (resnets, resample)
        blocks, attn = nn.ModuleList(), nn.ModuleList()
        self.add_module(resnets, blocks)
        self.attn = attn
        for _ in range(count):
            blocks.append(ResnetBlock(channels, out_channels))
            channels = out_channels
            if attention:
                attn.append(AttnBlock(channels))
        self.channels = channels  # the level's output channels
        if resample == "downsample":
            self.downsample = Downsample(channels)
        elif resample == "upsample":
            self.upsample = Upsample(channels)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        resnets, resample = self._names
        for j, block in enumerate(_module_list(self, resnets)):
            h = block(h)
            if len(self.attn):
                h = self.attn[j](h)
        return h if resample is None else self.get_submodule(resample)(h)


class Middle(nn.Module):
    """Resnet, attention, resnet at the coarsest resolution, under the release's three names."""

    def __init__(self, channels: int, names: tuple[str, str, str]) -> None:
        super().__init__()
        blocks = (ResnetBlock(channels, channels), AttnBlock(channels), ResnetBlock(channels, channels))
        for name, block in zip(names, blocks):
            self.add_module(name, block)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for block in self.children():
            h = block(h)
        return h


class Encoder(nn.Module):
    """Images (B, in_channels, H, W) -> latents (B, out_channels, H / 2^(n-1), W / 2^(n-1)) for n
    levels: conv_in, the levels finest first (each but the last downsampling), the middle, norm,
    conv_out."""

    def __init__(self, layout: Layout, levels: Levels, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.layout = layout
        self.conv_in = nn.Conv2d(in_channels, levels.ch, 3, padding=1)
        built: list[Level] = []  # finest first
        channels = levels.ch
        for i, mult in enumerate(levels.ch_mult):
            resample = "downsample" if i != len(levels.ch_mult) - 1 else None
            built.append(Level(layout.resnets, channels, levels.ch * mult, levels.count, levels.attention[i], resample))
            channels = built[-1].channels
        self.add_module(layout.levels[0], nn.ModuleList(built))
        self.mid = Middle(channels, layout.middle)
        self.norm_out = group_norm(channels)
        self.conv_out = nn.Conv2d(channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for level in _module_list(self, self.layout.levels[0]):
            h = level(h)
        return self.conv_out(swish(self.norm_out(self.mid(h))))


class Decoder(nn.Module):
    """Latents (B, z_channels, h, w) -> images (B, out_channels, h * 2^(n-1), w * 2^(n-1)): conv_in,
    the middle, the levels coarsest first (each but the finest upsampling), norm, conv_out."""

    def __init__(self, layout: Layout, levels: Levels, z_channels: int, out_channels: int) -> None:
        super().__init__()
        self.layout = layout
        channels = levels.ch * levels.ch_mult[-1]
        self.conv_in = nn.Conv2d(z_channels, channels, 3, padding=1)
        self.mid = Middle(channels, layout.middle)
        built: list[Level] = []  # coarsest first
        for i in reversed(range(len(levels.ch_mult))):
            out, resample = levels.ch * levels.ch_mult[i], "upsample" if i != 0 else None
            built.append(Level(layout.resnets, channels, out, levels.count + 1, levels.attention[i], resample))
            channels = built[-1].channels
        self.add_module(layout.levels[1], nn.ModuleList(built[::-1] if layout.decoder_finest_first else built))
        self.norm_out = group_norm(channels)
        self.conv_out = nn.Conv2d(channels, out_channels, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(z))
        levels = _module_list(self, self.layout.levels[1])
        for level in reversed(levels) if self.layout.decoder_finest_first else levels:
            h = level(h)
        return self.conv_out(swish(self.norm_out(h)))


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
