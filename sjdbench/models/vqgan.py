"""Meta's Chameleon image tokenizer (a taming-transformers VQGAN: 8192 codes of dim 256, 16x
downsampling), as released in `vqgan.ckpt` + `vqgan.yaml` and used by Lumina-mGPT to decode.

transformers' `ChameleonVQVAE` has an encoder only, so the decoder is ours. Parameter names follow
the release checkpoint's `state_dict` (encoder.*, decoder.*, quantize.embedding.weight, quant_conv.*,
post_quant_conv.*): every weight of the module must be in the file with its shape (`loss.*`
discriminator weights a training checkpoint may carry are skipped by name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch
from torch import nn

from sjdbench.models.vq_blocks import (
    AttnBlock,
    Downsample,
    ResnetBlock,
    Upsample,
    VQModel,
    fill_level,
    group_norm,
    load_exact,
    read_checkpoint,
    swish,
    through_level,
)


@dataclass
class VQGANConfig:
    """`model.params` of vqgan.yaml; defaults are the released Chameleon tokenizer's."""

    n_embed: int = 8192
    embed_dim: int = 256
    z_channels: int = 256
    resolution: int = 512
    in_channels: int = 3
    out_ch: int = 3
    ch: int = 128
    ch_mult: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    num_res_blocks: int = 2
    attn_resolutions: list[int] = field(default_factory=list)
    double_z: bool = False

    @classmethod
    def from_yaml(cls, path: Path) -> VQGANConfig:
        import yaml

        params = yaml.safe_load(Path(path).read_text())["model"]["params"]
        dd = params["ddconfig"]
        return cls(
            n_embed=params["n_embed"],
            embed_dim=params["embed_dim"],
            z_channels=dd["z_channels"],
            resolution=dd["resolution"],
            in_channels=dd["in_channels"],
            out_ch=dd["out_ch"],
            ch=dd["ch"],
            ch_mult=list(dd["ch_mult"]),
            num_res_blocks=dd["num_res_blocks"],
            attn_resolutions=list(dd["attn_resolutions"]),
            double_z=dd.get("double_z", False),
        )

    @property
    def downsampling(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)


class _Level(nn.Module):
    """One resolution level: `block` resnets, `attn` blocks, and its resampler (named by the caller)."""

    downsample: nn.Module  # set by the Encoder on every level but the last
    upsample: nn.Module  # set by the Decoder on every level but the first

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.ModuleList()
        self.attn = nn.ModuleList()


class _Middle(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block_1 = ResnetBlock(channels, channels)
        self.attn_1 = AttnBlock(channels)
        self.block_2 = ResnetBlock(channels, channels)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.block_2(self.attn_1(self.block_1(h)))


class Encoder(nn.Module):
    def __init__(self, cfg: VQGANConfig) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(cfg.in_channels, cfg.ch, 3, padding=1)
        in_mult = (1, *cfg.ch_mult)
        res = cfg.resolution
        self.down = nn.ModuleList()
        for i, mult in enumerate(cfg.ch_mult):
            level, channels = _Level(), cfg.ch * in_mult[i]
            attention = res in cfg.attn_resolutions
            channels = fill_level(level.block, level.attn, channels, cfg.ch * mult, cfg.num_res_blocks, attention)
            if i != len(cfg.ch_mult) - 1:
                level.downsample = Downsample(channels)
                res //= 2
            self.down.append(level)
        self.mid = _Middle(channels)
        self.norm_out = group_norm(channels)
        self.conv_out = nn.Conv2d(channels, 2 * cfg.z_channels if cfg.double_z else cfg.z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for i, level in enumerate(cast(Iterable[_Level], self.down)):
            h = through_level(h, level.block, level.attn)
            if i != len(self.down) - 1:
                h = level.downsample(h)
        return self.conv_out(swish(self.norm_out(self.mid(h))))


class Decoder(nn.Module):
    def __init__(self, cfg: VQGANConfig) -> None:
        super().__init__()
        levels = len(cfg.ch_mult)
        channels = cfg.ch * cfg.ch_mult[-1]
        res = cfg.resolution // cfg.downsampling
        self.conv_in = nn.Conv2d(cfg.z_channels, channels, 3, padding=1)
        self.mid = _Middle(channels)
        up: list[_Level] = []
        for i in reversed(range(levels)):  # built from the coarsest level; stored finest-first
            level = _Level()
            out, attention = cfg.ch * cfg.ch_mult[i], res in cfg.attn_resolutions
            channels = fill_level(level.block, level.attn, channels, out, cfg.num_res_blocks + 1, attention)
            if i != 0:
                level.upsample = Upsample(channels)
                res *= 2
            up.insert(0, level)
        self.up = nn.ModuleList(up)
        self.norm_out = group_norm(channels)
        self.conv_out = nn.Conv2d(channels, cfg.out_ch, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(z))
        for i in reversed(range(len(self.up))):
            level = cast(_Level, self.up[i])
            h = through_level(h, level.block, level.attn)
            if i != 0:
                h = level.upsample(h)
        return self.conv_out(swish(self.norm_out(h)))


class Quantizer(nn.Module):
    def __init__(self, cfg: VQGANConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(cfg.n_embed, cfg.embed_dim)


class ChameleonVQGAN(VQModel):
    quantize: Quantizer

    def __init__(self, cfg: VQGANConfig) -> None:
        super().__init__(Encoder(cfg), Decoder(cfg), Quantizer(cfg), cfg.z_channels, cfg.embed_dim)
        self.cfg = cfg

    def code_vectors(self, codes: torch.Tensor) -> torch.Tensor:
        return self.quantize.embedding(codes)  # no normalisation: Chameleon looks its vectors up as stored

    @classmethod
    def load(cls, checkpoint: Path, config: Path | None = None) -> ChameleonVQGAN:
        cfg = VQGANConfig.from_yaml(config) if config is not None else VQGANConfig()
        model = cls(cfg)
        state = read_checkpoint(checkpoint)
        load_exact(model, state.get("state_dict", state), str(checkpoint), ignore=("loss.",))
        return model.eval()
