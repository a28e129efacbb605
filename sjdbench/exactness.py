"""Exactness checks: compare a decoder's sample distribution with exact AR probabilities.

On a model small enough to enumerate (a few content positions, a few codes), every prefix's logits
are tabulated once through the adapter's own prefill/forward, so (a) the exact AR probability of every
full sequence is a product of processed distributions, and (b) decoding many samples is cheap because
`TabulatedAdapter` answers forwards by lookup. A chi-square goodness-of-fit test then says whether the
decoder is indistinguishable from AR; the total-variation distance says by how much it is not.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from sjdbench.decoding.loop import DecoderParts, jacobi_decode
from sjdbench.decoding.processing import StructureMasks, process_logits
from sjdbench.models.base import Sampling


class TabulatedAdapter:
    """Wraps an adapter; serves prefill/forward from a table of every prefix's logits."""

    def __init__(self, adapter, prompt: str) -> None:
        self.inner = adapter
        self.prompt_text = prompt
        for attr in ("name", "vocab_size", "layout", "image_token_ids", "default_sampling", "device"):
            setattr(self, attr, getattr(adapter, attr))
        self.table = self._tabulate()

    def sequences(self) -> list[tuple[int, ...]]:
        """Every segment consistent with the layout (forced ids fixed, content ids free)."""
        choices = [[int(f)] if f >= 0 else self.image_token_ids.tolist() for f in self.layout.forced.tolist()]
        return [tuple(s) for s in itertools.product(*choices)]

    def _tabulate(self) -> dict[tuple[int, ...], torch.Tensor]:
        inner = self.inner
        prompt = inner.encode_prompt(self.prompt_text)
        N = self.layout.n_positions
        table: dict[tuple[int, ...], torch.Tensor] = {}
        for seq in self.sequences():
            cache = inner.new_cache(prompt, extra=1)
            table[()] = inner.prefill(prompt, cache).cpu()  # (2, V)
            logits = inner.forward(torch.tensor(seq[: N - 1], device=inner.device), 0, cache).cpu()  # (2, N-1, V)
            for j in range(1, N):
                table[seq[:j]] = logits[:, j - 1]
        return table

    def encode_prompt(self, text: str):
        return text

    def new_cache(self, prompt, extra: int) -> list[int]:
        return [-1] * self.layout.n_positions

    def prefill(self, prompt, cache) -> torch.Tensor:
        return self.table[()].to(self.device)

    def forward(self, tokens: torch.Tensor, seg_start: int, cache: list[int]) -> torch.Tensor:
        values = tokens.tolist()
        cache[seg_start : seg_start + len(values)] = values
        rows = [self.table[tuple(cache[: seg_start + i + 1])] for i in range(len(values))]
        return torch.stack(rows, dim=1).to(self.device)  # (2, L, V)

    def rollback(self, cache, n_tokens: int) -> None:
        """Positions are overwritten on the next forward."""

    def codebook(self) -> torch.Tensor:
        return self.inner.codebook()

    def token_embeddings(self) -> torch.Tensor:
        return self.inner.token_embeddings()


def exact_probabilities(adapter: TabulatedAdapter, sampling: Sampling) -> dict[tuple[int, ...], float]:
    """AR probability of every full sequence under the processed distributions."""
    legal = torch.zeros(adapter.vocab_size, dtype=torch.bool)
    legal[adapter.image_token_ids.cpu()] = True
    masks = StructureMasks(adapter.layout.forced, legal)
    probs = {}
    for seq in adapter.sequences():
        total = 1.0
        for j, token in enumerate(seq):
            p = process_logits(adapter.table[seq[:j]][:, None].cpu(), masks.window(j, j + 1), sampling)[0]
            total *= float(p[token])
            if total == 0.0:
                break
        probs[seq] = total
    return probs


@dataclass
class GoodnessOfFit:
    n_samples: int
    chi2: float
    dof: int
    p_value: float
    tv: float  # total variation between empirical and exact
    tv_noise: float  # expected TV of an exact sampler at this n (sampling noise floor)
    mean_nfe: float

    def __str__(self) -> str:
        return (f"n={self.n_samples} chi2={self.chi2:.1f} dof={self.dof} p={self.p_value:.3g} "
                f"TV={self.tv:.4f} (noise floor {self.tv_noise:.4f}) NFE={self.mean_nfe:.2f}")


def chi_square(counts: Counter, exact: dict[tuple[int, ...], float], min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson chi-square; cells with expected count < min_expected are pooled into one."""
    from scipy.stats import chi2 as chi2_dist

    n = sum(counts.values())
    stat, dof, pooled_obs, pooled_exp = 0.0, -1, 0.0, 0.0
    for seq, prob in exact.items():
        expected, observed = n * prob, counts.get(seq, 0)
        if expected < min_expected:
            pooled_obs += observed
            pooled_exp += expected
            continue
        stat += (observed - expected) ** 2 / expected
        dof += 1
    impossible = sum(c for s, c in counts.items() if exact.get(s, 0.0) == 0.0)
    if impossible:  # a sample AR can never produce: certainly not exact
        return float("inf"), max(dof, 1), 0.0
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        dof += 1
    return stat, max(dof, 1), float(chi2_dist.sf(stat, max(dof, 1)))


def expected_tv_noise(exact: dict, n: int) -> float:
    """E[TV] of n exact samples ≈ sum sqrt(p(1-p)/n) * sqrt(2/pi) / 2 (normal approximation)."""
    p = np.array(list(exact.values()))
    return float(0.5 * np.sqrt(2 / np.pi) * np.sqrt(p * (1 - p) / n).sum())


def decoder_fit(adapter: TabulatedAdapter, parts: DecoderParts, sampling: Sampling, n_samples: int, seed: int = 0,
                exact: dict | None = None) -> GoodnessOfFit:
    """Draw n_samples sequences with the decoder and test them against exact AR."""
    exact = exact if exact is not None else exact_probabilities(adapter, sampling)
    generator = torch.Generator(adapter.device).manual_seed(seed)
    counts: Counter = Counter()
    nfe = 0
    for _ in range(n_samples):
        result = jacobi_decode(adapter, adapter.prompt_text, parts, sampling, generator)
        counts[tuple(result.tokens.tolist())] += 1
        nfe += result.stats.nfe
    stat, dof, p_value = chi_square(counts, exact)
    tv = 0.5 * sum(abs(counts.get(s, 0) / n_samples - p) for s, p in exact.items())
    tv += 0.5 * sum(c / n_samples for s, c in counts.items() if s not in exact)
    return GoodnessOfFit(n_samples, stat, dof, p_value, tv, expected_tv_noise(exact, n_samples), nfe / n_samples)
