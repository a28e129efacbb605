"""The decoding loop on the debug model: greedy equivalences, cache rollback, statistics."""
from dataclasses import replace

import pytest
import torch

from sjdbench.decoding.inits import Init
from sjdbench.decoding.loop import DecoderParts, jacobi_decode
from sjdbench.decoding.proposals import CoupledProposal, ResampleProposal
from sjdbench.decoding.verifiers import ExactVerifier, GreedyVerifier
from sjdbench.models.debug import build_debug_adapter

PROMPTS = ["a red circle", "two blue squares on a striped background", "x"]


@pytest.fixture(scope="module")
def adapter():
    return build_debug_adapter(grid_h=6, grid_w=6, n_codes=32, init_std=0.5)


def parts(window: int, verifier=None, proposal=None, init="random") -> DecoderParts:
    return DecoderParts(window, proposal or ResampleProposal(), verifier or ExactVerifier(), Init(init))


def greedy(adapter):
    return replace(adapter.default_sampling, temperature=0.0)


@pytest.mark.parametrize("window", [2, 5, 16, 64])
@pytest.mark.parametrize("init", ["random", "left", "above", "argmax_left"])
def test_greedy_jacobi_equals_greedy_ar(adapter, window, init):
    for i, prompt in enumerate(PROMPTS):
        ar = jacobi_decode(adapter, prompt, parts(1), greedy(adapter), torch.Generator().manual_seed(i))
        jac = jacobi_decode(adapter, prompt, parts(window, GreedyVerifier(), init=init), adapter.default_sampling,
                            torch.Generator().manual_seed(100 + i))
        assert torch.equal(ar.tokens, jac.tokens)
        assert jac.stats.nfe <= ar.stats.nfe


@pytest.mark.parametrize("proposal", [ResampleProposal(), CoupledProposal()])
def test_sjd_with_greedy_sampling_equals_greedy_ar(adapter, proposal):
    for i, prompt in enumerate(PROMPTS):
        ar = jacobi_decode(adapter, prompt, parts(1), greedy(adapter), torch.Generator().manual_seed(i))
        sjd = jacobi_decode(adapter, prompt, parts(8, proposal=proposal), greedy(adapter), torch.Generator().manual_seed(7))
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
    """Feed garbage drafts, 'reject' them, then continue: logits must match a clean prefix."""
    prompt = adapter.encode_prompt("a green circle")
    seq = torch.randint(101, 101 + adapter.n_codes, (20,))
    adapter.new_cache(prompt, extra=8)
    adapter.prefill(prompt, None)
    clean = adapter.forward(seq, 0, None)  # (2, 20, V)

    adapter.new_cache(prompt, extra=8)
    adapter.prefill(prompt, None)
    adapter.forward(seq[:5], 0, None)
    garbage = torch.randint(101, 101 + adapter.n_codes, (8,))
    adapter.forward(torch.cat([seq[5:6], garbage]), 5, None)  # window with wrong drafts
    adapter.rollback(None, 8)
    resumed = adapter.forward(seq[6:], 6, None)
    assert torch.allclose(resumed, clean[:, 6:], atol=1e-5)


def test_cfg_branches_differ(adapter):
    prompt = adapter.encode_prompt("a green circle")
    adapter.new_cache(prompt, extra=1)
    logits = adapter.prefill(prompt, None)
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
