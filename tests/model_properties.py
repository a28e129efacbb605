"""Properties every model adapter must have (the batched contract in sjdbench/adapter.py), checked on
the toy and debug models and on tiny random-weight configurations of the real architectures. Used by
tests/test_<model>.py. `one_*` helpers drive a cache holding one sample (B = 1)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from sjdbench.adapter import WindowInputs
from sjdbench.config import build_preset
from sjdbench.decoding.loop import jacobi_decode

ATOL = RTOL = 1e-4
PROMPTS = ("a red cube", "a much longer prompt about a large green pyramid in the rain", "x")


def random_image_tokens(adapter, count: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = adapter.image_token_ids.cpu()
    return ids[torch.randint(0, ids.numel(), (count,), generator=g)].to(adapter.device)


def arange(adapter, a: int, b: int) -> torch.Tensor:
    return torch.arange(a, b, device=adapter.device)


def fresh(adapter, text: str, window: int):
    """(prompt, a one-sample cache holding it, the prefill's logits (2, V))."""
    prompt = adapter.encode_prompt(text)
    cache = adapter.new_cache(1, prompt.length, window)
    return prompt, cache, adapter.prefill(cache, [0], [prompt])[0]


def prefilled(adapter, prompt, window: int = 1) -> torch.Tensor:
    """The prefill logits (2, V) of a prompt in a fresh one-sample cache."""
    return adapter.prefill(adapter.new_cache(1, prompt.length, window), [0], [prompt])[0]


def one_forward(adapter, cache, tokens, positions, mask=None, horizon=None) -> torch.Tensor:
    """A one-sample window forward: tokens, positions (L,), mask (L, L) -> logits (2, L, V)."""
    return adapter.forward(
        cache, WindowInputs(tokens[None], positions[None], None if mask is None else mask[None], horizon)
    )[0]


def one_commit(adapter, cache, slots: torch.Tensor) -> None:
    adapter.commit(cache, slots[None])


FP64_ATOL = 1e-11  # on logits of magnitude ~10-30; measured differences are ~2e-14


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Batched vs unbatched logits: within 1e-11 in fp64, allclose in fp32. Not bit for bit: BLAS picks
    its kernel by the number of rows (measured on this CPU: F.linear of 1-2 rows differs from the
    same rows inside a larger batch by ~4e-14 in fp64, ~1e-5 in fp32), and attention over a longer
    row of masked keys sums in another order (~3e-16 in fp64). Far below any sampling decision in fp64."""
    if a.dtype == torch.float64:
        torch.testing.assert_close(a, b, atol=FP64_ATOL, rtol=0)
    else:
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)


# -- one sample -----------------------------------------------------------------------------------
def check_rollback_equals_fresh_prefill(adapter, text: str = "a red cube") -> None:
    """Feed garbage drafts, keep only the verified slot, then continue: the logits must equal those of
    a cache that only ever saw the clean prefix."""
    seq = random_image_tokens(adapter, 20, seed=0)
    _, cache, p0 = fresh(adapter, text, 20)
    clean = one_forward(adapter, cache, seq, arange(adapter, 0, 20))  # (2, 20, V)

    _, cache, p0_again = fresh(adapter, text, 20)
    torch.testing.assert_close(p0_again, p0, atol=ATOL, rtol=RTOL)
    one_forward(adapter, cache, seq[:5], arange(adapter, 0, 5))
    one_commit(adapter, cache, arange(adapter, 0, 5))
    garbage = random_image_tokens(adapter, 8, seed=1)
    one_forward(adapter, cache, torch.cat([seq[5:6], garbage]), arange(adapter, 5, 14))  # a window of wrong drafts
    one_commit(adapter, cache, arange(adapter, 0, 1))  # only position 5 is kept
    resumed = one_forward(adapter, cache, seq[6:], arange(adapter, 6, 20))
    torch.testing.assert_close(resumed, clean[:, 6:], atol=ATOL, rtol=RTOL)


def check_masked_window_equals_separate_chains(adapter, text: str = "a red cube") -> None:
    """Two draft chains in one window, each slot seeing only its own chain, give the logits of two
    separate forwards; committing the second chain equals having fed only that chain."""
    a = random_image_tokens(adapter, 6, seed=2)
    b = random_image_tokens(adapter, 5, seed=3)
    _, cache, _ = fresh(adapter, text, 16)
    one_forward(adapter, cache, a[:1], arange(adapter, 0, 1))
    one_commit(adapter, cache, arange(adapter, 0, 1))
    alone_a = one_forward(adapter, cache, a[1:], arange(adapter, 1, 6))
    alone_b = one_forward(adapter, cache, b, arange(adapter, 1, 6))
    mask = torch.zeros(10, 10, dtype=torch.bool, device=adapter.device)
    mask[:5, :5] = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[5:, 5:] = torch.ones(5, 5, dtype=torch.bool).tril()
    positions = torch.cat([arange(adapter, 1, 6), arange(adapter, 1, 6)])
    both = one_forward(adapter, cache, torch.cat([a[1:], b]), positions, mask)
    torch.testing.assert_close(both[:, :5], alone_a, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(both[:, 5:], alone_b, atol=ATOL, rtol=RTOL)
    one_commit(adapter, cache, arange(adapter, 5, 10))  # keep chain b
    after = one_forward(adapter, cache, a[:1], arange(adapter, 6, 7))

    _, cache, _ = fresh(adapter, text, 16)
    one_forward(adapter, cache, torch.cat([a[:1], b]), arange(adapter, 0, 6))
    one_commit(adapter, cache, arange(adapter, 0, 6))
    torch.testing.assert_close(after, one_forward(adapter, cache, a[:1], arange(adapter, 6, 7)), atol=ATOL, rtol=RTOL)


def greedy(adapter, preset: str, text: str = "a red cube", **overrides):
    sampling = replace(adapter.default_sampling, temperature=0.0, **overrides)
    return jacobi_decode(adapter, text, build_preset(preset, adapter), sampling, torch.Generator().manual_seed(0))


def check_greedy_jacobi_equals_greedy_ar(adapter, text: str = "a red cube") -> torch.Tensor:
    ar = greedy(adapter, "ar", text)
    jacobi = greedy(adapter, "jacobi", text)
    assert torch.equal(jacobi.tokens, ar.tokens)
    assert jacobi.stats.nfe <= ar.stats.nfe
    return ar.tokens


def check_topologies(adapter, text: str = "a red cube") -> None:
    """A greedy draft tree (this model's masked tree forward and its compaction of the accepted path
    in the cache) equals greedy AR token for token; rows in flight (PJD, ZipAR; rows start after two
    decided tokens so they overlap on tiny grids) fill every position with a legal token."""
    ar = greedy(adapter, "ar", text)
    sampling = replace(adapter.default_sampling, temperature=0.0)
    tree = build_preset("sjd_pac", adapter, "decoder/verifier=greedy", "decoder.window=16")
    out = jacobi_decode(adapter, text, tree, sampling, torch.Generator().manual_seed(0))
    assert torch.equal(out.tokens, ar.tokens) and out.stats.nfe <= ar.stats.nfe
    for preset in ("pjd", "zipar"):
        rows = build_preset(preset, adapter, "decoder.topology.row_start=2")
        out = jacobi_decode(adapter, text, rows, adapter.default_sampling, torch.Generator().manual_seed(0))
        check_forced_tokens_in_place(adapter, out.tokens)
        # the leading row emits a token every forward; ZipAR's rows each take one, so they overlap
        assert out.stats.nfe < ar.stats.nfe if preset == "zipar" else out.stats.nfe <= ar.stats.nfe


def check_forced_tokens_in_place(adapter, tokens: torch.Tensor) -> None:
    """Every forced position holds its forced token; every content position holds an image token."""
    forced = adapter.layout.forced
    is_forced = forced >= 0
    assert torch.equal(tokens[is_forced], forced[is_forced])
    legal = set(adapter.image_token_ids.tolist())
    assert all(int(t) in legal for t in tokens[~is_forced])


def check_decode(adapter, tokens: torch.Tensor, size: tuple[int, int]) -> None:
    image = adapter.decode(tokens)
    assert isinstance(image, np.ndarray) and image.dtype == np.uint8
    assert image.shape == (*size, 3)


def check_contract_shapes(adapter) -> None:
    prompt, cache, p0 = fresh(adapter, "a red cube", 4)
    assert p0.shape == (2, adapter.vocab_size) and torch.isfinite(p0).all() and p0.dtype == adapter.dtype
    assert adapter.codebook().shape[0] == adapter.image_token_ids.numel()
    embeddings = adapter.token_embeddings()
    assert embeddings.ndim == 2 and embeddings.shape[0] == adapter.vocab_size  # GSD indexes it by token id
    assert adapter.gsd_d_thr > 0


def check_padded_window_equals_unpadded(adapter) -> None:
    """The compiled path pads a window to the next power of two of slots and rounds its committed keys
    up to a power of two: the real slots' logits must not change. The padding is exercised with the
    eager function standing in for the compiled one (compilation itself: tests/test_models_gpu.py and
    the toy's compile tests)."""
    seq = random_image_tokens(adapter, 9, seed=6)
    outputs = []
    for padded in (False, True):
        adapter.compile = padded
        adapter.__dict__["_compiled"] = adapter._run
        try:
            _, cache, _ = fresh(adapter, "a red cube", 16)
            one_forward(adapter, cache, seq[:4], arange(adapter, 0, 4), horizon=4)
            one_commit(adapter, cache, arange(adapter, 0, 2))
            outputs.append(one_forward(adapter, cache, seq[4:], arange(adapter, 2, 7), horizon=7))
        finally:
            adapter.compile = False
            adapter.__dict__.pop("_compiled")
    torch.testing.assert_close(outputs[1], outputs[0], atol=ATOL, rtol=RTOL)


def check_reused_cache_is_clean(adapter) -> None:
    """What another prompt left in a cache's sample is invisible to the next one started there
    (prompts of different lengths, one cache)."""
    seq = random_image_tokens(adapter, 8, seed=7)
    long = adapter.encode_prompt(PROMPTS[1])
    cache = adapter.new_cache(1, long.length, 8)

    def run(text: str) -> torch.Tensor:
        p0 = adapter.prefill(cache, [0], [adapter.encode_prompt(text)])[0]
        window = one_forward(adapter, cache, seq, arange(adapter, 0, 8))
        one_commit(adapter, cache, arange(adapter, 0, 8))
        return torch.cat([p0[:, None], window, one_forward(adapter, cache, seq[:2], arange(adapter, 8, 10))], dim=1)

    before = run("a blue sphere")
    run(PROMPTS[1])
    torch.testing.assert_close(run("a blue sphere"), before, atol=ATOL, rtol=RTOL)


# -- batches --------------------------------------------------------------------------------------
def _sample_inputs(adapter):
    """Three samples in different states: prompts of different lengths, committed prefixes of 3, 9
    and 0 tokens, then windows of 5 (causal), 3 (a tree: two children of the root) and 4 slots."""
    seq = [random_image_tokens(adapter, 16, seed=10 + b) for b in range(3)]
    done = [3, 9, 0]
    width = [5, 3, 4]
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    masks = [torch.ones(5, 5, dtype=torch.bool).tril(), tree, torch.ones(4, 4, dtype=torch.bool).tril()]
    positions = [torch.arange(done[0], done[0] + 5), torch.tensor([9, 10, 10]), torch.arange(0, 4)]
    windows = [seq[0][3:8], torch.stack([seq[1][9], seq[1][10], seq[1][12]]), seq[2][:4]]
    return seq, done, width, masks, positions, windows


def _alone(adapter, b: int, seq, done, width, masks, positions, windows) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample b decoded by itself: (its prefill logits (2, V), its window's logits (2, L, V))."""
    prompt, cache, p0 = fresh(adapter, PROMPTS[b], 16)
    if done[b]:
        one_forward(adapter, cache, seq[b][: done[b]], arange(adapter, 0, done[b]))
        one_commit(adapter, cache, arange(adapter, 0, done[b]))
    device = adapter.device
    logits = one_forward(adapter, cache, windows[b].to(device), positions[b].to(device), masks[b].to(device))
    return p0, logits


def _batched(adapter, samples: list[int], seq, done, width, masks, positions, windows, horizon=True):
    """The same samples in one cache: one prefill, one commit of every prefix (padded rows), one
    window forward (windows padded at the end) -> (prefill logits (n, 2, V), window logits (n, 2, L, V), cache)."""
    device, n = adapter.device, len(samples)
    prompts = [adapter.encode_prompt(PROMPTS[b]) for b in samples]
    cache = adapter.new_cache(n, max(p.length for p in prompts), 16)
    p0 = adapter.prefill(cache, list(range(n)), prompts)
    longest = max(max(done[b] for b in samples), 1)
    tokens = torch.stack([torch.cat([seq[b][: done[b]], seq[b][done[b] :]])[:longest] for b in samples])
    adapter.forward(
        cache, WindowInputs(tokens.to(device), torch.arange(longest).expand(n, -1).to(device), None, longest)
    )
    slots = torch.tensor([[k if k < done[b] else -1 for k in range(longest)] for b in samples])
    adapter.commit(cache, slots.to(device))
    L = max(width[b] for b in samples)
    pad = lambda t, value: torch.cat([t, t.new_full((L - t.shape[0], *t.shape[1:]), value)])  # noqa: E731
    win = torch.stack([pad(windows[b], int(windows[b][-1])) for b in samples])
    pos = torch.stack([pad(positions[b], int(positions[b][-1])) for b in samples])
    mask = torch.zeros(n, L, L, dtype=torch.bool)
    for i, b in enumerate(samples):
        mask[i, : width[b], : width[b]] = masks[b]
        mask[i, width[b] :, width[b] :] = torch.eye(L - width[b], dtype=torch.bool)  # padding sees itself
    logits = adapter.forward(
        cache, WindowInputs(win.to(device), pos.to(device), mask.to(device), int(pos.max()) + 1 if horizon else None)
    )
    return p0, logits, cache


def check_batched_forward_equals_unbatched(adapter) -> None:
    """Three samples at different positions with prompts of different lengths, committed with padded
    rows and forwarded in one window (a tree for one of them): each sample gets the logits of its
    own unbatched decode, the horizon-trimmed forward equals the full one, and retaining two of the
    samples (in another order) leaves each with its own logits."""
    inputs = _sample_inputs(adapter)
    width = inputs[2]
    alone = [_alone(adapter, b, *inputs) for b in range(3)]
    p0, logits, cache = _batched(adapter, [0, 1, 2], *inputs)
    assert logits.shape == (3, 2, max(width), adapter.vocab_size) and logits.dtype == adapter.dtype
    for b in range(3):
        close(p0[b], alone[b][0])
        close(logits[b, :, : width[b]], alone[b][1])
    _, full, _ = _batched(adapter, [0, 1, 2], *inputs, horizon=False)
    for b in range(3):
        close(full[b, :, : width[b]], logits[b, :, : width[b]])

    adapter.retain(cache, [2, 0])
    seq, done, _, masks, positions, windows = inputs
    device = adapter.device
    probe_pos = torch.stack([torch.arange(0, 2), torch.arange(3, 5)]).to(device)  # sample 2, sample 0
    probe = torch.stack([seq[2][:2], seq[0][3:5]]).to(device)
    after = adapter.forward(cache, WindowInputs(probe, probe_pos, None, 5))
    for i, b in enumerate((2, 0)):
        _, own, _ = fresh(adapter, PROMPTS[b], 16)
        own_cache = own
        if done[b]:
            one_forward(adapter, own_cache, seq[b][: done[b]], arange(adapter, 0, done[b]))
            one_commit(adapter, own_cache, arange(adapter, 0, done[b]))
        close(after[i], one_forward(adapter, own_cache, probe[i], probe_pos[i]))


def check_prefill_leaves_other_samples(adapter) -> None:
    """Starting one sample afresh (a new prompt in its slot) leaves the other samples' caches and
    logits as they were, and the restarted sample computes what a fresh cache would."""
    inputs = _sample_inputs(adapter)
    seq, done, width, masks, positions, windows = inputs
    device = adapter.device
    _, before, cache = _batched(adapter, [0, 1], *inputs)
    new = adapter.encode_prompt(PROMPTS[2])
    p_new = adapter.prefill(cache, [1], [new])[0]  # sample 1 now decodes prompt 2 from the start
    tokens = torch.stack([windows[0], seq[2][:5]]).to(device)
    pos = torch.stack([positions[0], torch.arange(0, 5)]).to(device)
    after = adapter.forward(cache, WindowInputs(tokens, pos, None, int(pos.max()) + 1))
    close(after[0], before[0, :, : width[0]])  # sample 0: the same window, the same logits
    _, own, p_own = fresh(adapter, PROMPTS[2], 16)
    close(p_new, p_own)
    close(after[1], one_forward(adapter, own, seq[2][:5].to(device), arange(adapter, 0, 5)))
