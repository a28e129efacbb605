"""Exactness checks: compare a decoder's sample distribution with exact AR probabilities.

On a model small enough to enumerate (a few content positions, a few codes), every prefix's logits
are tabulated once through the adapter's own prefill/forward, so (a) the exact AR probability of every
full sequence is a product of processed distributions, and (b) decoding many samples is cheap because
`TabulatedAdapter` answers forwards by lookup. A chi-square goodness-of-fit test then says whether the
decoder is indistinguishable from AR; the total-variation distance says by how much it is not.

A chain or a draft tree only ever shows a slot a whole prefix (position 0 up to its own), which the
table answers. Several rows in flight show a slot a context with holes (the rows above are decided
only in part); such a window is answered by the wrapped model itself, with its own cache brought to
the state the decode's earlier forwards and commits left it in (replayed once, then kept in step),
so a lossy decoder's distribution is measured as it runs on the real model.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sjdbench.adapter import Sampling, SegmentLayout, WindowInputs
from sjdbench.decoding.loop import Decoder, Request, jacobi_decode_batch
from sjdbench.decoding.processing import StructureMasks, process_logits


def enumerable_model(device: str = "cpu"):
    """The exactness suite's model: the debug LLaMA on a 2x2 grid of 4 codes with a row end token
    after each row (6 positions, 256 sequences), CFG 2, weights small enough (std 0.15) that many
    sequences carry mass and every conditional depends on its context. The same seeded weights on
    any device."""
    from sjdbench.models.debug import build_debug_adapter

    return build_debug_adapter(
        device, grid_h=2, grid_w=2, n_codes=4, dim=32, n_layers=2, init_std=0.15, cfg_scale=2.0, seed=0
    )


class TabulatedAdapter:
    """Wraps an adapter; serves prefill/forward from a table of every prefix's logits, for a batch of
    samples (each sample's window answered on its own, as the contract says)."""

    # the wrapped adapter's, copied in __init__
    name: str
    vocab_size: int
    layout: SegmentLayout
    image_token_ids: torch.Tensor
    default_sampling: Sampling
    device: torch.device

    def __init__(self, adapter, prompt: str) -> None:
        self.inner = adapter
        self.prompt_text = prompt
        self.live_forwards = 0  # forwards answered by the wrapped model (contexts with holes)
        for attr in ("name", "vocab_size", "layout", "image_token_ids", "default_sampling", "device"):
            setattr(self, attr, getattr(adapter, attr))
        self.dtype = torch.float32
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
        device = inner.device
        for seq in self.sequences():
            cache = inner.new_cache(1, prompt.length, N - 1)
            table[()] = inner.prefill(cache, [0], [prompt])[0].float().cpu()  # (2, V)
            tokens = torch.tensor(seq[: N - 1], device=device)[None]
            logits = (
                inner.forward(cache, WindowInputs(tokens, torch.arange(N - 1, device=device)[None]))[0].float().cpu()
            )
            for j in range(1, N):  # logits (2, N-1, V)
                table[seq[:j]] = logits[:, j - 1]
        return table

    def encode_prompt(self, text: str) -> Any:
        return self.inner.encode_prompt(self.prompt_text)

    def new_cache(self, batch: int, prompt_len: int, window: int) -> list[dict]:
        """Per sample: committed[j], the token committed at segment position j (-1: none yet); window,
        the last forward's (tokens, positions); calls, this decode's forwards and commits, replayed on the
        wrapped model when a window first needs it; live: the wrapped model's cache is in step."""
        self._window = window
        return [self._fresh() for _ in range(batch)]

    def _fresh(self) -> dict:
        return {"committed": [-1] * self.layout.n_positions, "window": ([], []), "calls": [], "live": False}

    def prefill(self, cache: list[dict], samples: list[int], prompts: list) -> torch.Tensor:
        for sample in samples:
            cache[sample] = self._fresh()
        return self.table[()].to(self.device).expand(len(samples), -1, -1)

    def forward(self, cache: list[dict], window: WindowInputs) -> torch.Tensor:
        tokens, positions, mask, lengths = window.tokens, window.positions, window.mask, window.lengths
        L = tokens.shape[1]
        host_mask = None if mask is None else mask.cpu().numpy()
        out = []
        for b, c in enumerate(cache):
            n = L if lengths is None else lengths[b]
            sample_mask = None if mask is None else mask[b, :n, :n]
            logits = self._forward_one(
                c, tokens[b, :n], positions[b, :n], sample_mask, None if host_mask is None else host_mask[b, :n, :n]
            )
            if n < L:  # padding slots: never read
                logits = torch.cat([logits, logits[:, -1:].expand(-1, L - n, -1)], dim=1)
            out.append(logits)
        return torch.stack(out)

    def _forward_one(
        self,
        cache: dict,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        host_mask: np.ndarray | None,
    ) -> torch.Tensor:
        values, where = tokens.tolist(), positions.tolist()
        cache["window"] = (values, where)
        alone = WindowInputs(tokens[None], positions[None], None if mask is None else mask[None])  # B = 1
        if cache["live"]:
            return self._live(alone, cache)
        committed = cache["committed"]
        rows = []
        for i, pos in enumerate(where):
            prefix = committed[: pos + 1]
            visible = range(i + 1) if host_mask is None else np.flatnonzero(host_mask[i]).tolist()
            for j in visible:
                prefix[where[j]] = values[j]
            if -1 in prefix:  # a context with holes: the wrapped model answers from here on
                return self._live(alone, cache)
            rows.append(self.table[tuple(prefix)])
        cache["calls"].append(("forward", alone))
        return torch.stack(rows, dim=1).to(self.device)  # (2, L, V)

    def commit(self, cache: list[dict], slots: torch.Tensor) -> None:
        for c, row in zip(cache, slots):
            kept = row[row >= 0]
            values, where = c["window"]
            for slot in kept.tolist():
                c["committed"][where[slot]] = values[slot]
            if c["live"]:
                self.inner.commit(c["inner"], kept[None])
            else:
                c["calls"].append(("commit", kept))

    def retain(self, cache: list[dict], samples: list[int]) -> None:
        cache[:] = [cache[i] for i in samples]

    def _live(self, window: WindowInputs, cache: dict) -> torch.Tensor:
        """Run the window on the wrapped model, first replaying this decode's earlier calls on a fresh cache."""
        inner = self.inner
        if not cache["live"]:
            prompt = inner.encode_prompt(self.prompt_text)
            cache["inner"] = inner.new_cache(1, prompt.length, self._window)
            inner.prefill(cache["inner"], [0], [prompt])
            for name, value in cache["calls"]:
                if name == "forward":
                    inner.forward(cache["inner"], value)
                else:
                    inner.commit(cache["inner"], value[None])
            cache["live"], cache["calls"] = True, []
        self.live_forwards += 1
        out = inner.forward(cache["inner"], window)
        return out[0].float().to(self.device)

    def decode(self, tokens: torch.Tensor) -> Any:
        return self.inner.decode(tokens)

    def codebook(self) -> torch.Tensor:
        return self.inner.codebook()

    def token_embeddings(self) -> torch.Tensor:
        return self.inner.token_embeddings()

    @property
    def gsd_d_thr(self) -> float:
        return float(self.inner.gsd_d_thr)


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
        return (
            f"n={self.n_samples} chi2={self.chi2:.1f} dof={self.dof} p={self.p_value:.3g} "
            f"TV={self.tv:.4f} (noise floor {self.tv_noise:.4f}) NFE={self.mean_nfe:.2f}"
        )


def pooled_cells(probs: np.ndarray, n: int, min_expected: float = 5.0) -> np.ndarray:
    """Cell index (C,) of each outcome for a Pearson test at n samples, every cell expecting >= min_expected.

    Outcomes expecting fewer than min_expected form one pooled cell; while that pooled cell still
    expects too few, it is merged into the smallest remaining cell. (Leaving a pooled cell that
    expects, say, 0.02 makes a single observation there worth chi2 = 48: an exact sampler is then
    rejected far more often than the test's level says.)
    """
    expected = probs * n
    order = np.argsort(expected, kind="stable")  # smallest first
    cell = np.arange(probs.size)
    rare = expected < min_expected
    if rare.all() or not rare.any():
        return np.zeros(probs.size, dtype=np.int64) if rare.all() else cell
    pooled = order[rare[order]]  # the rare outcomes
    cell[pooled] = pooled[0]
    pooled_expected = expected[pooled].sum()
    for nxt in order[~rare[order]]:  # merge into the smallest common cells until the pool is big enough
        if pooled_expected >= min_expected:
            break
        cell[nxt] = pooled[0]
        pooled_expected += expected[nxt]
    _, dense = np.unique(cell, return_inverse=True)
    return dense.reshape(-1)


def chi_square_table(
    observed: np.ndarray, probs: np.ndarray, min_expected: float = 5.0
) -> tuple[np.ndarray, int, np.ndarray]:
    """Pearson statistics for many samples at once: observed (T, C) counts of T samples over the C
    outcomes (each row summing to the same n) -> (chi2 (T,), dof, p-values (T,))."""
    from scipy.stats import chi2 as chi2_dist

    observed = np.atleast_2d(observed)
    n = int(observed[0].sum())
    cells = pooled_cells(probs, n, min_expected)
    n_cells = int(cells.max()) + 1
    exp_cells = np.bincount(cells, weights=probs * n, minlength=n_cells)  # (K,)
    obs_cells = np.zeros((observed.shape[0], n_cells))
    np.add.at(obs_cells.T, cells, observed.T)  # (T, K)
    stat = ((obs_cells - exp_cells) ** 2 / exp_cells).sum(-1)
    dof = max(n_cells - 1, 1)
    return stat, dof, chi2_dist.sf(stat, dof)


def chi_square(
    counts: Counter, exact: dict[tuple[int, ...], float], min_expected: float = 5.0
) -> tuple[float, int, float]:
    """Pearson goodness of fit of sampled sequences against exact probabilities (cells pooled so that
    every one expects >= min_expected). A sample AR can never produce fails outright."""
    if any(c for s, c in counts.items() if exact.get(s, 0.0) == 0.0):
        return float("inf"), 1, 0.0
    seqs = list(exact)
    probs = np.array([exact[s] for s in seqs])
    observed = np.array([counts.get(s, 0) for s in seqs], dtype=float)
    stat, dof, p_value = chi_square_table(observed, probs, min_expected)
    return float(stat[0]), dof, float(p_value[0])


def expected_tv_noise(exact: dict, n: int) -> float:
    """E[TV] of n exact samples ≈ sum sqrt(p(1-p)/n) * sqrt(2/pi) / 2 (normal approximation)."""
    p = np.array(list(exact.values()))
    return float(0.5 * np.sqrt(2 / np.pi) * np.sqrt(p * (1 - p) / n).sum())


def decoder_fit(
    adapter: TabulatedAdapter,
    decoder: Decoder,
    sampling: Sampling,
    n_samples: int,
    seed: int = 0,
    exact: dict | None = None,
    batch_size: int = 1,
) -> GoodnessOfFit:
    """Draw n_samples sequences with the decoder, `batch_size` at a time in lockstep (each sample with its
    own generator), and test them against exact AR."""
    exact = exact if exact is not None else exact_probabilities(adapter, sampling)
    counts, nfe = sample_sequences(adapter, decoder, sampling, n_samples, seed, batch_size)
    stat, dof, p_value = chi_square(counts, exact)
    tv = 0.5 * sum(abs(counts.get(s, 0) / n_samples - p) for s, p in exact.items())
    tv += 0.5 * sum(c / n_samples for s, c in counts.items() if s not in exact)
    return GoodnessOfFit(n_samples, stat, dof, p_value, tv, expected_tv_noise(exact, n_samples), nfe / n_samples)


def sample_sequences(
    adapter: TabulatedAdapter, decoder: Decoder, sampling: Sampling, n_samples: int, seed: int, batch_size: int = 1
) -> tuple[Counter, int]:
    """(counts of each decoded sequence, total NFE) over n_samples decodes; sample i's generator is
    seeded from (seed, i)."""
    device = adapter.device
    requests = [
        Request(adapter.prompt_text, torch.Generator(device).manual_seed(seed * 1_000_003 + i))
        for i in range(n_samples)
    ]
    counts: Counter = Counter()
    nfe = 0
    for _, result in jacobi_decode_batch(adapter, requests, decoder, sampling, batch_size):
        counts[tuple(result.tokens.tolist())] += 1
        nfe += result.stats.nfe
    return counts, nfe
