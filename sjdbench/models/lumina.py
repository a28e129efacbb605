"""Lumina-mGPT (Alpha-VLLM; a Chameleon-7B fine-tune) with our own Chameleon forward and Meta's VQGAN.

Checkpoints: `Alpha-VLLM/Lumina-mGPT-7B-{512,768,1024}` (HF-format safetensors, config.json with the
tokenizer's `vocabulary_map`, tokenizer files) and Meta's Chameleon image tokenizer (`vqgan.ckpt`,
`vqgan.yaml`, from Meta's Chameleon release; not on the hub) for decoding.

Prompt (Lumina's FlexAR item processor): `<s>` + "Generate an image of {W}x{H} according to the
following prompt:\\n{caption}" + `<reserved08706>` (the turn separator).
Generated segment: `<racm3:break>`, the height and width grid tokens `<reserved{8800+n}>` (n = px/32),
then 2n rows of (2n image tokens, `<reserved08799>` end of line), then `<eoss>` (end of image). The
header, the row ends and the end token are forced by the layout (Lumina lets the model sample the
header in text mode and forces the rest with a logits processor).

CFG: Lumina runs the unconditional branch as a second, unbatched forward with its own cache whose
context starts at `<racm3:break>` with positions from 0 and holds no text. Here that branch is row 1
of one batched forward: its prompt is all padding (never visible) and its rotary positions count from
the break token, so it computes exactly the unbatched logits (tests/test_lumina.py). Mixing is
`u + s (c - u)` on raw logits, then the image mask, then top-k 2000 (Lumina's defaults: CFG 3, T 1).

Image token ids <-> VQ codes come from the vocabulary's `IMGIMG<letters>Z` names (letters A-J are the
code's decimal digits), never from an assumed offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from sjdbench.adapter import PromptBatch, SegmentLayout
from sjdbench.models.chameleon_family import (  # noqa: F401  (grid_token_name, image_code: named here too)
    SEPARATOR,
    ChameleonFamilyAdapter,
    ChameleonFamilyOptions,
    LuminaVocabulary,
    grid_token_name,
    image_code,
    load_checkpoint,
    random_models,
    stand_in_text,
    stand_in_vocabulary,
)
from sjdbench.models.registry import ModelEntry

HUB = "Alpha-VLLM/Lumina-mGPT-7B-{resolution}"
RESOLUTIONS = (512, 768, 1024)
PATCH = 32  # pixels per grid token; the VQGAN downsamples 16x, so 2 latent rows per grid step
VQGAN_SOURCE = (
    "Meta's Chameleon image tokenizer (tokenizer/vqgan.ckpt and tokenizer/vqgan.yaml of the Chameleon release)"
)


def lumina_layout(vocab: LuminaVocabulary, resolution: int) -> SegmentLayout:
    """Break, height and width tokens, 2n rows of (2n codes, end of line), end of image."""
    n_grids = resolution // PATCH
    side = 2 * n_grids
    grid = SegmentLayout.grid(side, side, eol_token=vocab.new_line)
    head = torch.tensor([vocab.image_start, vocab.grid_token(n_grids), vocab.grid_token(n_grids)])
    tail = torch.tensor([vocab.image_end])
    minus = lambda n: torch.full((n,), -1, dtype=torch.long)  # noqa: E731
    return SegmentLayout(
        torch.cat([head, grid.forced, tail]),
        torch.cat([minus(3), grid.row, minus(1)]),
        torch.cat([minus(3), grid.col, minus(1)]),
        (side, side),
    )


def prompt_text(caption: str, resolution: int) -> str:
    return f"Generate an image of {resolution}x{resolution} according to the following prompt:\n{caption}"


@dataclass
class LuminaOptions(ChameleonFamilyOptions):
    resolution_step: ClassVar[int] = PATCH  # Lumina's size tokens count 32 px steps
    released_resolutions: ClassVar[Optional[tuple[int, ...]]] = RESOLUTIONS
    vqgan_source: ClassVar[str] = VQGAN_SOURCE

    resolution: int = 768

    def hub_repo(self) -> str:
        return HUB.format(resolution=self.resolution)


class LuminaAdapter(ChameleonFamilyAdapter):
    model_name = "lumina"
    segment_layout = staticmethod(lumina_layout)

    def prompt_ids(self, caption: str) -> list[int]:
        return [self.vocab.bos] + self._encode_text(prompt_text(caption, self.resolution) + SEPARATOR)

    def encode_prompt(self, text: str) -> PromptBatch:
        cond = torch.tensor(self.prompt_ids(text), dtype=torch.long)
        tokens = torch.stack([cond, torch.full_like(cond, self.vocab.bos)]).to(self.device)  # (2, P)
        pad_mask = torch.zeros_like(tokens, dtype=torch.bool)
        pad_mask[0] = True  # the unconditional branch has no prompt: its context starts at the break token
        return PromptBatch(tokens, pad_mask, text=text)


def build(options: LuminaOptions, device: str) -> LuminaAdapter:
    o = options
    if o.random:
        lm, vqgan = random_models(o, device)
        vocab = LuminaVocabulary.from_names(stand_in_vocabulary(vqgan.cfg.n_embed), bos=lm.cfg.bos_token_id)
        return LuminaAdapter(lm, vqgan, vocab, stand_in_text, o.resolution, o.sampling(), o.compile)
    loaded = load_checkpoint("lumina", o, device)
    vocab = LuminaVocabulary.from_names(loaded.names, bos=int(loaded.config.get("bos_token_id", 1)))
    return LuminaAdapter(loaded.lm, loaded.vqgan, vocab, loaded.encode_text, o.resolution, o.sampling(), o.compile)


MODEL = ModelEntry(LuminaOptions, build, fingerprint=lambda options: options.fingerprint(options.weight_files))
