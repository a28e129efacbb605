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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Optional

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, Sampling, SegmentLayout
from sjdbench.models import hf_common
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.chameleon import ChameleonLM
from sjdbench.models.images import to_uint8
from sjdbench.models.lumina import (
    VQGAN_FILES,
    LuminaVocabulary,
    load_lm,
    random_parts,
    stand_in_vocabulary,
    text_encoder,
)
from sjdbench.models.options import CheckpointOptions
from sjdbench.models.registry import ModelEntry
from sjdbench.models.vqgan import ChameleonVQGAN
from sjdbench.models.windowed import WindowedAdapter

HUB = "leloy/Anole-7b-v0.1-hf"
PIXELS_PER_CODE = 16  # the Chameleon VQGAN downsamples 16x: 512 px is 32 x 32 codes
RESOLUTION = 512
DEFAULT_SAMPLING = Sampling(cfg_scale=3.0, temperature=1.0, top_k=2000, top_p=1.0)
PAPER_GSD_D_THR = 0.5  # a Chameleon-7B's input embeddings, as Lumina-mGPT's
VQGAN_SOURCE = "the Chameleon image tokenizer (tokenizer/vqgan.ckpt and tokenizer/vqgan.yaml of GAIR/Anole-7b-v0.1)"
BOS = "<s>"


@dataclass
class AnoleOptions(CheckpointOptions):
    sizes: ClassVar[tuple[str, ...]] = ("7B",)
    resolution_step: ClassVar[int] = PIXELS_PER_CODE
    released_resolutions: ClassVar[Optional[tuple[int, ...]]] = (RESOLUTION,)

    cfg_scale: float = DEFAULT_SAMPLING.cfg_scale
    top_k: int = DEFAULT_SAMPLING.top_k
    size: str = "7B"
    resolution: int = RESOLUTION
    vqgan_dir: Optional[str] = None  # vqgan.ckpt + vqgan.yaml (not in the hf-format repository)

    def released_only(self) -> bool:
        return not self.random and self.path is None  # a local checkpoint may be fine-tuned to any size


class AnoleAdapter(WindowedAdapter):
    def __init__(
        self,
        lm: ChameleonLM,
        vqgan: ChameleonVQGAN,
        vocab: LuminaVocabulary,
        encode_text: Callable[[str], list[int]],
        resolution: int,
        sampling: Sampling = DEFAULT_SAMPLING,
        compile: bool = False,
    ) -> None:
        self.resolution = resolution
        self.lm, self.vqgan, self.vocab = lm.eval(), vqgan.eval(), vocab
        self._encode_text = encode_text  # text -> ids without BOS
        side = resolution // PIXELS_PER_CODE
        super().__init__(
            "anole",
            SegmentLayout.grid(side, side),
            lm.cfg.vocab_size,
            vocab.image_token_ids,
            sampling,
            lm.lm_head.weight.device,
            codebook=lambda: self.vqgan.quantize.embedding.weight.detach().float(),  # (8192, 256), code order
            token_embeddings=lambda: self.lm.model.embed_tokens.weight.detach().float(),
            gsd_d_thr=PAPER_GSD_D_THR,
            compile=compile,
        )
        code_of = torch.full((self.vocab_size,), -1, dtype=torch.long)
        code_of[vocab.image_token_ids] = torch.arange(vocab.image_token_ids.numel())
        self._code_of = code_of

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

    # -- WindowedAdapter hooks --------------------------------------------------------------
    def _kv_shape(self) -> KVShape:
        return self.lm.kv_shape()

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.lm.model.embed_tokens(tokens)

    def _run(self, x: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        return self.lm(x, rotary, mask, cache)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm.lm_head(hidden)  # every id, image ids included: no masking

    # -- tokens <-> images ------------------------------------------------------------------
    def tokens_to_codes(self, tokens: torch.Tensor) -> torch.Tensor:
        h, w = self.layout.grid_hw
        return self._code_of[tokens.cpu()].view(h, w)

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        codes = self.tokens_to_codes(tokens).to(self.vqgan.post_quant_conv.weight.device)
        return to_uint8(self.vqgan.decode_codes(codes[None])[0])


def anole_vocabulary(names: dict[str, int]) -> LuminaVocabulary:
    """Image ids from the `IMGIMG...Z` names; structural ids from the Chameleon tokenizer's names
    (Anole shares Lumina-mGPT's tokenizer: BOS `<s>`, separator, `<racm3:break>`)."""
    if BOS not in names:
        raise ValueError(f"the vocabulary has no {BOS} token; is this a Chameleon checkpoint?")
    return LuminaVocabulary.from_names(names, bos=names[BOS])


def build(options: AnoleOptions, device: str) -> AnoleAdapter:
    o = options
    if o.random:
        lm_config, vq_config = random_parts(o.size)
        with o.random_weights(device):
            lm = hf_common.init_random(ChameleonLM(lm_config))
        with torch.device(device):
            vqgan = ChameleonVQGAN(vq_config)
        vocab = anole_vocabulary({**stand_in_vocabulary(vq_config.n_embed), "<s>": 0})
        encode = lambda text: hf_common.stand_in_ids(text, 9000, 50000)  # noqa: E731
        return AnoleAdapter(lm, vqgan, vocab, encode, o.resolution, o.sampling(), o.compile)

    hf_common.require_transformers("anole")  # the tokenizer only
    root, vq_root = anole_weights_dirs(o.path, o.vqgan_dir)
    lm = load_lm(root, o.torch_dtype(device), device)
    config = json.loads((root / "config.json").read_text())
    names = config.get("vocabulary_map") or _tokenizer_vocabulary(root)
    vqgan = ChameleonVQGAN.load(vq_root / "vqgan.ckpt", vq_root / "vqgan.yaml").to(device)
    return AnoleAdapter(lm, vqgan, anole_vocabulary(names), text_encoder(root), o.resolution, o.sampling(), o.compile)


def _tokenizer_vocabulary(root: Path) -> dict[str, int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(root).get_vocab()


def anole_weights_dirs(path: str | None, vqgan_dir: str | None) -> tuple[Path, Path]:
    source = f"the {HUB} repository (config.json, *.safetensors, tokenizer files)"
    if path is not None:
        root = hf_common.local_dir(path, ["config.json", "tokenizer.json"], source)
    else:
        root = hf_common.hub_dir(HUB, ["*.json", "*.safetensors", "tokenizer*"])
    hf_common.shards_present(root, source)
    if vqgan_dir is None:
        raise FileNotFoundError(
            f"decoding needs {VQGAN_SOURCE}; put vqgan.ckpt and vqgan.yaml in a "
            "directory and pass model.options.vqgan_dir=DIR"
        )
    return root, hf_common.local_dir(vqgan_dir, VQGAN_FILES, VQGAN_SOURCE)


def weight_files(options: AnoleOptions) -> list[Path]:
    root, vq_root = anole_weights_dirs(options.path, options.vqgan_dir)
    return [*root.glob("*.safetensors"), vq_root / "vqgan.ckpt"]


MODEL = ModelEntry(AnoleOptions, build, fingerprint=lambda options: options.fingerprint(lambda: weight_files(options)))
