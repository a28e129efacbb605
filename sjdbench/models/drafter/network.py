"""The EAGLE-style drafter network: one decoder layer that reads the target's features.

For each entry the drafter embeds a token with the target's token embedding, concatenates it with
a feature (the target's last hidden state of the slot before that token, or the drafter's own
output while it drafts ahead), projects 2d -> d with one linear layer (`fc`, with bias) and runs
`num_hidden_layers` (1 in every released drafter) decoder layers of the target's family. Its output
is a feature again: the target's LM head turns it into draft logits (the head is the caller's).

Two families, as jadohu/LANTERN releases them (`models/drafters/cnets_llamagen.py`, `cnets_anole.py`):
    llama       LLaMA layer (RMSNorm, SwiGLU); the first layer has no input norm (the fc output
                goes straight into attention), later layers have one. The toy and LlamaGen.
    chameleon   Chameleon layer: input norm on every layer and per-head QK-LayerNorm (weight and
                bias (heads, head_dim)). Anole.
Two position encodings: `rope` (1-D rotary, rotate-half, the target's theta) and `llamagen_2d`
(LlamaGen's 2-D table, indexed by entry position; the released drafter builds it with one
conditioning slot fewer than the target, 119, because it reads the slot *before* each token).

Parameter names are the released ones (`embed_tokens.weight`, `fc.weight`, `fc.bias`,
`layers.0.self_attn.q_proj.weight`, ..., `layers.0.post_attention_layernorm.weight`), so a released
`pytorch_model.bin` loads strictly. Attention stores and reads its keys through the cache it is given
(`cache.update(layer, k, v)`, see `drafter/cache.py`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sjdbench.models.llama import RMSNorm, wide
from sjdbench.models.llamagen_gpt import GPTConfig, rope_table_2d, rotate_pairs

FAMILIES = ("llama", "chameleon")
ROTARIES = ("rope", "llamagen_2d")
TABLE_MARGIN = 20  # zero rows past the 2-D table (the released drafter adds 10 + 10)


@dataclass
class DrafterConfig:
    family: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    num_hidden_layers: int = 1
    rms_norm_eps: float = 1e-5
    rotary: str = "rope"
    rope_theta: float = 10000.0
    grid: int = 0  # llamagen_2d: image side in tokens
    cls_token_num: int = 0  # llamagen_2d: zero rows before the grid's
    fc_bias: bool = True  # the released config's "bias" (absent: True)
    attention_bias: bool = False  # chameleon configs' attention_bias / mlp_bias
    mlp_bias: bool = False
    # jadohu/LANTERN's LlamaGen drafter runs without an attention mask: its prompt entries over the
    # caption's padding are visible. Elsewhere an entry whose feature comes from padding is hidden.
    sees_prompt_padding: bool = False

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"drafter family '{self.family}' is unknown; choose one of: {', '.join(FAMILIES)}")
        if self.rotary not in ROTARIES:
            raise ValueError(f"drafter rotary '{self.rotary}' is unknown; choose one of: {', '.join(ROTARIES)}")
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{self.hidden_size} hidden units cannot split into {self.num_attention_heads} heads "
                f"sharing {self.num_key_value_heads} key/value heads"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DrafterConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"drafter config has unknown keys {unknown}")
        return cls(**values)


class DrafterAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        H, KV, hd, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        self.q_proj = nn.Linear(D, H * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(D, KV * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(D, KV * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(H * hd, D, bias=cfg.attention_bias)
        if cfg.family == "chameleon":  # per-head LayerNorm of queries and keys, one affine row per head
            self.q_norm = HeadNorm(H, hd)
            self.k_norm = HeadNorm(KV, hd)

    def forward(self, x: torch.Tensor, rotary: Rotary, mask: torch.Tensor, cache: Any, layer: int) -> torch.Tensor:
        """x (R, L, D); mask (R, 1, L, keys) bool; keys stored and read through `cache.update`."""
        R, L, _ = x.shape
        H, KV, hd = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        q = self.q_proj(x).view(R, L, H, hd)
        k = self.k_proj(x).view(R, L, KV, hd)
        v = self.v_proj(x).view(R, L, KV, hd).transpose(1, 2)  # (R, KV, L, hd)
        if self.cfg.family == "chameleon":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotary.apply(q).transpose(1, 2), rotary.apply(k).transpose(1, 2)  # (R, H|KV, L, hd)
        keys, values = cache.update(layer, k, v)  # (R, KV, keys, hd)
        if KV != H:
            keys, values = keys.repeat_interleave(H // KV, dim=1), values.repeat_interleave(H // KV, dim=1)
        with torch.autocast(x.device.type, enabled=False):  # softmax in fp32 at least, as the released layer
            y = F.scaled_dot_product_attention(wide(q), wide(keys), wide(values), attn_mask=mask)  # (R, H, L, hd)
        return self.o_proj(y.type_as(x).transpose(1, 2).reshape(R, L, H * hd))


class HeadNorm(nn.Module):
    """LayerNorm over each head's dimension, then that head's own scale and bias (heads, head_dim)."""

    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(heads, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads, head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (R, L, heads, head_dim)."""
        return F.layer_norm(x, x.shape[-1:], eps=1e-5) * self.weight + self.bias


class DrafterMLP(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        D, inner, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(D, inner, bias=bias)
        self.up_proj = nn.Linear(D, inner, bias=bias)
        self.down_proj = nn.Linear(inner, D, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig, index: int) -> None:
        super().__init__()
        self.index = index
        if cfg.family == "chameleon" or index > 0:
            self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DrafterAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = DrafterMLP(cfg)

    def forward(self, x: torch.Tensor, rotary: Rotary, mask: torch.Tensor, cache: Any) -> torch.Tensor:
        norm = getattr(self, "input_layernorm", None)
        x = x + self.self_attn(x if norm is None else norm(x), rotary, mask, cache, self.index)
        return x + self.mlp(self.post_attention_layernorm(x))


class Rotary:
    """The rotary encoding of one forward's entries, applied to queries and keys (R, L, heads, hd)."""

    def __init__(self, kind: str, cos: torch.Tensor, sin: torch.Tensor | None = None) -> None:
        self.kind, self.cos, self.sin = kind, cos, sin

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "llamagen_2d":
            return rotate_pairs(x, self.cos)  # cos holds the (R, L, hd/2, 2) table rows
        assert self.sin is not None
        cos, sin = self.cos[:, :, None], self.sin[:, :, None]  # (R, L, 1, hd)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return (wide(x) * cos + wide(rotated) * sin).type_as(x)


class DrafterNet(nn.Module):
    """The network; `forward` maps (tokens, features, positions) to output features through a cache."""

    inv_freq: torch.Tensor  # buffer (head_dim / 2,) for rope
    table: torch.Tensor  # buffer (entries, head_dim / 2, 2) for llamagen_2d

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)  # the target's, frozen
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=cfg.fc_bias)
        self.layers = nn.ModuleList(DrafterLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        hd = cfg.head_dim
        if cfg.rotary == "rope":
            inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
            self.register_buffer("inv_freq", inv_freq, persistent=False)
        else:
            grid = GPTConfig(dim=cfg.hidden_size, n_head=cfg.num_attention_heads, cls_token_num=cfg.cls_token_num)
            grid.grid = cfg.grid
            table = torch.cat([rope_table_2d(grid), torch.zeros(TABLE_MARGIN, hd // 2, 2)])
            self.register_buffer("table", table, persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def rotary(self, positions: torch.Tensor) -> Rotary:
        """positions (R, L) long -> the rotary encoding of entries there."""
        if self.cfg.rotary == "llamagen_2d":
            return Rotary("llamagen_2d", self.table[positions.clamp(0, self.table.shape[0] - 1)])
        precision = torch.promote_types(self.dtype, torch.float32)  # fp32 as the released code; fp64 in fp64
        angles = positions[..., None].to(precision) * self.inv_freq.to(precision)  # (R, L, hd/2)
        angles = torch.cat([angles, angles], dim=-1)
        return Rotary("rope", angles.cos(), angles.sin())

    def forward(
        self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """tokens (R, L), features (R, L, D), rotary positions (R, L), mask (R, 1, L, keys) bool ->
        output features (R, L, D) (no final norm: the target's head reads them as they are)."""
        embedded = self.embed_tokens(tokens).to(features.dtype)  # (R, L, D)
        x = self.fc(torch.cat([embedded, features], dim=-1))
        rotary = self.rotary(positions)
        for layer in self.layers:
            x = layer(x, rotary, mask, cache)
        return x

    def parameter_count(self) -> int:
        """Trained parameters (the frozen token embedding excluded)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def init_drafter(net: DrafterNet, std: float = 0.02, seed: int | None = None) -> DrafterNet:
    """Normal(0, std) linear weights, zero biases, unit norms: the trainable part's start."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in net.named_parameters():
            if name.startswith("embed_tokens"):
                continue
            if param.dim() >= 2 and "norm" not in name:
                param.copy_(torch.randn(param.shape, generator=generator) * std)
            elif name.endswith("bias"):
                param.zero_()
    return net


class NoCache:
    """The cache of a plain forward (training, references): each layer attends to its own new keys."""

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return k, v
