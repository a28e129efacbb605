"""Emu3-Gen adapter on a tiny random-weight Emu3ForConditionalGeneration (4x4 codes at 32 px).

The visual tokens are deliberately numbered out of order in the tiny vocabulary: the code <-> token
map must come from their names, never from an offset."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import model_properties as props  # noqa: E402
from hf_fixtures import ScoreRecorder, char_tokenizer, spread_weights  # noqa: E402

from sjdbench.decoding.processing import StructureMasks, process_logits  # noqa: E402
from sjdbench.models import emu3  # noqa: E402
from sjdbench.models.emu3 import (  # noqa: E402
    NEGATIVE_PROMPT,
    Emu3Adapter,
    emu3_layout,  # noqa: E402
    visual_token_ids,
)

N_CODES = 64
STRUCTURAL = [
    "<|extra_203|>",
    "<|extra_204|>",
    "<|endoftext|>",
    "<|extra_200|>",
    "<|extra_201|>",
    "<|image start|>",
    "<|image end|>",
    "<|image token|>",
    "<image>",
]
SHUFFLED_CODES = torch.randperm(N_CODES, generator=torch.Generator().manual_seed(5)).tolist()
VISUAL_NAMES = [f"<|visual token {k:06d}|>" for k in SHUFFLED_CODES]


def tiny_tokenizer():
    return char_tokenizer(
        STRUCTURAL + VISUAL_NAMES,
        bos="<|extra_203|>",
        pad="<|endoftext|>",
        extra={
            "image_token": "<image>",
            "boi_token": "<|image start|>",
            "eoi_token": "<|image end|>",
            "image_wrapper_token": "<|image token|>",
            "eof_token": "<|extra_201|>",
        },
        size=200,
    )


@pytest.fixture(scope="module")
def emu3_dir(tmp_path_factory):
    from transformers import Emu3Config, Emu3ForConditionalGeneration, Emu3ImageProcessor, Emu3Processor

    root = tmp_path_factory.mktemp("emu3")
    tokenizer = tiny_tokenizer()
    vocabulary = tokenizer.get_vocab()
    text = dict(
        vocab_size=200,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attention_dropout=0.0,
        pad_token_id=vocabulary["<|endoftext|>"],
        bos_token_id=vocabulary["<|extra_203|>"],
        eos_token_id=vocabulary["<|extra_204|>"],
    )
    vq = dict(
        codebook_size=N_CODES,
        embed_dim=4,
        latent_channels=4,
        base_channels=32,
        channel_multiplier=[1, 1, 1, 2],
        num_res_blocks=1,
        attn_resolutions=[],
        hidden_size=64,
        num_attention_heads=1,
    )
    config = Emu3Config(text_config=text, vq_config=vq, vocabulary_map=vocabulary)
    torch.manual_seed(0)
    spread_weights(Emu3ForConditionalGeneration(config)).save_pretrained(root)
    Emu3Processor(image_processor=Emu3ImageProcessor(), tokenizer=tokenizer).save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def adapter(emu3_dir):
    return emu3.MODEL.load(path=str(emu3_dir), resolution=32)


def baai_prefix_constraint(adapter):
    """BAAI's rule (emu3/mllm/utils_emu3.py), restated: offsets counted from `<|image token|>`."""
    t, H, W = adapter.tokens, adapter.height, adapter.width
    visual = adapter.image_token_ids.tolist()

    def allowed(batch_id, input_ids):
        offset = input_ids.shape[0] - int(torch.nonzero(input_ids == t.wrapper)[0, 0])
        if offset % (W + 1) == 0:
            return [t.eol]
        return {(W + 1) * H + 1: [t.eof], (W + 1) * H + 2: [t.eoi], (W + 1) * H + 3: [t.eos]}.get(offset, visual)

    return allowed


def library_generate(adapter, text: str, **kwargs) -> torch.Tensor:
    """transformers' generate with BAAI's settings: unbatched negative-prompt CFG and the prefix rule."""
    ids = torch.tensor([adapter.prompt_ids(text)])
    neg = torch.tensor([adapter.negative_ids()])
    out = adapter.model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=adapter.layout.n_positions,
        negative_prompt_ids=neg,
        negative_prompt_attention_mask=torch.ones_like(neg),
        guidance_scale=adapter.default_sampling.cfg_scale,
        prefix_allowed_tokens_fn=baai_prefix_constraint(adapter),
        eos_token_id=adapter.tokens.eos,
        pad_token_id=adapter.tokens.pad,
        **kwargs,
    )
    return out[0, ids.shape[1] :]


def test_code_to_token_map_follows_the_names(adapter, emu3_dir):
    vocabulary = tiny_tokenizer().get_vocab()
    expected = torch.tensor([vocabulary[f"<|visual token {k:06d}|>"] for k in range(N_CODES)])
    assert torch.equal(adapter.image_token_ids, expected)
    assert not torch.equal(expected, expected.sort().values)  # the fixture really is out of order
    assert torch.equal(visual_token_ids(vocabulary), expected)


def test_layout_matches_baai_prefix_constraint(adapter):
    """Row ends, end of frame, end of image and end of sequence sit exactly where BAAI forces them."""
    layout, t = adapter.layout, adapter.tokens
    assert layout.n_positions == 4 * 5 + 3
    rule = baai_prefix_constraint(adapter)
    prompt = adapter.prompt_ids("a")
    for j in range(layout.n_positions):
        allowed = rule(0, torch.tensor(prompt + [0] * j))
        if layout.forced[j] >= 0:
            assert allowed == [int(layout.forced[j])]
        else:
            assert sorted(allowed) == sorted(adapter.image_token_ids.tolist())
    assert layout.forced[-3:].tolist() == [t.eof, t.eoi, t.eos]


def test_prompts_are_baai_generation_prompts(adapter):
    t = adapter.tokens
    cond, neg = adapter.prompt_ids("a cat"), adapter.negative_ids()
    for ids in (cond, neg):  # BOS, text, <|image start|> "4*4" <|image token|>
        assert ids[0] == t.bos and ids[-1] == t.wrapper and ids[-5] == t.boi
    assert len(neg) > len(cond)
    prompt = adapter.encode_prompt("a cat")
    assert prompt.pad_mask[0].sum() == len(cond) and prompt.pad_mask[1].all()  # the shorter row is left-padded
    assert prompt.tokens[1].tolist() == neg


def test_batched_cfg_equals_unbatched_forwards(adapter):
    """Both rows of the adapter's one batched forward equal separate forwards of the caption prompt and
    of the negative prompt (what BAAI's unbatched CFG processor computes)."""
    seq = props.random_image_tokens(adapter, 7, seed=4)
    prompt = adapter.encode_prompt("a cat")
    cache = adapter.new_cache(1, prompt.length, 7)
    first = adapter.prefill(cache, [0], [prompt])[0]
    window = props.one_forward(adapter, cache, seq, torch.arange(7))  # (2, 7, V)
    for row, ids in enumerate([adapter.prompt_ids("a cat"), adapter.negative_ids()]):
        full = torch.cat([torch.tensor(ids), seq])[None]
        with torch.no_grad():
            alone = adapter.model(input_ids=full).logits[0, len(ids) - 1 :]  # (8, V)
        torch.testing.assert_close(first[row], alone[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(window[row], alone[1:], atol=1e-4, rtol=1e-4)


def test_greedy_ar_reproduces_library_generate(adapter):
    expected = library_generate(adapter, "a cat", do_sample=False)
    ours = props.greedy(adapter, "ar", "a cat").tokens
    assert torch.equal(ours, expected)
    props.check_forced_tokens_in_place(adapter, ours)


def test_sampling_distributions_match_library_generate(adapter):
    """Follow the library's sampled image; at every step our processed distribution (batched CFG on raw
    logits, then the layout's mask) equals the library's (log-softmax CFG, then the prefix rule)."""
    recorder = ScoreRecorder()
    torch.manual_seed(1)
    sampled = library_generate(adapter, "a cat", do_sample=True, top_k=0, logits_processor=[recorder])
    N = adapter.layout.n_positions
    assert sampled.shape[0] == N
    sampling = adapter.default_sampling.__class__(cfg_scale=adapter.default_sampling.cfg_scale, top_k=0)
    masks = StructureMasks(adapter.layout.forced, torch.isin(torch.arange(adapter.vocab_size), adapter.image_token_ids))
    prompt = adapter.encode_prompt("a cat")
    cache = adapter.new_cache(1, prompt.length, 1)
    logits = [adapter.prefill(cache, [0], [prompt])[0]]
    for j in range(N - 1):
        logits.append(props.one_forward(adapter, cache, sampled[j : j + 1], torch.tensor([j]))[:, 0])
        props.one_commit(adapter, cache, torch.tensor([0]))
    ours = process_logits(torch.stack(logits, dim=1), masks.window(0, N), sampling)  # (N, V)
    theirs = torch.softmax(torch.cat(recorder.scores), dim=-1)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


def test_greedy_jacobi_equals_greedy_ar(adapter):
    tokens = props.check_greedy_jacobi_equals_greedy_ar(adapter)
    props.check_forced_tokens_in_place(adapter, tokens)


def test_cache_after_rollback_equals_fresh_prefill(adapter):
    props.check_rollback_equals_fresh_prefill(adapter)


def test_masked_window_equals_separate_chains(adapter):
    props.check_masked_window_equals_separate_chains(adapter)


def test_decode_returns_an_image_of_the_resolution(adapter):
    props.check_decode(adapter, props.greedy(adapter, "ar").tokens, (32, 32))


def test_contract_tables(adapter):
    props.check_contract_shapes(adapter)
    assert adapter.default_sampling.top_k == 2048 and adapter.default_sampling.cfg_scale == 3.0
    assert adapter.negative_prompt == NEGATIVE_PROMPT


def test_layout_helper_counts():
    from sjdbench.models.emu3 import Emu3Tokens

    layout = emu3_layout(90, 90, Emu3Tokens(1, 2, 3, 4, 5, 6, 7, 8))
    assert layout.n_positions == 90 * 91 + 3 and int((layout.forced == 4).sum()) == 90


def test_missing_weights_give_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        emu3.MODEL.load(path=str(tmp_path))
    assert "\n" not in str(error.value) and "BAAI/Emu3-Gen-hf" in str(error.value)


def test_random_weights_tiny_size_builds_without_files():
    adapter = emu3.MODEL.load(weights="random", size="tiny", resolution=32)
    assert isinstance(adapter, Emu3Adapter) and adapter.vocab_size == 184622
    assert adapter.image_token_ids[0] == 151854 and adapter.layout.n_positions == 23


def test_padded_window_of_the_compiled_path_equals_unpadded(adapter):
    props.check_padded_window_equals_unpadded(adapter)


def test_reused_cache_buffers_are_clean(adapter):
    props.check_reused_cache_is_clean(adapter)


def test_draft_trees_and_rows_in_flight_run_on_this_model(adapter):
    props.check_topologies(adapter)


def test_batched_forward_equals_each_samples_own(adapter):
    props.check_batched_forward_equals_unbatched(adapter)


def test_prefill_of_one_sample_leaves_the_others(adapter):
    props.check_prefill_leaves_other_samples(adapter)
