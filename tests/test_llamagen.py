"""LlamaGen adapter: our GPT (2-D RoPE, 120 caption slots, learned null caption) and VQ-16 on a tiny
random-weight checkpoint in the release layout (256 px -> 16x16 codes), checked against an
independent restatement of LlamaGen's forward (full sequence, no cache, complex-number rotary)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

import model_properties as props  # noqa: E402
from hf_fixtures import char_tokenizer  # noqa: E402

from sjdbench.models import llamagen  # noqa: E402
from sjdbench.models.llamagen import (  # noqa: E402
    CAPTION_TOKENS,
    LlamaGenAdapter,
    clean_caption,
)
from sjdbench.models.llamagen_gpt import GPTConfig, LlamaGenGPT, rope_table_2d  # noqa: E402
from sjdbench.models.vq16 import VQ16, VQ16Config  # noqa: E402

GRID = 16


def release_keys(n_layer: int) -> set[str]:
    """The parameter names of LlamaGen's t2i GPT checkpoints (checkpoint["model"])."""
    keys = {
        "cls_embedding.cap_proj.fc1.weight",
        "cls_embedding.cap_proj.fc2.weight",
        "cls_embedding.uncond_embedding",
        "tok_embeddings.weight",
        "norm.weight",
        "output.weight",
    }
    for i in range(n_layer):
        keys |= {
            f"layers.{i}.{name}.weight"
            for name in (
                "attention.wqkv",
                "attention.wo",
                "feed_forward.w1",
                "feed_forward.w2",
                "feed_forward.w3",
                "attention_norm",
                "ffn_norm",
            )
        }
    return keys


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    from transformers import T5Config, T5EncoderModel

    root = tmp_path_factory.mktemp("llamagen")
    torch.manual_seed(0)
    gpt = LlamaGenGPT(GPTConfig(dim=128, n_layer=2, n_head=2, caption_dim=32, grid=GRID))
    with torch.no_grad():
        for p in gpt.parameters():
            p.normal_(0.0, 0.3) if p.dim() >= 2 else None
        gpt.cls_embedding.uncond_embedding.normal_(0.0, 1.0)
    state = gpt.state_dict()
    assert set(state) == release_keys(2)
    torch.save({"model": state, "optimizer": {}, "steps": 1}, root / "t2i_XL_stage1_256.pt")
    vq = VQ16(VQ16Config(ch=32, ch_mult=[1, 1, 2, 2, 4], num_res_blocks=1, z_channels=32))
    torch.save({"model": vq.state_dict()}, root / "vq_ds16_t2i.pt")
    t5_root = root / "t5"
    t5 = T5EncoderModel(
        T5Config(
            vocab_size=128,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=1,
            num_heads=4,
            feed_forward_proj="gated-gelu",
            pad_token_id=1,
            eos_token_id=2,
        )
    )
    t5.save_pretrained(t5_root)
    char_tokenizer(["<pad>", "</s>"], bos="<pad>", pad="<pad>", eos="</s>", size=128).save_pretrained(t5_root)
    return root


@pytest.fixture(scope="module")
def adapter(dirs):
    return llamagen.MODEL.load(path=str(dirs), t5_path=str(dirs / "t5"), resolution=256)


@pytest.fixture(scope="module")
def small(adapter):
    """The same weights generating a 4x4 grid (64 px), for the tests that decode whole images."""
    from dataclasses import replace

    gpt = LlamaGenGPT(replace(adapter.gpt.cfg, grid=4))
    gpt.load_state_dict(adapter.gpt.state_dict())
    return LlamaGenAdapter(gpt, adapter.vq, adapter.captions)


def reference_logits(
    gpt: LlamaGenGPT, conditioning: torch.Tensor, caption_mask: torch.Tensor, tokens: torch.Tensor, last: bool = False
) -> torch.Tensor:
    """LlamaGen's forward restated: all slots at once, a causal mask whose caption columns follow the
    caption mask (plus the diagonal), and rotary as complex multiplication. -> (2, 120 + n, V), or
    (2, 1, V) for the last slot only."""
    cfg = gpt.cfg
    x = torch.cat([gpt.cls_embedding.cap_proj(conditioning), gpt.tok_embeddings(tokens)[None].expand(2, -1, -1)], 1)
    S, hd = x.shape[1], cfg.head_dim
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    mask[:, :CAPTION_TOKENS] &= caption_mask[None]
    mask |= torch.eye(S, dtype=torch.bool)
    quarter = hd // 4
    base = cfg.rope_base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)
    slot = torch.arange(S - CAPTION_TOKENS, dtype=torch.float64)
    angles = torch.cat([(slot // cfg.grid)[:, None] * base, (slot % cfg.grid)[:, None] * base], dim=-1)
    rotation = torch.cat(
        [
            torch.zeros(CAPTION_TOKENS, hd // 2, dtype=torch.complex128),  # caption slots: x 0
            torch.polar(torch.ones_like(angles), angles),
        ]
    ).to(torch.complex64)

    def rotate(t):  # (2, S, H, hd)
        pairs = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * rotation[None, :, None]).flatten(3)

    for layer in gpt.layers:
        h = layer.attention_norm(x)
        q, k, v = layer.attention.wqkv(h).view(2, S, 3, cfg.n_head, hd).unbind(2)
        q, k = rotate(q).transpose(1, 2), rotate(k).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), attn_mask=mask)
        x = x + layer.attention.wo(y.transpose(1, 2).reshape(2, S, cfg.dim))
        x = x + layer.feed_forward(layer.ffn_norm(x))
    return gpt.output(gpt.norm(x[:, -1:] if last else x))


def conditioning_of(adapter, text):
    prompt = adapter.encode_prompt(text)
    return prompt, prompt.extras["conditioning"], prompt.pad_mask[0]


def test_checkpoint_in_release_layout_loads_strictly(adapter):
    assert set(adapter.gpt.state_dict()) == release_keys(2)
    assert (adapter.gpt.cfg.dim, adapter.gpt.cfg.n_head, adapter.gpt.cfg.caption_dim) == (128, 2, 32)
    assert adapter.vq.cfg.ch == 32 and adapter.vq.cfg.num_res_blocks == 1


def test_rope_table_rows_are_grid_rows_and_columns():
    cfg = GPTConfig(dim=128, n_head=2, grid=4, cls_token_num=3)
    table = rope_table_2d(cfg)  # (3 + 16, 32, 2)
    assert table.shape == (19, 32, 2) and not table[:3].any()  # caption slots: cos = sin = 0
    quarter = 16
    base = cfg.rope_base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)
    for i in (0, 5, 15):
        row, col = divmod(i, 4)
        angles = torch.cat([row * base, col * base]).float()
        torch.testing.assert_close(table[3 + i, :, 0], angles.cos())
        torch.testing.assert_close(table[3 + i, :, 1], angles.sin())


def test_window_slots_use_their_grid_positions(adapter):
    """Drafts at segment positions 5..9 in a window (with a wrong draft among them) give the logits of
    LlamaGen's full forward at those positions: the 2-D rotary row of slot 120 + j is (j // g, j % g)."""
    seq = props.random_image_tokens(adapter, 10, seed=3)
    prompt, conditioning, mask = conditioning_of(adapter, "a red cube")
    cache = adapter.new_cache(1, prompt.length, 6)
    first = adapter.prefill(cache, [0], [prompt])[0]
    props.one_forward(adapter, cache, seq[:5], torch.arange(5))
    props.one_commit(adapter, cache, torch.arange(5))
    window = props.one_forward(adapter, cache, seq[5:], torch.arange(5, 10))
    with torch.no_grad():
        expected = reference_logits(adapter.gpt, conditioning, mask, seq)
    torch.testing.assert_close(first, expected[:, CAPTION_TOKENS - 1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(window, expected[:, CAPTION_TOKENS + 5 :], atol=1e-4, rtol=1e-4)


def test_unconditional_row_is_the_learned_null_caption(adapter):
    prompt, conditioning, mask = conditioning_of(adapter, "a red cube")
    torch.testing.assert_close(conditioning[1], adapter.gpt.cls_embedding.uncond_embedding)
    assert torch.equal(prompt.pad_mask[1], prompt.pad_mask[0])  # LlamaGen masks both rows with the caption's mask


def test_caption_is_left_padded_and_padding_is_invisible(adapter):
    prompt, conditioning, mask = conditioning_of(adapter, "a red cube")
    n = int(mask.sum())
    assert 0 < n < CAPTION_TOKENS and mask[-n:].all() and not mask[:-n].any()  # caption last, padding first
    assert not conditioning[0, :-n].any()  # padded features are zeroed
    cache = adapter.new_cache(1, prompt.length, 1)
    before = adapter.prefill(cache, [0], [prompt])[0]
    noisy = prompt.extras["conditioning"].clone()
    noisy[:, : CAPTION_TOKENS - n] += torch.randn_like(noisy[:, : CAPTION_TOKENS - n])  # padded slots, both rows
    prompt.extras["conditioning"] = noisy
    after = props.prefilled(adapter, prompt)
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)
    noisy[0, -1] += 1.0  # a caption slot does matter
    assert not torch.allclose(props.prefilled(adapter, prompt)[0], before[0])


def llamagen_reference_greedy(adapter, text: str) -> list[int]:
    prompt, conditioning, mask = conditioning_of(adapter, text)
    scale, tokens = adapter.default_sampling.cfg_scale, torch.zeros(0, dtype=torch.long)
    with torch.no_grad():
        for _ in range(adapter.layout.n_positions):
            logits = reference_logits(adapter.gpt, conditioning, mask, tokens, last=True)[:, -1]
            mixed = logits[1] + scale * (logits[0] - logits[1])
            tokens = torch.cat([tokens, mixed.argmax()[None]])
    return tokens.tolist()


def test_greedy_ar_and_jacobi_reproduce_llamagen_generation(small):
    expected = llamagen_reference_greedy(small, "a red cube")
    ar = props.greedy(small, "ar").tokens
    assert ar.tolist() == expected and len(set(expected)) > 3
    assert torch.equal(props.greedy(small, "jacobi").tokens, ar)


def test_cache_after_rollback_equals_fresh_prefill(adapter):
    props.check_rollback_equals_fresh_prefill(adapter)


def test_masked_window_equals_separate_chains(adapter):
    props.check_masked_window_equals_separate_chains(adapter)


def test_decode_returns_an_image_of_the_resolution(adapter, small):
    props.check_decode(small, props.greedy(small, "ar").tokens, (64, 64))
    props.check_decode(adapter, props.random_image_tokens(adapter, GRID * GRID, seed=5), (256, 256))


def test_contract_tables(adapter):
    props.check_contract_shapes(adapter)
    assert adapter.default_sampling.cfg_scale == 7.5 and adapter.default_sampling.top_k == 1000
    assert adapter.layout.n_positions == GRID * GRID and not adapter.layout.is_forced.any()


def test_caption_cleaning_is_the_released_cleaner():  # tests/test_llamagen_captions.py checks it in full
    assert clean_caption("  A  Blue\tPorsche &amp; Co ") == "a blue porsche co"


def test_missing_weights_give_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        llamagen.MODEL.load(path=str(tmp_path), t5_path=str(tmp_path), resolution=512)
    message = str(error.value)
    assert "\n" not in message and "t2i_XL_stage2_512.pt" in message and "vq_ds16_t2i.pt" in message


def test_random_weights_tiny_size_builds_without_files():
    adapter = llamagen.MODEL.load(weights="random", size="tiny", resolution=64)
    assert isinstance(adapter, LlamaGenAdapter) and adapter.layout.grid_hw == (4, 4)
    assert adapter.encode_prompt("x").extras["conditioning"].shape == (2, CAPTION_TOKENS, 32)


def test_padded_window_of_the_compiled_path_equals_unpadded(adapter):
    props.check_padded_window_equals_unpadded(adapter)


def test_reused_cache_buffers_are_clean(adapter):
    props.check_reused_cache_is_clean(adapter)


def test_draft_trees_and_rows_in_flight_run_on_this_model(small):
    props.check_topologies(small)


def test_batched_forward_equals_each_samples_own(adapter):
    props.check_batched_forward_equals_unbatched(adapter)


def test_prefill_of_one_sample_leaves_the_others(adapter):
    props.check_prefill_leaves_other_samples(adapter)
