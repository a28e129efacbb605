"""The contract between the decoding loop and a model: the loop never knows which model it drives.

Both `sjdbench.decoding` (which drives adapters) and `sjdbench.models` (which implements them)
import this module; neither imports the other.

Coordinates: the *generated segment* has positions 0..N-1 (everything after the prompt). The
adapter describes it with a `SegmentLayout`: each position is either CONTENT (an image token at
grid cell (row, col), sampled and verified) or FORCED (a structural token such as end-of-line,
written in, never sampled).

Batches: one cache holds B *samples* (images decoded in lockstep); sample b is the model-batch rows
2b (conditional) and 2b + 1 (unconditional), so the CFG pair of every sample runs inside one
forward, and one forward over all samples counts as one function evaluation (NFE) for each of them.
Samples are independent: each has its own prompt (left-padded into the cache's prompt region), its
own committed tokens, and windows at its own positions. A sample that finishes leaves the batch
(`retain`) or its slot is reused for the next prompt (`prefill` starts a sample afresh).

The window forward takes explicit positions and a mask over each sample's own window slots, and the
cache keeps any subset of a window's slots. A chain of drafts is the simplest case (positions
n-1, n, ..., causal mask, keep a prefix); a draft tree (several slots share a position, each sees
only its ancestors) and several image rows in flight (each row sees only its own drafts) use the
same two calls. Windows of different lengths in one batch are padded at the end by the loop: a
padding slot's logits are never read and it is never committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

GUIDANCE = ("always", "above_one")  # when a model's released pipeline mixes the CFG pair (docs/MODELS.md)


@dataclass(frozen=True)
class Sampling:
    """Processing of every distribution that is sampled or compared (draft and target alike)."""

    cfg_scale: float = 1.0
    temperature: float = 1.0  # 0 = argmax (greedy): the processed distribution is one-hot
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    # the model's rule, not a knob: always = mix at every scale (Lumina-mGPT, Janus-Pro, Emu3);
    # above_one = mix only at a scale above 1, else the conditional row alone (LlamaGen)
    guidance: str = "always"

    def __post_init__(self) -> None:
        if self.guidance not in GUIDANCE:
            raise ValueError(f"guidance '{self.guidance}' is unknown; choose one of: {', '.join(GUIDANCE)}")


@dataclass
class SegmentLayout:
    """Per generated position j: forced[j] = token id (or -1 for content), row[j], col[j] (-1 for forced)."""

    forced: torch.Tensor  # (N,) long
    row: torch.Tensor  # (N,) long
    col: torch.Tensor  # (N,) long
    grid_hw: tuple[int, int]

    @property
    def n_positions(self) -> int:
        return int(self.forced.numel())

    @property
    def is_forced(self) -> torch.Tensor:
        return self.forced >= 0

    def position_of(self) -> torch.Tensor:
        """(rows, cols) table: segment position of each grid cell."""
        h, w = self.grid_hw
        table = torch.full((h, w), -1, dtype=torch.long)
        content = ~self.is_forced
        table[self.row[content], self.col[content]] = torch.nonzero(content).squeeze(1)
        return table

    @staticmethod
    def grid(h: int, w: int, eol_token: int | None = None, eoi_token: int | None = None) -> SegmentLayout:
        """Row-major grid, optionally with a forced end-of-line token after each row and an end token."""
        forced, rows, cols = [], [], []
        for r in range(h):
            for c in range(w):
                forced.append(-1)
                rows.append(r)
                cols.append(c)
            if eol_token is not None:
                forced.append(eol_token)
                rows.append(-1)
                cols.append(-1)
        if eoi_token is not None:
            forced.append(eoi_token)
            rows.append(-1)
            cols.append(-1)
        as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
        return SegmentLayout(as_long(forced), as_long(rows), as_long(cols), (h, w))


@dataclass
class PromptBatch:
    """Encoded prompt for both CFG branches: tokens (2, P), pad_mask (2, P) True = real token."""

    tokens: torch.Tensor
    pad_mask: torch.Tensor
    text: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return int(self.tokens.shape[1])


@dataclass(frozen=True)
class WindowInputs:
    """What one window forward reads, for every sample of a cache (B samples, L slots).

    Slot (b, i) holds tokens[b, i] at segment position positions[b, i]. It sees every *committed*
    token of sample b at a position < positions[b, i] (its prompt included) and its window slots j
    with mask[b, i, j]; mask None is the causal chain (slot i sees slots 0..i). One value, because
    the loop, the adapters and every wrapper of an adapter pass these together."""

    tokens: torch.Tensor  # (B, L) token ids
    positions: torch.Tensor  # (B, L) segment positions
    mask: torch.Tensor | None = None  # (B, L, L) bool: which window slots each slot sees
    # No slot sits at a position >= horizon (host int), so committed entries from there on need not be
    # attended to: a cheaper forward, never needed for correctness; a compiled forward may ignore it
    # to keep its shapes static.
    horizon: int | None = None
    # Each sample's real slots; the rest pad its window and may be answered with anything.
    lengths: list[int] | None = None


@runtime_checkable
class ImageARAdapter(Protocol):
    """What every model provides to the loop (docs/MODELS.md describes each model's layout)."""

    name: str
    vocab_size: int
    layout: SegmentLayout
    image_token_ids: torch.Tensor  # (K,) legal ids at content positions, in VQ-code order
    default_sampling: Sampling
    device: torch.device
    dtype: torch.dtype  # of the logits the forward returns (float32; float64 where the model runs in it)

    def encode_prompt(self, text: str) -> PromptBatch: ...

    def new_cache(self, batch: int, prompt_len: int, window: int) -> Any:
        """A cache for `batch` samples, prompts of up to `prompt_len` tokens (PromptBatch.length), the
        whole segment, and windows of up to `window` slots. Every sample starts empty."""
        ...

    def prefill(self, cache: Any, samples: list[int], prompts: list[PromptBatch]) -> torch.Tensor:
        """Start samples[i] afresh with prompts[i] (whatever the sample held before is forgotten) and
        run the prompts: logits (len(samples), 2, V) predicting segment position 0 of each sample."""
        ...

    def forward(self, cache: Any, window: WindowInputs) -> torch.Tensor:
        """One window forward for every sample in the cache -> logits (B, 2, L, V) in `dtype`; slot i's
        logits predict the token after it. The window's keys and values are held until `commit`;
        nothing is committed by the forward itself."""
        ...

    def commit(self, cache: Any, slots: torch.Tensor) -> None:
        """Keep the given slots (B, K) of the last window as committed tokens of each sample, at their
        positions; entries < 0 pad rows of different lengths. Every other slot of that window is
        forgotten."""
        ...

    def retain(self, cache: Any, samples: list[int]) -> None:
        """The cache now holds only these samples, in this order (sample i of the cache is the old
        samples[i]); the others leave the batch. Forwards after it take B = len(samples)."""
        ...

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        """Segment tokens (N,) -> uint8 image (H, W, 3)."""
        ...

    # -- model data some decoding parts read (implemented once, for every model, by the models layer)
    def codebook(self) -> torch.Tensor:
        """VQ vectors (K, D) in code order (row k belongs to image_token_ids[k]); for LANTERN."""
        ...

    def token_embeddings(self) -> torch.Tensor:
        """Input embeddings (V, D) the language model gives each token id (rows of ids that are not
        image tokens may be anything); for GSD's grouping distance."""
        ...

    @property
    def gsd_d_thr(self) -> float:
        """GSD's squared-distance threshold in the units of `token_embeddings` (the paper's 0.5 for
        Lumina-mGPT-like models), used when the GSD verifier's `d_thr` is null."""
        ...


# -- an optional capability: the target's hidden states, for drafters ---------------------------
@dataclass
class PromptStates:
    """What a prefill hands a drafter about the prompts it ran (n samples, both CFG rows).

    A drafter reads, for each slot, the target's last hidden state: the final-norm output the LM head
    reads (EAGLE's feature; jadohu/LANTERN takes `outputs[0]` of the base model, which is after the
    final norm). Drafter entries pair the hidden state of slot i - 1 with the token of slot i.
    """

    hidden: torch.Tensor  # (n, 2, P, D) last hidden state of every prompt slot
    tokens: torch.Tensor  # (n, 2, P) the token id each slot holds, as a drafter embeds it (padding: anything)
    valid: torch.Tensor  # (n, 2, P) bool: a real prompt token (False: left padding)
    rotary: torch.Tensor  # (n, 2, P) long: the rotary position the target gave each slot
    base: torch.Tensor  # (n, 2) long: the rotary position of segment position 0 in each row


@runtime_checkable
class HiddenStatesAdapter(Protocol):
    """An adapter that returns, on request, each slot's last hidden state with its logits (both CFG
    rows: the released drafters run on the conditional and the unconditional row and mix their
    logits like the target's). Asking costs nothing extra: the hidden states are the head's input."""

    name: str
    returns_hidden_states: bool  # False: the model cannot (a drafter preset refuses it)
    hidden_size: int

    def prefill_states(
        self, cache: Any, samples: list[int], prompts: list[PromptBatch]
    ) -> tuple[torch.Tensor, PromptStates]:
        """`prefill`, plus the prompts' hidden states: (logits (n, 2, V), PromptStates)."""
        ...

    def forward_states(self, cache: Any, window: WindowInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`, plus each slot's hidden state: (logits (B, 2, L, V), hidden (B, 2, L, D))."""
        ...

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's head over hidden states (..., D) -> logits (..., V) in `dtype`: a drafter's
        features go through it."""
        ...

    def token_embeddings(self) -> torch.Tensor: ...


def returns_hidden_states(adapter: Any) -> bool:
    """Whether `adapter` can hand a drafter its hidden states (the capability's flag)."""
    return bool(getattr(adapter, "returns_hidden_states", False))


def require_hidden_states(adapter: Any, what: str = "a drafter") -> HiddenStatesAdapter:
    """The adapter as a HiddenStatesAdapter, or one line naming the model that cannot serve `what`."""
    if not returns_hidden_states(adapter):
        from sjdbench.errors import UserError

        raise UserError(
            f"model '{getattr(adapter, 'name', type(adapter).__name__)}' does not return its hidden states, "
            f"which {what} needs; choose a decoder without a drafter or a model that has them"
        )
    return adapter
