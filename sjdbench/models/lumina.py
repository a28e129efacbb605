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

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Optional

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, Sampling, SegmentLayout
from sjdbench.models import hf_common
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.chameleon import ChameleonLM, ChameleonLMConfig
from sjdbench.models.images import to_uint8
from sjdbench.models.options import CheckpointOptions
from sjdbench.models.registry import ModelEntry
from sjdbench.models.vq_blocks import load_exact
from sjdbench.models.vqgan import ChameleonVQGAN, VQGANConfig
from sjdbench.models.windowed import WindowedAdapter

HUB = "Alpha-VLLM/Lumina-mGPT-7B-{resolution}"
RESOLUTIONS = (512, 768, 1024)
PATCH = 32  # pixels per grid token; the VQGAN downsamples 16x, so 2 latent rows per grid step
DEFAULT_SAMPLING = Sampling(cfg_scale=3.0, temperature=1.0, top_k=2000, top_p=1.0)
PAPER_GSD_D_THR = 0.5  # So et al.'s threshold, measured on Lumina-mGPT's own input embeddings
VQGAN_FILES = ["vqgan.ckpt", "vqgan.yaml"]
VQGAN_SOURCE = (
    "Meta's Chameleon image tokenizer (tokenizer/vqgan.ckpt and tokenizer/vqgan.yaml of the Chameleon release)"
)
IMAGE_NAME = re.compile(r"IMGIMG([A-J]+)Z")
SEPARATOR, BREAK, END, NEW_LINE = "<reserved08706>", "<racm3:break>", "<eoss>", "<reserved08799>"


def grid_token_name(n_grids: int) -> str:
    return f"<reserved{8800 + n_grids:05d}>"


def image_code(name: str) -> int | None:
    match = IMAGE_NAME.fullmatch(name)
    return None if match is None else int("".join(str(ord(ch) - ord("A")) for ch in match.group(1)))


@dataclass
class LuminaVocabulary:
    image_token_ids: torch.Tensor  # (K,) token of code k
    bos: int
    separator: int
    image_start: int
    image_end: int
    new_line: int
    names: dict[str, int]

    @classmethod
    def from_names(cls, names: dict[str, int], bos: int) -> LuminaVocabulary:
        codes = {code: int(i) for name, i in names.items() if (code := image_code(name)) is not None}
        if not codes or sorted(codes) != list(range(len(codes))):
            raise ValueError(
                "the vocabulary has no complete set of IMGIMG...Z image tokens; is this a Chameleon checkpoint?"
            )
        missing = [n for n in (SEPARATOR, BREAK, END, NEW_LINE) if n not in names]
        if missing:
            raise ValueError(f"the vocabulary lacks Lumina-mGPT's structural tokens {missing}")
        ids = torch.tensor([codes[k] for k in range(len(codes))], dtype=torch.long)
        return cls(ids, bos, names[SEPARATOR], names[BREAK], names[END], names[NEW_LINE], names)

    def grid_token(self, n_grids: int) -> int:
        name = grid_token_name(n_grids)
        if name not in self.names:
            raise ValueError(f"no size token {name} for {n_grids} grid steps in the vocabulary")
        return self.names[name]


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
class LuminaOptions(CheckpointOptions):
    sizes: ClassVar[tuple[str, ...]] = ("7B",)
    resolution_step: ClassVar[int] = PATCH  # Lumina's size tokens count 32 px steps
    released_resolutions: ClassVar[Optional[tuple[int, ...]]] = RESOLUTIONS

    cfg_scale: float = DEFAULT_SAMPLING.cfg_scale
    top_k: int = DEFAULT_SAMPLING.top_k
    size: str = "7B"
    resolution: int = 768
    vqgan_dir: Optional[str] = None  # Meta's vqgan.ckpt + vqgan.yaml (not on the hub)

    def released_only(self) -> bool:
        return not self.random and self.path is None  # a local checkpoint may be fine-tuned to any size


class LuminaAdapter(WindowedAdapter):
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
        super().__init__(
            "lumina",
            lumina_layout(vocab, resolution),
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
        return [self.vocab.bos] + self._encode_text(prompt_text(caption, self.resolution) + SEPARATOR)

    def encode_prompt(self, text: str) -> PromptBatch:
        cond = torch.tensor(self.prompt_ids(text), dtype=torch.long)
        tokens = torch.stack([cond, torch.full_like(cond, self.vocab.bos)]).to(self.device)  # (2, P)
        pad_mask = torch.zeros_like(tokens, dtype=torch.bool)
        pad_mask[0] = True  # the unconditional branch has no prompt: its context starts at the break token
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
        return self._code_of[tokens.cpu()[~self.layout.is_forced]].view(h, w)

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        codes = self.tokens_to_codes(tokens).to(self.vqgan.post_quant_conv.weight.device)
        return to_uint8(self.vqgan.decode_codes(codes[None])[0])


# -- building -----------------------------------------------------------------------------------
def stand_in_vocabulary(n_codes: int = 8192) -> dict[str, int]:
    """Lumina-mGPT's structural and image token names at the released ids (image code k at id 4 + k,
    reserved token n at id n + 4), for weights=random: no tokenizer file is read."""
    names = {f"IMGIMG{''.join(chr(ord('A') + int(d)) for d in str(k))}Z": 4 + k for k in range(n_codes)}
    names.update({f"<reserved{n:05d}>": n + 4 for n in range(8700, 8900)})
    names.update({"<eoss>": 8196, "<racm3:break>": 8197, "<s>": 1})
    return names


def random_parts(size: str) -> tuple[ChameleonLMConfig, VQGANConfig]:
    if size == "tiny":
        return (
            ChameleonLMConfig(
                hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4
            ),
            VQGANConfig(ch=32, ch_mult=[1, 1, 2, 2, 4], num_res_blocks=1, z_channels=32),
        )
    return ChameleonLMConfig(), VQGANConfig()  # Chameleon-7B and the released tokenizer


def load_lm(root: Path, dtype: torch.dtype, device: str) -> ChameleonLM:
    """The LM of an HF-format Chameleon checkpoint directory. QK-norm group counts are read from the
    weights (Lumina-mGPT stores one group, transformers' conversions one per head). The VQGAN encoder
    copy some conversions keep under `model.vqmodel.` is not needed and skipped."""
    from safetensors import safe_open

    config = json.loads((root / "config.json").read_text())
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(root.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt", device="cpu") as handle:
            for key in handle.keys():
                if not key.startswith("model.vqmodel."):
                    state[key] = handle.get_tensor(key)
    q_norm = state.get("model.layers.0.self_attn.q_norm.weight")
    k_norm = state.get("model.layers.0.self_attn.k_norm.weight")
    if q_norm is not None:
        config["model_parallel_size"] = q_norm.shape[0]
    if k_norm is not None:
        config["qk_norm_groups_k"] = k_norm.shape[0]
    lm = ChameleonLM(ChameleonLMConfig.from_dict(config))
    load_exact(lm, state, str(root))
    return lm.to(device=device, dtype=dtype)


def text_encoder(root: Path) -> Callable[[str], list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root)
    return lambda text: tokenizer.encode(text, add_special_tokens=False)


def build(options: LuminaOptions, device: str) -> LuminaAdapter:
    o = options
    if o.random:
        lm_config, vq_config = random_parts(o.size)
        with o.random_weights(device):
            lm = hf_common.init_random(ChameleonLM(lm_config))
        with torch.device(device):
            vqgan = ChameleonVQGAN(vq_config)
        vocab = LuminaVocabulary.from_names(stand_in_vocabulary(vq_config.n_embed), bos=lm_config.bos_token_id)
        encode = lambda text: hf_common.stand_in_ids(text, 9000, 50000)  # noqa: E731
        return LuminaAdapter(lm, vqgan, vocab, encode, o.resolution, o.sampling(), o.compile)

    hf_common.require_transformers("lumina")  # the tokenizer only
    root, vq_root = lumina_weights_dirs(o.path, o.vqgan_dir, o.resolution)
    lm = load_lm(root, o.torch_dtype(device), device)
    config = json.loads((root / "config.json").read_text())
    names = config.get("vocabulary_map") or _tokenizer_vocabulary(root)
    vocab = LuminaVocabulary.from_names(names, bos=int(config.get("bos_token_id", 1)))
    vqgan = ChameleonVQGAN.load(vq_root / "vqgan.ckpt", vq_root / "vqgan.yaml").to(device)
    return LuminaAdapter(lm, vqgan, vocab, text_encoder(root), o.resolution, o.sampling(), o.compile)


def _tokenizer_vocabulary(root: Path) -> dict[str, int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(root).get_vocab()


def lumina_weights_dirs(path: str | None, vqgan_dir: str | None, resolution: int) -> tuple[Path, Path]:
    repo = HUB.format(resolution=resolution)
    source = f"the {repo} repository (config.json, *.safetensors, tokenizer files)"
    if path is not None:
        root = hf_common.local_dir(path, ["config.json", "tokenizer.json"], source)
    else:
        root = hf_common.hub_dir(repo, ["*.json", "*.safetensors", "tokenizer*"])
    hf_common.shards_present(root, source)
    if vqgan_dir is None:
        raise FileNotFoundError(
            f"decoding needs {VQGAN_SOURCE}; put vqgan.ckpt and vqgan.yaml in a "
            "directory and pass model.options.vqgan_dir=DIR"
        )
    vq_root = hf_common.local_dir(vqgan_dir, VQGAN_FILES, VQGAN_SOURCE)
    return root, vq_root


def weight_files(options: LuminaOptions) -> list[Path]:
    root, vq_root = lumina_weights_dirs(options.path, options.vqgan_dir, options.resolution)
    return [*root.glob("*.safetensors"), vq_root / "vqgan.ckpt"]


MODEL = ModelEntry(LuminaOptions, build, fingerprint=lambda options: options.fingerprint(lambda: weight_files(options)))
