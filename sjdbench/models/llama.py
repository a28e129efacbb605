"""A small LLaMA-style decoder (RoPE, RMSNorm, SwiGLU) with a static, position-indexed KV cache.

Shared by the debug adapter (random weights, used by tests) and the embedded toy model (trained and
shipped). The cache is written by absolute position, so rolling back rejected Jacobi drafts is
free: their slots are simply overwritten by the next forward, and the attention mask only lets a
query see keys at positions <= its own (gpt-fast's design).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

CPU_FAST_PATHS = True  # the CPU fast paths below; switch off to measure what they save (same tokens either way)


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
        x_float = x.float()
        normed = x_float * torch.rsqrt(x_float.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(cfg: LlamaConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (max_seq_len, head_dim/2) for rotary embeddings."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(cfg.max_seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def segment_index(length: int, prompt_len: int) -> torch.Tensor:
    """(length,) segment index of each position of `prompt + segment` inputs; -1 inside the prompt."""
    return (torch.arange(length) - prompt_len).clamp(min=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, nh, L, hd); cos/sin: (L, hd/2). Rotates the two halves of each head."""
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return rotated.type_as(x)


class KVCache(nn.Module):
    """Static cache (B, nh, max_len + window, hd) per layer, in two regions.

    Indices 0..max_len-1 hold *committed* tokens at their absolute positions; the last `window`
    indices hold the current window's slots, by slot. A window forward writes only the window
    region; `commit` copies the chosen slots to their positions. So any subset of a window can be
    kept (a prefix of a chain, one path of a draft tree, several rows' prefixes), and drafts that
    were not kept never reach the committed region.
    """

    def __init__(
        self,
        batch: int,
        n_heads: int,
        max_len: int,
        window: int,
        head_dim: int,
        dtype,
        device,
        storage: torch.Tensor | None = None,
    ) -> None:
        """storage: (2, batch, n_heads, max_len + window, head_dim) to hold k and v, e.g. one layer's
        slice of the model's single cache tensor; allocated here when not given."""
        super().__init__()
        self.max_len, self.window = max_len, window
        if storage is None:
            storage = torch.zeros(2, batch, n_heads, max_len + window, head_dim, dtype=dtype, device=device)
        self.k, self.v = storage[0], storage[1]  # views (B, nh, max_len + window, hd)

    def write(self, index: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, nh, L, hd) at cache indices (L,); returns the whole cache for attention."""
        self.k[:, :, index] = k
        self.v[:, :, index] = v
        return self.k, self.v

    def commit(self, slots: torch.Tensor, positions: torch.Tensor, span: tuple[int, int, int] | None = None) -> None:
        """Copy window slots (k,) to the committed region at absolute positions (k,). span: (first
        slot, first position, count) when both are consecutive, copied as slices (no gather/scatter)."""
        if span is not None:
            slot, position, count = span
            self.k[:, :, position : position + count] = self.k[:, :, self.max_len + slot : self.max_len + slot + count]
            self.v[:, :, position : position + count] = self.v[:, :, self.max_len + slot : self.max_len + slot + count]
            return
        self.k[:, :, positions] = self.k[:, :, self.max_len + slots]
        self.v[:, :, positions] = self.v[:, :, self.max_len + slots]

    def window_keys(self, k: torch.Tensor, v: torch.Tensor, visible: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write a window's k, v (B, nh, L, hd) to window slots 0..L-1 and return only the keys it
        may attend to: committed positions < visible, then its own L slots (B, nh, visible + L, hd)."""
        L = k.shape[2]
        self.k[:, :, self.max_len : self.max_len + L] = k
        self.v[:, :, self.max_len : self.max_len + L] = v
        return (torch.cat([self.k[:, :, :visible], k], dim=2), torch.cat([self.v[:, :, :visible], v], dim=2))


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wqkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.cache: KVCache | None = None

    def forward(self, x, cos, sin, index, mask, visible: int | None = None) -> torch.Tensor:
        """index: (L,) cache indices the new keys are written to (unused without a cache). visible: a
        window forward that attends only to the committed keys below this position and its own
        slots (the mask then has visible + L columns); None: the whole cache."""
        B, L, D = x.shape
        nh, hd = self.cfg.n_heads, self.cfg.head_dim
        q, k, v = self.wqkv(x).split(D, dim=-1)
        q = q.view(B, L, nh, hd).transpose(1, 2)  # (B, nh, L, hd)
        k = k.view(B, L, nh, hd).transpose(1, 2)
        v = v.view(B, L, nh, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.cache is not None and visible is not None:
            k, v = self.cache.window_keys(k, v, visible)  # (B, nh, visible + L, hd)
        elif self.cache is not None:
            k, v = self.cache.write(index, k, v)  # (B, nh, max_len + window, hd)
        # attention stays fp32 under bf16 autocast (training): the softmax over a few hundred keys is
        # where reduced precision hurts most; measured on 2 cores it costs 0.80 s vs 0.75 s per toy step
        with torch.autocast(x.device.type, enabled=False):
            y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)  # (B, nh, L, hd)
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

    def forward(self, x, cos, sin, index, mask, visible: int | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, index, mask, visible)
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    """Decoder-only transformer. `forward(tokens, pos)` uses the cache when one is set up."""

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
        self.key_valid: torch.Tensor | None = None  # (B, max_len) committed keys that may be seen
        self.kv: torch.Tensor | None = None  # (n_layers, 2, B, nh, max_len + window, hd): every layer's cache
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def setup_cache(self, batch: int, max_len: int, window: int = 0) -> None:
        """Allocate a fresh static cache for `max_len` positions plus a window of `window` slots;
        all keys start invisible until written. Every layer's k and v live in one tensor
        (n_layers, 2, B, nh, max_len + window, hd), so a commit is one copy, not 2 per layer."""
        p = self.head.weight
        cfg = self.cfg
        self.kv = torch.zeros(
            cfg.n_layers, 2, batch, cfg.n_heads, max_len + window, cfg.head_dim, dtype=p.dtype, device=p.device
        )
        for layer, storage in zip(self.layers, self.kv):
            layer.attn.cache = KVCache(batch, cfg.n_heads, max_len, window, cfg.head_dim, p.dtype, p.device, storage)
        self.key_valid = torch.zeros(batch, max_len, dtype=torch.bool, device=p.device)

    def clear_cache(self) -> None:
        for layer in self.layers:
            layer.attn.cache = None
        self.key_valid = None
        self.kv = None

    def _embed(self, tokens: torch.Tensor, segment_index: torch.Tensor | None) -> torch.Tensor:
        x = self.embed(tokens)  # (B, L, D)
        if self.segment_embed is not None:
            if segment_index is None:
                raise ValueError("this model embeds segment positions: pass segment_index (-1 for prompt tokens)")
            in_segment = (segment_index >= 0).to(x.dtype)[:, None]  # (L, 1)
            x = x + self.segment_embed(segment_index.clamp(min=0)) * in_segment  # (B, L, D)
        return x

    def _run(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        index: torch.Tensor | None,
        mask: torch.Tensor,
        visible: int | None = None,
    ) -> torch.Tensor:
        cos, sin = self.rope_cos[pos], self.rope_sin[pos]  # (L, hd/2)
        for layer in self.layers:
            x = layer(x, cos, sin, index, mask, visible)
        return self.head(self.norm(x))

    def forward(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor,
        pad_mask: torch.Tensor | None = None,
        segment_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens: (B, L) ids at absolute positions pos: (L,). pad_mask: (B, L) True = real token.
        segment_index: (L,) index of each input token in the generated segment, -1 for prompt tokens
        (used only when cfg.segment_len > 0).

        Returns logits (B, L, V). Without a cache this is a plain causal forward (training); with one
        the tokens are written straight to the committed region (the prompt prefill).
        """
        B, L = tokens.shape
        x = self._embed(tokens, segment_index)
        if self.key_valid is not None:
            valid = torch.ones(B, L, dtype=torch.bool, device=tokens.device) if pad_mask is None else pad_mask
            self.key_valid[:, pos] = valid
            max_len = self.key_valid.shape[1]
            key_pos = torch.arange(max_len, device=tokens.device)
            causal = key_pos[None, :] <= pos[:, None]  # (L, max_len)
            itself = key_pos[None, :] == pos[:, None]  # a padding query sees itself: no NaN rows
            committed = (causal[None, None] & self.key_valid[:, None, None, :]) | itself[
                None, None
            ]  # (B, 1, L, max_len)
            window = self.layers[0].attn.cache.window
            mask = torch.cat([committed, committed.new_zeros(B, 1, L, window)], dim=-1)  # window region unseen
            return self._run(x, pos, pos, mask)
        causal = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
        mask = causal[None, None]
        if pad_mask is not None:
            mask = (mask & pad_mask[:, None, None, :]) | torch.eye(L, dtype=torch.bool, device=tokens.device)
        return self._run(x, pos, pos, mask)

    def forward_window(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor,
        window_mask: torch.Tensor | None = None,
        segment_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """A window of drafts: tokens (B, L) at absolute positions pos (L,) -> logits (B, L, V).

        Slot i sees the committed keys at positions < pos[i] and the window slots j with
        window_mask[i, j] (L, L) (None: causal, j <= i). Keys go to the window region only.
        """
        B, L = tokens.shape
        cache = self.layers[0].attn.cache
        if self.key_valid is None or L > cache.window:
            raise ValueError(f"window of {L} slots needs a cache set up with window >= {L}")
        x = self._embed(tokens, segment_index)
        if window_mask is None:
            window_mask = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
        if tokens.device.type == "cpu" and CPU_FAST_PATHS:
            # Attend only to what any slot may see: committed positions below the window's last one,
            # then the window's own L slots. Past the image's written prefix the static cache is
            # empty; on a CPU computing attention over it is most of the attention's cost (reading
            # the bound is free here, on a GPU it would be a host sync, so GPUs keep the full cache).
            visible = int(pos.max())
            key_pos = torch.arange(visible, device=tokens.device)
            committed = (key_pos[None, :] < pos[:, None])[None, None] & self.key_valid[
                :, None, None, :visible
            ]  # (B, 1, L, visible)
            mask = torch.cat([committed, window_mask[None, None].expand(B, 1, L, L)], dim=-1)  # (B, 1, L, visible + L)
            return self._run(x, pos, None, mask, visible)
        max_len = self.key_valid.shape[1]
        key_pos = torch.arange(max_len, device=tokens.device)
        earlier = key_pos[None, :] < pos[:, None]  # (L, max_len)
        committed = earlier[None, None] & self.key_valid[:, None, None, :]  # (B, 1, L, max_len)
        slots = torch.zeros(L, cache.window, dtype=torch.bool, device=tokens.device)
        slots[:, :L] = window_mask
        mask = torch.cat([committed, slots[None, None].expand(B, 1, L, cache.window)], dim=-1)
        index = max_len + torch.arange(L, device=tokens.device)
        return self._run(x, pos, index, mask)

    def commit_window(self, slots: torch.Tensor, positions: torch.Tensor) -> None:
        """Keep window slots (k,) as committed tokens at absolute positions (k,)."""
        span = _consecutive_span(slots, positions) if CPU_FAST_PATHS else None
        max_len = self.key_valid.shape[1]
        if span is not None:
            slot, position, count = span
            self.kv[:, :, :, :, position : position + count] = self.kv[
                :, :, :, :, max_len + slot : max_len + slot + count
            ]
            self.key_valid[:, position : position + count] = True
        else:
            self.kv[:, :, :, :, positions] = self.kv[:, :, :, :, max_len + slots]
            self.key_valid[:, positions] = True


def _consecutive_span(slots: torch.Tensor, positions: torch.Tensor) -> tuple[int, int, int] | None:
    """(first slot, first position, count) when a CPU commit keeps consecutive slots at consecutive
    positions (a chain's accepted prefix); then slices replace gathers. None on GPUs (reading the
    values would be a host sync) and for anything else (tree paths)."""
    if slots.device.type != "cpu" or slots.numel() == 0:
        return None
    kept, at = slots.tolist(), positions.tolist()
    first, start, count = kept[0], at[0], len(kept)
    if kept != list(range(first, first + count)) or at != list(range(start, start + count)):
        return None
    return first, start, count
