"""Properties every real-model adapter must have, checked on tiny random-weight configurations of the
same architectures (the adapter contract in sjdbench/adapter.py). Used by tests/test_<model>.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from sjdbench.config import build_preset
from sjdbench.decoding.loop import jacobi_decode

ATOL = RTOL = 1e-4


def random_image_tokens(adapter, count: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = adapter.image_token_ids.cpu()
    return ids[torch.randint(0, ids.numel(), (count,), generator=g)].to(adapter.device)


def fresh(adapter, text: str, extra: int):
    prompt = adapter.encode_prompt(text)
    cache = adapter.new_cache(prompt, extra=extra)
    return prompt, cache, adapter.prefill(prompt, cache)


def check_rollback_equals_fresh_prefill(adapter, text: str = "a red cube") -> None:
    """Feed garbage drafts, keep only the verified slot, then continue: the logits must equal those of
    a cache that only ever saw the clean prefix."""
    arange = lambda a, b: torch.arange(a, b, device=adapter.device)  # noqa: E731
    seq = random_image_tokens(adapter, 20, seed=0)
    _, cache, p0 = fresh(adapter, text, 20)
    clean = adapter.forward(seq, arange(0, 20), cache)  # (2, 20, V)

    _, cache, p0_again = fresh(adapter, text, 20)
    torch.testing.assert_close(p0_again, p0, atol=ATOL, rtol=RTOL)
    adapter.forward(seq[:5], arange(0, 5), cache)
    adapter.commit(cache, arange(0, 5))
    garbage = random_image_tokens(adapter, 8, seed=1)
    adapter.forward(torch.cat([seq[5:6], garbage]), arange(5, 14), cache)  # a window of wrong drafts
    adapter.commit(cache, arange(0, 1))  # only position 5 is kept
    resumed = adapter.forward(seq[6:], arange(6, 20), cache)
    torch.testing.assert_close(resumed, clean[:, 6:], atol=ATOL, rtol=RTOL)


def check_masked_window_equals_separate_chains(adapter, text: str = "a red cube") -> None:
    """Two draft chains in one window, each slot seeing only its own chain, give the logits of two
    separate forwards; committing the second chain equals having fed only that chain."""
    arange = lambda a, b: torch.arange(a, b, device=adapter.device)  # noqa: E731
    a = random_image_tokens(adapter, 6, seed=2)
    b = random_image_tokens(adapter, 5, seed=3)
    _, cache, _ = fresh(adapter, text, 16)
    adapter.forward(a[:1], arange(0, 1), cache)
    adapter.commit(cache, arange(0, 1))
    alone_a = adapter.forward(a[1:], arange(1, 6), cache)
    alone_b = adapter.forward(b, arange(1, 6), cache)
    mask = torch.zeros(10, 10, dtype=torch.bool, device=adapter.device)
    mask[:5, :5] = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[5:, 5:] = torch.ones(5, 5, dtype=torch.bool).tril()
    both = adapter.forward(torch.cat([a[1:], b]), torch.cat([arange(1, 6), arange(1, 6)]), cache, mask)
    torch.testing.assert_close(both[:, :5], alone_a, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(both[:, 5:], alone_b, atol=ATOL, rtol=RTOL)
    adapter.commit(cache, arange(5, 10))  # keep chain b
    after = adapter.forward(a[:1], arange(6, 7), cache)

    _, cache, _ = fresh(adapter, text, 16)
    adapter.forward(torch.cat([a[:1], b]), arange(0, 6), cache)
    adapter.commit(cache, arange(0, 6))
    torch.testing.assert_close(after, adapter.forward(a[:1], arange(6, 7), cache), atol=ATOL, rtol=RTOL)


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
    assert p0.shape == (2, adapter.vocab_size) and torch.isfinite(p0).all()
    assert adapter.codebook().shape[0] == adapter.image_token_ids.numel()
    embeddings = adapter.token_embeddings()
    assert embeddings.ndim == 2 and embeddings.shape[0] == adapter.vocab_size  # GSD indexes it by token id
    assert adapter.gsd_d_thr > 0


def check_padded_window_equals_unpadded(adapter) -> None:
    """The compiled path pads every window to the cache's window size (one static shape): the real
    slots' logits must not change. The padding is exercised with the eager function standing in for
    the compiled one (compilation itself is checked on CUDA, tests/test_models_gpu.py)."""
    seq = random_image_tokens(adapter, 9, seed=6)
    outputs = []
    for padded in (False, True):
        adapter.compile = padded
        adapter.__dict__["_compiled"] = adapter._run
        try:
            _, cache, _ = fresh(adapter, "a red cube", 16)
            adapter.forward(seq[:4], torch.arange(4, device=adapter.device), cache)
            adapter.commit(cache, torch.arange(2, device=adapter.device))
            outputs.append(adapter.forward(seq[4:], torch.arange(2, 7, device=adapter.device), cache))
        finally:
            adapter.compile = False
            adapter.__dict__.pop("_compiled")
    torch.testing.assert_close(outputs[1], outputs[0], atol=ATOL, rtol=RTOL)


def check_reused_cache_is_clean(adapter) -> None:
    """Cache buffers are reused from image to image without clearing: what another prompt left in
    them must be invisible to the next one (prompts of different lengths share a bucketed size)."""
    arange = lambda a, b: torch.arange(a, b, device=adapter.device)  # noqa: E731
    seq = random_image_tokens(adapter, 8, seed=7)

    def run(text: str) -> torch.Tensor:
        _, cache, p0 = fresh(adapter, text, 8)
        window = adapter.forward(seq, arange(0, 8), cache)
        adapter.commit(cache, arange(0, 8))
        return torch.cat([p0[:, None], window, adapter.forward(seq[:2], arange(8, 10), cache)], dim=1)

    before = run("a blue sphere")
    run("a much longer prompt about a large green pyramid standing in the rain at night")
    torch.testing.assert_close(run("a blue sphere"), before, atol=ATOL, rtol=RTOL)
