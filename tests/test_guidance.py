"""Guidance at a scale <= 1 follows each model's released rule (docs/MODELS.md, "Guidance").

LlamaGen's `generate` (FoundationVision/LlamaGen, `autoregressive/models/generate.py`) builds the
CFG pair and mixes only when `cfg_scale > 1.0`; otherwise it runs the caption alone. Lumina-mGPT's
CFG processor (`inference_solver.py`) and transformers' unbatched CFG processor that Emu3's
`image_generation.py` uses return the conditional scores only at exactly 1 and mix at every other
scale; DeepSeek's Janus-Pro loop (`generation_inference.py`) mixes at every scale.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from sjdbench.adapter import GUIDANCE, Sampling
from sjdbench.config import SamplingOverrides
from sjdbench.decoding.loop import jacobi_decode
from sjdbench.decoding.processing import cfg_mix, process_logits
from sjdbench.run.runner import resolve_sampling

RULES = {"llamagen": "above_one", "lumina": "always", "janus": "always", "emu3": "always"}


def pair(seed: int = 0, L: int = 3, V: int = 7) -> torch.Tensor:
    return torch.randn(2, L, V, generator=torch.Generator().manual_seed(seed))  # [cond; uncond]


@pytest.mark.parametrize("scale", [0.0, 0.5, 1.0, 2.0, 7.5])
def test_always_mixes_at_every_scale(scale):
    logits = pair()
    cond, uncond = logits
    torch.testing.assert_close(cfg_mix(logits, scale, "always"), uncond + scale * (cond - uncond))


@pytest.mark.parametrize("scale", [0.0, 0.5, 1.0])
def test_above_one_takes_the_conditional_row_alone_at_a_scale_up_to_1(scale):
    logits = pair()
    assert torch.equal(cfg_mix(logits, scale, "above_one"), logits[0])


def test_above_one_mixes_above_1():
    logits = pair()
    cond, uncond = logits
    torch.testing.assert_close(cfg_mix(logits, 1.5, "above_one"), uncond + 1.5 * (cond - uncond))


def test_process_logits_reads_the_rule_from_sampling():
    logits, allowed = pair(), torch.ones(3, 7, dtype=torch.bool)
    cond_only = process_logits(logits, allowed, Sampling(cfg_scale=1.0))
    llamagen = process_logits(logits, allowed, Sampling(cfg_scale=0.5, guidance="above_one"))
    mixed = process_logits(logits, allowed, Sampling(cfg_scale=0.5))
    assert torch.equal(llamagen, cond_only)
    assert not torch.allclose(mixed, cond_only)


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="guidance 'sometimes' is unknown; choose one of: always, above_one"):
        Sampling(guidance="sometimes")
    assert GUIDANCE == ("always", "above_one")


def test_a_sampling_override_keeps_the_models_rule():
    """sampling.cfg_scale=0.5 on LlamaGen is still LlamaGen's rule (the rule is the model's, not a knob)."""
    default = Sampling(cfg_scale=7.5, top_k=1000, guidance="above_one")
    resolved = resolve_sampling(default, SamplingOverrides(cfg_scale=0.5))
    assert resolved.cfg_scale == 0.5 and resolved.guidance == "above_one"


@pytest.mark.parametrize("model", sorted(RULES))
def test_each_model_follows_its_released_rule(model):
    pytest.importorskip("transformers")
    from sjdbench.models.registry import build_adapter

    resolution = 384 if model == "janus" else 64
    adapter = build_adapter(model, {"weights": "random", "size": "tiny", "resolution": resolution}, "cpu")
    assert adapter.default_sampling.guidance == RULES[model]


def test_llamagen_below_1_decodes_the_caption_alone():
    """The whole loop: LlamaGen sampled at scale 0.5 draws exactly what it draws at scale 1."""
    pytest.importorskip("transformers")
    from sjdbench.config import compose_run, decoder_spec
    from sjdbench.models.registry import build_adapter

    adapter = build_adapter("llamagen", {"weights": "random", "size": "tiny", "resolution": 64}, "cpu")
    ar = decoder_spec(compose_run(["decoder=ar"])).build(adapter)

    def tokens(scale: float, guidance: str = "above_one") -> torch.Tensor:
        sampling = replace(adapter.default_sampling, cfg_scale=scale, guidance=guidance)
        return jacobi_decode(adapter, "a red cube", ar, sampling, torch.Generator().manual_seed(3)).tokens

    assert torch.equal(tokens(0.5), tokens(1.0))
    assert torch.equal(tokens(0.0), tokens(1.0))
    assert not torch.equal(tokens(0.5, "always"), tokens(1.0))  # mixing at 0.5 would draw other tokens
