"""What the Chameleon-7B image generators share (Lumina-mGPT in `lumina.py`, Anole in `anole.py`):
our Chameleon forward with Meta's Chameleon VQGAN, Lumina-mGPT's vocabulary (Anole shares its
tokenizer), their options, the adapter over both, and how they are built: stand-in random weights,
or an HF-format checkpoint directory plus the VQGAN's files.

Each model file supplies only what differs: its segment layout, its prompt, its vocabulary's reading
and the hub repository of its weights.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Optional

import numpy as np
import torch

from sjdbench.adapter import Sampling, SegmentLayout
from sjdbench.models import hf_common
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.chameleon import ChameleonLM, ChameleonLMConfig
from sjdbench.models.images import to_uint8
from sjdbench.models.options import CheckpointOptions
from sjdbench.models.vq_blocks import load_exact
from sjdbench.models.vqgan import ChameleonVQGAN, VQGANConfig
from sjdbench.models.windowed import WindowedAdapter

# the released defaults of both: CFG 3, temperature 1, top-k 2000
DEFAULT_SAMPLING = Sampling(cfg_scale=3.0, temperature=1.0, top_k=2000, top_p=1.0)
PAPER_GSD_D_THR = 0.5  # So et al.'s threshold, measured on Lumina-mGPT's own (Chameleon-7B) input embeddings
VQGAN_FILES = ["vqgan.ckpt", "vqgan.yaml"]
STAND_IN_TEXT_IDS = (9000, 50000)  # weights=random: text ids drawn from this range (no tokenizer is read)


# -- the vocabulary: Lumina-mGPT's tokenizer, which Anole shares ------------------------------------
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


def stand_in_vocabulary(n_codes: int = 8192) -> dict[str, int]:
    """Lumina-mGPT's structural and image token names at the released ids (image code k at id 4 + k,
    reserved token n at id n + 4), for weights=random: no tokenizer file is read."""
    names = {f"IMGIMG{''.join(chr(ord('A') + int(d)) for d in str(k))}Z": 4 + k for k in range(n_codes)}
    names.update({f"<reserved{n:05d}>": n + 4 for n in range(8700, 8900)})
    names.update({"<eoss>": 8196, "<racm3:break>": 8197, "<s>": 1})
    return names


@dataclass
class ChameleonFamilyOptions(CheckpointOptions):
    sizes: ClassVar[tuple[str, ...]] = ("7B",)

    cfg_scale: float = DEFAULT_SAMPLING.cfg_scale
    top_k: int = DEFAULT_SAMPLING.top_k
    size: str = "7B"
    resolution: int = 512
    vqgan_dir: Optional[str] = None  # Meta's vqgan.ckpt + vqgan.yaml (in neither model's hf-format repository)

    vqgan_source: ClassVar[str]  # where the VQGAN's files come from, as a refusal names it

    def released_only(self) -> bool:
        return not self.random and self.path is None  # a local checkpoint may be fine-tuned to any size

    def hub_repo(self) -> str:
        """The hub repository of the released weights."""
        raise NotImplementedError

    def weight_files(self) -> list[Path]:
        """The files a run's weights fingerprint reads."""
        root, vq_root = _weights_dirs(self)
        return [*root.glob("*.safetensors"), vq_root / "vqgan.ckpt"]


class ChameleonFamilyAdapter(WindowedAdapter):
    """A Chameleon-7B generating image tokens that map to VQ codes through their names (`vocab`),
    CFG rows mixed in one batched forward; every id, image ids included, comes from the LM head."""

    model_name: ClassVar[str]

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
            self.model_name,
            self.segment_layout(vocab, resolution),
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

    @staticmethod
    def segment_layout(vocab: LuminaVocabulary, resolution: int) -> SegmentLayout:
        raise NotImplementedError

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
        """The grid of VQ codes of a segment's tokens (the layout's forced tokens left out)."""
        h, w = self.layout.grid_hw
        return self._code_of[tokens.cpu()[~self.layout.is_forced]].view(h, w)

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        codes = self.tokens_to_codes(tokens).to(self.vqgan.post_quant_conv.weight.device)
        return to_uint8(self.vqgan.decode_codes(codes[None])[0])


# -- building -----------------------------------------------------------------------------------
def random_parts(size: str) -> tuple[ChameleonLMConfig, VQGANConfig]:
    if size == "tiny":
        return (
            ChameleonLMConfig(
                hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4
            ),
            VQGANConfig(ch=32, ch_mult=[1, 1, 2, 2, 4], num_res_blocks=1, z_channels=32),
        )
    return ChameleonLMConfig(), VQGANConfig()  # Chameleon-7B and the released tokenizer


def random_models(options: ChameleonFamilyOptions, device: str) -> tuple[ChameleonLM, ChameleonVQGAN]:
    """weights=random: the LM and the VQGAN of `options.size` with random weights."""
    lm_config, vq_config = random_parts(options.size)
    with options.random_weights(device):
        lm = hf_common.init_random(ChameleonLM(lm_config))
    with torch.device(device):
        vqgan = ChameleonVQGAN(vq_config)
    return lm, vqgan


def stand_in_text(text: str) -> list[int]:
    return hf_common.stand_in_ids(text, *STAND_IN_TEXT_IDS)


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


@dataclass
class Checkpoint:
    """A loaded release: the LM, the VQGAN, the checkpoint's config.json and its token names."""

    lm: ChameleonLM
    vqgan: ChameleonVQGAN
    config: dict
    names: dict[str, int]
    encode_text: Callable[[str], list[int]]


def load_checkpoint(model: str, options: ChameleonFamilyOptions, device: str) -> Checkpoint:
    """The LM from `options.path` (or the hub) and the VQGAN from `options.vqgan_dir`; the token names
    from config.json's `vocabulary_map`, or from the tokenizer when it has none."""
    hf_common.require_transformers(model)  # the tokenizer only
    root, vq_root = _weights_dirs(options)
    lm = load_lm(root, options.torch_dtype(device), device)
    config = json.loads((root / "config.json").read_text())
    names = config.get("vocabulary_map") or _tokenizer_vocabulary(root)
    vqgan = ChameleonVQGAN.load(vq_root / "vqgan.ckpt", vq_root / "vqgan.yaml").to(device)
    return Checkpoint(lm, vqgan, config, names, text_encoder(root))


def _tokenizer_vocabulary(root: Path) -> dict[str, int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(root).get_vocab()


def _weights_dirs(options: ChameleonFamilyOptions) -> tuple[Path, Path]:
    """(the LM's checkpoint directory: `options.path`, or the hub's repository; the VQGAN's directory)."""
    repo = options.hub_repo()
    source = f"the {repo} repository (config.json, *.safetensors, tokenizer files)"
    if options.path is not None:
        root = hf_common.local_dir(options.path, ["config.json", "tokenizer.json"], source)
    else:
        root = hf_common.hub_dir(repo, ["*.json", "*.safetensors", "tokenizer*"])
    hf_common.shards_present(root, source)
    if options.vqgan_dir is None:
        raise FileNotFoundError(
            f"decoding needs {options.vqgan_source}; put vqgan.ckpt and vqgan.yaml in a "
            "directory and pass model.options.vqgan_dir=DIR"
        )
    return root, hf_common.local_dir(options.vqgan_dir, VQGAN_FILES, options.vqgan_source)
