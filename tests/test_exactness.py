"""The lossless decoders are proven lossless: their sample distribution over every sequence of an
enumerable model (4 content positions x 4 codes + 2 forced row ends, CFG on) passes a chi-square
goodness-of-fit test against the exact AR probabilities, while a deliberately broken decoder
(reference q taken from the wrong iteration) fails the same test.

SJD-PAC's draft tree joins the suite twice: with the preset's tree (K = 3, D = 3) and with a deeper
one (K = 2, D = 5: siblings at every content position of the model). Its broken control is the
released code's reading of tree verification, the longest accepted path instead of the first
accepted sibling: on the deep tree it fails (measured at 8k: chi2 = 195 at 107 dof, p = 4e-7). The
rows decoders (PJD, ZipAR) are lossy: their TV from AR is measured, and ZipAR with rows that never
overlap is AR itself and passes. Measured at 8k (noise floor 0.042): PJD TV 0.053 (p = 4e-7),
ZipAR TV 0.100 (p = 4e-67), both with rows overlapping by one token (row_start = 1).

Two sizes: `make test` runs every decoder at N_FAST = 8k samples and the `slow` suite
(`make test-all`) at N_FULL = 20k. At 8k the broken control's chi2 exceeds its dof by about 100
(measured: chi2 = 210 at 107 dof), which gives the test about 99 % power to reject it at P_PASS
(noncentral chi-square; at 4k it would be 88 %); at 20k it fails at p < 1e-6. The test's own level
is calibrated: an exact sampler is rejected at the threshold's rate, not more.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
import torch

from sjdbench.decoding.loop import Decoder, Request, jacobi_decode, jacobi_decode_batch
from sjdbench.decoding.parts import Proposal
from sjdbench.decoding.processing import sample
from sjdbench.decoding.registry import resolve_part
from sjdbench.decoding.topologies.tree import TreeConfig, TreeTopology
from sjdbench.exactness import (
    TabulatedAdapter,
    chi_square,
    chi_square_table,
    enumerable_model,
    exact_probabilities,
    expected_tv_noise,
)

N_FULL = 20_000
N_FAST = 8_000
PROMPT = "ab"
BATCH = 64  # samples in lockstep in the fast suite
P_PASS = 1e-3  # a lossless decoder's p-value must exceed this (fixed seeds: deterministic outcome)
LOSSLESS = ["sjd", "sjd_left", "sjd_pp", "mc_sjd", "sjd_vp", "vp_coupled", "sjd_pac", "sjd_pac_k4", "sjd_pac_deep"]
LOSSLESS += ["sjd_tree", "scd_gs"]  # the draft tree without adaptive continuation (resample proposal)
LOSSLESS += ["sjd_adt"]  # widths that adapt to the decided neighbours
# at 20k only: variants whose mechanism a fast case already covers (left init: sjd; VP over the
# coupling: sjd_vp and mc_sjd; deeper and wider trees: sjd_pac), so `make test` stays under 5 minutes
LOSSLESS_FAST = [
    kind
    for kind in LOSSLESS
    if kind not in ("sjd_pac_k4", "sjd_tree", "sjd_left", "vp_coupled", "sjd_pac_deep", "sjd_adt")
]
TREES = ("sjd_pac", "sjd_pac_k4", "sjd_pac_deep", "sjd_tree", "tree_longest", "tree_uniform_bonus", "sjd_adt")


def enumerable_adapter():
    return enumerable_model()


class StaleReferenceProposal(Proposal):
    """Deliberately wrong: drafts ~ p_t, but the stored reference is p_{t-1} (wrong iteration)."""

    history_depth = 2

    def propose(self, p, carried, ctx):
        recent, valid = ctx.history.last(ctx.samples, ctx.positions, 2)
        return sample(p, ctx.draws), torch.where(valid[:, 1:2], recent[:, 1], p)


class UniformBonusTree(TreeTopology):
    """Deliberately wrong (the released code's suspected bug): when every draft of the accepted path
    passed, the next token is drawn uniformly (from the pad) instead of from the last slot's p."""

    def verify(self, window, p, rows, passed, verifier):
        verdict = super().verify(window, p, rows, passed, verifier)
        bonus = torch.as_tensor(verdict.emit_rejected < 0)[:, None]
        support = (verdict.emit_base > 0).float()
        verdict.emit_base = torch.where(bonus, support / support.sum(-1, keepdim=True), verdict.emit_base)
        return verdict


def part(kind: str, name: str, adapter=None, **knobs):
    return resolve_part(kind, {"name": name, **knobs}, f"decoder.{kind}").build(adapter)


def make_decoder(kind: str, adapter=None) -> Decoder:
    base = Decoder(
        4,
        part("proposal", "resample"),
        part("verifier", "exact"),
        part("init", "random"),
        track_growth=False,
        trace_positions=0,
    )
    vp = dict(fusion_top_k=0)  # N = 1 (decoder growth_steps), so fusion acts on this tiny model
    if kind == "sjd":
        return base
    if kind == "sjd_left":
        return replace(base, init=part("init", "left"))
    if kind == "sjd_pp":  # coupled reuse + spatial prior init
        return replace(base, proposal=part("proposal", "coupled"), init=part("init", "above"))
    if kind == "mc_sjd":
        return replace(base, proposal=part("proposal", "coupled"))
    if kind == "scd_gs":
        return replace(base, proposal=part("proposal", "coupled", coupling="gumbel"))
    if kind == "sjd_vp":
        return replace(
            base,
            proposal=part("proposal", "vp", **vp),
            init=part("init", "argmax_left"),
            growth_steps=1,
            track_growth=True,
        )
    if kind == "vp_coupled":
        return replace(base, proposal=part("proposal", "vp", inner="coupled", **vp), growth_steps=1, track_growth=True)
    if kind == "broken_stale_q":
        return replace(base, proposal=StaleReferenceProposal(), track_growth=True)
    if kind == "sjd_pac":  # the preset (K = 3, D = 3, init uniform) in 8 slots: the window ends inside the image
        return replace(
            base,
            window=8,
            proposal=part("proposal", "coupled"),
            init=part("init", "uniform"),
            topology=part("topology", "tree"),
        )
    if kind == "sjd_adt":  # widths 3, 2 or 1 by the neighbours' runs
        return replace(make_decoder("sjd_pac"), topology=part("topology", "tree", adapt="neighbours"))
    if kind == "sjd_tree":
        return replace(make_decoder("sjd_pac_deep"), proposal=part("proposal", "resample"))
    if kind == "sjd_pac_k4":  # K = 4: every code of the model is a sibling at each content position
        return replace(make_decoder("sjd_pac"), topology=part("topology", "tree", width=4))
    if kind == "sjd_pac_deep":  # K = 2, D = 5: siblings at every content position
        return replace(
            base,
            window=32,
            proposal=part("proposal", "coupled"),
            init=part("init", "uniform"),
            topology=part("topology", "tree", width=2, depth=5),
        )
    if kind == "tree_longest":
        return replace(
            make_decoder("sjd_pac_deep"), topology=part("topology", "tree", width=2, depth=5, select="longest")
        )
    if kind == "tree_uniform_bonus":  # in 8 slots, a fully accepted path often ends before an image token
        return replace(make_decoder("sjd_pac"), topology=UniformBonusTree(TreeConfig(width=3, depth=3)))
    if kind == "zipar_apart":  # rows that never overlap (row_start = the grid's width): AR itself
        return replace(base, window=16, topology=part("topology", "rows", row_window=1, row_start=2, emit="all"))
    if kind == "zipar":
        return replace(base, window=16, topology=part("topology", "rows", row_window=1, row_start=1, emit="all"))
    if kind == "pjd":
        return replace(
            base, window=16, proposal=part("proposal", "reuse"), topology=part("topology", "rows", row_start=1)
        )
    if kind == "lantern_pac":  # the preset keeps one-hot references for fresh drafts (init random)
        return replace(
            make_decoder("sjd_pac"),
            init=part("init", "random"),
            verifier=part("verifier", "lantern", adapter, k=2, delta=0.1),
        )
    if kind == "lantern":
        return replace(base, verifier=part("verifier", "lantern", adapter, k=2, delta=0.1))
    if kind == "gsd":
        return replace(base, verifier=part("verifier", "gsd", adapter, group_size=3, p_thr=0.15, d_thr=10.0))
    if kind == "sjd_pv":  # phrases: the 6 likeliest consecutive pairs of exact AR
        from sjdbench.decoding.verifiers.phrases import PhrasesConfig, PhraseVerifier

        return replace(base, verifier=PhraseVerifier(PhrasesConfig(), pairs=likely_pairs(6)))
    if kind == "cool_sd":  # budgets 0.1, 0.05, 0.025 at depths 1, 2, 3
        return replace(base, verifier=part("verifier", "cool_sd", omega=0.1, decay=0.5))
    raise KeyError(kind)


@functools.lru_cache(maxsize=4)
def likely_pairs(k: int) -> list[tuple[int, int]]:
    """The k consecutive token pairs with the most probability under exact AR (a phrase table)."""
    adapter = TabulatedAdapter(enumerable_adapter(), PROMPT)
    pairs: Counter = Counter()
    for sequence, prob in exact_probabilities(adapter, adapter.default_sampling).items():
        for a, b in zip(sequence, sequence[1:]):
            pairs[(a, b)] += prob
    return [pair for pair, _ in pairs.most_common(k)]


def _draw(kind: str, n: int, seed: int, batch: int) -> tuple[Counter, dict]:
    """n decodes, `batch` of them in lockstep; with batch = 1 they share one generator, decoded one
    after another, with batch > 1 each sample has its own."""
    torch.set_num_threads(1)
    adapter = TabulatedAdapter(enumerable_adapter(), PROMPT)
    decoder = make_decoder(kind, adapter)
    if batch == 1:
        generator = torch.Generator().manual_seed(seed)
        results = (jacobi_decode(adapter, PROMPT, decoder, adapter.default_sampling, generator) for _ in range(n))
    else:
        requests = [Request(PROMPT, torch.Generator().manual_seed(seed * 1_000_003 + i)) for i in range(n)]
        results = (r for _, r in jacobi_decode_batch(adapter, requests, decoder, adapter.default_sampling, batch))
    counts: Counter = Counter()
    totals: Counter = Counter()
    for result in results:
        counts[tuple(result.tokens.tolist())] += 1
        row = result.stats.to_row()
        for key in ("nfe", "accepted", "verified", "growth_flagged_verified"):
            totals[key] += row[key]
        totals["sibling_accepted"] += sum(row["sibling_accepted"][1:])
        totals["rows_overlapped"] += sum(row["rows_in_flight"][2:])
    totals["live_forwards"] = adapter.live_forwards
    return counts, dict(totals)


@functools.cache
def sample_decoder(kind: str, n: int, batch: int = BATCH) -> tuple[Counter, dict]:
    """n samples split over two processes (2 cores), each with its own seed; `batch` samples in
    lockstep (the fast suite proves exactness for batched decoding directly, the 20k suite for
    decodes one at a time)."""
    with ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as pool:
        parts = list(pool.map(_draw, [kind, kind], [n // 2, n - n // 2], [101 + n, 202 + n], [batch, batch]))
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


def check_lossless(kind: str, n: int, exact: dict, batch: int = BATCH) -> None:
    counts, totals = sample_decoder(kind, n, batch)
    stat, dof, p_value = chi_square(counts, exact)
    tv = tv_from(counts, exact)
    print(
        f"{kind} n={n}: chi2={stat:.1f} dof={dof} p={p_value:.3g} TV={tv:.4f} "
        f"noise={expected_tv_noise(exact, n):.4f} totals={totals}"
    )
    assert sum(counts.values()) == n
    assert totals["verified"] > 0
    if kind in ("sjd_vp", "vp_coupled"):
        assert totals["growth_flagged_verified"] > 0, "VP fusion never acted: the test would not cover it"
    if kind in TREES:
        assert totals["sibling_accepted"] > n // 10, "siblings were rarely accepted: the tree would not be covered"
    assert p_value > P_PASS, f"{kind} is distinguishable from AR: chi2={stat:.1f} dof={dof} p={p_value:.2e}"


def check_broken_detected(
    n: int, exact: dict, threshold: float, kind: str = "broken_stale_q", batch: int = BATCH
) -> None:
    counts, _ = sample_decoder(kind, n, batch)
    stat, dof, p_value = chi_square(counts, exact)
    print(f"{kind} n={n}: chi2={stat:.1f} dof={dof} p={p_value:.3g} TV={tv_from(counts, exact):.4f}")
    assert p_value < threshold


@pytest.mark.parametrize("kind", LOSSLESS_FAST)
def test_lossless_decoder_matches_exact_ar_fast(kind, exact):
    check_lossless(kind, N_FAST, exact)


def test_broken_reference_is_detected_fast(exact):
    """The negative control at the fast size fails the very test the lossless decoders pass."""
    check_broken_detected(N_FAST, exact, P_PASS)


@pytest.mark.slow
@pytest.mark.parametrize("kind", LOSSLESS)
def test_lossless_decoder_matches_exact_ar(kind, exact):
    check_lossless(kind, N_FULL, exact, batch=1)


@pytest.mark.slow
def test_broken_reference_is_detected(exact):
    check_broken_detected(N_FULL, exact, 1e-6, batch=1)


@pytest.mark.slow  # beside its 20k version: the fast suite's negative control is the broken reference's
def test_tree_longest_path_reading_is_detected_fast(exact):
    """The released code's tree verification (longest accepted path, so sibling k > 0 may win although
    sibling 0 passed) fails the test the exact tree passes. With the released reading of an empty
    sibling residual (later siblings fail) its departure is smaller than it was: measured at 8k, chi2 =
    206 at 107 dof decoded one at a time, 148 (p = 5e-3) batched with per-sample seeds; at 16k batched,
    225 at 136 dof (p = 2e-6). So the fast suite draws 16k."""
    check_broken_detected(2 * N_FAST, exact, P_PASS, "tree_longest")


@pytest.mark.slow
def test_tree_longest_path_reading_is_detected(exact):
    check_broken_detected(N_FULL, exact, 1e-6, "tree_longest", batch=1)


def test_tree_uniform_bonus_is_detected(exact):
    """The suspected bug of the released code, a uniform token after a fully accepted path instead of
    a draw from the last slot's p, is a gross error (measured at 8k: chi2 = 4881 at 107 dof, TV
    0.26): 2,000 samples reject it."""
    check_broken_detected(N_FAST // 4, exact, 1e-6, "tree_uniform_bonus")


@pytest.mark.slow  # about 7 s; the rows presets run in make test through test_topologies
def test_rows_that_never_overlap_are_ar(exact):
    """ZipAR whose next row starts only after the row above is complete samples each token from the
    full context: it passes the test (which shows the rows machinery itself adds no error)."""
    n = N_FAST // 2
    counts, totals = sample_decoder("zipar_apart", n)
    stat, dof, p_value = chi_square(counts, exact)
    print(
        f"zipar_apart n={n}: chi2={stat:.1f} dof={dof} p={p_value:.3g} TV={tv_from(counts, exact):.4f} totals={totals}"
    )
    assert totals["nfe"] == 5 * n  # prefill + one forward per token but the row end anchor
    assert totals["live_forwards"] == 0  # every slot saw a whole prefix
    assert p_value > P_PASS


@pytest.mark.parametrize(
    "kind,n",
    [pytest.param("zipar", N_FAST // 4, marks=pytest.mark.slow), pytest.param("pjd", N_FAST, marks=pytest.mark.slow)],
)
def test_rows_in_flight_are_lossy_and_their_tv_is_measured(kind, n, exact):
    """Rows that overlap sample from a partial context (the row above is decided only in part): the
    chi-square test rejects them and the TV from AR is above an exact sampler's noise floor. The
    numbers go to the README."""
    counts, totals = sample_decoder(kind, n)
    stat, dof, p_value = chi_square(counts, exact)
    tv, noise = tv_from(counts, exact), expected_tv_noise(exact, n)
    print(f"{kind} n={n}: chi2={stat:.1f} dof={dof} p={p_value:.3g} TV={tv:.4f} noise={noise:.4f} totals={totals}")
    assert totals["rows_overlapped"] > 0 and totals["live_forwards"] > 0  # rows did run side by side
    assert p_value < P_PASS and tv > noise


@pytest.mark.slow
def test_lantern_inside_the_tree_stays_within_its_bound(exact):
    """LANTERN's relaxed test at every sibling: lossy; TV within its per-token bound over the 4
    content positions (plus sampling noise), as for LANTERN in the chain."""
    counts, _ = sample_decoder("lantern_pac", N_FAST)
    tv, noise = tv_from(counts, exact), expected_tv_noise(exact, N_FAST)
    print(f"lantern_pac: TV={tv:.4f} (noise {noise:.4f})")
    assert tv <= 4 * 0.1 + 3 * noise


@pytest.mark.parametrize("n", [N_FAST, N_FULL])
def test_exact_sampler_is_rejected_at_the_tests_level(n, exact):
    """Calibration: multinomial draws from the exact distribution itself, 20,000 times, are rejected
    at P_PASS as often as the level says (binomial 99.9 % bound), both on the suite's model and on a
    distribution with many near-empty cells (20 common outcomes + rare ones expecting 0.02 in all)."""
    rng = np.random.default_rng(0)
    trials = 20_000
    suite = np.array(list(exact.values()))
    rare = np.full(12, 0.02 / 12 / n)
    skewed = np.concatenate([np.full(20, (1 - rare.sum()) / 20), rare])
    bound = trials * P_PASS + 3.1 * np.sqrt(trials * P_PASS)
    for probs in (suite / suite.sum(), skewed):
        _, _, p_values = chi_square_table(rng.multinomial(n, probs, size=trials), probs)
        rejected = int((p_values < P_PASS).sum())
        print(f"n={n} cells={probs.size}: {rejected} of {trials} exact samples rejected at p<{P_PASS}")
        assert rejected <= bound


@pytest.mark.parametrize(
    "kind,per_token_bound",
    [
        ("lantern", 0.1),
        pytest.param("gsd", None, marks=pytest.mark.slow),
        pytest.param("cool_sd", 0.1, marks=pytest.mark.slow),
        pytest.param("sjd_pv", None, marks=pytest.mark.slow),
    ],
)
def test_relaxed_verifiers_tv_and_acceptance(kind, per_token_bound, exact):
    """Lossy by design: measure TV from AR; it must stay within the per-token bound summed over the
    4 content positions (plus sampling noise), and acceptance must not fall below SJD's."""
    n = N_FAST
    counts, totals = sample_decoder(kind, n)
    sjd_counts, sjd_totals = sample_decoder("sjd", n)  # the fast SJD run above, reused
    tv = tv_from(counts, exact)
    noise = expected_tv_noise(exact, n)
    acc, acc_sjd = totals["accepted"] / totals["verified"], sjd_totals["accepted"] / sjd_totals["verified"]
    print(
        f"{kind}: TV={tv:.4f} (SJD {tv_from(sjd_counts, exact):.4f}, noise {noise:.4f}) "
        f"accept={acc:.3f} vs SJD {acc_sjd:.3f}"
    )
    assert acc >= acc_sjd
    if per_token_bound is not None:
        assert tv <= 4 * per_token_bound + 3 * noise


def test_decoder_fit_helper_reports_a_fit():
    """The public helper users run on their own decoders (small n here: a smoke check of the API)."""
    from sjdbench.exactness import decoder_fit

    adapter = TabulatedAdapter(enumerable_adapter(), PROMPT)
    fit = decoder_fit(adapter, make_decoder("sjd"), adapter.default_sampling, n_samples=300, seed=1)
    assert fit.n_samples == 300 and 0 <= fit.p_value <= 1 and fit.tv > 0 and fit.mean_nfe > 1
    assert "chi2=" in str(fit)
