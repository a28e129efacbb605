"""Anole adapter: our Chameleon forward on tiny random weights in the transformers checkpoint layout
(QK-norm rows per head, as leloy/Anole-7b-v0.1-hf stores them), checked against transformers'
ChameleonForConditionalGeneration on the same state dict, in jadohu/LANTERN's Anole setting (prompt
`<s> caption <reserved08706> <racm3:break>`, unconditional `<s><racm3:break>`, a bare image grid)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import model_properties as props  # noqa: E402
from hf_fixtures import char_tokenizer, spread_weights  # noqa: E402

from sjdbench.models import anole  # noqa: E402
from sjdbench.models.drafter import DrafterConfig, DrafterNet, bind  # noqa: E402
from sjdbench.models.vqgan import ChameleonVQGAN, VQGANConfig  # noqa: E402

N_CODES = 64
RESOLUTION = 64  # 4x4 codes
IMAGE_NAMES = [
    f"IMGIMG{''.join(chr(65 + int(d)) for d in str(k))}Z"
    for k in torch.randperm(N_CODES, generator=torch.Generator().manual_seed(3)).tolist()
]
SPECIALS = ["<s>", "<pad>", "<reserved08706>", "<racm3:break>", "<eoss>", "<reserved08799>", "<image>"]
VQ_YAML = """model:
  params:
    embed_dim: 8
    n_embed: 64
    ddconfig: {double_z: false, z_channels: 32, resolution: 64, in_channels: 3, out_ch: 3, ch: 32,
               ch_mult: [1, 1, 2, 2, 4], num_res_blocks: 1, attn_resolutions: [], dropout: 0.0}
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    root = tmp_path_factory.mktemp("anole")
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
            embed_dim=8, num_embeddings=N_CODES, latent_channels=32, base_channels=32, channel_multiplier=[1, 2]
        ),
    )
    torch.manual_seed(0)
    hf = spread_weights(ChameleonForConditionalGeneration(config))
    with torch.no_grad():  # per-head QK-norm rows that differ (transformers' conversion layout)
        for name, param in hf.named_parameters():
            if "_norm." in name and param.dim() == 2:
                param.copy_(1.0 + 0.3 * torch.randn(param.shape))
    hf.save_pretrained(root / "hf")
    tokenizer.save_pretrained(root / "hf")
    (root / "vq").mkdir()
    (root / "vq" / "vqgan.yaml").write_text(VQ_YAML)
    vqgan = ChameleonVQGAN(VQGANConfig.from_yaml(root / "vq" / "vqgan.yaml"))
    torch.save({"state_dict": vqgan.state_dict()}, root / "vq" / "vqgan.ckpt")
    return root, hf.eval()


@pytest.fixture(scope="module")
def adapter(checkpoint):
    root, _ = checkpoint
    return anole.MODEL.load(path=str(root / "hf"), vqgan_dir=str(root / "vq"), resolution=RESOLUTION)


def hf_logits(hf_model, ids: list[int]) -> torch.Tensor:
    """transformers' Chameleon hidden states -> lm_head (no image-logit mask), (len(ids), V)."""
    with torch.no_grad():
        hidden = hf_model.model(input_ids=torch.tensor([ids])).last_hidden_state
        return hf_model.lm_head(hidden)[0]


def test_logits_equal_transformers_hidden_states_through_lm_head(adapter, checkpoint):
    _, hf = checkpoint
    prompt_ids = adapter.prompt_ids("a red cube")
    seq = props.random_image_tokens(adapter, 6, seed=1)
    prompt = adapter.encode_prompt("a red cube")
    cache = adapter.new_cache(1, prompt.length, 6)
    first = adapter.prefill(cache, [0], [prompt])[0]
    window = props.one_forward(adapter, cache, seq, torch.arange(6))
    expected = hf_logits(hf, prompt_ids + seq.tolist())[len(prompt_ids) - 1 :]  # (7, V)
    torch.testing.assert_close(first[0], expected[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(window[0], expected[1:], atol=1e-4, rtol=1e-4)


def test_unconditional_row_is_lanterns_bos_and_begin_of_image(adapter, checkpoint):
    """LANTERN's unconditional context: `<s><racm3:break>` at positions 0 and 1, then the image."""
    _, hf = checkpoint
    seq = props.random_image_tokens(adapter, 5, seed=2)
    prompt = adapter.encode_prompt("a red cube")
    cache = adapter.new_cache(1, prompt.length, 5)
    first = adapter.prefill(cache, [0], [prompt])[0]
    window = props.one_forward(adapter, cache, seq, torch.arange(5))[1]
    v = adapter.vocab
    expected = hf_logits(hf, [v.bos, v.image_start] + seq.tolist())[1:]
    torch.testing.assert_close(first[1], expected[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(window, expected[1:], atol=1e-4, rtol=1e-4)


def anole_reference_greedy(adapter, hf_model, caption: str) -> list[int]:
    """LANTERN's Anole pipeline restated on transformers' model without a cache, greedy: CFG on raw
    logits, every non-image id masked, argmax, for the whole grid."""
    prompt, scale = adapter.prompt_ids(caption), adapter.default_sampling.cfg_scale
    v = adapter.vocab
    allowed = torch.full((adapter.vocab_size,), float("-inf"))
    allowed[adapter.image_token_ids] = 0.0
    seq: list[int] = []
    while len(seq) < adapter.layout.n_positions:
        cond = hf_logits(hf_model, prompt + seq)[-1]
        uncond = hf_logits(hf_model, [v.bos, v.image_start] + seq)[-1]
        seq.append(int((uncond + scale * (cond - uncond) + allowed).argmax()))
    return seq


def test_greedy_ar_and_jacobi_reproduce_the_anole_pipeline(adapter, checkpoint):
    _, hf = checkpoint
    ar = props.greedy(adapter, "ar").tokens
    assert ar.tolist() == anole_reference_greedy(adapter, hf, "a red cube")
    assert torch.equal(props.greedy(adapter, "jacobi").tokens, ar)


def test_prompt_layout_and_sampling_are_lanterns(adapter):
    names = adapter.vocab.names
    ids = adapter.prompt_ids("a cat")
    assert ids[0] == names["<s>"] and ids[-2:] == [names["<reserved08706>"], names["<racm3:break>"]]
    prompt = adapter.encode_prompt("a cat")
    assert prompt.pad_mask[0].all() and prompt.pad_mask[1].tolist() == [False] * (len(ids) - 2) + [True, True]
    assert prompt.tokens[1, -2:].tolist() == [names["<s>"], names["<racm3:break>"]]
    assert adapter.layout.n_positions == 16 and not adapter.layout.is_forced.any()
    s = adapter.default_sampling
    assert (s.cfg_scale, s.temperature, s.top_k, s.top_p) == (3.0, 1.0, 2000, 1.0)


def test_codes_come_from_the_image_token_names(adapter):
    names = adapter.vocab.names
    tokens = adapter.image_token_ids[torch.tensor([5, 0, 63, 7] * 4)]
    codes = adapter.tokens_to_codes(tokens)
    assert codes.flatten().tolist() == [5, 0, 63, 7] * 4
    assert all(
        names[n] == int(adapter.image_token_ids[int(n[6:-1].translate(str.maketrans("ABCDEFGHIJ", "0123456789")))])
        for n in IMAGE_NAMES[:5]
    )


def test_decode_returns_an_image_of_the_resolution(adapter):
    props.check_decode(adapter, props.greedy(adapter, "ar").tokens, (RESOLUTION, RESOLUTION))


def test_cache_and_batching_contract(adapter):
    props.check_rollback_equals_fresh_prefill(adapter)
    props.check_batched_forward_equals_unbatched(adapter)
    props.check_contract_shapes(adapter)


def test_hidden_states_feed_a_chameleon_drafter(adapter):
    """The capability on Anole: the drafter binds (Chameleon family, its width and vocabulary) and
    its logits come through Anole's LM head."""
    cfg = DrafterConfig("chameleon", 64, 96, 4, 4, adapter.vocab_size)
    drafter = bind(adapter, DrafterNet(cfg))
    prompt = adapter.encode_prompt("a cat")
    cache = adapter.new_cache(1, prompt.length, 2)
    _, states = adapter.prefill_states(cache, [0], [prompt])
    dcache = drafter.new_cache(1, prompt.length, adapter.layout.n_positions, 4)
    drafter.start(dcache, [0], states)
    step = drafter.extend(dcache, adapter.image_token_ids[:1][None], states.hidden[:, :, -1:], torch.zeros(1, 1).long())
    assert step.logits.shape == (1, 2, 1, adapter.vocab_size) and torch.isfinite(step.logits).all()
    assert torch.equal(states.rotary[0, 1, -2:], torch.tensor([0, 1]))  # <s><racm3:break> at 0 and 1


def test_missing_files_give_one_line(checkpoint, tmp_path):
    root, _ = checkpoint
    with pytest.raises(FileNotFoundError) as error:
        anole.MODEL.load(path=str(root / "hf"), vqgan_dir=None, resolution=RESOLUTION)
    assert "\n" not in str(error.value) and "vqgan" in str(error.value)
    with pytest.raises(FileNotFoundError) as error:
        anole.MODEL.load(path=str(tmp_path), vqgan_dir=str(tmp_path))
    assert "\n" not in str(error.value) and "leloy/Anole-7b-v0.1-hf" in str(error.value)


def test_random_weights_tiny_size_builds_without_files():
    built = anole.MODEL.load(weights="random", size="tiny", resolution=64)
    assert built.vocab_size == 65536 and built.layout.n_positions == 16
    prompt = built.encode_prompt("x")
    assert prompt.tokens[1, -2:].tolist() == [0, 8197] and prompt.tokens[0, -2:].tolist() == [8710, 8197]
