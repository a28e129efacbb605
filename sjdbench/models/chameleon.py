"""The Chameleon language model (LLaMA with per-head QK-LayerNorm) over the shared static cache,
for Lumina-mGPT.

transformers' `ChameleonForConditionalGeneration` cannot generate images: its forward overwrites
every image token's logit with the dtype minimum. This module reproduces the same network and
returns plain `lm_head` logits. Parameter names are those of the HF-format checkpoints
(`model.layers.N.self_attn.q_proj.weight`, ..., `lm_head.weight`), so Lumina-mGPT's safetensors
load as they are.

QK-LayerNorm: Chameleon normalises each head's query and key over the head dimension and then
applies a (groups, head_dim) scale and bias, repeated over the heads of each group. Lumina-mGPT's
checkpoints store one group (model_parallel_size = 1, weight (1, 128)); transformers' conversion of
Meta's checkpoints stores one row per head. Both are the same operation with a different group count.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.llama import RMSNorm


@dataclass
class ChameleonLMConfig:
    vocab_size: int = 65536
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    model_parallel_size: int = 1  # QK-norm groups: rows of q_norm.weight
    qk_norm_groups_k: int | None = None  # rows of k_norm.weight (default: model_parallel_size)
    swin_norm: bool = False
    bos_token_id: int = 1

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> ChameleonLMConfig:
        """From a Chameleon `config.json` (unknown keys ignored)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in config.items() if k in known and v is not None}
        theta = (config.get("rope_parameters") or {}).get("rope_theta")
        if theta is not None:
            values["rope_theta"] = theta
        cfg = cls(**values)
        if cfg.swin_norm:
            raise ValueError("Chameleon checkpoints with swin_norm=true (the 30B layout) are not supported")
        return cfg

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class HeadLayerNorm(nn.Module):
    """LayerNorm over each head's dimension, then a per-group affine repeated over the group's heads."""

    def __init__(self, heads: int, groups: int, head_dim: int) -> None:
        super().__init__()
        if heads % groups:
            raise ValueError(f"{heads} heads cannot share {groups} QK-norm groups")
        self.heads_per_group = heads // groups
        self.weight = nn.Parameter(torch.ones(groups, head_dim))
        self.bias = nn.Parameter(torch.zeros(groups, head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, L, heads, head_dim)."""
        normed = F.layer_norm(x, x.shape[-1:], eps=1e-5)
        weight = self.weight.repeat_interleave(self.heads_per_group, dim=0)  # (heads, head_dim)
        bias = self.bias.repeat_interleave(self.heads_per_group, dim=0)
        return normed * weight + bias


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ChameleonLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        H, KV, hd, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        self.q_proj = nn.Linear(D, H * hd, bias=False)
        self.k_proj = nn.Linear(D, KV * hd, bias=False)
        self.v_proj = nn.Linear(D, KV * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, D, bias=False)
        self.q_norm = HeadLayerNorm(H, cfg.model_parallel_size, hd)
        self.k_norm = HeadLayerNorm(KV, cfg.qk_norm_groups_k or cfg.model_parallel_size, hd)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, cache: WindowCache, layer: int
    ) -> torch.Tensor:
        """x (B, L, D); cos/sin (B, L, hd); mask (B, 1, L, keys); keys stored and read through the cache."""
        B, L, _ = x.shape
        H, KV, hd = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, L, H, hd)).transpose(1, 2)  # (B, H, L, hd)
        k = self.k_norm(self.k_proj(x).view(B, L, KV, hd)).transpose(1, 2)  # (B, KV, L, hd)
        v = self.v_proj(x).view(B, L, KV, hd).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        keys, values = cache.update(layer, k, v)  # (B, KV, keys, hd)
        if KV != H:
            keys, values = keys.repeat_interleave(H // KV, dim=1), values.repeat_interleave(H // KV, dim=1)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # (B, H, L, hd)
        return self.o_proj(y.transpose(1, 2).reshape(B, L, H * hd))


class MLP(nn.Module):
    def __init__(self, cfg: ChameleonLMConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ChameleonLMConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, cache: WindowCache, layer: int) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ChameleonLMConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class ChameleonLM(nn.Module):
    """`model.*` backbone and `lm_head`, as in the HF-format checkpoint. `forward` runs the backbone
    over input vectors at rotary positions (B, L) through a cache and returns the final hidden
    states; `lm_head` is applied by the caller to the rows it needs."""

    inv_freq: torch.Tensor  # buffer (head_dim / 2,) rotary frequencies

    def __init__(self, cfg: ChameleonLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        half = cfg.head_dim // 2
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, dtype=torch.float32) * 2 / cfg.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def kv_shape(self) -> KVShape:
        cfg = self.cfg
        return KVShape(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, self.lm_head.weight.dtype)

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, L) -> cos, sin (B, L, head_dim), computed in fp32 like transformers' RoPE."""
        freqs = positions[..., None].float() * self.inv_freq  # (B, L, hd/2)
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        cos, sin = self.rotary(positions, x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, cache, i)
        return self.model.norm(x)
