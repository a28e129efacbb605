"""Emu3-Gen (BAAI) through transformers' `Emu3ForConditionalGeneration` (hub `BAAI/Emu3-Gen-hf`).

Prompt (BAAI's image_generation.py): `<|extra_203|>` (BOS) + caption + " masterpiece, film grained,
best quality." + `<|image start|>` + "H*W" + `<|image token|>`; with image_area = 720² and an 8x VQ
that is a 90x90 grid. The generated segment is H rows of (W visual tokens, `<|extra_200|>` end of
line), then `<|extra_201|>` (end of frame), `<|image end|>`, `<|extra_204|>` (end of sequence): the
row ends and the three closing tokens are forced by the layout, exactly where BAAI's prefix
constraint puts them.

CFG: BAAI runs the negative prompt ("lowres, bad anatomy, ...", with the same image prefix) as a
second, unbatched forward with its own cache (`UnbatchedClassifierFreeGuidanceLogitsProcessor`,
scale 3). Here both prompts are left-padded into one batch of 2; each row's rotary positions count
only its own real tokens, so every row sees exactly what its unbatched forward would
(tests/test_emu3.py proves the logits equal). The processor's log-softmax before mixing changes the
mixed logits by a per-row constant only, which softmax and top-k ignore. Sampling: top-k 2048, T=1.

The token <-> VQ-code map comes from the vocabulary's `<|visual token NNNNNN|>` names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, Sampling, SegmentLayout
from sjdbench.models import hf_common
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.images import to_uint8
from sjdbench.models.options import CheckpointOptions
from sjdbench.models.registry import ModelEntry
from sjdbench.models.windowed import WindowedAdapter

HUB = "BAAI/Emu3-Gen-hf"
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.tiktoken", "tokenizer*"]
DEFAULT_SAMPLING = Sampling(cfg_scale=3.0, temperature=1.0, top_k=2048, top_p=1.0)
POSITIVE_PROMPT = " masterpiece, film grained, best quality."
NEGATIVE_PROMPT = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
    "cropped, worst quality, low quality, normal quality, jpeg artifacts, signature, watermark, "
    "username, blurry."
)
VISUAL = re.compile(r"<\|visual token (\d{6})\|>")
SPECIAL_NAMES = dict(
    bos="<|extra_203|>",
    eos="<|extra_204|>",
    pad="<|endoftext|>",
    eol="<|extra_200|>",
    eof="<|extra_201|>",
    boi="<|image start|>",
    eoi="<|image end|>",
    wrapper="<|image token|>",
)
SPATIAL = 8  # VQ downsampling of the released vision tokenizer


@dataclass(frozen=True)
class Emu3Tokens:
    bos: int
    eos: int
    pad: int
    eol: int
    eof: int
    boi: int
    eoi: int
    wrapper: int

    @classmethod
    def from_vocabulary(cls, vocabulary: dict[str, int]) -> Emu3Tokens:
        missing = [name for name in SPECIAL_NAMES.values() if name not in vocabulary]
        if missing:
            raise ValueError(
                f"the vocabulary lacks Emu3's structural tokens {missing}; is this an Emu3-Gen checkpoint?"
            )
        return cls(**{key: int(vocabulary[name]) for key, name in SPECIAL_NAMES.items()})


def visual_token_ids(vocabulary: dict[str, int]) -> torch.Tensor:
    """(K,) token id of each VQ code, in code order, from the `<|visual token NNNNNN|>` names."""
    codes = {int(m.group(1)): int(token_id) for name, token_id in vocabulary.items() if (m := VISUAL.fullmatch(name))}
    if not codes or sorted(codes) != list(range(len(codes))):
        raise ValueError("the vocabulary's visual tokens are not numbered 0..K-1; is this an Emu3-Gen checkpoint?")
    return torch.tensor([codes[k] for k in range(len(codes))], dtype=torch.long)


def emu3_layout(height: int, width: int, tokens: Emu3Tokens) -> SegmentLayout:
    """H rows of (W codes, EOL), then EOF, EOI, EOS."""
    grid = SegmentLayout.grid(height, width, eol_token=tokens.eol)
    tail = torch.tensor([tokens.eof, tokens.eoi, tokens.eos])
    minus = torch.full((3,), -1, dtype=torch.long)
    return SegmentLayout(
        torch.cat([grid.forced, tail]), torch.cat([grid.row, minus]), torch.cat([grid.col, minus]), (height, width)
    )


@dataclass
class Emu3Options(CheckpointOptions):
    sizes: ClassVar[tuple[str, ...]] = ("8B",)
    resolution_step: ClassVar[int] = SPATIAL

    cfg_scale: float = DEFAULT_SAMPLING.cfg_scale
    top_k: int = DEFAULT_SAMPLING.top_k
    size: str = "8B"
    resolution: int = 720  # BAAI's image_area of 720x720
    positive_prompt: str = POSITIVE_PROMPT
    negative_prompt: str = NEGATIVE_PROMPT


class Emu3Adapter(WindowedAdapter):
    def __init__(
        self,
        model: Any,
        encode_text: Callable[[str], list[int]],
        vocabulary: dict[str, int],
        height: int,
        width: int,
        sampling: Sampling = DEFAULT_SAMPLING,
        compile: bool = False,
        positive_prompt: str = POSITIVE_PROMPT,
        negative_prompt: str = NEGATIVE_PROMPT,
    ) -> None:
        self.model = hf_common.hf_modules_eval(model)
        self.lm = model.model.text_model
        self.tokens = Emu3Tokens.from_vocabulary(vocabulary)
        self.height, self.width = height, width
        self.positive_prompt, self.negative_prompt = positive_prompt, negative_prompt
        self._encode_text = encode_text  # full prompt string -> ids (BOS and image prefix included)
        self._cache_keyword = hf_common.cache_keyword(self.lm)
        super().__init__(
            "emu3",
            emu3_layout(height, width, self.tokens),
            int(model.config.text_config.vocab_size),
            visual_token_ids(vocabulary),
            sampling,
            next(model.parameters()).device,
            codebook=lambda: self.model.model.vqmodel.quantize.embedding.weight.detach().float(),  # (32768, 4)
            token_embeddings=lambda: self.lm.embed_tokens.weight.detach().float(),
            compile=compile,
        )
        code_of = torch.full((self.vocab_size,), -1, dtype=torch.long)
        code_of[self.image_token_ids.cpu()] = torch.arange(self.image_token_ids.numel())
        self._code_of = code_of

    # -- prompt -----------------------------------------------------------------------------
    def prompt_ids(self, caption: str) -> list[int]:
        return self._encode_text(caption + self.positive_prompt)

    def negative_ids(self) -> list[int]:
        return self._encode_text(self.negative_prompt)

    def encode_prompt(self, text: str) -> PromptBatch:
        rows = [self.prompt_ids(text), self.negative_ids()]
        length = max(map(len, rows))
        tokens = torch.full((2, length), self.tokens.pad, dtype=torch.long)
        pad_mask = torch.zeros(2, length, dtype=torch.bool)
        for i, row in enumerate(rows):  # left padding, masked out
            tokens[i, length - len(row) :] = torch.tensor(row)
            pad_mask[i, length - len(row) :] = True
        return PromptBatch(tokens.to(self.device), pad_mask.to(self.device), text=text)

    # -- WindowedAdapter hooks --------------------------------------------------------------
    def _kv_shape(self) -> KVShape:
        return hf_common.kv_shape(self.lm)

    def _bind(self, cache: WindowCache) -> Any:
        return hf_common.hf_cache_view(cache, self.lm.config.num_hidden_layers)

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.lm.embed_tokens(tokens)

    def _run(self, x: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        return hf_common.run_hf(self.lm, self._cache_keyword, x, rotary, mask, cache)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(hidden)

    # -- tokens <-> images ------------------------------------------------------------------
    def tokens_to_codes(self, tokens: torch.Tensor) -> torch.Tensor:
        content = ~self.layout.is_forced
        return self._code_of[tokens.cpu()[content]].view(self.height, self.width)

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        codes = self.tokens_to_codes(tokens).to(self.device)
        pixels = self.model.model.vqmodel.decode(codes[None])  # (1, 3, 8H, 8W) in [-1, 1]
        return to_uint8(pixels[0])


# -- building -----------------------------------------------------------------------------------
FIRST_VISUAL = 151854  # id of <|visual token 000000|> in the released vocabulary


def stand_in_vocabulary(n_codes: int = 32768) -> dict[str, int]:
    """The structural and visual token names at the released ids, for weights=random (no tokenizer)."""
    vocabulary = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
    vocabulary.update({f"<|extra_{i}|>": 151646 + i for i in range(205)})
    vocabulary.update({"<|image start|>": 151851, "<|image token|>": 151852, "<|image end|>": 151853})
    vocabulary.update({f"<|visual token {k:06d}|>": FIRST_VISUAL + k for k in range(n_codes)})
    return vocabulary


def random_config(size: str) -> Any:
    from transformers import Emu3Config

    text: dict[str, Any] = dict(
        vocab_size=184622, pad_token_id=151643, bos_token_id=151849, eos_token_id=151850, attention_dropout=0.0
    )
    vq: dict[str, Any] = {}
    if size == "tiny":
        text.update(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
        )
        vq.update(
            base_channels=32,
            channel_multiplier=[1, 1, 1, 2],
            num_res_blocks=1,
            attn_resolutions=[],
            hidden_size=64,
            num_attention_heads=1,
        )
    return Emu3Config(text_config=text, vq_config=vq, vocabulary_map=stand_in_vocabulary())


def build(options: Emu3Options, device: str) -> Emu3Adapter:
    o = options
    transformers = hf_common.require_transformers("emu3")
    side = o.resolution // SPATIAL  # 1:1 images; the processor's rule for image_area = resolution²
    prompts = dict(positive_prompt=o.positive_prompt, negative_prompt=o.negative_prompt)
    if o.random:
        hf_common.seed_everything(o.init_seed)
        config = random_config(o.size)
        with torch.device(device):
            model = transformers.Emu3ForConditionalGeneration._from_config(
                config, dtype=o.torch_dtype(device), attn_implementation="sdpa"
            )
        vocabulary = config.vocabulary_map
        tokens = Emu3Tokens.from_vocabulary(vocabulary)

        def encode_stand_in(text: str) -> list[int]:
            digits = hf_common.stand_in_ids(f"{side}*{side}", 1000, 9)
            return [tokens.bos, *hf_common.stand_in_ids(text, 2000, 140000), tokens.boi, *digits, tokens.wrapper]

        return Emu3Adapter(model, encode_stand_in, vocabulary, side, side, o.sampling(), o.compile, **prompts)

    root = emu3_weights_dir(o.path)
    model_class = transformers.Emu3ForConditionalGeneration
    model = hf_common.load_pretrained(model_class, root, o.torch_dtype(device), device, "emu3")
    processor = transformers.Emu3Processor.from_pretrained(root)

    def encode(text: str) -> list[int]:
        area = o.resolution * o.resolution
        inputs = processor(
            text=[text], return_for_image_generation=True, ratio="1:1", image_area=area, return_tensors="pt"
        )
        return inputs.input_ids[0].tolist()

    return Emu3Adapter(model, encode, model.config.vocabulary_map, side, side, o.sampling(), o.compile, **prompts)


def emu3_weights_dir(path: str | None):
    source = f"the {HUB} repository (config, *.safetensors, tokenizer and processor files)"
    if path is not None:
        root = hf_common.local_dir(path, ["config.json", "tokenizer_config.json"], source)
    else:
        root = hf_common.hub_dir(HUB, HUB_FILES)
    hf_common.shards_present(root, source)
    return root


MODEL = ModelEntry(
    Emu3Options, build, fingerprint=lambda o: o.fingerprint(lambda: emu3_weights_dir(o.path).glob("*.safetensors"))
)
