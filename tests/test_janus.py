"""Janus-Pro adapter on a tiny random-weight JanusForConditionalGeneration (8x8 codes, 128 codes)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import model_properties as props  # noqa: E402
from hf_fixtures import ScoreRecorder, char_tokenizer, spread_weights  # noqa: E402

from sjdbench.errors import UserError  # noqa: E402
from sjdbench.models import janus  # noqa: E402
from sjdbench.models.janus import JanusAdapter, JanusTokens  # noqa: E402

SPECIALS = ["<bos>", "<pad>", "<begin_of_image>", "<end_of_image>", "<image_placeholder>"]
TEMPLATE = (
    "{% for m in messages %}<|User|>: {{ m['content'][0]['text'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}<|Assistant|>:{% endif %}"
)


def tiny_config():
    from transformers import JanusConfig

    text = dict(
        model_type="llama",
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=2,
        bos_token_id=1,
    )
    vision = dict(
        image_size=128,
        patch_size=16,
        num_image_tokens=64,
        projection_dim=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
    )
    vq = dict(
        embed_dim=8,
        num_embeddings=128,
        base_channels=32,
        channel_multiplier=[1, 1, 2],
        num_res_blocks=1,
        projection_dim=64,
        image_token_embed_dim=64,
    )
    return JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=5)


@pytest.fixture(scope="module")
def janus_dir(tmp_path_factory):
    """A checkpoint directory in the hub layout: config, safetensors, tokenizer, processor."""
    from transformers import JanusForConditionalGeneration, JanusImageProcessor, JanusProcessor

    root = tmp_path_factory.mktemp("janus")
    torch.manual_seed(0)
    model = spread_weights(JanusForConditionalGeneration(tiny_config()))
    model.save_pretrained(root)
    tokenizer = char_tokenizer(
        SPECIALS,
        bos="<bos>",
        pad="<pad>",
        size=128,
        extra={"image_token": "<image_placeholder>", "boi_token": "<begin_of_image>", "eoi_token": "<end_of_image>"},
    )
    JanusProcessor(
        image_processor=JanusImageProcessor(), tokenizer=tokenizer, chat_template=TEMPLATE, num_image_tokens=64
    ).save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def adapter(janus_dir):
    return janus.MODEL.load(path=str(janus_dir), size="7B", resolution=384)


def library_generate(adapter, text: str, **kwargs) -> torch.Tensor:
    ids = torch.tensor([adapter._encode_text(text)])
    config = adapter.model.generation_config
    config.pad_token_id, config.bos_token_id = adapter.tokens.pad, adapter.tokens.bos
    config.generation_kwargs = {"boi_token_id": adapter.tokens.boi}  # what the hub's generation_config sets
    return adapter.model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        generation_mode="image",
        num_return_sequences=1,
        max_length=ids.shape[1] + adapter.layout.n_positions,
        guidance_scale=adapter.default_sampling.cfg_scale,
        **kwargs,
    )[0]


def test_prompt_is_the_chat_template_then_begin_of_image(adapter):
    prompt = adapter.encode_prompt("ab")
    cond, uncond = prompt.tokens.tolist()
    assert cond[0] == adapter.tokens.bos and cond[-1] == adapter.tokens.boi
    assert uncond == [cond[0]] + [adapter.tokens.pad] * (len(cond) - 2) + [cond[-1]]  # generate's CFG batch
    assert prompt.pad_mask.all()  # the library attends to the pad tokens of the unconditional row


def test_greedy_ar_reproduces_library_generate_with_cfg(adapter):
    expected = library_generate(adapter, "a red cube", do_sample=False)
    ours = props.greedy(adapter, "ar").tokens
    assert torch.equal(ours, expected)


def test_sampling_distributions_match_library_generate(adapter):
    """Random streams cannot be matched (the library draws with torch.multinomial, the loop by inverse
    CDF), so follow the library's own sampled image and compare both CFG branches' logits at every
    step: the adapter must present exactly what `generate` samples from."""
    recorder = ScoreRecorder()
    torch.manual_seed(3)
    sampled = library_generate(adapter, "a red cube", do_sample=True, top_k=0, logits_processor=[recorder])
    assert len(recorder.scores) == adapter.layout.n_positions
    prompt = adapter.encode_prompt("a red cube")
    cache = adapter.new_cache(1, prompt.length, 1)
    ours = [adapter.prefill(cache, [0], [prompt])[0]]
    for j in range(adapter.layout.n_positions - 1):
        position = torch.tensor([j])
        ours.append(props.one_forward(adapter, cache, sampled[j : j + 1], position)[:, 0])
        props.one_commit(adapter, cache, torch.tensor([0]))
    torch.testing.assert_close(torch.stack(ours), torch.stack(recorder.scores), atol=1e-4, rtol=1e-4)


def test_greedy_jacobi_equals_greedy_ar(adapter):
    props.check_greedy_jacobi_equals_greedy_ar(adapter)


def test_cache_after_rollback_equals_fresh_prefill(adapter):
    props.check_rollback_equals_fresh_prefill(adapter)


def test_masked_window_equals_separate_chains(adapter):
    props.check_masked_window_equals_separate_chains(adapter)


def test_decode_returns_an_image_of_the_vq_size(adapter):
    tokens = props.greedy(adapter, "ar").tokens
    props.check_decode(adapter, tokens, (32, 32))  # 8x8 codes, 4x upsampling in the tiny VQ


def test_contract_tables(adapter):
    props.check_contract_shapes(adapter)
    assert adapter.vocab_size == 128 and torch.equal(adapter.image_token_ids, torch.arange(128))
    assert adapter.layout.n_positions == 64 and not adapter.layout.is_forced.any()


def test_checkpoint_missing_a_weight_is_refused(janus_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(janus_dir, broken)
    weights = load_file(broken / "model.safetensors")
    weights.pop(next(k for k in weights if "generation_head" in k))
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="missing keys.*generation_head"):
        janus.MODEL.load(path=str(broken))


def test_missing_weights_give_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        janus.MODEL.load(path=str(tmp_path))
    message = str(error.value)
    assert "\n" not in message and "config.json" in message and "deepseek-community/Janus-Pro-7B" in message


def test_offline_hub_gives_one_line(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # an empty cache, whatever this machine holds
    with pytest.raises(FileNotFoundError) as error:
        janus.MODEL.load(size="1B")
    message = str(error.value)
    assert "\n" not in message and "hf download deepseek-community/Janus-Pro-1B" in message and "model.path" in message


def test_random_weights_tiny_size_builds_without_files():
    adapter = janus.MODEL.load(weights="random", size="tiny", resolution=64)
    assert isinstance(adapter, JanusAdapter) and adapter.layout.grid_hw == (4, 4)
    assert adapter.encode_prompt("x").tokens.shape[0] == 2


def test_unknown_size_lists_the_choices():
    with pytest.raises(ValueError, match="choose one of: 1B, 7B"):
        janus.MODEL.load(size="3B")


def test_out_of_range_transformers_is_one_line(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "4.47.1" if name == "transformers" else real(name))
    with pytest.raises(UserError, match=r"tested with transformers>=5.*4\.47\.1 is installed"):
        janus.MODEL.load(weights="random", size="tiny")


def test_tokens_dataclass_is_plain():
    assert JanusTokens(1, 2, 3).pad == 3


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
