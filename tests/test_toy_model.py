"""The shipped toy model and the debug model (the LLaMA adapter): weights, the cache against the plain
causal forward, the batched contract in fp32 and fp64, CFG, compilation, and decoding through the loop."""

import time

import model_properties as props
import pytest
import torch

from sjdbench.models.debug import build_debug_adapter
from sjdbench.models.llama import segment_index
from sjdbench.models.llama_adapter import CODE_OFFSET
from sjdbench.models.toy.model import LM_FILE, META_FILE, TOKENIZER_FILE, WEIGHTS_DIR, build_toy_adapter


@pytest.fixture(scope="module")
def adapter():
    return build_toy_adapter()


DEBUG = dict(grid_h=6, grid_w=6, n_codes=32, init_std=0.5)
MODELS = {
    "toy": lambda: build_toy_adapter(),
    "toy-fp64": lambda: build_toy_adapter(dtype="fp64"),
    "debug": lambda: build_debug_adapter(**DEBUG),
    "debug-fp64": lambda: build_debug_adapter(**DEBUG, dtype="fp64"),
}


@pytest.fixture(scope="module", params=list(MODELS))
def each(request):
    return MODELS[request.param]()


def test_shipped_weights_exist_and_load_fast():
    total = 0
    for name in (LM_FILE, META_FILE, TOKENIZER_FILE):
        path = WEIGHTS_DIR / name
        assert path.exists(), path
        total += path.stat().st_size
    assert total < 30 * 2**20
    t0 = time.time()
    a = build_toy_adapter()
    assert time.time() - t0 < 2.0
    assert a.name == "toy" and a.n_codes >= 512
    assert a.layout.grid_hw == (16, 16) and a.layout.n_positions == 16 * 17  # <eol> after each row
    assert tuple(a.codebook().shape) == (a.n_codes, 48)


def test_row_end_token_must_match_weights():
    with pytest.raises(ValueError):
        build_toy_adapter(row_end_token=False)


def _segment(adapter, seed=0):
    g = torch.Generator().manual_seed(seed)
    seg = adapter.layout.forced.clone()
    content = ~adapter.layout.is_forced
    seg[content] = CODE_OFFSET + torch.randint(adapter.n_codes, (int(content.sum()),), generator=g)
    return seg


def test_cache_path_equals_full_forward(adapter):
    prompt = adapter.encode_prompt("a big red circle in the center, on a blue striped background")
    seg = _segment(adapter)[:100]
    # full causal forward, no cache
    full = torch.cat([prompt.tokens, seg[None].expand(2, -1)], dim=1)
    mask = torch.cat([prompt.pad_mask, torch.ones(2, seg.numel(), dtype=torch.bool)], dim=1)
    with torch.no_grad():
        L = full.shape[1]
        index = segment_index(L, prompt.length)  # the training code's segment indexing
        ref = adapter.model(full, torch.arange(L), pad_mask=mask, segment_index=index)[
            :, prompt.length - 1 :
        ]  # (2, 101, V)
    # cached: prefill, then windows of varied size, each committed
    _, cache, first = props.fresh(adapter, prompt.text, 46)
    torch.testing.assert_close(first, ref[:, 0].float(), atol=1e-4, rtol=1e-4)
    start = 0
    for size in (1, 7, 16, 30, 26):
        positions = torch.arange(start, start + size)
        out = props.one_forward(adapter, cache, seg[start : start + size], positions, horizon=start + size)
        torch.testing.assert_close(out, ref[:, start + 1 : start + 1 + size].float(), atol=1e-4, rtol=1e-4)
        props.one_commit(adapter, cache, torch.arange(size))
        start += size
    # a window of wrong drafts, none kept: the true tokens afterwards see only the committed prefix
    props.one_forward(adapter, cache, _segment(adapter, 1)[80:96], torch.arange(80, 96))
    props.one_commit(adapter, cache, torch.arange(0))
    out = props.one_forward(adapter, cache, seg[80:100], torch.arange(80, 100))
    torch.testing.assert_close(out, ref[:, 81:101].float(), atol=1e-4, rtol=1e-4)


def test_cfg_branches_differ(adapter):
    _, _, logits = props.fresh(adapter, "a small yellow triangle at the top left, on a black cloudy background", 1)
    p = logits.softmax(-1)
    assert 0.5 * (p[0] - p[1]).abs().sum() > 0.05


def test_jacobi_decode_makes_an_image(adapter):
    from sjdbench.config import build_preset
    from sjdbench.decoding.loop import jacobi_decode

    parts = build_preset("sjd", adapter, "decoder.window=16")
    res = jacobi_decode(
        adapter,
        "a big green square on the left, on a white wavy background",
        parts,
        adapter.default_sampling,
        torch.Generator().manual_seed(0),
    )
    assert res.tokens.shape == (16 * 17,)
    codes = adapter.tokens_to_codes(res.tokens)
    assert codes.shape == (16, 16) and int(codes.min()) >= 0 and int(codes.max()) < adapter.n_codes
    image = adapter.decode(res.tokens)
    assert image.shape == (64, 64, 3) and image.dtype.name == "uint8"
    assert res.stats.to_row()["step_compression"] > 1.0


def test_shipped_weights_read_captions_as_words(adapter):
    from sjdbench.models.toy.model import load_meta
    from sjdbench.toyworld.world import grammar_words

    meta = load_meta()
    assert meta["text"] == {"kind": "words", "vocab": grammar_words()}
    prompt = adapter.encode_prompt("a big red circle in the center, on a blue striped background")
    assert prompt.tokens.shape[1] == 2 + 13  # <bos> + 13 words and commas + <boi>


def test_shipped_weights_embed_segment_positions(adapter):
    """The toy knows which row and column it draws: the same tokens at another segment index
    (same relative offsets, so RoPE alone could not tell) give other predictions."""
    assert adapter.model.cfg.segment_len == adapter.layout.n_positions
    prompt = adapter.encode_prompt("a big red circle at the top left, on a blue striped background")
    seg = _segment(adapter)[:34]  # two rows with their <eol>
    P = prompt.length
    full = torch.cat([prompt.tokens, seg[None].expand(2, -1)], dim=1)
    mask = torch.cat([prompt.pad_mask, torch.ones(2, seg.numel(), dtype=torch.bool)], dim=1)
    with torch.no_grad():
        L = full.shape[1]
        at_top = adapter.model(full, torch.arange(L), pad_mask=mask, segment_index=segment_index(L, P))
        shifted = segment_index(L, P)
        shifted[P:] += 8 * 17  # the same two rows claimed to be rows 8 and 9
        at_middle = adapter.model(full, torch.arange(L), pad_mask=mask, segment_index=shifted)
        with pytest.raises(ValueError, match="segment_index"):
            adapter.model(full, torch.arange(L), pad_mask=mask)
    p_top, p_mid = at_top[0, P:].softmax(-1), at_middle[0, P:].softmax(-1)
    tv = 0.5 * (p_top - p_mid).abs().sum(-1)  # (34,)
    assert float(tv.mean()) > 0.05


# -- the contract on the toy and debug models, fp32 and fp64 ----------------------------------------


def test_batched_forward_equals_each_samples_own(each):
    props.check_batched_forward_equals_unbatched(each)


def test_prefill_of_one_sample_leaves_the_others(each):
    props.check_prefill_leaves_other_samples(each)


def test_rollback_masked_windows_and_reused_cache(each):
    props.check_rollback_equals_fresh_prefill(each)
    props.check_masked_window_equals_separate_chains(each)
    props.check_reused_cache_is_clean(each)
    props.check_padded_window_equals_unpadded(each)


def test_contract_tables_and_dtype(each):
    props.check_contract_shapes(each)
    wide = each.model.head.weight.dtype == torch.float64
    assert each.dtype == (torch.float64 if wide else torch.float32)
    assert each.gsd_d_thr == (1.5 if each.name == "toy" else 0.5)


def test_fp64_is_the_fp32_model_in_double_precision():
    """The same weights in fp64 give the fp32 logits up to fp32 rounding (and a greedy decode's tokens)."""
    narrow, wide = MODELS["debug"](), MODELS["debug-fp64"]()
    _, _, a = props.fresh(narrow, "a red cube", 4)
    _, _, b = props.fresh(wide, "a red cube", 4)
    assert b.dtype == torch.float64
    torch.testing.assert_close(a.double(), b, atol=1e-4, rtol=1e-4)
    assert torch.equal(props.greedy(narrow, "sjd").tokens, props.greedy(wide, "sjd").tokens)


def test_greedy_decodes_through_the_loop(each):
    props.check_greedy_jacobi_equals_greedy_ar(each)


def test_unknown_dtype_lists_the_choices():
    with pytest.raises(ValueError, match="choose one of: auto, fp32, fp64"):
        build_debug_adapter(dtype="bf16")


@pytest.mark.slow
def test_compiled_window_forward_equals_eager():
    """model.compile=true: the window forward is inductor-compiled (bucketed static shapes: the window
    padded to a power of two of slots, the keys to a power of two) and gives the eager logits; the
    prefill stays eager. Slow: a cold compilation takes ~15 s a shape on 2 cores."""
    eager, compiled = build_toy_adapter(), build_toy_adapter(compile=True)
    outputs = []
    for adapter in (eager, compiled):
        _, cache, _ = props.fresh(adapter, "a red circle", 16)
        tokens = props.random_image_tokens(adapter, 12, seed=1)
        props.one_forward(adapter, cache, tokens, torch.arange(12), horizon=12)
        props.one_commit(adapter, cache, torch.arange(4))
        outputs.append(props.one_forward(adapter, cache, tokens[4:], torch.arange(4, 12), horizon=12))
    assert "_compiled" in compiled.__dict__ and "_compiled" not in eager.__dict__
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-4, rtol=1e-4)


DRAFTER_PRESETS = ("eagle", "eagle2", "eagle2_adt", "eagle_chain", "lantern_adt", "lantern_eagle", "lantern_pp")


@pytest.fixture(scope="module")
def eager_and_compiled(tmp_path_factory):
    """The debug model in float64, eager and compiled (one pair for every preset: presets share compiled
    shapes, as the runs of a sweep do), and what some presets read beside the model: a drafter (random
    weights, saved as `sjdbench toy train-drafter` saves one) and a phrase table over its first codes."""
    import json

    from sjdbench.models.drafter import DrafterConfig, DrafterNet
    from sjdbench.models.drafter.files import save_trained
    from sjdbench.models.drafter.network import init_drafter

    torch._dynamo.reset()  # graphs compiled by earlier tests in this process would not be counted
    options = dict(grid_h=8, grid_w=8, n_codes=32, init_std=0.5, dtype="fp64")  # 72 positions: 2 key buckets
    eager, compiled = build_debug_adapter(**options), build_debug_adapter(**options, compile=True)
    folder = tmp_path_factory.mktemp("beside")
    config = DrafterConfig("llama", eager.hidden_size, 64, 4, 2, eager.vocab_size, num_hidden_layers=1)
    net = init_drafter(DrafterNet(config), std=0.2, seed=0)
    with torch.no_grad():
        net.embed_tokens.weight.copy_(eager.token_embeddings())
    save_trained(net, folder / "drafter", "debug_drafter", {})
    codes = eager.image_token_ids.tolist()[:8]
    pairs = [[a, b, 1, 1.0] for a in codes for b in codes]  # every pair of 8 codes: joint passes happen
    (folder / "debug_phrases.json").write_text(json.dumps({"model": "debug", "pairs": pairs}))
    overrides = {preset: [f"decoder.proposal.drafter={folder / 'drafter'}"] for preset in DRAFTER_PRESETS}
    overrides["sjd_pv"] = [f"decoder.verifier.phrases={folder / 'debug_phrases.json'}"]
    return eager, compiled, overrides


def every_preset() -> list[str]:
    from sjdbench.config.identity import decoder_presets

    return ["ar", *decoder_presets()]


@pytest.mark.slow
@pytest.mark.parametrize("preset", every_preset())
def test_compiled_decoding_equals_eager_in_float64(preset, eager_and_compiled):
    """A compiled decode is the eager one token for token, and statistic for statistic, in float64 at
    B = 1 and 3, for every preset (chains, trees, rows, drafters; W = 16), over prompts of different
    lengths (so shapes change with the window's length, the keys' bucket and the batch). The prompts
    share compiled shapes: an AR decode compiles one forward per key bucket and batch size, not one
    per prompt. Slow: each shape compiles in ~5 s on 2 cores (every preset: about 2.5 minutes)."""
    from torch._dynamo.utils import counters

    from sjdbench.config import build_preset
    from sjdbench.decoding.loop import Request, jacobi_decode_batch

    eager, compiled, beside = eager_and_compiled
    prompts = ["a red circle", "two blue squares on a striped background", "x"]
    overrides = [*([] if preset == "ar" else ["decoder.window=16"]), *beside.get(preset, [])]
    for batch in (1, 3):
        results = []
        for adapter in (eager, compiled):
            requests = [Request(p, torch.Generator().manual_seed(100 + i), key=i) for i, p in enumerate(prompts)]
            decoder = build_preset(preset, adapter, *overrides)
            graphs = counters["stats"]["unique_graphs"]
            decoded = jacobi_decode_batch(adapter, requests, decoder, adapter.default_sampling, batch)
            results.append({r.key: out for r, out in decoded})
            if adapter is compiled and preset == "ar" and batch == 1:
                # the window forward: 1 slot (a cache of its own: no other preset's shape), keys of 64 or
                # 128 entries (2 graphs; on a CPU the loop's chain step is not compiled, loop.CHAIN_STEP)
                assert 0 < counters["stats"]["unique_graphs"] - graphs <= 2
        for key, out in results[0].items():
            assert torch.equal(results[1][key].tokens, out.tokens), (preset, batch, key)
            assert results[1][key].stats.to_row() == out.stats.to_row(), (preset, batch, key)
    assert "_compiled" in compiled.__dict__


def test_compile_option_reaches_the_adapter():
    from sjdbench.config import compose_run
    from sjdbench.models.registry import build_adapter

    config = compose_run(["model=toy", "model.compile=true"])
    assert build_adapter("toy", dict(config.model.options), "cpu").compile is True
