"""A drafter bound to its target: the API a drafter proposal drives.

Coordinates are the adapter contract's (sjdbench/adapter.py): segment positions, B samples, both
CFG rows. An entry *at segment position j* embeds token x_j and reads the feature of the slot
before it; its output feature stands for the target's hidden state at j, so the logits it gives
predict position j + 1, exactly as the target's slot at j does. One iteration of EAGLE-style drafting:

    logits, states = target.prefill_states(cache, samples, prompts)        # once per sample
    drafter.start(dcache, samples, states)
    x0 = sample(logits)
    step = drafter.extend(dcache, x0[:, None], states.hidden[:, :, -1:], positions=0)   # q for position 1
    level = drafter.draft(dcache, children, step.features[parents], positions=1, mask=ancestors)  # q for 2
    ...                                                                    # one draft() per tree depth
    target verifies; accepted tokens x_{n+1..n+a} and the token sampled after them:
    step = drafter.extend(dcache, tokens, hidden of the slots before them, positions)   # drafts forgotten

`extend` pairs each token with the *target's* hidden state (exact features); `draft` pairs it with
the drafter's own output feature of its parent. Both return the logits of every entry through the
target's LM head (raw, both CFG rows: they go through the same processing as the target's) and the
output features the next level reads. Every call is one drafter forward (`forwards` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from sjdbench.adapter import PromptStates
from sjdbench.models.cache import KVShape
from sjdbench.models.drafter.cache import DrafterCache
from sjdbench.models.drafter.network import DrafterNet


@dataclass
class DrafterStep:
    logits: torch.Tensor  # (B, 2, L, V) raw logits of each entry (predicting the position after it)
    features: torch.Tensor  # (B, 2, L, D) output features (a child's input feature)


class Drafter:
    """A `DrafterNet` with its target's LM head; the forwards over a `DrafterCache`."""

    def __init__(self, net: DrafterNet, head: Callable[[torch.Tensor], torch.Tensor], name: str = "drafter") -> None:
        """head: the target's LM head (hidden (..., D) -> logits (..., V)), e.g. adapter.lm_head."""
        self.net = net.eval()
        self.head = head
        self.name = name
        self.forwards = 0  # drafter forwards run (the decoding side reports them beside the target's NFE)

    @property
    def device(self) -> torch.device:
        return self.net.fc.weight.device

    def new_cache(self, batch: int, prompt_len: int, segment_len: int, drafts: int) -> DrafterCache:
        """prompt_len: the target cache's prompt region (`cache.prompt_len`); drafts: the most draft
        entries one iteration holds (the tree's node count)."""
        cfg = self.net.cfg
        shape = KVShape(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, self.net.dtype)
        return DrafterCache(batch, prompt_len, segment_len, drafts, shape, self.device)

    @torch.inference_mode()
    def start(self, cache: DrafterCache, samples: list[int], states: PromptStates) -> None:
        """Start samples[i] afresh on the prompt the target's `prefill_states` ran (states for
        len(samples) samples): their prompt entries, each prompt token with the hidden state of the
        slot before it. The first `extend` (segment position 0) pairs x_0 with the prompt's last slot."""
        n, _, P, D = states.hidden.shape
        if P != cache.prompt_len:
            raise ValueError(f"prompt states of {P} slots for a drafter cache made for {cache.prompt_len}")
        if P < 2:
            return self._reset_only(cache, samples, states)
        rotary, mask = cache.begin_start(
            samples,
            states.valid.reshape(2 * n, P),
            states.rotary.reshape(2 * n, P),
            states.base.reshape(2 * n),
            self.net.cfg.sees_prompt_padding,
        )
        tokens = states.tokens.reshape(2 * n, P)[:, 1:]
        features = states.hidden.reshape(2 * n, P, D)[:, :-1].to(self.net.dtype)
        try:
            self.net(tokens, features, rotary, mask, cache)
        finally:
            cache.end()
        self.forwards += 1

    def _reset_only(self, cache: DrafterCache, samples: list[int], states: PromptStates) -> None:
        n, _, P = states.valid.shape
        rows = cache._rows(samples)
        cache.valid[rows] = False
        cache.base[rows] = states.base.reshape(2 * n)

    @torch.inference_mode()
    def extend(
        self,
        cache: DrafterCache,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        reach: int | None = None,
    ) -> DrafterStep:
        """Commit tokens (B, K) at segment positions (B, K) (< 0: padding) with the target's hidden
        states (B, 2, K, D) of the slots before them (for position 0: the prompt's last slot).
        reach: positions < reach, where the caller knows it on the host (the forwards' keys stop
        there; None: the whole segment). Returns every entry's logits and features; this
        iteration's drafts are forgotten."""
        rotary, mask = cache.begin_extend(positions, reach)
        return self._run(cache, tokens, hidden, rotary, mask)

    @torch.inference_mode()
    def draft(
        self,
        cache: DrafterCache,
        tokens: torch.Tensor,
        features: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> DrafterStep:
        """One level of drafts: tokens (B, L) at segment positions (B, L), each with its parent's
        output feature (B, 2, L, D); mask (B, L, used + L): the draft entries each sees (its
        ancestors; None: a chain). Returns each draft's logits and features."""
        rotary, attend = cache.begin_draft(positions, mask)
        return self._run(cache, tokens, features, rotary, attend)

    def _run(
        self,
        cache: DrafterCache,
        tokens: torch.Tensor,
        features: torch.Tensor,
        rotary: torch.Tensor,
        mask: torch.Tensor,
    ) -> DrafterStep:
        B, L = tokens.shape
        D = features.shape[-1]
        row_tokens = tokens.repeat_interleave(2, dim=0)  # (2B, L)
        try:
            out = self.net(row_tokens, features.reshape(2 * B, L, D).to(self.net.dtype), rotary, mask, cache)
        finally:
            cache.end()
        self.forwards += 1
        out = out.view(B, 2, L, D)
        return DrafterStep(self.head(out), out)

    # -- the cache's bookkeeping, as the target's ---------------------------------------------
    def commit_drafts(self, cache: DrafterCache, entries: torch.Tensor) -> None:
        cache.commit_drafts(entries)

    def rollback(self, cache: DrafterCache, lengths: torch.Tensor) -> None:
        cache.rollback(lengths)

    def discard_drafts(self, cache: DrafterCache) -> None:
        cache.discard_drafts()

    def retain(self, cache: DrafterCache, samples: list[int]) -> None:
        cache.retain(samples)
