"""The lossless decoders are proven lossless: their sample distribution over every sequence of an
enumerable model (4 content positions x 4 codes + 2 forced row ends, CFG on) passes a chi-square
goodness-of-fit test against the exact AR probabilities with 20k samples, while a deliberately broken
decoder (reference q taken from the wrong iteration) fails the same test."""
from __future__ import annotations

import functools
import multiprocessing as mp
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import pytest
import torch

from sjdbench.decoding.inits import Init
from sjdbench.decoding.loop import DecoderParts, jacobi_decode
from sjdbench.decoding.proposals import CoupledProposal, ResampleProposal
from sjdbench.decoding.verifiers import ExactVerifier, GSDVerifier, LanternVerifier, neighbour_table
from sjdbench.decoding.vp import VPProposal, VPSettings
from sjdbench.exactness import TabulatedAdapter, chi_square, exact_probabilities, expected_tv_noise
from sjdbench.models.debug import build_debug_adapter

N_SAMPLES = 20_000
PROMPT = "ab"
P_PASS = 1e-3  # a lossless decoder's p-value must exceed this (fixed seeds: deterministic outcome)


def enumerable_adapter():
    return build_debug_adapter(grid_h=2, grid_w=2, n_codes=4, dim=32, n_layers=2, init_std=0.15, cfg_scale=2.0, seed=0)


class StaleReferenceProposal:
    """Deliberately wrong: drafts ~ p_t, but the stored reference is p_{t-1} (wrong iteration)."""

    name = "stale"

    def __init__(self) -> None:
        self.inner = ResampleProposal()

    def proposal_distribution(self, p, positions, history, growth=None):
        recent, valid = history.last(positions, 2)
        return p, torch.where(valid[:, 1:2], recent[:, 1], p)

    def draw(self, *args):
        return self.inner.draw(*args)


def make_parts(kind: str, adapter=None) -> DecoderParts:
    base = DecoderParts(4, ResampleProposal(), ExactVerifier(), Init("random"), track_growth=False, trace_positions=0)
    vp1 = VPSettings(growth_steps=1, fusion_top_k=0)
    if kind == "sjd":
        return base
    if kind == "sjd_left":
        return replace(base, init=Init("left"))
    if kind == "sjd_pp":  # coupled reuse + spatial prior init
        return replace(base, proposal=CoupledProposal(), init=Init("above"))
    if kind == "mc_sjd":
        return replace(base, proposal=CoupledProposal())
    if kind == "sjd_vp":
        return replace(base, proposal=VPProposal(ResampleProposal(), vp1), init=Init("argmax_left"), growth_steps=1, track_growth=True)
    if kind == "vp_coupled":
        return replace(base, proposal=VPProposal(CoupledProposal(), vp1), growth_steps=1, track_growth=True)
    if kind == "broken_stale_q":
        return replace(base, proposal=StaleReferenceProposal(), track_growth=True)
    if kind == "lantern":
        table = neighbour_table(adapter.codebook(), 3)
        return replace(base, verifier=LanternVerifier(table, adapter.image_token_ids, adapter.vocab_size, 0.1))
    if kind == "gsd":
        return replace(base, verifier=GSDVerifier(adapter.token_embeddings(), 3, 0.15, 10.0))
    raise KeyError(kind)


def _draw(kind: str, n: int, seed: int) -> tuple[Counter, dict]:
    torch.set_num_threads(1)
    adapter = TabulatedAdapter(enumerable_adapter(), PROMPT)
    parts = make_parts(kind, adapter)
    generator = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    totals = Counter()
    for _ in range(n):
        result = jacobi_decode(adapter, PROMPT, parts, adapter.default_sampling, generator)
        counts[tuple(result.tokens.tolist())] += 1
        row = result.stats.to_row()
        for key in ("nfe", "accepted", "verified", "growth_flagged_verified"):
            totals[key] += row[key]
    return counts, dict(totals)


@functools.lru_cache(maxsize=None)
def sample_decoder(kind: str, n: int = N_SAMPLES) -> tuple[Counter, dict]:
    """n samples split over two processes (2 cores), each with its own seed."""
    with ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as pool:
        parts = list(pool.map(_draw, [kind, kind], [n // 2, n - n // 2], [101, 202]))
    counts, totals = Counter(), Counter()
    for c, t in parts:
        counts.update(c)
        totals.update(t)
    return counts, dict(totals)


@pytest.fixture(scope="module")
def exact():
    adapter = TabulatedAdapter(enumerable_adapter(), PROMPT)
    return exact_probabilities(adapter, adapter.default_sampling)


def tv_from(counts: Counter, exact: dict) -> float:
    n = sum(counts.values())
    return 0.5 * sum(abs(counts.get(s, 0) / n - p) for s, p in exact.items())


def test_enumerable_model_is_a_real_test_bed(exact):
    """Many sequences carry mass and the conditionals depend on context, or the test has no power."""
    assert abs(sum(exact.values()) - 1) < 1e-5
    assert sum(p > 1e-3 for p in exact.values()) >= 60
    assert max(exact.values()) < 0.2


@pytest.mark.parametrize("kind", ["sjd", "sjd_left", "sjd_pp", "mc_sjd", "sjd_vp", "vp_coupled"])
def test_lossless_decoder_matches_exact_ar(kind, exact):
    counts, totals = sample_decoder(kind)
    stat, dof, p_value = chi_square(counts, exact)
    tv = tv_from(counts, exact)
    print(f"{kind}: chi2={stat:.1f} dof={dof} p={p_value:.3g} TV={tv:.4f} noise={expected_tv_noise(exact, N_SAMPLES):.4f} totals={totals}")
    assert sum(counts.values()) == N_SAMPLES
    assert totals["verified"] > 0
    if kind in ("sjd_vp", "vp_coupled"):
        assert totals["growth_flagged_verified"] > 0, "VP fusion never acted: the test would not cover it"
    assert p_value > P_PASS, f"{kind} is distinguishable from AR: chi2={stat:.1f} dof={dof} p={p_value:.2e}"


def test_broken_reference_is_detected(exact):
    counts, _ = sample_decoder("broken_stale_q")
    stat, dof, p_value = chi_square(counts, exact)
    print(f"broken: chi2={stat:.1f} dof={dof} p={p_value:.3g} TV={tv_from(counts, exact):.4f}")
    assert p_value < 1e-6


@pytest.mark.parametrize("kind,per_token_bound", [("lantern", 0.1), ("gsd", None)])
def test_relaxed_verifiers_tv_and_acceptance(kind, per_token_bound, exact):
    """Lossy by design: measure TV from AR; it must stay within the per-token bound summed over the
    4 content positions (plus sampling noise), and acceptance must not fall below SJD's."""
    n = 10_000
    counts, totals = sample_decoder(kind, n)
    sjd_counts, sjd_totals = sample_decoder("sjd")  # the 20k SJD run above, reused
    sjd_n = sum(sjd_counts.values())
    tv = tv_from(counts, exact)
    noise = expected_tv_noise(exact, n)
    acc, acc_sjd = totals["accepted"] / totals["verified"], sjd_totals["accepted"] / sjd_totals["verified"]
    print(f"{kind}: TV={tv:.4f} (SJD {tv_from(sjd_counts, exact):.4f} at n={sjd_n}, noise {noise:.4f}) "
          f"accept={acc:.3f} vs SJD {acc_sjd:.3f}")
    assert acc >= acc_sjd
    if per_token_bound is not None:
        assert tv <= 4 * per_token_bound + 3 * noise


def test_decoder_fit_helper_reports_a_fit():
    """The public helper users run on their own decoders (small n here: a smoke check of the API)."""
    from sjdbench.exactness import decoder_fit

    adapter = TabulatedAdapter(enumerable_adapter(), PROMPT)
    fit = decoder_fit(adapter, make_parts("sjd"), adapter.default_sampling, n_samples=300, seed=1)
    assert fit.n_samples == 300 and 0 <= fit.p_value <= 1 and fit.tv > 0 and fit.mean_nfe > 1
    assert "chi2=" in str(fit)
