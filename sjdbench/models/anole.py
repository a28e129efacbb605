"""Anole-7b (GAIR; a Chameleon-7B fine-tuned to generate images again) with our own Chameleon forward
and Meta's Chameleon VQGAN, in jadohu/LANTERN's setting (`models/ea_model_anole.py`,
`entrypoints/generate_images.py`).

Checkpoint: `leloy/Anole-7b-v0.1-hf`, GAIR's weights converted to transformers' Chameleon format
(config.json with `vocabulary_map`, safetensors, tokenizer files); our `chameleon.ChameleonLM` loads
it as Lumina-mGPT's (transformers' own Chameleon class cannot generate images: its forward pins every
image logit to the dtype minimum). Decoding needs the Chameleon image tokenizer (`vqgan.ckpt`,
`vqgan.yaml`; GAIR/Anole-7b-v0.1's `tokenizer/` folder holds them) in `model.options.vqgan_dir`.

Prompt (LANTERN's `generate`): `<s>` + the caption's text tokens + `<reserved08706>` (the turn
separator) + `<racm3:break>` (begin of image); the unconditional row is `<s><racm3:break>` at
positions 0 and 1 (its left padding is never visible). Generated segment: 1024 image tokens, a
32 x 32 grid in raster order with no row or end tokens (LANTERN generates exactly 1024 tokens and
decodes them; SJD's Anole loop forces `<eoss>` after them, which no image needs). Every other id
(0-3 and 8196 on) is masked at every position. CFG mixes raw logits `u + s (c - u)` in one batched
forward. LANTERN's defaults for Anole: CFG 3, temperature 1, top-k 2000, top-p 1. Image token ids
map to VQ codes through their `IMGIMG<letters>Z` names (LANTERN's `convert_bpe2img`), not an offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from sjdbench.adapter import PromptBatch, SegmentLayout
from sjdbench.models.chameleon_family import (
    ChameleonFamilyAdapter,
    ChameleonFamilyOptions,
    LuminaVocabulary,
    load_checkpoint,
    random_models,
    stand_in_text,
    stand_in_vocabulary,
)
from sjdbench.models.registry import ModelEntry

HUB = "leloy/Anole-7b-v0.1-hf"
PIXELS_PER_CODE = 16  # the Chameleon VQGAN downsamples 16x: 512 px is 32 x 32 codes
RESOLUTION = 512
VQGAN_SOURCE = "the Chameleon image tokenizer (tokenizer/vqgan.ckpt and tokenizer/vqgan.yaml of GAIR/Anole-7b-v0.1)"
BOS = "<s>"


@dataclass
class AnoleOptions(ChameleonFamilyOptions):
    resolution_step: ClassVar[int] = PIXELS_PER_CODE
    released_resolutions: ClassVar[Optional[tuple[int, ...]]] = (RESOLUTION,)
    vqgan_source: ClassVar[str] = VQGAN_SOURCE

    resolution: int = RESOLUTION

    def hub_repo(self) -> str:
        return HUB


def anole_layout(vocab: LuminaVocabulary, resolution: int) -> SegmentLayout:
    """A bare grid of codes: no header, row ends or end token."""
    side = resolution // PIXELS_PER_CODE
    return SegmentLayout.grid(side, side)


class AnoleAdapter(ChameleonFamilyAdapter):
    model_name = "anole"
    segment_layout = staticmethod(anole_layout)

    def prompt_ids(self, caption: str) -> list[int]:
        return [self.vocab.bos] + self._encode_text(caption) + [self.vocab.separator, self.vocab.image_start]

    def encode_prompt(self, text: str) -> PromptBatch:
        cond = torch.tensor(self.prompt_ids(text), dtype=torch.long)
        uncond = torch.full_like(cond, self.vocab.bos)
        uncond[-1] = self.vocab.image_start  # <s><racm3:break>, left-padded to the conditional length
        tokens = torch.stack([cond, uncond]).to(self.device)  # (2, P)
        pad_mask = torch.ones_like(tokens, dtype=torch.bool)
        pad_mask[1, :-2] = False
        return PromptBatch(tokens, pad_mask, text=text)


def anole_vocabulary(names: dict[str, int]) -> LuminaVocabulary:
    """Image ids from the `IMGIMG...Z` names; structural ids from the Chameleon tokenizer's names
    (Anole shares Lumina-mGPT's tokenizer: BOS `<s>`, separator, `<racm3:break>`)."""
    if BOS not in names:
        raise ValueError(f"the vocabulary has no {BOS} token; is this a Chameleon checkpoint?")
    return LuminaVocabulary.from_names(names, bos=names[BOS])


def build(options: AnoleOptions, device: str) -> AnoleAdapter:
    o = options
    if o.random:
        lm, vqgan = random_models(o, device)
        vocab = anole_vocabulary({**stand_in_vocabulary(vqgan.cfg.n_embed), "<s>": 0})
        return AnoleAdapter(lm, vqgan, vocab, stand_in_text, o.resolution, o.sampling(), o.compile)
    loaded = load_checkpoint("anole", o, device)
    vocab = anole_vocabulary(loaded.names)
    return AnoleAdapter(loaded.lm, loaded.vqgan, vocab, loaded.encode_text, o.resolution, o.sampling(), o.compile)


MODEL = ModelEntry(AnoleOptions, build, fingerprint=lambda options: options.fingerprint(options.weight_files))
