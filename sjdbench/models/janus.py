"""Janus-Pro (DeepSeek) through transformers' `JanusForConditionalGeneration`.

Image tokens are not in the language model's vocabulary: a generated code k enters the LM as
`generation_aligner(generation_embeddings(k))` and the next code's logits come from
`generation_head(hidden)`, over the 16384 VQ codes (so token id = code, `vocab_size` = 16384).
The image is a fixed 24x24 grid (384 px) with no structural tokens.

Prompt: the processor's chat template with the generation prompt, then `<begin_of_image>`. The
unconditional branch is that prompt with every token except BOS and `<begin_of_image>` replaced by
the pad token, all attended, at the same positions: exactly the batch `generate(generation_mode=
"image")` doubles, so CFG is one batched forward as in the library. Defaults follow DeepSeek's own
loop: CFG 5, temperature 1, no top-k (transformers' `generate` would add its implicit top-k 50
unless top_k=0 is passed; see docs/MODELS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import numpy as np
import torch

from sjdbench.adapter import PromptBatch, Sampling, SegmentLayout
from sjdbench.models import hf_common
from sjdbench.models.cache import KVShape, WindowCache
from sjdbench.models.images import to_uint8
from sjdbench.models.options import CheckpointOptions
from sjdbench.models.registry import ModelEntry
from sjdbench.models.windowed import WindowedAdapter

HUB = {"1B": "deepseek-community/Janus-Pro-1B", "7B": "deepseek-community/Janus-Pro-7B"}
DEFAULT_SAMPLING = Sampling(cfg_scale=5.0, temperature=1.0, top_k=0, top_p=1.0)
HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "tokenizer*"]

# Language-model shapes of the released checkpoints (DeepSeek-LLM 1.5B / 7B bases), used only for
# weights=random; real weights bring their own config.json.
_TEXT = {
    "1B": dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16
    ),
    "7B": dict(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=30, num_attention_heads=32, num_key_value_heads=32
    ),
    "tiny": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4
    ),
}
VOCAB = 102400
PAD_ID, BOS_ID, BOI_ID = 100002, 100000, 100016  # stand-in ids for random weights (no tokenizer)


@dataclass(frozen=True)
class JanusTokens:
    bos: int
    boi: int
    pad: int


@dataclass
class JanusOptions(CheckpointOptions):
    sizes: ClassVar[tuple[str, ...]] = tuple(HUB)
    resolution_step: ClassVar[int] = 16
    released_resolutions: ClassVar[Optional[tuple[int, ...]]] = (384,)  # the released models generate 384 px only

    cfg_scale: float = DEFAULT_SAMPLING.cfg_scale
    top_k: int = DEFAULT_SAMPLING.top_k
    size: str = "7B"
    resolution: int = 384


class JanusAdapter(WindowedAdapter):
    def __init__(
        self,
        model: Any,
        encode_text: Callable[[str], list[int]],
        tokens: JanusTokens,
        sampling: Sampling = DEFAULT_SAMPLING,
        compile: bool = False,
    ) -> None:
        self.model = hf_common.hf_modules_eval(model)
        self.lm = model.model.language_model
        self.tokens, self._encode_text = tokens, encode_text
        self._cache_keyword = hf_common.cache_keyword(self.lm)
        vq = model.config.vq_config
        side = int(vq.num_patches)
        super().__init__(
            "janus",
            SegmentLayout.grid(side, side),
            int(vq.num_embeddings),
            torch.arange(int(vq.num_embeddings)),
            sampling,
            next(model.parameters()).device,
            codebook=self._normalised_codebook,
            token_embeddings=self._code_inputs,
            compile=compile,
        )

    # -- prompt -----------------------------------------------------------------------------
    def encode_prompt(self, text: str) -> PromptBatch:
        cond = torch.tensor(self._encode_text(text), dtype=torch.long)
        keep = (cond == self.tokens.bos) | (cond == self.tokens.boi)
        uncond = torch.where(keep, cond, torch.full_like(cond, self.tokens.pad))
        tokens = torch.stack([cond, uncond]).to(self.device)  # (2, P)
        return PromptBatch(tokens, torch.ones_like(tokens, dtype=torch.bool), text=text)

    # -- WindowedAdapter hooks --------------------------------------------------------------
    def _kv_shape(self) -> KVShape:
        return hf_common.kv_shape(self.lm)

    def _bind(self, cache: WindowCache) -> Any:
        return hf_common.hf_cache_view(cache, self.lm.config.num_hidden_layers)

    def _prompt_inputs(self, prompt: PromptBatch) -> torch.Tensor:
        return self.model.get_input_embeddings()(prompt.tokens)  # (2, P, D)

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        return self.model.prepare_embeddings_for_image_generation(tokens)  # (R, L, D)

    def _run(self, x: torch.Tensor, rotary: torch.Tensor, mask: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        return hf_common.run_hf(self.lm, self._cache_keyword, x, rotary, mask, cache)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.model.generation_head(hidden)  # (R, L, 16384)

    # -- tokens <-> images ------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        codes = tokens.to(self.device).view(1, -1)  # (1, 576): every position is a code
        pixels = self.model.decode_image_tokens(codes)  # (1, H, W, 3) in [-1, 1]
        return to_uint8(pixels[0])

    def _normalised_codebook(self) -> torch.Tensor:
        """L2-normalised VQ vectors in code order: the vectors the decoder actually receives."""
        weight = self.model.model.vqmodel.quantize.embedding.weight.detach().float()
        return torch.nn.functional.normalize(weight, dim=-1)

    @torch.inference_mode()
    def _code_inputs(self) -> torch.Tensor:
        """The LM inputs of the 16384 codes (generation_aligner(generation_embeddings))."""
        return self._embed(self.image_token_ids[None], None)[0].float()


# -- building -----------------------------------------------------------------------------------
def random_config(size: str, resolution: int) -> Any:
    """The released architecture with random weights (sizes 1B/7B), or a shrunken one (tiny)."""
    from transformers import JanusConfig

    text = dict(
        _TEXT[size],
        vocab_size=VOCAB,
        max_position_embeddings=16384,
        rms_norm_eps=1e-6,
        model_type="llama",
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
    )
    hidden = text["hidden_size"]
    tiny = size == "tiny"
    vision = dict(image_size=resolution, patch_size=16, num_image_tokens=(resolution // 16) ** 2, projection_dim=hidden)
    if tiny:
        vision.update(hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    vq = dict(
        embed_dim=8,
        num_embeddings=16384,
        projection_dim=hidden,
        image_token_embed_dim=hidden,
        base_channels=32 if tiny else 128,
        channel_multiplier=[1, 1, 2, 2, 4],
        num_res_blocks=1 if tiny else 2,
    )
    return JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=100581)


def build(options: JanusOptions, device: str) -> JanusAdapter:
    o = options
    transformers = hf_common.require_transformers("janus")
    if o.random:
        hf_common.seed_everything(o.init_seed)
        config = random_config(o.size, o.resolution)
        with torch.device(device):
            model = transformers.JanusForConditionalGeneration._from_config(
                config, dtype=o.torch_dtype(device), attn_implementation="sdpa"
            )
        tokens = JanusTokens(bos=BOS_ID, boi=BOI_ID, pad=PAD_ID)

        def encode_stand_in(text: str) -> list[int]:
            return [BOS_ID] + hf_common.stand_in_ids(f"<|User|>: {text}\n\n<|Assistant|>:", 1000, 90000) + [BOI_ID]

        return JanusAdapter(model, encode_stand_in, tokens, o.sampling(), o.compile)

    root = janus_weights_dir(o.path, o.size)
    model_class = transformers.JanusForConditionalGeneration
    model = hf_common.load_pretrained(model_class, root, o.torch_dtype(device), device, "janus")
    processor = transformers.JanusProcessor.from_pretrained(root)
    tokenizer = processor.tokenizer
    tokens = JanusTokens(
        bos=tokenizer.bos_token_id,
        boi=tokenizer.convert_tokens_to_ids(processor.image_start_token),
        pad=tokenizer.pad_token_id,
    )

    def encode(text: str) -> list[int]:
        messages = [{"role": "user", "content": [{"type": "text", "text": text}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
        return processor(text=prompt, generation_mode="image", return_tensors="pt").input_ids[0].tolist()

    return JanusAdapter(model, encode, tokens, o.sampling(), o.compile)


def janus_weights_dir(path: str | None, size: str):
    source = f"the {HUB[size]} repository (config, *.safetensors, tokenizer and processor files)"
    if path is not None:
        root = hf_common.local_dir(path, ["config.json", "tokenizer_config.json"], source)
    else:
        root = hf_common.hub_dir(HUB[size], HUB_FILES)
    hf_common.shards_present(root, source)
    return root


MODEL = ModelEntry(
    JanusOptions,
    build,
    fingerprint=lambda o: o.fingerprint(lambda: janus_weights_dir(o.path, o.size).glob("*.safetensors")),
)
