"""LlamaGen's VQ-16 image tokenizer (16384 codes of dim 8, L2-normalised, 16x downsampling), as
released in `vq_ds16_t2i.pt` (`checkpoint["model"]`).

Parameter names follow that checkpoint: encoder/decoder `conv_blocks.<level>.res.<i>`,
`conv_blocks.<level>.attn.<i>` (attention at the coarsest level only), `mid.0/1/2`, and the
quantizer's `embedding` plus its `codebook_used` usage buffer. Decoding looks codes up in the
L2-normalised codebook, as LlamaGen's `decode_code` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from sjdbench.models.vq_blocks import VQ16_LAYOUT, Decoder, Encoder, Levels, VQModel, load_exact, read_checkpoint


@dataclass
class VQ16Config:
    codebook_size: int = 16384
    codebook_embed_dim: int = 8
    ch: int = 128
    ch_mult: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    num_res_blocks: int = 2
    z_channels: int = 256
    usage_buffer: int = 65536  # length of the training-time `codebook_used` buffer kept in the checkpoint

    @property
    def downsampling(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)

    def levels(self) -> Levels:
        """The encoder's and the decoder's levels: attention at the coarsest one only."""
        n = len(self.ch_mult)
        return Levels(self.ch, self.ch_mult, self.num_res_blocks, [i == n - 1 for i in range(n)])

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> VQ16Config:
        """The architecture of a checkpoint, read from its weight shapes (VQ-16 and VQ-8 alike)."""
        ch = state["encoder.conv_in.weight"].shape[0]
        levels = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("encoder.conv_blocks."))
        mult = [state[f"encoder.conv_blocks.{i}.res.0.conv1.weight"].shape[0] // ch for i in range(levels)]
        blocks = {k.split(".")[4] for k in state if k.startswith("encoder.conv_blocks.0.res.")}
        size, dim = state["quantize.embedding.weight"].shape
        usage = state.get("quantize.codebook_used")
        return cls(
            codebook_size=size,
            codebook_embed_dim=dim,
            ch=ch,
            ch_mult=mult,
            num_res_blocks=len(blocks),
            z_channels=state["encoder.conv_out.weight"].shape[0],
            usage_buffer=usage.numel() if usage is not None else cls.usage_buffer,
        )


class Quantizer(nn.Module):
    def __init__(self, cfg: VQ16Config) -> None:
        super().__init__()
        self.embedding = nn.Embedding(cfg.codebook_size, cfg.codebook_embed_dim)
        self.register_buffer("codebook_used", torch.zeros(cfg.usage_buffer))

    def normalised(self) -> torch.Tensor:
        return F.normalize(self.embedding.weight, p=2, dim=-1)  # (K, D)


class VQ16(VQModel):
    quantize: Quantizer

    def __init__(self, cfg: VQ16Config) -> None:
        levels = cfg.levels()
        encoder = Encoder(VQ16_LAYOUT, levels, in_channels=3, out_channels=cfg.z_channels)
        decoder = Decoder(VQ16_LAYOUT, levels, z_channels=cfg.z_channels, out_channels=3)
        super().__init__(encoder, decoder, Quantizer(cfg), cfg.z_channels, cfg.codebook_embed_dim)
        self.cfg = cfg

    def code_vectors(self, codes: torch.Tensor) -> torch.Tensor:
        return self.quantize.normalised()[codes]  # the L2-normalised codebook, as LlamaGen's decode_code

    @classmethod
    def load(cls, checkpoint: Path) -> VQ16:
        state = read_checkpoint(checkpoint)
        state = state.get("model", state)
        model = cls(VQ16Config.from_state(state))
        load_exact(model, state, str(checkpoint))
        return model.eval()
