"""The embedded toy model: a small trained LLaMA-style transformer over toy-world patch codes.

`build_toy_adapter()` (the registry's `MODEL.build`) loads the shipped weights from `sjdbench/models/toy/weights/`:
    toy_lm.safetensors         transformer weights
    toy_tokenizer.safetensors  k-means patch codebook (K, 48)
    toy.json                   exact model config, layout, caption vocabulary, sampling defaults,
                               training config, losses
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

import torch
from safetensors.torch import load_file

from sjdbench.adapter import SegmentLayout
from sjdbench.models.llama import Llama, LlamaConfig
from sjdbench.models.llama_adapter import EOI, EOL, LlamaImageAdapter
from sjdbench.models.options import ModelOptions
from sjdbench.models.registry import ModelEntry
from sjdbench.models.toy.text import caption_encoder
from sjdbench.models.toy.tokenizer import PatchTokenizer

WEIGHTS_DIR = Path(__file__).parent / "weights"
LM_FILE = "toy_lm.safetensors"
TOKENIZER_FILE = "toy_tokenizer.safetensors"
META_FILE = "toy.json"

# shipped sampling defaults (see docs/TOY.md for how they set the regime)
DEFAULT_CFG_SCALE = 3.0
DEFAULT_TOP_K = 100
DEFAULT_ROW_END_TOKEN = True
# GSD's squared embedding distance threshold for the toy: the paper's 0.5 is in Lumina-mGPT's units;
# the toy's nearest code embeddings lie 1.28 apart (median; minimum 0.51), so 0.5 forms no group at
# all. At 1.5 a code has 4.3 neighbours on average (1.2: 1.4; 2.0: 27; 3.0: 439 of 512, no longer a
# filter). Re-measure after retraining: the embedding geometry is the model's. See docs/TOY.md.
GSD_D_THR = 1.5


def load_meta(weights_dir: str | Path | None = None) -> dict:
    path = Path(weights_dir or WEIGHTS_DIR) / META_FILE
    if not path.exists():
        raise FileNotFoundError(f"toy model metadata not found at {path}; run `sjdbench toy train` to create it")
    return json.loads(path.read_text())


@dataclass
class ToyOptions(ModelOptions):
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp64")

    cfg_scale: float = DEFAULT_CFG_SCALE
    top_k: int = DEFAULT_TOP_K
    weights_dir: Optional[str] = None  # None: the shipped weights
    row_end_token: bool = DEFAULT_ROW_END_TOKEN


def build(options: ToyOptions, device: str) -> LlamaImageAdapter:
    """The trained toy model as an adapter named "toy" (16x16 grid of codes, <eol> after each row)."""
    weights_dir = Path(options.weights_dir or WEIGHTS_DIR)
    meta = load_meta(weights_dir)
    trained_eol = bool(meta["layout"]["row_end_token"])
    if options.row_end_token != trained_eol:
        raise ValueError(
            f"these toy weights were trained with row_end_token={trained_eol}; "
            f"retrain with `sjdbench toy train --{'' if options.row_end_token else 'no-'}row-end-token` to change it"
        )
    cfg = LlamaConfig(**meta["model"])
    model = Llama(cfg)
    state = load_file(str(weights_dir / LM_FILE))
    model.load_state_dict({k: v.float() for k, v in state.items()})
    model.to(device).to_precision(options.torch_dtype(device))
    tokenizer = load_toy_tokenizer(weights_dir)
    h, w = meta["layout"]["grid"]
    eoi = EOI if meta["layout"].get("end_token") else None
    layout = SegmentLayout.grid(h, w, EOL if options.row_end_token else None, eoi)
    return LlamaImageAdapter(
        "toy",
        model,
        tokenizer.n_codes,
        layout,
        options.sampling(),
        tokenizer.decode,
        tokenizer.codebook(),
        trained_caption_encoder(meta),
        gsd_d_thr=GSD_D_THR,
        compile=options.compile,
    )


def build_toy_adapter(weights_dir: str | Path | None = None, device: str = "cpu", **options: Any) -> LlamaImageAdapter:
    """The toy model from its weights directory (None: the shipped weights) and keyword options
    (`build_toy_adapter(cfg_scale=5)`)."""
    folder = None if weights_dir is None else str(weights_dir)
    return build(ToyOptions.from_dict({"weights_dir": folder, **options}), device)


def weights_fingerprint(weights_dir: str | Path | None = None) -> str:
    """sha256 (16 hex) over the metadata, transformer and tokenizer files: identifies one training run."""
    weights_dir = Path(weights_dir or WEIGHTS_DIR)
    digest = hashlib.sha256()
    for name in (META_FILE, LM_FILE, TOKENIZER_FILE):
        path = weights_dir / name
        if not path.exists():
            raise FileNotFoundError(f"toy weights not found at {path}; run `sjdbench toy train` to create them")
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def verify_weights(weights_dir: str | Path | None = None) -> None:
    """Before loading: every weight file is whole, matches its recorded checksum and has the shapes
    toy.json's model config needs (WeightsError naming the file otherwise)."""
    from sjdbench.models.weights import WeightsError, check_weight_file, recorded_checksums

    weights_dir = Path(weights_dir or WEIGHTS_DIR)
    try:
        meta = load_meta(weights_dir)
        # built on the CPU (a toy builds in well under 0.1 s): the first tensor on the meta device
        # imports torch's compiler stack, seconds that every `sjdbench run` would pay; its random
        # initialisation draws from a forked stream, so checking leaves the global one as it was
        with torch.random.fork_rng(devices=[]):
            shapes = {k: tuple(v.shape) for k, v in Llama(LlamaConfig(**meta["model"])).state_dict().items()}
    except FileNotFoundError as error:
        raise WeightsError(str(error)) from None
    except (ValueError, KeyError, TypeError) as error:
        raise WeightsError(
            f"{weights_dir / META_FILE} is corrupt or not a toy model config ({error}); restore it"
        ) from None
    checksums = recorded_checksums(weights_dir)
    check_weight_file(weights_dir / LM_FILE, shapes, checksums)
    check_weight_file(weights_dir / TOKENIZER_FILE, None, checksums)


def image_token_count(weights_dir: str | Path | None = None) -> int:
    """Image codes in the vocabulary, read from toy.json without loading the weights."""
    return int(load_meta(weights_dir)["tokenizer"]["n_codes"])


def trained_caption_encoder(meta: dict) -> Callable[[str], list[int]]:
    """The caption tokenization the weights were trained with (words; older weights: characters)."""
    text = meta.get("text") or {"kind": "chars"}
    return caption_encoder(text["kind"], text.get("vocab"))


def load_toy_tokenizer(weights_dir: str | Path | None = None) -> PatchTokenizer:
    """The k-means patch tokenizer of these weights (None: the shipped ones): what the adapter decodes
    its codes with."""
    return PatchTokenizer.load(Path(weights_dir or WEIGHTS_DIR) / TOKENIZER_FILE)


MODEL = ModelEntry(
    ToyOptions,
    build,
    fingerprint=lambda options: weights_fingerprint(options.weights_dir),
    verify=lambda options: verify_weights(options.weights_dir),
    image_tokens=lambda options: image_token_count(options.weights_dir),
)
