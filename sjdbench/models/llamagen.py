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

from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, Sampling, SegmentLayout
from sjdbench.models import hf_common
from sjdbench.models.captions import clean_caption
from sjdbench.models.gsd_threshold import nearest_neighbour_threshold
from sjdbench.models.images import to_uint8
from sjdbench.models.kv_window import CacheBook
from sjdbench.models.llamagen_gpt import GPTConfig, LlamaGenGPT, config_from_state
from sjdbench.models.vq16 import VQ16, VQ16Config
from sjdbench.models.vq_blocks import load_exact, read_checkpoint
from sjdbench.models.windowed import WindowedAdapter

HUB = "peizesun/llamagen_t2i"
T5_HUB = "google/flan-t5-xl"
GPT_FILES = {256: "t2i_XL_stage1_256.pt", 512: "t2i_XL_stage2_512.pt"}
VQ_FILE = "vq_ds16_t2i.pt"
SIZES = ("XL", "tiny")
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


class LlamaGenAdapter(WindowedAdapter):
    entry_positions = True  # the 2-D rotary table is indexed by absolute slot in both CFG rows

    def __init__(
        self,
        gpt: LlamaGenGPT,
        vq: VQ16,
        captions: CaptionEncoder,
        sampling: Sampling = DEFAULT_SAMPLING,
        name: str = "llamagen",
        compile: bool = False,
    ) -> None:
        self.name, self.compile = name, compile
        self.gpt, self.vq, self.captions = gpt.eval(), vq.eval(), captions
        g = gpt.cfg.grid
        self.layout = SegmentLayout.grid(g, g)
        self.vocab_size = gpt.cfg.vocab_size
        self.device = gpt.output.weight.device
        self.image_token_ids = torch.arange(self.vocab_size, device=self.device)
        self.default_sampling = sampling
        self._gsd_d_thr: float | None = None

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
    def _allocate(self, book: CacheBook) -> None:
        self.gpt.setup_cache(book.batch, book.size)

    def _prompt_inputs(self, prompt: PromptBatch) -> torch.Tensor:
        conditioning = prompt.extras["conditioning"].to(self.gpt.output.weight.dtype)
        return self.gpt.embed_captions(conditioning)  # (2, 120, dim)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.gpt.tok_embeddings(tokens)

    def _run(self, x: torch.Tensor, write: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.gpt(x, write, rotary[0], mask)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.gpt.output(hidden)

    def _commit_kv(self, source: torch.Tensor, destination: torch.Tensor) -> None:
        self.gpt.copy_cache(source, destination)

    # -- tokens <-> images ------------------------------------------------------------------
    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        g = self.gpt.cfg.grid
        codes = tokens.to(self.vq.post_quant_conv.weight.device).view(1, g, g)
        return to_uint8(self.vq.decode_codes(codes)[0])

    def codebook(self) -> torch.Tensor:
        """The raw (unnormalised) codebook, as LANTERN computes LlamaGen's neighbourhoods."""
        return self.vq.quantize.embedding.weight.detach().float()

    def token_embeddings(self) -> torch.Tensor:
        return self.gpt.tok_embeddings.weight.detach().float()

    @property
    def gsd_d_thr(self) -> float:
        if self._gsd_d_thr is None:
            self._gsd_d_thr = nearest_neighbour_threshold(self.token_embeddings())
        return self._gsd_d_thr


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


def build_llamagen_adapter(
    path: str | None = None,
    t5_path: str | None = None,
    weights: str = "pretrained",
    size: str = "XL",
    resolution: int = 512,
    dtype: str = "auto",
    compile: bool = False,
    cfg_scale: float = DEFAULT_SAMPLING.cfg_scale,
    temperature: float = DEFAULT_SAMPLING.temperature,
    top_k: int = DEFAULT_SAMPLING.top_k,
    top_p: float = DEFAULT_SAMPLING.top_p,
    init_seed: int = 0,
    device: str = "cpu",
) -> LlamaGenAdapter:
    transformers = hf_common.require_transformers("llamagen")
    random_weights = hf_common.check_weights_choice(weights)
    hf_common.check_choice("model.size", size, SIZES if random_weights else SIZES[:1])
    torch_dtype = hf_common.resolve_dtype(dtype, device)
    sampling = Sampling(cfg_scale=cfg_scale, temperature=temperature, top_k=top_k, top_p=top_p, guidance=GUIDANCE)
    if random_weights:
        if resolution % DOWNSAMPLING or resolution < 2 * DOWNSAMPLING:
            raise ValueError(f"resolution {resolution} must be a multiple of {DOWNSAMPLING} (LlamaGen: 256, 512)")
        hf_common.seed_everything(init_seed)
        tiny = size == "tiny"
        shrink = dict(dim=64, n_layer=2, n_head=4, caption_dim=32) if tiny else {}
        gpt_cfg = GPTConfig(grid=resolution // DOWNSAMPLING, **shrink)
        vq_cfg = VQ16Config(ch=32, num_res_blocks=1) if tiny else VQ16Config()
        with hf_common.building(device, torch_dtype):
            gpt = hf_common.init_random(LlamaGenGPT(gpt_cfg))
            gpt.cls_embedding.uncond_embedding.normal_(0.0, gpt_cfg.caption_dim**-0.5)
            t5 = random_t5(size, transformers)
        with torch.device(device):
            vq = VQ16(vq_cfg)
        return LlamaGenAdapter(gpt, vq, CaptionEncoder(stand_in_t5_tokenizer, t5), sampling, compile=compile)

    hf_common.check_choice("model.resolution", resolution, GPT_FILES)
    root, t5_root = llamagen_weights_dirs(path, t5_path, resolution)
    state = _model_state(read_checkpoint(root / GPT_FILES[resolution]))
    gpt = LlamaGenGPT(config_from_state(state, grid=resolution // DOWNSAMPLING))
    load_exact(gpt, state, str(root / GPT_FILES[resolution]))
    vq = VQ16.load(root / VQ_FILE)
    t5 = transformers.T5EncoderModel.from_pretrained(t5_root, dtype=torch_dtype)
    tokenizer = transformers.AutoTokenizer.from_pretrained(t5_root)
    return LlamaGenAdapter(
        gpt.to(device=device, dtype=torch_dtype),
        vq.to(device),
        CaptionEncoder(t5_tokenizer(tokenizer), t5.to(device)),
        sampling,
        compile=compile,
    )


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


def weights_fingerprint(
    path: str | None = None,
    t5_path: str | None = None,
    weights: str = "pretrained",
    size: str = "XL",
    resolution: int = 512,
) -> str:
    if weights == "random":
        return f"random weights ({size}): meaningless tokens"
    root, t5_root = llamagen_weights_dirs(path, t5_path, resolution)
    return hf_common.file_fingerprint([root / GPT_FILES[resolution], root / VQ_FILE, *t5_root.glob("*.safetensors")])
