"""LlamaGen's text-conditional GPT (FoundationVision/LlamaGen, `t2i_XL_stage*.pt`) over the shared
static cache (`cache.WindowCache`).

The sequence is 120 conditioning slots (flan-t5-xl caption features projected by `cls_embedding`)
followed by the g x g image codes. Positions are a 2-D rotary table indexed by absolute slot: the
conditioning slots get cos = sin = 0 (which zeroes their queries and keys, as in the release), and
image slot 120 + i rotates half of each head's pairs by row i // g and the other half by column
i % g. Rotations act on interleaved (even, odd) pairs, LlamaGen's complex-number convention.

Parameter names follow `checkpoint["model"]` of the release: `cls_embedding.cap_proj.fc1/fc2`,
`cls_embedding.uncond_embedding` (the learned null caption, a buffer), `tok_embeddings`,
`layers.N.attention.wqkv/wo`, `layers.N.feed_forward.w1/w2/w3`, `layers.N.attention_norm`,
`layers.N.ffn_norm`, `norm`, `output`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.llama import FusedQKV, RMSNorm


@dataclass
class GPTConfig:
    dim: int = 1280  # GPT-XL
    n_layer: int = 36
    n_head: int = 20
    vocab_size: int = 16384
    cls_token_num: int = 120
    caption_dim: int = 2048
    grid: int = 32  # block_size = grid ** 2
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    multiple_of: int = 256

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def hidden_dim(self) -> int:
        hidden = int(2 * 4 * self.dim / 3)
        return hidden if hidden % self.multiple_of == 0 else hidden + self.multiple_of - hidden % self.multiple_of


def config_from_state(state: dict[str, torch.Tensor], grid: int) -> GPTConfig:
    """The architecture of a checkpoint, read from its weight shapes. Heads are not visible in the
    shapes: LlamaGen's GPTs use 64-dim heads except GPT-3B (3200 = 32 x 100) and GPT-7B (32 x 128)."""
    vocab_size, dim = state["tok_embeddings.weight"].shape
    n_layer = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
    cls_token_num, caption_dim = state["cls_embedding.uncond_embedding"].shape
    return GPTConfig(
        dim=dim,
        n_layer=n_layer,
        n_head={3200: 32, 4096: 32}.get(dim, dim // 64),
        vocab_size=vocab_size,
        cls_token_num=cls_token_num,
        caption_dim=caption_dim,
        grid=grid,
    )


def rope_table_2d(cfg: GPTConfig) -> torch.Tensor:
    """(cls_token_num + grid², head_dim / 2, 2) cos/sin per slot; zeros for the conditioning slots."""
    quarter = cfg.head_dim // 4
    freqs = 1.0 / (cfg.rope_base ** (torch.arange(0, quarter, dtype=torch.float32) * 2 / (cfg.head_dim // 2)))
    steps = torch.outer(torch.arange(cfg.grid, dtype=torch.float32), freqs)  # (g, hd/4)
    rows = steps[:, None, :].expand(cfg.grid, cfg.grid, quarter)
    cols = steps[None, :, :].expand(cfg.grid, cfg.grid, quarter)
    angles = torch.cat([rows, cols], dim=-1).flatten(0, 1)  # (g², hd/2)
    table = torch.stack([angles.cos(), angles.sin()], dim=-1)
    return torch.cat([torch.zeros(cfg.cls_token_num, cfg.head_dim // 2, 2), table])


def rotate_pairs(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (B, L, H, hd); table (L, hd/2, 2) or (B, L, hd/2, 2) -> x with each (even, odd) pair
    rotated, in fp32."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    table = table if table.dim() == 4 else table[None]
    cos, sin = table[:, :, None, :, 0], table[:, :, None, :, 1]
    out = torch.stack([pairs[..., 0] * cos - pairs[..., 1] * sin, pairs[..., 1] * cos + pairs[..., 0] * sin], dim=-1)
    return out.flatten(3).type_as(x)


class CaptionMLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.caption_dim, cfg.dim, bias=False)
        self.fc2 = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class CaptionEmbedder(nn.Module):
    uncond_embedding: torch.Tensor  # buffer (cls_token_num, caption_dim): the null caption

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cap_proj = CaptionMLP(cfg)
        self.register_buffer("uncond_embedding", torch.zeros(cfg.cls_token_num, cfg.caption_dim))


class Attention(FusedQKV):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg.dim)
        self.cfg = cfg

    def forward(
        self, x: torch.Tensor, table: torch.Tensor, mask: torch.Tensor, cache: WindowCache, layer: int
    ) -> torch.Tensor:
        B, L, D = x.shape
        H, hd = self.cfg.n_head, self.cfg.head_dim
        q, k, v = self.wqkv(x).split(D, dim=-1)
        q = rotate_pairs(q.view(B, L, H, hd), table).transpose(1, 2)  # (B, H, L, hd)
        k = rotate_pairs(k.view(B, L, H, hd), table).transpose(1, 2)
        keys, values = cache.update(layer, k, v.view(B, L, H, hd).transpose(1, 2))  # (B, H, keys, hd)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(B, L, D))


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, table, mask, cache: WindowCache, layer: int) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), table, mask, cache, layer)
        return h + self.feed_forward(self.ffn_norm(h))


class LlamaGenGPT(nn.Module):
    rope: torch.Tensor  # buffer (positions, hd/2, 2): the 2-d rotary table

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.cls_embedding = CaptionEmbedder(cfg)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.register_buffer("rope", rope_table_2d(cfg), persistent=False)

    def kv_shape(self) -> KVShape:
        return KVShape(self.cfg.n_layer, self.cfg.n_head, self.cfg.head_dim, self.output.weight.dtype)

    def embed_captions(self, captions: torch.Tensor) -> torch.Tensor:
        """(B, 120, caption_dim) T5 features (or the null caption) -> (B, 120, dim)."""
        return self.cls_embedding.cap_proj(captions)

    def forward(self, x: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        """x (B, L, dim) at absolute slots (B, L) (the rotary table's rows), mask (B, 1, L, keys), keys
        stored and read through the cache -> final hidden (B, L, dim)."""
        table = self.rope[slots.clamp(max=self.rope.shape[0] - 1)].to(torch.float32)  # (B, L, hd/2, 2)
        for i, layer in enumerate(self.layers):
            x = layer(x, table, mask, cache, i)
        return self.norm(x)
