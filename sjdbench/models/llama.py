"""A small LLaMA-style decoder (RoPE, RMSNorm, SwiGLU), the network of the debug and toy models.

`Llama.forward` is the plain causal forward the toy is trained with; decoding runs `Llama.hidden`
over the shared static cache (`cache.WindowCache`, through `llama_adapter.LlamaImageAdapter`), the
same cache and window forward every model decodes with. Norms, rotary embeddings and attention run
in fp32 at least (fp64 when the model is fp64), whatever the weights' precision.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sjdbench.models.cache import WindowCache


@dataclass
class LlamaConfig:
    vocab_size: int
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    hidden_mult: float = 8 / 3
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    # > 0: a learned embedding of each generated-segment index (0..segment_len-1) is added to that
    # token's input. 1-D RoPE only tells a small model *relative* offsets; to start an object "at the
    # top left" it must know which row and column it is drawing, which a 4-layer model would have to
    # infer from the <eol> rhythm. The real 7B models do without it; the toy uses it.
    segment_len: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def hidden_dim(self) -> int:
        hidden = int(self.hidden_mult * self.dim)
        return 16 * math.ceil(hidden / 16)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_wide = wide(x)
        normed = x_wide * torch.rsqrt(x_wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def wide(x: torch.Tensor) -> torch.Tensor:
    """x in fp32, or in its own precision when that is wider (fp64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def rope_tables(cfg: LlamaConfig, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (max_seq_len, head_dim/2) for rotary embeddings, computed in `dtype`."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=dtype) / half))
    angles = torch.outer(torch.arange(cfg.max_seq_len, dtype=dtype), inv_freq)
    return angles.cos(), angles.sin()


def segment_index(length: int, prompt_len: int) -> torch.Tensor:
    """(length,) segment index of each position of `prompt + segment` inputs; -1 inside the prompt."""
    return (torch.arange(length) - prompt_len).clamp(min=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, nh, L, hd); cos/sin: (L, hd/2) or (B, 1, L, hd/2). Rotates the two halves of each head."""
    x1, x2 = wide(x).chunk(2, dim=-1)
    rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return rotated.type_as(x)


class FusedQKV(nn.Module):
    """Attention weights stored as one fused q/k/v projection `wqkv` (D -> 3D) and the output `wo`,
    as ours and LlamaGen's GPT name them; each attention applies its own rotary embedding."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)


class Attention(FusedQKV):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__(cfg.dim)
        self.cfg = cfg

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        cache: WindowCache | None = None,
        layer: int = 0,
    ) -> torch.Tensor:
        """x (B, L, D); mask (B, 1, L, keys). With a cache the new keys are stored there and the
        attention reads the keys it returns; without one (training) it reads the L new keys."""
        B, L, D = x.shape
        nh, hd = self.cfg.n_heads, self.cfg.head_dim
        q, k, v = self.wqkv(x).split(D, dim=-1)
        q = q.view(B, L, nh, hd).transpose(1, 2)  # (B, nh, L, hd)
        k = k.view(B, L, nh, hd).transpose(1, 2)
        v = v.view(B, L, nh, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, nh, keys, hd)
        # attention stays fp32 under bf16 autocast (training): the softmax over a few hundred keys is
        # where reduced precision hurts most; measured on 2 cores it costs 0.80 s vs 0.75 s per toy step
        with torch.autocast(x.device.type, enabled=False):
            y = F.scaled_dot_product_attention(wide(q), wide(k), wide(v), attn_mask=mask)  # (B, nh, L, hd)
        return self.wo(y.type_as(x).transpose(1, 2).reshape(B, L, D))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w13 = nn.Linear(cfg.dim, 2 * cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, cos, sin, mask, cache: WindowCache | None = None, layer: int = 0) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, cache, layer)
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    """Decoder-only transformer: `forward` is the plain causal forward (training); `embed`, `hidden`
    and `head` are its steps, which the adapter runs over a cache."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.segment_embed = nn.Embedding(cfg.segment_len, cfg.dim) if cfg.segment_len > 0 else None
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def to_precision(self, dtype: torch.dtype) -> Llama:
        """Weights in `dtype`; in fp64 the rotary tables are recomputed in fp64 (not fp32 values cast up)."""
        self.to(dtype)
        if dtype == torch.float64:
            cos, sin = rope_tables(self.cfg, dtype)
            self.rope_cos, self.rope_sin = cos.to(self.head.weight.device), sin.to(self.head.weight.device)
        return self

    def embed_tokens(self, tokens: torch.Tensor, segment_index: torch.Tensor | None) -> torch.Tensor:
        """tokens (B, L) -> (B, L, D); segment_index (L,) or (B, L): each token's index in the generated
        segment, -1 for prompt tokens (read only when cfg.segment_len > 0)."""
        x = self.embed(tokens)  # (B, L, D)
        if self.segment_embed is not None:
            if segment_index is None:
                raise ValueError("this model embeds segment positions: pass segment_index (-1 for prompt tokens)")
            in_segment = (segment_index >= 0).to(x.dtype)[..., None]  # (L, 1) or (B, L, 1)
            x = x + self.segment_embed(segment_index.clamp(min=0)) * in_segment  # (B, L, D)
        return x

    def hidden(
        self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: WindowCache | None = None
    ) -> torch.Tensor:
        """The layers and final norm over x (B, L, D) at rotary positions pos (L,) or (B, L)."""
        cos, sin = self.rope_cos[pos], self.rope_sin[pos]  # (L, hd/2) or (B, L, hd/2)
        if pos.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, hd/2): broadcast over heads
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, cache, i)
        return self.norm(x)

    def forward(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor,
        pad_mask: torch.Tensor | None = None,
        segment_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The plain causal forward: tokens (B, L) at positions pos (L,) -> logits (B, L, V).
        pad_mask: (B, L) True = real token (a padding query sees only itself). segment_index: (L,)
        index of each token in the generated segment, -1 for prompt tokens."""
        B, L = tokens.shape
        x = self.embed_tokens(tokens, segment_index)
        causal = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
        mask = causal[None, None]
        if pad_mask is not None:
            mask = (mask & pad_mask[:, None, None, :]) | torch.eye(L, dtype=torch.bool, device=tokens.device)
        return self.head(self.hidden(x, pos, mask))
