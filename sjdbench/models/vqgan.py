"""Meta's Chameleon image tokenizer (a taming-transformers VQGAN: 8192 codes of dim 256, 16x
downsampling), as released in `vqgan.ckpt` + `vqgan.yaml` and used by Lumina-mGPT to decode.

transformers' `ChameleonVQVAE` has an encoder only, so the decoder is ours. Parameter names follow
the release checkpoint's `state_dict` (encoder.*, decoder.*, quantize.embedding.weight, quant_conv.*,
post_quant_conv.*): every weight of the module must be in the file with its shape (`loss.*`
discriminator weights a training checkpoint may carry are skipped by name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from sjdbench.models.vq_blocks import META_LAYOUT, Decoder, Encoder, Levels, VQModel, load_exact, read_checkpoint


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

    def levels(self) -> tuple[Levels, Levels]:
        """The encoder's and the decoder's levels, with attention where the resolution is one of
        attn_resolutions: the encoder halves `resolution` level by level, the decoder doubles the
        latents' side, as the original does."""
        n, coarsest = len(self.ch_mult), self.resolution // self.downsampling
        down = [self.resolution // 2**i in self.attn_resolutions for i in range(n)]
        up = [coarsest * 2 ** (n - 1 - i) in self.attn_resolutions for i in range(n)]
        widths = (self.ch, self.ch_mult, self.num_res_blocks)
        return Levels(*widths, down), Levels(*widths, up)


class Quantizer(nn.Module):
    def __init__(self, cfg: VQGANConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(cfg.n_embed, cfg.embed_dim)


class ChameleonVQGAN(VQModel):
    quantize: Quantizer

    def __init__(self, cfg: VQGANConfig) -> None:
        down, up = cfg.levels()
        latents = 2 * cfg.z_channels if cfg.double_z else cfg.z_channels
        encoder = Encoder(META_LAYOUT, down, in_channels=cfg.in_channels, out_channels=latents)
        decoder = Decoder(META_LAYOUT, up, z_channels=cfg.z_channels, out_channels=cfg.out_ch)
        super().__init__(encoder, decoder, Quantizer(cfg), cfg.z_channels, cfg.embed_dim)
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
