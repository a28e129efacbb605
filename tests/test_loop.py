"""The decoding loop on the debug model: greedy equivalences, cache rollback, statistics."""

from dataclasses import replace

import pytest
import torch

from sjdbench.adapter import WindowInputs
from sjdbench.decoding.loop import Decoder, jacobi_decode
from sjdbench.decoding.proposals.coupled import CoupledProposal
from sjdbench.decoding.proposals.resample import ResampleProposal
from sjdbench.decoding.registry import resolve_part
from sjdbench.decoding.verifiers.exact import ExactVerifier
from sjdbench.decoding.verifiers.greedy import GreedyVerifier
from sjdbench.models.debug import build_debug_adapter

PROMPTS = ["a red circle", "two blue squares on a striped background", "x"]


@pytest.fixture(scope="module")
def adapter():
    return build_debug_adapter(grid_h=6, grid_w=6, n_codes=32, init_std=0.5)


def parts(window: int, verifier=None, proposal=None, init="random") -> Decoder:
    return Decoder(
        window,
        proposal or ResampleProposal(),
        verifier or ExactVerifier(),
        resolve_part("init", init, "init").build(None),
    )


def greedy(adapter):
    return replace(adapter.default_sampling, temperature=0.0)


@pytest.mark.parametrize("window", [2, 5, 16, 64])
@pytest.mark.parametrize("init", ["random", "left", "above", "argmax_left"])
def test_greedy_jacobi_equals_greedy_ar(adapter, window, init):
    for i, prompt in enumerate(PROMPTS):
        ar = jacobi_decode(adapter, prompt, parts(1), greedy(adapter), torch.Generator().manual_seed(i))
        jac = jacobi_decode(
            adapter,
            prompt,
            parts(window, GreedyVerifier(), init=init),
            adapter.default_sampling,
            torch.Generator().manual_seed(100 + i),
        )
        assert torch.equal(ar.tokens, jac.tokens)
        assert jac.stats.nfe <= ar.stats.nfe


@pytest.mark.parametrize("proposal", [ResampleProposal(), CoupledProposal()])
def test_sjd_with_greedy_sampling_equals_greedy_ar(adapter, proposal):
    for i, prompt in enumerate(PROMPTS):
        ar = jacobi_decode(adapter, prompt, parts(1), greedy(adapter), torch.Generator().manual_seed(i))
        sjd = jacobi_decode(
            adapter, prompt, parts(8, proposal=proposal), greedy(adapter), torch.Generator().manual_seed(7)
        )
        assert torch.equal(ar.tokens, sjd.tokens)


def test_layout_is_respected(adapter):
    result = jacobi_decode(adapter, "a", parts(16), adapter.default_sampling, torch.Generator().manual_seed(0))
    forced = adapter.layout.forced
    assert torch.equal(result.tokens[forced >= 0], forced[forced >= 0])
    content = result.tokens[forced < 0]
    assert bool(((content >= adapter.image_token_ids.min()) & (content <= adapter.image_token_ids.max())).all())


def test_ar_nfe_is_the_token_count_and_stats_add_up(adapter):
    ar = jacobi_decode(adapter, "a", parts(1), adapter.default_sampling, torch.Generator().manual_seed(0))
    assert ar.stats.nfe == adapter.layout.n_positions
    sjd = jacobi_decode(adapter, "a", parts(16), adapter.default_sampling, torch.Generator().manual_seed(0))
    row = sjd.stats.to_row()
    assert row["nfe"] == row["iterations"] + 1  # + the prefill
    committed = sum(m * c for m, c in enumerate(row["accept_len_hist"]))
    assert committed == adapter.layout.n_positions - 1  # the prefill commits position 0
    assert row["accepted"] <= row["verified"]
    assert sum(row["slot_accepted"]) == row["accepted"] and sum(row["slot_verified"]) == row["verified"]
    assert row["step_compression"] == adapter.layout.n_positions / row["nfe"]


def test_same_generator_seed_reproduces(adapter):
    a = jacobi_decode(adapter, "a", parts(16), adapter.default_sampling, torch.Generator().manual_seed(5))
    b = jacobi_decode(adapter, "a", parts(16), adapter.default_sampling, torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens)


def test_cache_after_rollback_equals_fresh_prefill(adapter):
    """Feed garbage drafts, keep only the verified slot, then continue: logits must match a clean prefix."""
    prompt = adapter.encode_prompt("a green circle")
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(101, 101 + adapter.n_codes, (20,), generator=g)
    arange = torch.arange
    cache = adapter.new_cache(1, prompt.length, 20)
    adapter.prefill(cache, [0], [prompt])
    clean = adapter.forward(cache, WindowInputs(seq[None], arange(20)[None]))[0]  # (2, 20, V)

    cache = adapter.new_cache(1, prompt.length, 20)
    adapter.prefill(cache, [0], [prompt])
    adapter.forward(cache, WindowInputs(seq[:5][None], arange(5)[None]))[0]
    adapter.commit(cache, arange(5)[None])
    garbage = torch.randint(101, 101 + adapter.n_codes, (8,), generator=g)
    adapter.forward(
        cache, WindowInputs(torch.cat([seq[5:6], garbage])[None], arange(5, 14)[None])
    )  # window with wrong drafts
    adapter.commit(cache, arange(1)[None])  # only x_5 is kept
    resumed = adapter.forward(cache, WindowInputs(seq[6:][None], arange(6, 20)[None]))[0]
    torch.testing.assert_close(resumed, clean[:, 6:], atol=1e-4, rtol=1e-4)


def test_masked_window_equals_separate_chains(adapter):
    """Two draft chains in one window (each slot sees only its own chain) give the logits of two
    separate forwards, and committing one chain equals having fed only that chain."""
    prompt = adapter.encode_prompt("a green circle")
    g = torch.Generator().manual_seed(1)
    a = torch.randint(101, 101 + adapter.n_codes, (6,), generator=g)
    b = torch.randint(101, 101 + adapter.n_codes, (5,), generator=g)
    arange = torch.arange
    cache = adapter.new_cache(1, prompt.length, 16)
    adapter.prefill(cache, [0], [prompt])
    adapter.forward(cache, WindowInputs(a[:1][None], arange(1)[None]))[0]
    adapter.commit(cache, arange(1)[None])  # position 0 committed
    alone_a = adapter.forward(cache, WindowInputs(a[1:][None], arange(1, 6)[None]))[0]
    alone_b = adapter.forward(cache, WindowInputs(b[None], arange(1, 6)[None]))[0]
    both = torch.cat([a[1:], b])
    mask = torch.zeros(10, 10, dtype=torch.bool)
    mask[:5, :5] = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[5:, 5:] = torch.ones(5, 5, dtype=torch.bool).tril()
    logits = adapter.forward(
        cache, WindowInputs(both[None], torch.cat([arange(1, 6), arange(1, 6)])[None], mask[None])
    )[0]
    torch.testing.assert_close(logits[:, :5], alone_a, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[:, 5:], alone_b, atol=1e-4, rtol=1e-4)
    adapter.commit(cache, arange(5, 10)[None])  # keep chain b
    after = adapter.forward(cache, WindowInputs(a[:1][None], arange(6, 7)[None]))[0]

    cache = adapter.new_cache(1, prompt.length, 16)
    adapter.prefill(cache, [0], [prompt])
    adapter.forward(cache, WindowInputs(torch.cat([a[:1], b])[None], arange(6)[None]))[0]
    adapter.commit(cache, arange(6)[None])
    fresh = adapter.forward(cache, WindowInputs(a[:1][None], arange(6, 7)[None]))[0]
    torch.testing.assert_close(after, fresh, atol=1e-4, rtol=1e-4)


def test_cfg_branches_differ(adapter):
    prompt = adapter.encode_prompt("a green circle")
    cache = adapter.new_cache(1, prompt.length, 1)
    logits = adapter.prefill(cache, [0], [prompt])[0]
    assert not torch.allclose(logits[0], logits[1])


def test_growth_statistics_are_consistent(adapter):
    result = jacobi_decode(adapter, "a", parts(16), adapter.default_sampling, torch.Generator().manual_seed(1))
    row = result.stats.to_row()
    assert 0 <= row["growth_grew_accepted"] <= row["growth_eligible_accepted"] <= row["accepted"]
    assert 0 <= row["verify_grew_accepted"] <= row["verify_eligible_accepted"] <= row["accepted"]
    assert row["growth_flagged_accepted"] <= row["growth_flagged_verified"] <= row["verified"]
    # growth up to verification sees one more observation than at proposal time
    assert row["verify_eligible_accepted"] >= row["growth_eligible_accepted"]
    assert row["verify_eligible_accepted"] > 0
    assert all(len(t["probs"]) >= 1 for t in row["trajectories"])
