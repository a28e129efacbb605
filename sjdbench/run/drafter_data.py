"""Self-distilled training data for a drafter: the target's own samples and its hidden states.

The target samples each prompt autoregressively with its default sampling (the processing pipeline
every decoder uses: CFG, structure mask, temperature, top-k, top-p), then one teacher-forced window
forward over the sampled segment records the hidden state of every slot (`forward_states`; the
prefill's `prefill_states` gives the prompt's). jadohu/LANTERN trains on the conditional sequence
with probability 0.9 and on the unconditional one otherwise; here that choice is drawn once per
sample (seeded) and only the chosen row is kept, which halves the data.

A sample is stored as one row's real slots, prompt then segment: tokens (T,), hidden states (T, D)
in fp16 (bf16 keeps too few mantissa bits for the regression target), rotary positions (T,) and the
index of the first segment slot. Batches are written one file each into `folder` as they finish,
named by their seed-determined index, so an interrupted run resumes where it stopped and produces
the same data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from sjdbench.adapter import WindowInputs, require_hidden_states
from sjdbench.decoding.processing import StructureMasks, process_logits

COND_SHARE = 0.9  # LANTERN's share of conditional sequences (train_drafter/data_utils.py)
STORE_DTYPE = torch.float16


@dataclass
class Sequence:
    tokens: torch.Tensor  # (T,) long: the row's real slots, prompt then segment
    hidden: torch.Tensor  # (T, D) STORE_DTYPE: the target's last hidden state of each slot
    rotary: torch.Tensor  # (T,) long: the target's rotary position of each slot
    first_segment: int  # index of segment position 0
    row: int  # 0 conditional, 1 unconditional


def prompt_batches(prompts: list[str], batch: int) -> list[list[str]]:
    return [prompts[i : i + batch] for i in range(0, len(prompts), batch)]


@torch.inference_mode()
def sample_batch(adapter: Any, prompts: list[str], seed: int) -> torch.Tensor:
    """Segments (n, N) of the target's own AR samples of `prompts`, its default sampling, seeded."""
    layout, n = adapter.layout, len(prompts)
    N = layout.n_positions
    encoded = [adapter.encode_prompt(text) for text in prompts]
    P = max(p.length for p in encoded)
    cache = adapter.new_cache(n, P, 1)
    logits = adapter.prefill(cache, list(range(n)), encoded)  # (n, 2, V)
    legal = torch.zeros(adapter.vocab_size, dtype=torch.bool, device=adapter.device)
    legal[adapter.image_token_ids] = True
    masks = StructureMasks(layout.forced.to(adapter.device), legal)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(n, N, dtype=torch.long, device=adapter.device)
    keep = torch.zeros(n, 1, dtype=torch.long, device=adapter.device)
    for j in range(N):
        probs = process_logits(logits[:, :, None], masks.window(j, j + 1), adapter.default_sampling)[:, 0]  # (n, V)
        tokens[:, j] = torch.multinomial(probs.double().cpu(), 1, generator=generator)[:, 0].to(adapter.device)
        if j + 1 < N:
            positions = torch.full((n, 1), j, dtype=torch.long, device=adapter.device)
            logits = adapter.forward(cache, WindowInputs(tokens[:, j : j + 1], positions, horizon=j + 1))[:, :, 0]
            adapter.commit(cache, keep)
    return tokens


@torch.inference_mode()
def teacher_forced(adapter: Any, prompts: list[str], tokens: torch.Tensor, rows: list[int]) -> list[Sequence]:
    """Each sample's chosen row as a Sequence: the prompt's states from the prefill, the segment's
    from one window forward over the sampled tokens."""
    n, N = tokens.shape
    encoded = [adapter.encode_prompt(text) for text in prompts]
    P = max(p.length for p in encoded)
    cache = adapter.new_cache(n, P, N)
    _, states = adapter.prefill_states(cache, list(range(n)), encoded)
    positions = torch.arange(N, device=adapter.device).expand(n, N)
    _, hidden = adapter.forward_states(cache, WindowInputs(tokens, positions))  # (n, 2, N, D)
    out = []
    for b, row in enumerate(rows):
        real = states.valid[b, row]
        prompt_tokens = states.tokens[b, row][real]
        seq_tokens = torch.cat([prompt_tokens, tokens[b]])
        seq_hidden = torch.cat([states.hidden[b, row][real], hidden[b, row]])
        seq_rotary = torch.cat(
            [states.rotary[b, row][real], states.base[b, row] + torch.arange(N, device=adapter.device)]
        )
        out.append(
            Sequence(
                seq_tokens.cpu(),
                seq_hidden.to(STORE_DTYPE).cpu(),
                seq_rotary.cpu(),
                int(prompt_tokens.numel()),
                row,
            )
        )
    return out


def generate(
    adapter: Any,
    prompts: list[str],
    folder: Path,
    seed: int,
    batch: int = 32,
    log: Callable[[str], None] = print,
    both_rows: bool = False,
) -> list[list[Sequence]]:
    """Self-distilled sequences for `prompts`, resumable batch by batch in `folder`: for each prompt,
    one row of its sample (the conditional one with probability 0.9), or with `both_rows` both rows
    (held-out data: CFG needs the pair)."""
    require_hidden_states(adapter, "drafter training")
    folder.mkdir(parents=True, exist_ok=True)
    out: list[list[Sequence]] = []
    started = time.time()
    batches = prompt_batches(prompts, batch)
    for index, texts in enumerate(batches):
        path = folder / f"batch_{index:05d}.pt"
        if path.exists():
            out += [[Sequence(**s) for s in group] for group in torch.load(path, weights_only=False)]
            continue
        rng = np.random.default_rng([seed, 11, index])
        rows = [0 if r < COND_SHARE else 1 for r in rng.random(len(texts))]
        tokens = sample_batch(adapter, texts, seed=int(rng.integers(2**62)))
        if both_rows:
            groups = [
                list(pair)
                for pair in zip(
                    teacher_forced(adapter, texts, tokens, [0] * len(texts)),
                    teacher_forced(adapter, texts, tokens, [1] * len(texts)),
                )
            ]
        else:
            groups = [[s] for s in teacher_forced(adapter, texts, tokens, rows)]
        tmp = path.with_suffix(".tmp")
        torch.save([[vars(s) for s in group] for group in groups], tmp)
        tmp.replace(path)
        out += groups
        log(f"self-distilled data ({folder.name}): batch {index + 1}/{len(batches)}, {time.time() - started:.0f} s")
    return out
