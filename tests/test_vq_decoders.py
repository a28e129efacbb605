"""Our VQ decoders against transformers' implementations of the same architectures.

transformers' `JanusVQVAE` is LlamaGen's VQ-16 architecture (Janus-Pro reuses LlamaGen's tokenizer)
under other parameter names, and its encoder is also Meta's VQGAN encoder once attention sits at the
coarsest level. With the weights renamed, our decoders must compute the same images."""

from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("transformers")

from sjdbench.models.vq16 import VQ16, VQ16Config  # noqa: E402
from sjdbench.models.vq_blocks import load_exact  # noqa: E402
from sjdbench.models.vqgan import ChameleonVQGAN, VQGANConfig  # noqa: E402

CH_MULT = [1, 2, 2]


def janus_vq():
    from transformers import JanusVQVAEConfig
    from transformers.models.janus.modeling_janus import JanusVQVAE

    torch.manual_seed(0)
    model = JanusVQVAE(
        JanusVQVAEConfig(
            embed_dim=8,
            num_embeddings=32,
            latent_channels=32,
            base_channels=32,
            channel_multiplier=CH_MULT,
            num_res_blocks=1,
            num_patches=4,
        )
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # no zero-initialised layer hides a wiring mistake
    return model


def janus_to_llamagen(key: str) -> str:
    key = re.sub(r"^(encoder|decoder)\.(down|up)\.", r"\1.conv_blocks.", key)
    key = re.sub(r"\.block\.(\d+)\.", r".res.\1.", key)
    for old, new in (("mid.block_1", "mid.0"), ("mid.attn_1", "mid.1"), ("mid.block_2", "mid.2")):
        key = key.replace(old, new)
    return key


def janus_to_meta(key: str, levels: int) -> str:
    """Meta's decoder keeps `up` finest-first; Janus's is coarsest-first."""
    match = re.match(r"^decoder\.up\.(\d+)\.(.*)$", key)
    return f"decoder.up.{levels - 1 - int(match.group(1))}.{match.group(2)}" if match else key


def test_vq16_decoder_equals_transformers_janus_vq():
    janus = janus_vq()
    ours = VQ16(
        VQ16Config(
            codebook_size=32,
            codebook_embed_dim=8,
            ch=32,
            ch_mult=CH_MULT,
            num_res_blocks=1,
            z_channels=32,
            usage_buffer=16,
        )
    )
    state = {janus_to_llamagen(k): v for k, v in janus.state_dict().items()}
    state["quantize.codebook_used"] = torch.zeros(16)
    assert load_exact(ours, state, "janus") == []  # every key of ours is a renamed Janus key, and back
    codes = torch.randint(0, 32, (1, 4, 4))
    with torch.no_grad():
        expected = janus.decode(codes.view(1, 16))  # L2-normalised lookup, post_quant_conv, decoder
    torch.testing.assert_close(ours.decode_codes(codes), expected, atol=1e-5, rtol=1e-5)
    pixels = torch.rand(1, 3, 16, 16) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(ours.encoder(pixels), janus.encoder(pixels), atol=1e-5, rtol=1e-5)


def test_meta_vqgan_decoder_equals_transformers_decoder_with_coarse_attention():
    janus = janus_vq()
    cfg = VQGANConfig(
        n_embed=32,
        embed_dim=8,
        z_channels=32,
        resolution=16,
        ch=32,
        ch_mult=CH_MULT,
        num_res_blocks=1,
        attn_resolutions=[4],
    )  # attention at the 4x4 level = where Janus/LlamaGen put it
    ours = ChameleonVQGAN(cfg)
    assert load_exact(ours, {janus_to_meta(k, len(CH_MULT)): v for k, v in janus.state_dict().items()}, "janus") == []
    z = torch.randn(1, 8, 4, 4)
    with torch.no_grad():
        expected = janus.decoder(janus.post_quant_conv(z))
        ours_out = ours.decoder(ours.post_quant_conv(z))
    torch.testing.assert_close(ours_out, expected, atol=1e-5, rtol=1e-5)


def test_meta_vqgan_encoder_keys_are_transformers_chameleon_keys():
    """transformers' ChameleonVQVAE was converted from Meta's vqgan.ckpt keeping its names: our encoder,
    quantizer and convolutions must carry exactly those names and shapes."""
    from transformers import ChameleonVQVAEConfig
    from transformers.models.chameleon.modeling_chameleon import ChameleonVQVAE

    hf = ChameleonVQVAE(
        ChameleonVQVAEConfig(
            embed_dim=8,
            num_embeddings=16,
            latent_channels=8,
            base_channels=32,
            channel_multiplier=[1, 2],
            num_res_blocks=1,
            attn_resolutions=[16],
            resolution=32,
        )
    ).state_dict()
    ours = ChameleonVQGAN(
        VQGANConfig(
            n_embed=16,
            embed_dim=8,
            z_channels=8,
            resolution=32,
            ch=32,
            ch_mult=[1, 2],
            num_res_blocks=1,
            attn_resolutions=[16],
        )
    ).state_dict()
    without_decoder = {k: tuple(v.shape) for k, v in ours.items() if not k.startswith("decoder.")}
    assert without_decoder == {k: tuple(v.shape) for k, v in hf.items()}


def test_meta_vqgan_decoder_names_follow_the_release_layout():
    keys = set(ChameleonVQGAN(VQGANConfig(ch=32, num_res_blocks=2, z_channels=32)).state_dict())
    for name in (
        "decoder.conv_in.weight",
        "decoder.mid.block_1.norm1.weight",
        "decoder.mid.attn_1.proj_out.bias",
        "decoder.up.0.block.2.conv2.weight",
        "decoder.up.4.block.0.conv1.weight",
        "decoder.up.4.upsample.conv.weight",
        "decoder.up.3.block.0.nin_shortcut.weight",
        "decoder.up.1.block.0.nin_shortcut.weight",
        "decoder.norm_out.weight",
        "decoder.conv_out.bias",
        "quantize.embedding.weight",
        "post_quant_conv.weight",
    ):
        assert name in keys, name
    assert "decoder.up.0.upsample.conv.weight" not in keys  # the finest level does not upsample


def test_vq16_names_follow_the_release_layout():
    keys = set(VQ16(VQ16Config(ch=32, num_res_blocks=2)).state_dict())
    for name in (
        "decoder.conv_blocks.0.res.2.conv2.weight",
        "decoder.conv_blocks.0.attn.2.proj_out.weight",
        "decoder.conv_blocks.0.upsample.conv.weight",
        "decoder.mid.1.q.weight",
        "encoder.conv_blocks.4.attn.1.k.bias",
        "encoder.conv_blocks.0.downsample.conv.weight",
        "quantize.embedding.weight",
        "quantize.codebook_used",
        "quant_conv.weight",
        "post_quant_conv.bias",
    ):
        assert name in keys, name
    assert "decoder.conv_blocks.4.upsample.conv.weight" not in keys
    assert not any(k.startswith("decoder.conv_blocks.1.attn") for k in keys)  # attention: coarsest level only


def test_vqgan_yaml_is_read(tmp_path):
    (tmp_path / "vqgan.yaml").write_text(
        "model:\n  params:\n    embed_dim: 8\n    n_embed: 16\n    ddconfig:\n      double_z: false\n"
        "      z_channels: 32\n      resolution: 64\n      in_channels: 3\n      out_ch: 3\n      ch: 32\n"
        "      ch_mult: [1, 2]\n      num_res_blocks: 1\n      attn_resolutions: []\n      dropout: 0.0\n"
        "    lossconfig:\n      target: ignored\n"
    )
    cfg = VQGANConfig.from_yaml(tmp_path / "vqgan.yaml")
    assert (cfg.n_embed, cfg.embed_dim, cfg.ch_mult, cfg.downsampling) == (16, 8, [1, 2], 2)


def test_missing_weight_is_one_line_naming_it():
    ours = VQ16(
        VQ16Config(codebook_size=8, codebook_embed_dim=4, ch=32, ch_mult=[1, 2], num_res_blocks=1, z_channels=32)
    )
    state = ours.state_dict()
    state.pop("decoder.conv_out.weight")
    with pytest.raises(ValueError, match=r"^vq\.pt: 1 missing weights for VQ16, e\.g\. decoder\.conv_out\.weight"):
        load_exact(ours, state, "vq.pt")
