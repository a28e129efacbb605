"""Lumina-mGPT adapter: our Chameleon forward and Meta-VQGAN decoder on tiny random weights (64 px,
a 4x4 code grid), checked against transformers' ChameleonForConditionalGeneration on the same
state dict. Image tokens are numbered out of order in the tiny vocabulary."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("transformers")

import model_properties as props  # noqa: E402
from hf_fixtures import char_tokenizer, spread_weights  # noqa: E402

from sjdbench.models import lumina  # noqa: E402
from sjdbench.models.lumina import LuminaAdapter, grid_token_name, image_code, stand_in_vocabulary  # noqa: E402
from sjdbench.models.vqgan import ChameleonVQGAN, VQGANConfig  # noqa: E402

N_CODES = 64
RESOLUTION = 64  # 2 grid steps of 32 px -> 4x4 codes
IMAGE_NAMES = [
    f"IMGIMG{''.join(chr(65 + int(d)) for d in str(k))}Z"
    for k in torch.randperm(N_CODES, generator=torch.Generator().manual_seed(7)).tolist()
]
SPECIALS = [
    "<s>",
    "<pad>",
    "<reserved08706>",
    "<racm3:break>",
    "<eoss>",
    "<reserved08799>",
    grid_token_name(2),
    "<image>",
]
VQ_YAML = """model:
  params:
    embed_dim: 8
    n_embed: 64
    ddconfig: {double_z: false, z_channels: 32, resolution: 64, in_channels: 3, out_ch: 3, ch: 32,
               ch_mult: [1, 1, 2, 2, 4], num_res_blocks: 1, attn_resolutions: [], dropout: 0.0}
"""


def make_checkpoints(root):
    """hf/: a transformers-saved Chameleon checkpoint (QK-norm rows per head); lumina/: the same network
    stored as Lumina-mGPT stores it (one QK-norm group); vq/: a Meta-layout VQGAN."""
    from safetensors.torch import load_file, save_file
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    tokenizer = char_tokenizer(SPECIALS + IMAGE_NAMES, bos="<s>", pad="<pad>", size=200)
    vocabulary = tokenizer.get_vocab()
    config = ChameleonConfig(
        vocab_size=200,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocabulary_map=vocabulary,
        bos_token_id=vocabulary["<s>"],
        vq_config=dict(
            embed_dim=8,
            num_embeddings=N_CODES,
            latent_channels=32,
            base_channels=32,
            channel_multiplier=[1, 2],
            resolution=32,
        ),
    )
    torch.manual_seed(0)
    hf = spread_weights(ChameleonForConditionalGeneration(config))
    with torch.no_grad():  # one QK-norm group: every head shares row 0 (what Lumina's checkpoints hold)
        for name, param in hf.named_parameters():
            if "_norm." in name and param.dim() == 2:
                param.copy_(param[:1].expand_as(param))
    hf.save_pretrained(root / "hf")
    tokenizer.save_pretrained(root / "hf")
    shutil.copytree(root / "hf", root / "lumina")
    weights = load_file(root / "lumina" / "model.safetensors")
    weights = {k: (v[:1].contiguous() if "_norm." in k and v.dim() == 2 else v) for k, v in weights.items()}
    save_file(weights, root / "lumina" / "model.safetensors", metadata={"format": "pt"})
    lumina_config = json.loads((root / "lumina" / "config.json").read_text())
    (root / "lumina" / "config.json").write_text(json.dumps({**lumina_config, "model_parallel_size": 1}))
    (root / "vq").mkdir()
    (root / "vq" / "vqgan.yaml").write_text(VQ_YAML)
    vqgan = ChameleonVQGAN(VQGANConfig.from_yaml(root / "vq" / "vqgan.yaml"))
    torch.save({"state_dict": vqgan.state_dict()}, root / "vq" / "vqgan.ckpt")
    return hf.eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("lumina")
    return root, make_checkpoints(root)


@pytest.fixture(scope="module")
def hf_model(checkpoints):
    return checkpoints[1]


@pytest.fixture(scope="module")
def adapter(checkpoints):
    root, _ = checkpoints
    return lumina.MODEL.load(path=str(root / "lumina"), vqgan_dir=str(root / "vq"), resolution=RESOLUTION)


def hf_logits(hf_model, ids: list[int]) -> torch.Tensor:
    """transformers' Chameleon hidden states -> lm_head (no image-logit mask), (len(ids), V)."""
    with torch.no_grad():
        hidden = hf_model.model(input_ids=torch.tensor([ids])).last_hidden_state
        return hf_model.lm_head(hidden)[0]


def test_logits_equal_transformers_hidden_states_through_lm_head(adapter, hf_model):
    prompt_ids = adapter.prompt_ids("a red cube")
    seq = props.random_image_tokens(adapter, 6, seed=1)
    prompt = adapter.encode_prompt("a red cube")
    cache = adapter.new_cache(1, prompt.length, 6)
    first = adapter.prefill(cache, [0], [prompt])[0]
    window = props.one_forward(adapter, cache, seq, torch.arange(6))
    expected = hf_logits(hf_model, prompt_ids + seq.tolist())[len(prompt_ids) - 1 :]  # (7, V)
    torch.testing.assert_close(first[0], expected[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(window[0], expected[1:], atol=1e-4, rtol=1e-4)


def test_image_logits_are_not_masked(adapter, hf_model):
    """transformers' own forward pins every image logit to the dtype minimum; ours keeps lm_head's."""
    prompt = adapter.encode_prompt("a red cube")
    logits = props.prefilled(adapter, prompt)[0]
    images = adapter.image_token_ids
    with torch.no_grad():
        library = hf_model(input_ids=torch.tensor([adapter.prompt_ids("a red cube")])).logits[0, -1]
    assert (library[images] == torch.finfo(library.dtype).min).all()
    assert torch.isfinite(logits[images]).all() and logits[images].std() > 0


def test_unconditional_row_equals_lumina_unbatched_cfg_context(adapter, hf_model):
    """Lumina's CFG runs the unconditional branch alone, from `<racm3:break>` at position 0 with no text;
    row 1 of our batched forward must compute exactly that."""
    header = adapter.layout.forced[:3].tolist()
    seq = torch.cat([torch.tensor(header), props.random_image_tokens(adapter, 5, seed=2)])
    prompt = adapter.encode_prompt("a red cube")
    cache = adapter.new_cache(1, prompt.length, 8)
    adapter.prefill(cache, [0], [prompt])
    ours = props.one_forward(adapter, cache, seq, torch.arange(8))[1]
    torch.testing.assert_close(ours, hf_logits(hf_model, seq.tolist()), atol=1e-4, rtol=1e-4)


def test_both_checkpoint_layouts_load_strictly_and_agree(checkpoints, adapter):
    root, _ = checkpoints
    per_head = lumina.MODEL.load(path=str(root / "hf"), vqgan_dir=str(root / "vq"), resolution=RESOLUTION)
    assert per_head.lm.model.layers[0].self_attn.q_norm.weight.shape == (4, 16)
    assert adapter.lm.model.layers[0].self_attn.q_norm.weight.shape == (1, 16)
    for a in (adapter, per_head):
        prompt = a.encode_prompt("x")
        a._logits = props.prefilled(a, prompt)
    torch.testing.assert_close(adapter._logits, per_head._logits, atol=1e-5, rtol=1e-5)


def lumina_reference_greedy(adapter, hf_model, caption: str) -> list[int]:
    """Lumina's own greedy pipeline, restated on transformers' model without any cache: the header
    tokens as our benchmark forces them, then per image position CFG (unconditional context from the
    break token) on raw logits, the image-id mask, argmax; end-of-line and end-of-image forced by
    Lumina's rule on the token count since the header."""
    prompt, scale = adapter.prompt_ids(caption), adapter.default_sampling.cfg_scale
    h, w = adapter.layout.grid_hw
    v = adapter.vocab
    seq = [v.image_start, v.grid_token(h // 2), v.grid_token(w // 2)]
    allowed = torch.full((adapter.vocab_size,), float("-inf"))
    allowed[adapter.image_token_ids] = 0.0
    while len(seq) < adapter.layout.n_positions:
        count = len(seq) - 3 + 1  # Lumina's `len(tokens) + 1` after the header
        if count % (w + 1) == 0:
            seq.append(v.new_line)
        elif count == (w + 1) * h + 1:
            seq.append(v.image_end)
        else:
            cond = hf_logits(hf_model, prompt + seq)[-1]
            uncond = hf_logits(hf_model, seq)[-1]
            seq.append(int((uncond + scale * (cond - uncond) + allowed).argmax()))
    return seq


def test_greedy_ar_and_jacobi_reproduce_lumina_pipeline(adapter, hf_model):
    expected = lumina_reference_greedy(adapter, hf_model, "a red cube")
    ar = props.greedy(adapter, "ar").tokens
    assert ar.tolist() == expected
    jacobi = props.greedy(adapter, "jacobi").tokens
    assert torch.equal(jacobi, ar)
    props.check_forced_tokens_in_place(adapter, ar)


def test_layout_header_row_ends_and_end_where_lumina_puts_them(adapter):
    names = adapter.vocab.names
    forced = adapter.layout.forced.tolist()
    assert forced[:3] == [names["<racm3:break>"], names[grid_token_name(2)], names[grid_token_name(2)]]
    body = forced[3:-1]
    assert len(body) == 4 * 5
    assert [i for i, t in enumerate(body) if t >= 0] == [4, 9, 14, 19]  # every (w + 1)-th token: end of line
    assert {body[i] for i in (4, 9, 14, 19)} == {names["<reserved08799>"]}
    assert forced[-1] == names["<eoss>"]


def test_code_map_comes_from_the_image_token_names(adapter):
    names = adapter.vocab.names
    for code in (0, 7, 63):
        token = int(adapter.image_token_ids[code])
        assert image_code(next(n for n, i in names.items() if i == token)) == code
    assert not torch.equal(adapter.image_token_ids, adapter.image_token_ids.sort().values)
    assert image_code("IMGIMGBCDZ") == 123 and image_code("<s>") is None


def test_prompt_is_lumina_generation_prompt(adapter):
    ids = adapter.prompt_ids("a cat")
    assert ids[0] == adapter.vocab.bos and ids[-1] == adapter.vocab.separator
    prompt = adapter.encode_prompt("a cat")
    assert prompt.pad_mask[0].all() and not prompt.pad_mask[1].any()


def test_cache_after_rollback_equals_fresh_prefill(adapter):
    props.check_rollback_equals_fresh_prefill(adapter)


def test_masked_window_equals_separate_chains(adapter):
    props.check_masked_window_equals_separate_chains(adapter)


def test_decode_returns_an_image_of_the_resolution(adapter):
    props.check_decode(adapter, props.greedy(adapter, "ar").tokens, (RESOLUTION, RESOLUTION))


def test_contract_tables(adapter):
    props.check_contract_shapes(adapter)
    assert adapter.gsd_d_thr == 0.5 and adapter.default_sampling.top_k == 2000


def test_missing_vqgan_gives_one_line(checkpoints, tmp_path):
    root, _ = checkpoints
    for vqgan_dir in (None, str(tmp_path)):
        with pytest.raises(FileNotFoundError) as error:
            lumina.MODEL.load(path=str(root / "lumina"), vqgan_dir=vqgan_dir, resolution=RESOLUTION)
        assert "\n" not in str(error.value) and "vqgan" in str(error.value)


def test_missing_weights_give_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        lumina.MODEL.load(path=str(tmp_path), vqgan_dir=str(tmp_path), resolution=768)
    message = str(error.value)
    assert "\n" not in message and "config.json" in message and "Alpha-VLLM/Lumina-mGPT-7B-768" in message


def test_released_resolutions_only_from_the_hub():
    with pytest.raises(ValueError, match="choose one of: 512, 768, 1024"):
        lumina.MODEL.load(resolution=640)


def test_random_weights_tiny_size_builds_without_files():
    adapter = lumina.MODEL.load(weights="random", size="tiny", resolution=64)
    assert isinstance(adapter, LuminaAdapter) and adapter.vocab_size == 65536
    assert adapter.layout.forced[:3].tolist() == [8197, 8806, 8806] and adapter.layout.forced[-1] == 8196
    assert len(stand_in_vocabulary()) > 8192


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
