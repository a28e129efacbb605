"""LlamaGen text-to-image (FoundationVision; `peizesun/llamagen_t2i`), our own GPT and VQ-16.

Checkpoints: `t2i_XL_stage1_256.pt` (256 px, 16x16 codes) or `t2i_XL_stage2_512.pt` (512 px, 32x32)
and `vq_ds16_t2i.pt`, from the hub repo `peizesun/llamagen_t2i`; captions are encoded by
`google/flan-t5-xl` (transformers' T5 encoder), padded to 120 tokens.

Conditioning (LlamaGen's sample_t2i.py): the caption's T5 features are left-aligned by the tokenizer,
so LlamaGen moves the padding to the front, zeroes the padded features and passes the mask on; the
unconditional branch is the learned null caption `cls_embedding.uncond_embedding` under the *same*
mask. Padded slots are invisible to every query (a padded slot sees only itself). CFG is one batch
of 2, as in LlamaGen's own loop: `u + s (c - u)`, then temperature, top-k 1000 (defaults: CFG 7.5,
T 1, top-p 1). The vocabulary is exactly the 16384 codes: token id = code, no structural tokens.

Caption cleaning: LlamaGen's own cleaner (`T5Embedder.clean_caption`, twice), reproduced step for
step in `sjdbench/models/captions.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, Sampling, SegmentLayout
from sjdbench.models import hf_common
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.captions import clean_caption
from sjdbench.models.images import to_uint8
from sjdbench.models.llamagen_gpt import GPTConfig, LlamaGenGPT, config_from_state
from sjdbench.models.options import CheckpointOptions
from sjdbench.models.registry import ModelEntry
from sjdbench.models.vq16 import VQ16, VQ16Config
from sjdbench.models.vq_blocks import load_exact, read_checkpoint
from sjdbench.models.windowed import WindowedAdapter

HUB = "peizesun/llamagen_t2i"
T5_HUB = "google/flan-t5-xl"
GPT_FILES = {256: "t2i_XL_stage1_256.pt", 512: "t2i_XL_stage2_512.pt"}
VQ_FILE = "vq_ds16_t2i.pt"
GUIDANCE = "above_one"  # generate.py guides only when cfg_scale > 1, else runs the caption alone
DEFAULT_SAMPLING = Sampling(cfg_scale=7.5, temperature=1.0, top_k=1000, top_p=1.0, guidance=GUIDANCE)
CAPTION_TOKENS = 120
DOWNSAMPLING = 16


class CaptionEncoder:
    """Caption -> (120, caption_dim) features and (120,) mask, left-padded the way LlamaGen feeds them."""

    def __init__(self, tokenizer: Callable[[str], tuple[list[int], list[int]]], encoder: torch.nn.Module) -> None:
        self.tokenize, self.encoder = tokenizer, encoder.eval()

    @torch.inference_mode()
    def __call__(self, caption: str) -> tuple[torch.Tensor, torch.Tensor]:
        ids, attention = self.tokenize(clean_caption(caption))  # right-padded to 120
        device = next(self.encoder.parameters()).device
        ids_t = torch.tensor([ids], device=device)
        mask_t = torch.tensor([attention], device=device)
        features = self.encoder(input_ids=ids_t, attention_mask=mask_t).last_hidden_state[0]  # (120, C)
        valid = int(sum(attention))
        features = torch.cat([features[valid:], features[:valid]])  # padding first, caption last
        mask = torch.flip(mask_t[0], dims=[0]).bool()
        return features * mask[:, None], mask


@dataclass
class LlamaGenOptions(CheckpointOptions):
    guidance: ClassVar[str] = GUIDANCE
    sizes: ClassVar[tuple[str, ...]] = ("XL",)
    resolution_step: ClassVar[int] = DOWNSAMPLING
    released_resolutions: ClassVar[Optional[tuple[int, ...]]] = tuple(GPT_FILES)

    cfg_scale: float = DEFAULT_SAMPLING.cfg_scale
    top_k: int = DEFAULT_SAMPLING.top_k
    size: str = "XL"
    resolution: int = 512
    t5_path: Optional[str] = None  # local google/flan-t5-xl (None: the hub's)


class LlamaGenAdapter(WindowedAdapter):
    own_positions = True  # the 2-D rotary table is indexed by absolute slot in both CFG rows

    def __init__(
        self,
        gpt: LlamaGenGPT,
        vq: VQ16,
        captions: CaptionEncoder,
        sampling: Sampling = DEFAULT_SAMPLING,
        compile: bool = False,
    ) -> None:
        self.gpt, self.vq, self.captions = gpt.eval(), vq.eval(), captions
        g = gpt.cfg.grid
        super().__init__(
            "llamagen",
            SegmentLayout.grid(g, g),
            gpt.cfg.vocab_size,
            torch.arange(gpt.cfg.vocab_size),
            sampling,
            gpt.output.weight.device,
            # the raw (unnormalised) codebook, as LANTERN computes LlamaGen's neighbourhoods
            codebook=lambda: self.vq.quantize.embedding.weight.detach().float(),
            token_embeddings=lambda: self.gpt.tok_embeddings.weight.detach().float(),
            compile=compile,
        )

    def encode_prompt(self, text: str) -> PromptBatch:
        """tokens: the slot indices 0..119 (the conditioning is in extras); pad_mask: the caption mask,
        shared by the null caption exactly as LlamaGen's `generate` shares `emb_masks`."""
        features, mask = self.captions(text)
        null = self.gpt.cls_embedding.uncond_embedding.to(features.dtype)
        conditioning = torch.stack([features, null]).to(self.device)  # (2, 120, caption_dim)
        slots = torch.arange(CAPTION_TOKENS, device=self.device).expand(2, CAPTION_TOKENS)
        return PromptBatch(
            slots,
            mask.to(self.device).expand(2, CAPTION_TOKENS).clone(),
            text=text,
            extras={"conditioning": conditioning},
        )

    # -- WindowedAdapter hooks --------------------------------------------------------------
    def _kv_shape(self) -> KVShape:
        return self.gpt.kv_shape()

    def _prompt_inputs(self, prompt: PromptBatch) -> torch.Tensor:
        conditioning = prompt.extras["conditioning"].to(self.gpt.output.weight.dtype)
        return self.gpt.embed_captions(conditioning)  # (2, 120, dim)

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.gpt.tok_embeddings(tokens)

    def _run(self, x: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        return self.gpt(x, rotary, mask, cache)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.gpt.output(hidden)

    # -- tokens <-> images ------------------------------------------------------------------
    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        g = self.gpt.cfg.grid
        codes = tokens.to(self.vq.post_quant_conv.weight.device).view(1, g, g)
        return to_uint8(self.vq.decode_codes(codes)[0])


# -- building -----------------------------------------------------------------------------------
def t5_tokenizer(tokenizer: Any) -> Callable[[str], tuple[list[int], list[int]]]:
    def tokenize(text: str) -> tuple[list[int], list[int]]:
        out = tokenizer(text, max_length=CAPTION_TOKENS, padding="max_length", truncation=True, add_special_tokens=True)
        return list(out["input_ids"]), list(out["attention_mask"])

    return tokenize


def stand_in_t5_tokenizer(text: str) -> tuple[list[int], list[int]]:
    """weights=random: byte ids, then T5's `</s>` (1), padded with `<pad>` (0) to 120."""
    ids = hf_common.stand_in_ids(text, 100, 32000)[: CAPTION_TOKENS - 1] + [1]
    return ids + [0] * (CAPTION_TOKENS - len(ids)), [1] * len(ids) + [0] * (CAPTION_TOKENS - len(ids))


def random_t5(size: str, transformers: Any) -> torch.nn.Module:
    """flan-t5-xl's encoder shape (or a tiny one) with random weights."""
    if size == "tiny":
        config = transformers.T5Config(
            vocab_size=32128, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4, feed_forward_proj="gated-gelu"
        )
    else:
        config = transformers.T5Config(
            vocab_size=32128,
            d_model=2048,
            d_kv=64,
            d_ff=5120,
            num_layers=24,
            num_heads=32,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
        )
    return transformers.T5EncoderModel(config)


def build(options: LlamaGenOptions, device: str) -> LlamaGenAdapter:
    o = options
    transformers = hf_common.require_transformers("llamagen")
    if o.random:
        tiny = o.size == "tiny"
        shrink = dict(dim=64, n_layer=2, n_head=4, caption_dim=32) if tiny else {}
        gpt_cfg = GPTConfig(grid=o.resolution // DOWNSAMPLING, **shrink)
        vq_cfg = VQ16Config(ch=32, num_res_blocks=1) if tiny else VQ16Config()
        with o.random_weights(device):
            gpt = hf_common.init_random(LlamaGenGPT(gpt_cfg))
            gpt.cls_embedding.uncond_embedding.normal_(0.0, gpt_cfg.caption_dim**-0.5)
            t5 = random_t5(o.size, transformers)
        with torch.device(device):
            vq = VQ16(vq_cfg)
        return LlamaGenAdapter(gpt, vq, CaptionEncoder(stand_in_t5_tokenizer, t5), o.sampling(), o.compile)

    root, t5_root = llamagen_weights_dirs(o.path, o.t5_path, o.resolution)
    state = _model_state(read_checkpoint(root / GPT_FILES[o.resolution]))
    gpt = LlamaGenGPT(config_from_state(state, grid=o.resolution // DOWNSAMPLING))
    load_exact(gpt, state, str(root / GPT_FILES[o.resolution]))
    vq = VQ16.load(root / VQ_FILE)
    dtype = o.torch_dtype(device)
    t5 = transformers.T5EncoderModel.from_pretrained(t5_root, dtype=dtype)
    tokenizer = transformers.AutoTokenizer.from_pretrained(t5_root)
    captions = CaptionEncoder(t5_tokenizer(tokenizer), t5.to(device))
    return LlamaGenAdapter(gpt.to(device=device, dtype=dtype), vq.to(device), captions, o.sampling(), o.compile)


def _model_state(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The weights of a LlamaGen training checkpoint: under "model" (DDP), "module" (DeepSpeed) or
    "state_dict", as LlamaGen's own sampler accepts."""
    for key in ("model", "module", "state_dict"):
        if key in checkpoint:
            return checkpoint[key]
    return checkpoint


def llamagen_weights_dirs(path: str | None, t5_path: str | None, resolution: int) -> tuple[Path, Path]:
    files = [GPT_FILES[resolution], VQ_FILE]
    if path is not None:
        root = hf_common.local_dir(path, files, f"{', '.join(files)} from the {HUB} repository")
    else:
        root = hf_common.hub_dir(HUB, files)
    if t5_path is not None:
        t5_root = hf_common.local_dir(t5_path, ["config.json"], f"the {T5_HUB} repository")
    else:
        t5_root = hf_common.hub_dir(T5_HUB, ["*.json", "*.safetensors", "spiece.model"], option="model.options.t5_path")
    return root, t5_root


def weight_files(options: LlamaGenOptions) -> list[Path]:
    root, t5_root = llamagen_weights_dirs(options.path, options.t5_path, options.resolution)
    return [root / GPT_FILES[options.resolution], root / VQ_FILE, *t5_root.glob("*.safetensors")]


MODEL = ModelEntry(
    LlamaGenOptions, build, fingerprint=lambda options: options.fingerprint(lambda: weight_files(options))
)
